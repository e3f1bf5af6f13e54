// attnserve-cli's subcommands. Each reads its flags (flags.h), makes its calls against
// --target and returns the process exit status: 0 success, 1 a failed call (printed with its
// gRPC code) or a server that is not serving, 2 a usage or input error.
#ifndef ATTNSERVE_CLIENT_CLI_COMMANDS_H_
#define ATTNSERVE_CLIENT_CLI_COMMANDS_H_

#include "client/cli/printer.h"

namespace attnserve::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitCallFailed = 1;
inline constexpr int kExitUsage = 2;

int RunModels(Printer& out);
int RunInfer(Printer& out);
int RunStream(Printer& out);
int RunGenerate(Printer& out);
int RunSessions(Printer& out);
int RunHealth(Printer& out);
// text_commands.cc
int RunTokenize(Printer& out);
int RunDetokenize(Printer& out);

}  // namespace attnserve::cli

#endif  // ATTNSERVE_CLIENT_CLI_COMMANDS_H_
