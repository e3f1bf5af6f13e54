// Where sessions go when they leave memory (server/sessions/session_persistence.h decides
// when): one small interface over a key-value store of session snapshots, keyed by session id.
//
// Implementations: dir:PATH (dir_session_store.h, one file per session, for one replica) and
// redis://HOST:PORT (redis_session_store.h, one key per session, shared by replicas).
//
// Contract: every method is thread-safe and bounded in time (a store that hangs answers with
// an error after its timeout; a read never waits on what is not a snapshot, such as a FIFO,
// and never reads more than SessionStoreOptions::max_snapshot_bytes); `id` is checked with
// ValidateSessionId (32 lowercase hex) before it becomes a file name or a key, so no client
// text reaches the file system or Redis; an error never leaves a half-written snapshot
// readable. Error codes: UNAVAILABLE only while the store cannot be reached (or fails in a way
// that may pass); DATA_LOSS when what is stored under `id` can never be a snapshot (a
// symbolic link, a folder, a FIFO, a Redis key of another type, more bytes than
// max_snapshot_bytes).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace attnserve::server {

class SessionLeases;

class SessionStore {
 public:
  virtual ~SessionStore() = default;

  // Stores `snapshot` under `id`, replacing what was there, to expire `ttl` from now.
  // RESOURCE_EXHAUSTED for a snapshot above max_snapshot_bytes (it could not be read back).
  virtual absl::Status Put(const std::string& id, std::string_view snapshot,
                           absl::Duration ttl) = 0;
  // The snapshot stored under `id`; NOT_FOUND when there is none or it expired; DATA_LOSS when
  // what is there cannot be a snapshot (above).
  virtual absl::StatusOr<std::string> Get(const std::string& id) = 0;
  // Removes the snapshot under `id`; NOT_FOUND when there was none.
  virtual absl::Status Delete(const std::string& id) = 0;
  // For the start-up log, e.g. "dir:/var/lib/attnserve (at most 8589934592 bytes)".
  virtual std::string Describe() const = 0;
  // The store's leases (session_lease.h), when it has them: then Put and Delete are fenced by
  // this process's lease token and may answer LeaseLost. Null for a store without (dir:, which
  // serves one replica: see dir_session_store.h).
  virtual SessionLeases* leases() { return nullptr; }
};

// --max_snapshot_bytes's default.
inline constexpr int64_t kDefaultMaxSnapshotBytes = int64_t{1} << 30;

// OK when a snapshot of `size` bytes is within `limit` (--max_snapshot_bytes); else, naming the
// limit, DATA_LOSS for one read from the store (`writing` false: this server can never restore
// it) or RESOURCE_EXHAUSTED for one to write.
absl::Status CheckSnapshotSize(const std::string& id, int64_t size, int64_t limit, bool writing);

struct SessionStoreOptions {
  // dir: the most bytes of snapshots the folder holds (--session_store_max_bytes); a Put beyond
  // is RESOURCE_EXHAUSTED (after removing expired snapshots).
  int64_t max_bytes = int64_t{8} << 30;
  // redis: connect and command timeout (--session_store_timeout_ms).
  absl::Duration timeout = absl::Seconds(1);
  // Both: the largest snapshot written or read (--max_snapshot_bytes, as ImportSession's).
  int64_t max_snapshot_bytes = kDefaultMaxSnapshotBytes;
  // redis: the leases' duration (--session_lease_ms; zero: no leases) and what this process
  // advertises in its token (--advertise_address, else its instance name).
  absl::Duration lease_duration = absl::ZeroDuration();
  std::string lease_address;
};

// Opens the store that `spec` names: "dir:PATH" (the folder is created) or
// "redis://HOST:PORT". INVALID_ARGUMENT for another form; the store's own error when it cannot
// be opened (a Redis that is down is not one: it is retried on use).
absl::StatusOr<std::unique_ptr<SessionStore>> OpenSessionStore(const std::string& spec,
                                                               const SessionStoreOptions& options);

}  // namespace attnserve::server
