// Command-line parsing for every attnserve binary: absl::ParseCommandLine, except that the
// usage flags (--help, --helpfull, --helpshort, --helppackage, --helpmatch) print their help
// and exit 0, as command-line tools conventionally do (Abseil 20220623 exits 1), and
// --version / --only_check_args keep Abseil's exit code. Returns the positional arguments
// (argv[0] first).
#pragma once

#include <cstdlib>
#include <iostream>
#include <vector>

#include "absl/flags/internal/parse.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/usage.h"

namespace attnserve {

inline std::vector<char*> ParseFlags(int argc, char** argv) {
  std::vector<char*> positional = absl::flags_internal::ParseCommandLineImpl(
      argc, argv, absl::flags_internal::ArgvListAction::kRemoveParsedArgs,
      absl::flags_internal::UsageFlagsAction::kIgnoreUsage,
      absl::flags_internal::OnUndefinedFlag::kAbortIfUndefined);
  const int usage = absl::flags_internal::HandleUsageFlags(std::cout, absl::ProgramUsageMessage());
  if (usage == 1) std::exit(0);  // help was asked for and printed
  if (usage >= 0) std::exit(usage);
  return positional;
}

}  // namespace attnserve
