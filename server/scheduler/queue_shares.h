// How the scheduler's queue (--max_queue) is shared between clients, so that one client cannot
// fill it for all. A client is a principal (with authentication) or, without authentication,
// a connection (its peer address and port): job.h's `client`.
//
// Admission of one more job of client C:
//   * C holds --max_queue_per_client already: refused (RESOURCE_EXHAUSTED);
//   * the queue holds fewer than --max_queue jobs: admitted;
//   * the queue is full: admitted only while C holds less than its fair share (--max_queue
//     divided by the clients holding jobs, C counted) and another client holds more than that
//     share, so a newcomer gets in while one client holds more than its share; refused
//     otherwise.
// Jobs past --max_queue are admitted only to clients below their share, so the queue never
// holds more than 2 x --max_queue jobs (at most --max_queue admitted before it filled, fewer
// than --max_queue held by clients below their share), and the client above its share gets
// no more until it is back under it.
//
// Not thread-safe: the scheduler calls it under its lock.
#pragma once

#include <cstdint>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"

namespace attnserve::server::scheduler {

class QueueShares {
 public:
  // capacity: --max_queue (>= 1); per_client: --max_queue_per_client (>= 1).
  QueueShares(int64_t capacity, int64_t per_client);

  // OK when one more job of `client` may join; RESOURCE_EXHAUSTED with the reason otherwise.
  absl::Status Admit(const std::string& client) const;
  void Add(const std::string& client);
  void Remove(const std::string& client);  // one of its jobs ended

  int64_t total() const { return total_; }
  int64_t held_by(const std::string& client) const;
  int64_t clients() const { return static_cast<int64_t>(held_.size()); }

 private:
  const int64_t capacity_;
  const int64_t per_client_;
  absl::flat_hash_map<std::string, int64_t> held_;  // clients holding jobs only
  int64_t total_ = 0;
};

}  // namespace attnserve::server::scheduler
