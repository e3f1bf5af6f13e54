// SessionStore on Redis (--session_store=redis://HOST:PORT), through hiredis (Debian's
// libhiredis): one key per session, "attnserve:session:<id>", whose value is the snapshot and
// whose expiry (PX) is the session's remaining TTL, so Redis drops what no replica comes back
// for. Several replicas share one Redis: any of them resumes any session.
//
// A snapshot above 4 MiB is written in 4 MiB pieces to "<key>:writing:<random>" (expiring
// with it) and renamed over the key, so readers never see part of one. Redis holds strings of
// at most 512 MB, so larger snapshots (a long KV cache) fail with RESOURCE_EXHAUSTED (the
// session stays in memory, or in the write queue when it was spilling), as do snapshots above
// max_snapshot_bytes. Get asks the value's length first: a key of another type (WRONGTYPE) or
// a value above max_snapshot_bytes is DATA_LOSS, without reading it.
//
// One connection, used under a mutex, with --session_store_timeout_ms for connecting and for
// every command. A connection that fails is dropped and made again on the next call, but not
// sooner than 1 s after the last failed attempt: while Redis is down, calls fail at once
// (UNAVAILABLE) instead of each waiting for a connect timeout. Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/random/random.h"
#include "absl/synchronization/mutex.h"
#include "server/sessions/session_store.h"

struct redisContext;

namespace attnserve::server {

class RedisSessionStore final : public SessionStore {
 public:
  // `address` is "HOST:PORT". Does not fail when Redis is unreachable (it may come up later);
  // only a malformed address is an error.
  static absl::StatusOr<std::unique_ptr<RedisSessionStore>> Open(
      const std::string& address, absl::Duration timeout,
      int64_t max_snapshot_bytes = kDefaultMaxSnapshotBytes);
  ~RedisSessionStore() override;

  absl::Status Put(const std::string& id, std::string_view snapshot, absl::Duration ttl) override;
  absl::StatusOr<std::string> Get(const std::string& id) override;
  absl::Status Delete(const std::string& id) override;
  std::string Describe() const override;

  static std::string KeyOf(const std::string& id) { return "attnserve:session:" + id; }

 private:
  RedisSessionStore(std::string host, int port, absl::Duration timeout, int64_t max_snapshot_bytes);
  // A connected context, or UNAVAILABLE (reconnecting at most once a second).
  absl::Status ConnectLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops the connection after an I/O error; returns UNAVAILABLE naming `what`.
  absl::Status FailLocked(const char* what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // One command whose reply is only OK or an error (RESOURCE_EXHAUSTED with Redis's message).
  absl::Status CommandLocked(const char* what, const char* format, ...)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Snapshots above this go in pieces of this size (see Put).
  static constexpr size_t kPieceBytes = size_t{4} << 20;

  const std::string host_;
  const int port_;
  const absl::Duration timeout_;
  const int64_t max_snapshot_bytes_;
  absl::Mutex mu_;
  redisContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Time last_failed_connect_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::BitGen bitgen_ ABSL_GUARDED_BY(mu_);  // temporary key names
};

}  // namespace attnserve::server
