// Cores a process may use and the thread team that fits under contention
// (kernels/common/cpu_share.h).
#include "kernels/common/cpu_share.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace attnserve::kernels {
namespace {

class CgroupTree {
 public:
  CgroupTree() {
    char pattern[] = "/tmp/attnserve_cgroup_XXXXXX";
    root_ = ::mkdtemp(pattern);
  }
  ~CgroupTree() { std::filesystem::remove_all(root_); }
  void Write(const std::string& path, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(root_ + path).parent_path());
    std::ofstream(root_ + path) << text << "\n";
  }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

TEST(CpuShareTest, QuotaFromCgroupV2TakesTheSmallestOfTheCgroupAndItsParents) {
  CgroupTree tree;
  tree.Write("/kubepods/pod1/cpu.max", "max 100000");
  tree.Write("/kubepods/pod1/c1/cpu.max", "150000 100000");
  tree.Write("/kubepods/cpu.max", "400000 100000");
  EXPECT_DOUBLE_EQ(CpuQuotaCores("0::/kubepods/pod1/c1\n", tree.root()), 1.5);
  EXPECT_DOUBLE_EQ(CpuQuotaCores("0::/kubepods/pod1\n", tree.root()), 4.0);
  tree.Write("/cpu.max", "max 100000");
  EXPECT_DOUBLE_EQ(CpuQuotaCores("0::/\n", tree.root()), 0.0) << "no quota";
}

TEST(CpuShareTest, QuotaFromCgroupV1) {
  CgroupTree tree;
  tree.Write("/cpu,cpuacct/docker/abc/cpu.cfs_quota_us", "50000");
  tree.Write("/cpu,cpuacct/docker/abc/cpu.cfs_period_us", "100000");
  tree.Write("/cpu,cpuacct/docker/cpu.cfs_quota_us", "-1");
  tree.Write("/cpu,cpuacct/docker/cpu.cfs_period_us", "100000");
  const std::string self = "12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n";
  EXPECT_DOUBLE_EQ(CpuQuotaCores(self, tree.root()), 0.5);
  EXPECT_DOUBLE_EQ(CpuQuotaCores("4:cpu,cpuacct:/docker\n", tree.root()), 0.0);
}

TEST(CpuShareTest, UsableCoresAreAtLeastOneAndAtMostTheAffinity) {
  const CoreCount c = UsableCores();
  EXPECT_GE(c.cores, 1);
  EXPECT_LE(c.cores, c.affinity);
  EXPECT_NE(c.Describe().find("affinity"), std::string::npos);
}

TEST(CpuShareTest, TheTeamShrinksToTheCoresOthersLeaveAndComesBack) {
  CpuContention contention(4);
  // Quiet: this process's own threads only.
  for (int i = 0; i < 20; ++i) EXPECT_EQ(contention.Update(4, 4), 4);
  // Two busy processes: two cores left.
  int team = 4;
  for (int i = 0; i < 20; ++i) team = contention.Update(6, 4);
  EXPECT_EQ(team, 2);
  // Many: one thread, never zero.
  for (int i = 0; i < 20; ++i) team = contention.Update(20, 2);
  EXPECT_EQ(team, 1);
  // A single blip does not move a settled team.
  for (int i = 0; i < 60; ++i) contention.Update(2, 2);
  EXPECT_EQ(contention.Update(2, 2), 4);
  EXPECT_EQ(contention.Update(5, 2), 4);
  for (int i = 0; i < 20; ++i) team = contention.Update(2, 2);
  EXPECT_EQ(team, 4);
}

}  // namespace
}  // namespace attnserve::kernels
