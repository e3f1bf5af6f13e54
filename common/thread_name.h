// Names the calling thread, so that `top -H`, `ps -L`, gdb, perf and
// /proc/<pid>/task/<tid>/comm tell attnserve's threads apart (Linux keeps the first 15 bytes;
// the OpenMP workers a thread starts inherit its name, so the scheduler's kernel threads show
// as its own). Elsewhere a no-op.
#pragma once

#include <string>

#if defined(__linux__)
#include <pthread.h>
#endif

namespace attnserve {

inline void NameThisThread(const std::string& name) {
#if defined(__linux__)
  pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
#else
  (void)name;
#endif
}

}  // namespace attnserve
