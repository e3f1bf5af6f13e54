// Which threads of a process run ATen's kernels on several cores.
//
// ATen's intra-op parallelism (at::parallel_for, hence most kernels) runs OpenMP parallel
// regions, and OpenMP gives every thread that opens one a team of its own: a server whose gRPC
// threads allocate a state or copy a tensor above ATen's grain size (32768 elements: a
// sliding_window session's zeroed ring) leaves a second team behind. libgomp then counts more
// OpenMP threads than cores and stops spinning between regions, so the computing thread's
// workers sleep and wake around every region: measured on 2 cores, a 64-token append to a
// sliding_window session took 21-25 ms in the server against 9 ms in-process.
//
// So: KeepOtherThreadsOnOneCore() once at start-up, before another thread runs a kernel, makes one
// intra-op thread the default of every thread (ATen's global setting, which a thread adopts on
// its first parallel region); RunKernelsOnThisThreadWith(n) then gives the computing thread
// (the scheduler's) n, for itself alone. Threads: each call affects the calling thread's OpenMP
// setting; the first also ATen's process-wide default. OpenBLAS (Debian's OpenMP build) sizes
// each call by the calling thread's OpenMP setting: checked, with OMP_NUM_THREADS=1 (as the
// Kubernetes deployment sets it) or after a large product on a one-thread thread, the
// scheduler thread's sgemm runs on its own count (openblas_get_num_threads 2, the same time).
#pragma once

namespace attnserve::kernels {

// at::set_num_threads(1): the calling thread and every thread that has not run an ATen
// parallel region yet will run them on one thread.
void KeepOtherThreadsOnOneCore();

// The calling thread runs ATen's parallel regions on `threads` threads (>= 1; 0 or less: one per
// core this process may use: UsableCores(), cpu_share.h), without changing the default of
// the others. Returns the count set.
int RunKernelsOnThisThreadWith(int threads);

}  // namespace attnserve::kernels
