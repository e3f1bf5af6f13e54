// Makes sure OpenBLAS runs the matrix-product kernels of the CPU it is on. Debian's OpenBLAS
// (libopenblas0-openmp, DYNAMIC_ARCH, which LibTorch's at::linear/at::matmul call for prefill)
// picks its kernels once, when the library loads, from the CPU's vendor/family/model numbers;
// a CPU it does not know by model (a VM's generic "Intel(R) Xeon(R) Processor") falls back to
// Prescott's SSE3 kernels even where AVX-512 is there. On the project's 2-vCPU VMs that made
// every prefill product ~3x slower (an rwkv block at 4096 tokens: 28.8k tok/s with Prescott's
// kernels, 75.4k with SkylakeX's; docs/benchmarks.md, "OpenBLAS's kernels"). The choice can only be
// changed before the library loads, through OPENBLAS_CORETYPE, so the fix is to set it and
// re-execute the process.
//
// Thread contract: call first thing in main, before any thread starts.
#pragma once

#include <string>

namespace attnserve::kernels {

// The OPENBLAS_CORETYPE to ask for, or "" to keep `detected` (OpenBLAS's own choice, e.g.
// "Prescott", "Haswell", "SkylakeX"): "SkylakeX" on a CPU with AVX-512 (F, VL, BW and DQ),
// "Haswell" with AVX2 and FMA, when `detected` is a core without AVX2 kernels. Pure: for tests.
std::string BetterOpenBlasCore(const std::string& detected, bool avx512, bool avx2_fma);

// OpenBLAS's core in this process ("" when LibTorch does not use OpenBLAS).
std::string OpenBlasCore();

// When OPENBLAS_CORETYPE is unset and BetterOpenBlasCore names a better core for this CPU:
// sets it and re-executes /proc/self/exe with `argv` (does not return on success). Only for a
// DYNAMIC_ARCH OpenBLAS (another ignores the variable) and a process that is its own program
// (not run through ld.so or valgrind). Otherwise, or when the re-execution fails (the variables
// are then unset again), returns, and the process goes on with what it has. Returns a line for
// the start-up log: which core runs, and why. Setting OPENBLAS_CORETYPE turns it off.
std::string UseTheCpusBlasKernels(char** argv);

}  // namespace attnserve::kernels
