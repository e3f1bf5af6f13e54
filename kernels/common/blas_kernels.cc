#include "kernels/common/blas_kernels.h"

#include <dlfcn.h>
#include <strings.h>
#include <sys/auxv.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace attnserve::kernels {
namespace {

// Tells the re-executed process what OpenBLAS had picked, for its log line.
constexpr const char* kDetectedVariable = "ATTNSERVE_OPENBLAS_FELL_BACK_TO";

// OpenBLAS's cores with AVX2 (or better) matrix kernels (a build for one core spells its name
// in capitals).
bool HasAvx2Kernels(const std::string& core) {
  for (const char* name : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"}) {
    if (strcasecmp(core.c_str(), name) == 0) return true;
  }
  return false;
}

// Only a DYNAMIC_ARCH build reads OPENBLAS_CORETYPE; another has one core compiled in.
bool ChoosesItsCoreAtLoad() {
  using Config = char* (*)();
  auto* get = reinterpret_cast<Config>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
  const char* config = get ? get() : nullptr;
  return config != nullptr && std::strstr(config, "DYNAMIC_ARCH") != nullptr;
}

// Whether /proc/self/exe is the program itself (not a loader or a tool it was started under,
// such as ld.so or valgrind, which would take argv[1] for the program to run).
bool SelfIsTheProgram() {
  const char* execfn = reinterpret_cast<const char*>(getauxval(AT_EXECFN));
  struct stat self {
  }, program{};
  return execfn != nullptr && stat("/proc/self/exe", &self) == 0 && stat(execfn, &program) == 0 &&
         self.st_dev == program.st_dev && self.st_ino == program.st_ino;
}

}  // namespace

std::string BetterOpenBlasCore(const std::string& detected, bool avx512, bool avx2_fma) {
  if (detected.empty() || HasAvx2Kernels(detected)) return "";
  if (avx512 && avx2_fma) return "SkylakeX";
  if (avx2_fma) return "Haswell";
  return "";
}

std::string OpenBlasCore() {
  using CoreName = char* (*)();
  auto* get = reinterpret_cast<CoreName>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  if (get == nullptr) return "";
  const char* name = get();
  return name ? name : "";
}

std::string UseTheCpusBlasKernels(char** argv) {
  const std::string core = OpenBlasCore();
  if (core.empty()) return "BLAS: not OpenBLAS";
  if (const char* asked = std::getenv("OPENBLAS_CORETYPE"); asked != nullptr) {
    const char* fell_back = std::getenv(kDetectedVariable);
    std::string line = absl::StrCat("OpenBLAS core ", core, " (OPENBLAS_CORETYPE=", asked,
                                    fell_back ? absl::StrCat(", set at start-up: OpenBLAS had "
                                                             "picked ",
                                                             fell_back, " for this CPU")
                                              : std::string(),
                                    ")");
    unsetenv(kDetectedVariable);
    return line;
  }
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  // SkylakeX's kernels use AVX-512 F, VL, BW and DQ (OpenBLAS's own check asks for them all).
  const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
  const bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  const bool avx512 = false, avx2_fma = false;
#endif
  const std::string better = BetterOpenBlasCore(core, avx512, avx2_fma);
  if (better.empty()) return absl::StrCat("OpenBLAS core ", core);
  if (!ChoosesItsCoreAtLoad() || !SelfIsTheProgram()) {
    return absl::StrCat("OpenBLAS core ", core, " (", better,
                        "'s kernels would be faster; set OPENBLAS_CORETYPE=", better, ")");
  }
  setenv("OPENBLAS_CORETYPE", better.c_str(), /*overwrite=*/1);
  setenv(kDetectedVariable, core.c_str(), /*overwrite=*/1);
  execv("/proc/self/exe", argv);
  // Still here: the re-execution failed; keep the slow kernels rather than stop, and leave the
  // environment as it was for the processes this one starts.
  const int error = errno;
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv(kDetectedVariable);
  return absl::StrCat("OpenBLAS core ", core, " (re-executing with OPENBLAS_CORETYPE=", better,
                      " failed: ", std::strerror(error), ")");
}

}  // namespace attnserve::kernels
