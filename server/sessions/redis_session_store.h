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
//
// Leases (session_lease.h; on when opened with a lease duration): the store is also the
// sessions' SessionLeases, and then every Put and Delete is fenced by this process's token in
// one script with the write (redis_lease_scripts.h): LeaseLost when another token holds the
// session's lease or took it since this one's lapsed. Get is not fenced.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/random/random.h"
#include "absl/synchronization/mutex.h"
#include "server/sessions/session_lease.h"
#include "server/sessions/session_store.h"

struct redisContext;

namespace attnserve::server {

class RedisSessionStore final : public SessionStore, public SessionLeases {
 public:
  // `address` is "HOST:PORT". Does not fail when Redis is unreachable (it may come up later);
  // only a malformed address is an error. With `lease_duration` > 0, leases are on, held as
  // `lease_token` (NewLeaseToken).
  static absl::StatusOr<std::unique_ptr<RedisSessionStore>> Open(
      const std::string& address, absl::Duration timeout,
      int64_t max_snapshot_bytes = kDefaultMaxSnapshotBytes,
      absl::Duration lease_duration = absl::ZeroDuration(), std::string lease_token = "");
  ~RedisSessionStore() override;

  absl::Status Put(const std::string& id, std::string_view snapshot, absl::Duration ttl) override;
  absl::StatusOr<std::string> Get(const std::string& id) override;
  absl::Status Delete(const std::string& id) override;
  std::string Describe() const override;
  SessionLeases* leases() override {
    return lease_duration_ > absl::ZeroDuration() ? this : nullptr;
  }

  // SessionLeases (only when leases are on).
  absl::StatusOr<Acquired> Acquire(const std::string& id) override;
  absl::StatusOr<std::string> Holder(const std::string& id) override;
  absl::StatusOr<std::vector<bool>> Renew(const std::vector<std::string>& ids) override;
  absl::Status Release(const std::string& id) override;
  const std::string& token() const override { return lease_token_; }
  absl::Duration duration() const override { return lease_duration_; }

  static std::string KeyOf(const std::string& id) { return "attnserve:session:" + id; }
  static std::string LeaseKeyOf(const std::string& id) { return "attnserve:lease:" + id; }
  static std::string HolderKeyOf(const std::string& id) { return "attnserve:holder:" + id; }

 private:
  RedisSessionStore(std::string host, int port, absl::Duration timeout, int64_t max_snapshot_bytes,
                    absl::Duration lease_duration, std::string lease_token);
  // What a lease script answered: an array of integers (Renew's), or {code, token}.
  struct ScriptReply {
    long long code = 0;
    std::string token;
    std::vector<long long> integers;
  };
  // EVAL of `script` with `keys` and ARGV this token, the lease's and the last holder's
  // expiries in ms, then `args`. UNAVAILABLE on an I/O error or an error from Redis.
  absl::StatusOr<ScriptReply> EvalLocked(const char* what, const char* script,
                                         const std::vector<std::string>& keys,
                                         const std::vector<std::string_view>& args = {})
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A fenced write's reply: OK for a code > 0, LeaseLost naming the token in the way for 0.
  static absl::Status FenceResult(const std::string& id, const ScriptReply& reply);
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
  const absl::Duration lease_duration_;  // zero: no leases
  const std::string lease_token_;
  absl::Mutex mu_;
  redisContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  absl::Time last_failed_connect_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  absl::BitGen bitgen_ ABSL_GUARDED_BY(mu_);  // temporary key names
};

}  // namespace attnserve::server
