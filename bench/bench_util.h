// What the benchmarks in bench/ share.
#pragma once

#include <algorithm>
#include <chrono>
#include <functional>
#include <vector>

namespace attnserve::bench {

// The median wall time of `reps` runs of `f`, in milliseconds.
inline double MedianMs(int reps, const std::function<void()>& f) {
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

}  // namespace attnserve::bench
