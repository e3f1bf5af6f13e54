// attnserve-cli: one call at a time against an attnserve server, for people and scripts.
//   attnserve-cli SUBCOMMAND [flags]     (models, infer, stream, generate, tokenize, detokenize,
//   sessions, health)
// The subcommand comes first; Abseil then parses the flags after it, and each subcommand
// accepts only its own flags and the common ones (--target, --timeout, --json).
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "client/cli/commands.h"
#include "client/cli/flags.h"
#include "client/cli/printer.h"
#include "client/cli/subcommand_flags.h"
#include "client/common/channel.h"

namespace cli = attnserve::cli;

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(cli::ToolUsage());
  if (argc < 2) {
    std::cerr << cli::ToolUsage();
    return cli::kExitUsage;
  }
  std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    // "help SUBCOMMAND" is "SUBCOMMAND --help".
    if (argc >= 3 && cli::FindSubcommand(argv[2]) != nullptr) {
      std::cout << cli::SubcommandUsage(*cli::FindSubcommand(argv[2]));
    } else {
      std::cout << cli::ToolUsage();
    }
    return cli::kExitOk;
  }
  const cli::Subcommand* sub = cli::FindSubcommand(name);
  if (sub == nullptr) {
    std::cerr << "attnserve-cli: unknown subcommand '" << name << "'\n\n" << cli::ToolUsage();
    return cli::kExitUsage;
  }
  const std::vector<std::string> args(argv + 2, argv + argc);
  bool help = false;
  const std::string problem = cli::CheckArgs(*sub, args, &help);
  if (help) {
    std::cout << cli::SubcommandUsage(*sub);
    return cli::kExitOk;
  }
  if (!problem.empty()) {
    std::cerr << "attnserve-cli: " << problem << "\n";
    return cli::kExitUsage;
  }

  // Abseil parses everything but the subcommand.
  std::vector<char*> rest = {argv[0]};
  for (int i = 2; i < argc; ++i) rest.push_back(argv[i]);
  std::vector<char*> positional =
      absl::ParseCommandLine(static_cast<int>(rest.size()), rest.data());
  if (positional.size() > 1) {
    std::cerr << "attnserve-cli " << sub->name << ": unexpected argument '" << positional[1]
              << "' (see attnserve-cli " << sub->name << " --help)\n";
    return cli::kExitUsage;
  }

  if (absl::Status security = attnserve::client::ConfigureChannelSecurityFromFlags();
      !security.ok()) {
    std::cerr << "attnserve-cli: " << security.message() << "\n";
    return cli::kExitUsage;
  }
  cli::Printer out(absl::GetFlag(FLAGS_json));
  if (sub->name == "models") return cli::RunModels(out);
  if (sub->name == "infer") return cli::RunInfer(out);
  if (sub->name == "stream") return cli::RunStream(out);
  if (sub->name == "generate") return cli::RunGenerate(out);
  if (sub->name == "sessions") return cli::RunSessions(out);
  if (sub->name == "tokenize") return cli::RunTokenize(out);
  if (sub->name == "detokenize") return cli::RunDetokenize(out);
  return cli::RunHealth(out);
}
