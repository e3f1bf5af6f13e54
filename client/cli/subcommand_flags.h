// attnserve-cli's subcommands: their names, one-line summaries and the flags each accepts,
// with per-subcommand usage text (Abseil's own --help lists every flag of the binary).
#ifndef ATTNSERVE_CLIENT_CLI_SUBCOMMAND_FLAGS_H_
#define ATTNSERVE_CLIENT_CLI_SUBCOMMAND_FLAGS_H_

#include <string>
#include <vector>

namespace attnserve::cli {

struct Subcommand {
  std::string name;
  std::string synopsis;  // arguments after the name
  std::string summary;
  std::vector<std::string> flags;  // besides the common ones
};

const std::vector<Subcommand>& Subcommands();
// nullptr for an unknown name.
const Subcommand* FindSubcommand(const std::string& name);
// --target, --timeout, --json.
const std::vector<std::string>& CommonFlags();

// The whole tool's usage, and one subcommand's (with each flag's help and default).
std::string ToolUsage();
std::string SubcommandUsage(const Subcommand& sub);

// Checks that every flag in args (the arguments after the subcommand) belongs to `sub`;
// returns an error message, or "" when they all do. `help` is set when --help or -h is there.
std::string CheckArgs(const Subcommand& sub, const std::vector<std::string>& args, bool* help);

}  // namespace attnserve::cli

#endif  // ATTNSERVE_CLIENT_CLI_SUBCOMMAND_FLAGS_H_
