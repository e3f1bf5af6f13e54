#include "kernels/common/blas_kernels.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace attnserve::kernels {
namespace {

// Tells the re-executed process what OpenBLAS had picked, for its log line.
constexpr const char* kDetectedVariable = "ATTNSERVE_OPENBLAS_FELL_BACK_TO";

// OpenBLAS's cores with AVX2 (or better) matrix kernels.
bool HasAvx2Kernels(const std::string& core) {
  for (const char* name : {"Haswell", "Zen", "SkylakeX", "Cooperlake", "SapphireRapids"}) {
    if (core == name) return true;
  }
  return false;
}

}  // namespace

std::string BetterOpenBlasCore(const std::string& detected, bool avx512f, bool avx2_fma) {
  if (detected.empty() || HasAvx2Kernels(detected)) return "";
  if (avx512f && avx2_fma) return "SkylakeX";
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
  const bool avx512f = __builtin_cpu_supports("avx512f");
  const bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  const bool avx512f = false, avx2_fma = false;
#endif
  const std::string better = BetterOpenBlasCore(core, avx512f, avx2_fma);
  if (better.empty()) return absl::StrCat("OpenBLAS core ", core);
  setenv("OPENBLAS_CORETYPE", better.c_str(), /*overwrite=*/1);
  setenv(kDetectedVariable, core.c_str(), /*overwrite=*/1);
  execv("/proc/self/exe", argv);
  // Still here: the re-execution failed; keep the slow kernels rather than stop.
  return absl::StrCat("OpenBLAS core ", core, " (re-executing with OPENBLAS_CORETYPE=", better,
                      " failed: ", std::strerror(errno), ")");
}

}  // namespace attnserve::kernels
