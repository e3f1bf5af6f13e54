// Command-line parsing for every attnserve binary: absl::ParseCommandLine, except that the
// usage flags (--help, --helpfull, --helpshort, --helppackage, --helpmatch) print their help
// and exit 0, as command-line tools conventionally do (Abseil 20220623 exits 1), and
// --version / --only_check_args keep Abseil's exit code. Returns the positional arguments
// (argv[0] first).
//
// --help (and --helpshort) list every flag of attnserve's own files, grouped by the file that
// defines it (server/flags/*_flags.cc for the server: one file a group), each file named from
// the repository's root; Abseil's default lists only the flags of a file named like the
// program (attnserve-server.cc), so the server's --help said "No flags matched". --helpfull
// adds Abseil's own flags (--flagfile, --fromenv, ...).
#pragma once

#include <cstdlib>
#include <iostream>
#include <vector>

#include "absl/flags/internal/parse.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace attnserve {

// A flag's file from the repository's root ("server/flags/limits_flags.cc"), whatever path the
// compiler saw ("../server/...", "/work/main/server/..."); other paths unchanged.
inline std::string RepositoryPath(absl::string_view file) {
  for (absl::string_view root : {"server/", "client/", "bench/", "common/", "kernels/", "tests/"}) {
    for (size_t at = file.find(root); at != absl::string_view::npos; at = file.find(root, at + 1)) {
      if (at == 0 || file[at - 1] == '/') return std::string(file.substr(at));
    }
  }
  return std::string(file);
}

// Whether --help lists the flags of `file`: attnserve's, not Abseil's.
inline bool IsAttnServeFlagFile(absl::string_view file) {
  return !absl::StrContains(file, "absl/");
}

inline std::vector<char*> ParseFlags(int argc, char** argv) {
  absl::FlagsUsageConfig config;
  config.contains_helpshort_flags = IsAttnServeFlagFile;
  config.contains_help_flags = IsAttnServeFlagFile;
  config.normalize_filename = RepositoryPath;
  absl::SetFlagsUsageConfig(config);
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
