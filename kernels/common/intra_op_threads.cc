#include "kernels/common/intra_op_threads.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <thread>

#include "kernels/common/cpu_share.h"

#if defined(_OPENMP)
#include <omp.h>
#endif

namespace attnserve::kernels {

void KeepOtherThreadsOnOneCore() { at::set_num_threads(1); }

int RunKernelsOnThisThreadWith(int threads) {
  if (threads <= 0) threads = UsableCores().cores;
  // ATen sets each thread's count from its global one on the thread's first parallel region
  // (lazy_init_num_threads): run that now, so that it cannot undo the line below later.
  at::internal::lazy_init_num_threads();
#if defined(_OPENMP)
  // This thread's OpenMP setting only (at::set_num_threads would also change the global one
  // that other threads adopt).
  omp_set_num_threads(threads);
#else
  at::set_num_threads(threads);  // ATen's native pool: one pool for the process anyway
#endif
  return threads;
}

}  // namespace attnserve::kernels
