// How many cores this process may really use, and how many it gets now.
//
// UsableCores(): the CPUs of the process's affinity mask (sched_getaffinity: taskset, a
// cpuset), capped by its CPU quota (cgroup v2 cpu.max, or v1 cpu.cfs_quota_us /
// cpu.cfs_period_us, for its own cgroup and every parent; rounded up), at least 1. A pod with
// `limits.cpu: 1` on a 16-core node gets 1, not 16: a team of 16 threads on a quota of one core
// spends the quota in its barriers and is throttled for the rest of each period.
//
// CpuContention: how many of those cores other processes keep busy. The kernels' thread team
// synchronises at every parallel region, so a team larger than the cores it gets waits, at
// each region, for a thread the kernel has descheduled (one time slice, milliseconds): with two
// busy processes on 2 cores a prefill took 10-18x its quiet time with 2 threads, where one
// thread takes 3x (its fair share of the cores). Sampled from /proc/stat's procs_running (the
// runnable threads of the machine, or of the container's view of it) minus this process's own
// running threads (/proc/self/task/*/stat), smoothed over the last second or so.
// Threads: UsableCores() is thread-safe; a CpuContention is used by one thread.
#pragma once

#include <cstdint>
#include <string>

namespace attnserve::kernels {

struct CoreCount {
  int cores = 1;                 // what the process may use: min(affinity, ceil(quota)), >= 1
  int affinity = 1;              // CPUs in the affinity mask
  double quota = 0;              // CPUs' worth of quota (0: none)
  std::string Describe() const;  // "2 cores (affinity 2, no CPU quota)"
};
CoreCount UsableCores();

// The CPU quota in cores from cgroup files under `cgroup_root` for the cgroup paths of
// `proc_self_cgroup` (the text of /proc/self/cgroup); 0 when there is none. For tests.
double CpuQuotaCores(const std::string& proc_self_cgroup, const std::string& cgroup_root);

class CpuContention {
 public:
  explicit CpuContention(int usable_cores);
  // Takes a sample (a few reads of /proc; call it at most every ~100 ms) and returns the
  // team size that fits: usable cores minus the smoothed count of other runnable threads,
  // rounded, at least 1.
  int Sample();
  double others() const { return others_; }  // smoothed other runnable threads

  // The same from counts: the runnable threads of the machine and this process's own running
  // threads at one instant (for tests).
  int Update(int machine_running, int own_running);

 private:
  const int usable_;
  double others_ = 0;
  int team_;
};

}  // namespace attnserve::kernels
