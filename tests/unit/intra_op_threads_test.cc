#include "kernels/common/intra_op_threads.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

namespace attnserve::kernels {
namespace {

// The threads one parallel region of `n` iterations (grain 1) actually ran on.
int ThreadsOfOneRegion(int64_t n) {
  std::atomic<int> seen{0};
  std::vector<std::atomic<bool>> used(64);
  at::parallel_for(0, n, 1, [&](int64_t, int64_t) {
    const int t = at::get_thread_num();
    if (t < 64 && !used[t].exchange(true)) seen.fetch_add(1);
  });
  return seen.load();
}

// The server's arrangement (main.cc, batch_scheduler.cc): the computing thread on 2 threads,
// every other thread, including ones started later, on 1.
TEST(IntraOpThreadsTest, OnlyTheComputingThreadRunsRegionsOnSeveralThreads) {
  const int before = at::get_num_threads();
  KeepOtherThreadsOnOneCore();
  int computing_threads = 0, computing_region = 0, other_threads = 0, other_region = 0;
  std::thread computing([&] {
    EXPECT_EQ(RunKernelsOnThisThreadWith(2), 2);
    // A kernel on another thread meanwhile (a gRPC thread zeroing a new session's state).
    std::thread other([&] {
      (void)at::zeros({1 << 20});
      other_threads = at::get_num_threads();
      other_region = ThreadsOfOneRegion(1000);
    });
    other.join();
    computing_threads = at::get_num_threads();
    computing_region = ThreadsOfOneRegion(1000);
  });
  computing.join();
  EXPECT_EQ(computing_threads, 2);
  EXPECT_EQ(other_threads, 1);
  EXPECT_EQ(other_region, 1);
  // Two threads asked for: ATen splits the 1000 iterations into one range per thread, so both
  // run (OpenMP gives fewer only when the system refuses threads).
  EXPECT_EQ(computing_region, 2);
  at::set_num_threads(before);
}

TEST(IntraOpThreadsTest, ZeroMeansOnePerCore) {
  int set = 0;
  int used = 0;
  std::thread t([&] {
    set = RunKernelsOnThisThreadWith(0);
    used = at::get_num_threads();
  });
  t.join();
  EXPECT_EQ(used, set);
  EXPECT_EQ(set, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
}

}  // namespace
}  // namespace attnserve::kernels
