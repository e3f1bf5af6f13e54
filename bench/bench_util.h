// What the benchmarks in bench/ share.
#pragma once

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "kernels/common/memory_reuse.h"
#include "kernels/common/mixer.h"

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

// A comma-separated list of positive integers ("1024,4096"), or nullopt when it is not one.
inline std::optional<std::vector<int64_t>> PositiveList(absl::string_view list) {
  std::vector<int64_t> out;
  for (absl::string_view part : absl::StrSplit(list, ',')) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 1) return std::nullopt;
    out.push_back(v);
  }
  return out;
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

  // --lengths as numbers; exits with status 2 when it is not a list of positive integers.
  std::vector<int64_t> Lengths() const {
    std::optional<std::vector<int64_t>> parsed = PositiveList(lengths);
    if (!parsed) {
      std::fprintf(stderr, "--lengths: expected positive integers, got %s\n", lengths.c_str());
      std::exit(2);
    }
    return *parsed;
  }

  // What the sweeps do before measuring, as the server does: ATen on --threads threads, and
  // freed memory kept for reuse (kernels/common/memory_reuse.h).
  void Start() const {
    at::set_num_threads(threads);
    kernels::KeepFreedMemoryForReuse();
  }
};

// Prints `what` failed and why, and exits 1 (a benchmark cannot go on without it).
[[noreturn]] inline void Die(const char* what, const absl::Status& status) {
  std::fprintf(stderr, "%s failed: %s\n", what, status.ToString().c_str());
  std::exit(1);
}

// The median time of one Step (batch 1) after each context length, in milliseconds: a state
// per context, prefilled with random input in chunks of 4096 tokens, then `reps` rounds that
// step each state once in turn, so that a machine slowing down mid-run (these VMs move by 30%)
// weighs on every context alike. Each step continues its state (a growing KV cache grows).
inline std::vector<double> StepMsAfterContexts(const kernels::Mixer& mixer, int64_t d_model,
                                               const std::vector<int64_t>& contexts,
                                               int reps = 101) {
  std::vector<kernels::MixerState> states;
  for (int64_t context : contexts) {
    absl::StatusOr<kernels::MixerState> state = mixer.InitialState(1);
    if (!state.ok()) Die("InitialState", state.status());
    for (int64_t done = 0; done < context; done += 4096) {
      const absl::StatusOr<at::Tensor> out =
          mixer.Prefill(at::randn({1, std::min<int64_t>(4096, context - done), d_model}), &*state);
      if (!out.ok()) Die("Prefill", out.status());
    }
    states.push_back(*std::move(state));
  }
  const at::Tensor x_t = at::randn({1, d_model});
  for (int w = 0; w < 5; ++w) {
    for (kernels::MixerState& state : states) (void)mixer.Step(x_t, &state);
  }
  std::vector<std::vector<double>> samples(states.size());
  for (int rep = 0; rep < reps; ++rep) {
    for (size_t c = 0; c < states.size(); ++c) {
      samples[c].push_back(MedianMs(1, [&] { (void)mixer.Step(x_t, &states[c]); }));
    }
  }
  std::vector<double> medians;
  for (std::vector<double>& s : samples) {
    std::sort(s.begin(), s.end());
    medians.push_back(s[s.size() / 2]);
  }
  return medians;
}

// Milliseconds since `t0`.
inline double MsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// The median of `v` (the mean of the middle two of an even count); v must not be empty.
inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Whether `arg` is `--name=VALUE` for one of `valued`, or exactly one of `switches`.
inline bool KnownFlag(const std::string& arg, std::initializer_list<const char*> valued,
                      std::initializer_list<const char*> switches = {}) {
  for (const char* name : valued) {
    if (arg.rfind(std::string(name) + "=", 0) == 0) return true;
  }
  for (const char* name : switches) {
    if (arg == name) return true;
  }
  return false;
}

// The CPU's model name from /proc/cpuinfo ("unknown" elsewhere), for a benchmark's header line.
inline std::string CpuName() {
  FILE* f = std::fopen("/proc/cpuinfo", "r");
  if (f == nullptr) return "unknown";
  char line[512];
  std::string name = "unknown";
  while (std::fgets(line, sizeof(line), f) != nullptr) {
    if (std::strncmp(line, "model name", 10) == 0) {
      const char* colon = std::strchr(line, ':');
      if (colon != nullptr) {
        name = colon + 1;
        name.erase(0, name.find_first_not_of(' '));
        name.erase(name.find_last_not_of(" \n") + 1);
      }
      break;
    }
  }
  std::fclose(f);
  return name;
}

}  // namespace attnserve::bench
