#include "common/thread_name.h"

#include <gtest/gtest.h>
#include <pthread.h>

#include <string>
#include <thread>

namespace attnserve {
namespace {

std::string NameOfThisThread() {
  char name[16] = {};
  pthread_getname_np(pthread_self(), name, sizeof(name));
  return name;
}

TEST(ThreadNameTest, NamesTheCallingThreadKeepingTheFirst15Bytes) {
  std::string short_name, long_name;
  std::thread a([&] {
    NameThisThread("scheduler");
    short_name = NameOfThisThread();
  });
  std::thread b([&] {
    NameThisThread("session-reaper-of-the-table");
    long_name = NameOfThisThread();
  });
  a.join();
  b.join();
  EXPECT_EQ(short_name, "scheduler");
  EXPECT_EQ(long_name, "session-reaper-");
}

}  // namespace
}  // namespace attnserve
