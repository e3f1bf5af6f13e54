// What the benchmarks in bench/ share.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
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

// The value of `--name=VALUE` when `arg` is that flag (name given with its dashes), else null.
inline const char* FlagValue(const std::string& arg, const char* name) {
  const size_t n = std::strlen(name);
  return arg.compare(0, n, name) == 0 && arg.size() > n && arg[n] == '=' ? arg.c_str() + n + 1
                                                                         : nullptr;
}

// The flags the per-mixer sweep benchmarks share: --lengths, --threads, --reps.
struct SweepFlags {
  std::string lengths = "1024,4096,16384,65536";
  int threads = 2;
  int reps = 3;

  // True when `arg` was one of them (and is now set).
  bool Parse(const std::string& arg) {
    if (const char* v = FlagValue(arg, "--lengths")) {
      lengths = v;
    } else if (const char* v = FlagValue(arg, "--threads")) {
      threads = std::atoi(v);
    } else if (const char* v = FlagValue(arg, "--reps")) {
      reps = std::max(1, std::atoi(v));
    } else {
      return false;
    }
    return true;
  }
};

}  // namespace attnserve::bench
