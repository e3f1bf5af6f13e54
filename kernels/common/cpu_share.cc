#include "kernels/common/cpu_share.h"

#include <dirent.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace attnserve::kernels {
namespace {

bool ReadFirstLine(const std::string& path, std::string* line) {
  std::ifstream in(path);
  return static_cast<bool>(std::getline(in, *line));
}

// The quota of one cgroup folder, in cores (0: none there).
double QuotaIn(const std::string& folder, bool v2) {
  std::string line;
  if (v2) {
    if (!ReadFirstLine(folder + "/cpu.max", &line)) return 0;
    std::istringstream in(line);
    std::string quota;
    double period = 0;
    in >> quota >> period;
    if (quota == "max" || period <= 0) return 0;
    return std::stod(quota) / period;
  }
  std::string period_line;
  if (!ReadFirstLine(folder + "/cpu.cfs_quota_us", &line) ||
      !ReadFirstLine(folder + "/cpu.cfs_period_us", &period_line)) {
    return 0;
  }
  const double quota = std::stod(line), period = std::stod(period_line);
  return quota > 0 && period > 0 ? quota / period : 0;
}

// The smallest quota of `path` and its parents under `root` (0: none).
double SmallestQuota(const std::string& root, std::string path, bool v2) {
  double smallest = 0;
  while (true) {
    const double q = QuotaIn(root + path, v2);
    if (q > 0 && (smallest == 0 || q < smallest)) smallest = q;
    if (path.empty() || path == "/") break;
    const size_t slash = path.find_last_of('/');
    path = slash == std::string::npos || slash == 0 ? "/" : path.substr(0, slash);
  }
  return smallest;
}

int ProcsRunning() {
  std::ifstream in("/proc/stat");
  std::string key;
  while (in >> key) {
    if (key == "procs_running") {
      int n = 0;
      in >> n;
      return n;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

int OwnRunningThreads() {
  DIR* dir = opendir("/proc/self/task");
  if (dir == nullptr) return 1;
  int running = 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream stat(std::string("/proc/self/task/") + e->d_name + "/stat");
    std::string text;
    std::getline(stat, text);
    // "tid (comm) S ...": the state follows the last ')' (a name may hold parentheses).
    const size_t close = text.rfind(')');
    if (close != std::string::npos && close + 2 < text.size() && text[close + 2] == 'R') ++running;
  }
  closedir(dir);
  return running;
}

}  // namespace

std::string CoreCount::Describe() const {
  std::ostringstream out;
  out << cores << (cores == 1 ? " core" : " cores") << " (affinity " << affinity << ", ";
  if (quota > 0) {
    out << "CPU quota " << quota << ")";
  } else {
    out << "no CPU quota)";
  }
  return out.str();
}

double CpuQuotaCores(const std::string& proc_self_cgroup, const std::string& cgroup_root) {
  std::istringstream lines(proc_self_cgroup);
  std::string line;
  double smallest = 0;
  auto take = [&](double q) {
    if (q > 0 && (smallest == 0 || q < smallest)) smallest = q;
  };
  while (std::getline(lines, line)) {
    // "hierarchy-id:controllers:path"; v2 is "0::path".
    const size_t a = line.find(':'), b = line.find(':', a + 1);
    if (a == std::string::npos || b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) {
      take(SmallestQuota(cgroup_root, path, /*v2=*/true));
      take(SmallestQuota(cgroup_root + "/unified", path, /*v2=*/true));
    } else {
      std::istringstream names(controllers);
      std::string name;
      while (std::getline(names, name, ',')) {
        if (name != "cpu") continue;
        take(SmallestQuota(cgroup_root + "/" + controllers, path, /*v2=*/false));
        take(SmallestQuota(cgroup_root + "/cpu", path, /*v2=*/false));
      }
    }
  }
  return smallest;
}

CoreCount UsableCores() {
  CoreCount c;
  cpu_set_t set;
  CPU_ZERO(&set);
  c.affinity = sched_getaffinity(0, sizeof(set), &set) == 0
                   ? CPU_COUNT(&set)
                   : static_cast<int>(std::thread::hardware_concurrency());
  c.affinity = std::max(1, c.affinity);
  std::ifstream in("/proc/self/cgroup");
  std::stringstream text;
  text << in.rdbuf();
  c.quota = CpuQuotaCores(text.str(), "/sys/fs/cgroup");
  c.cores = c.affinity;
  if (c.quota > 0) c.cores = std::min(c.cores, static_cast<int>(std::ceil(c.quota - 1e-9)));
  c.cores = std::max(1, c.cores);
  return c;
}

CpuContention::CpuContention(int usable_cores)
    : usable_(std::max(1, usable_cores)), team_(usable_) {}

int CpuContention::Sample() { return Update(ProcsRunning(), OwnRunningThreads()); }

int CpuContention::Update(int machine_running, int own_running) {
  const double others = std::max(0, machine_running - own_running);
  // About the last ten samples (a second of work): a busy process shows within ~0.6 s, a
  // one-sample blip does not move the team.
  others_ += 0.15 * (others - others_);
  // Hysteresis: the team changes only when the fit is off by more than half a core.
  const double fit = std::clamp(usable_ - others_, 1.0, static_cast<double>(usable_));
  if (std::abs(fit - team_) > 0.6) team_ = static_cast<int>(std::lround(fit));
  team_ = std::clamp(team_, 1, usable_);
  return team_;
}

}  // namespace attnserve::kernels
