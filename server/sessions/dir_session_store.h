// SessionStore on a local folder (--session_store=dir:PATH): one file per session,
// PATH/<id>.snapshot, for a server with one replica (or a volume per replica).
//
// Writes are atomic: the snapshot goes to a temporary file in the folder,
// PATH/<id>.snapshot.tmp.<n> (n: a decimal counter), is fsync'ed, renamed over <id>.snapshot,
// and the folder is fsync'ed, so a crash at any point leaves the old snapshot or the new one,
// never a mix. A file's modification time is set to its expiry (Put's ttl from now): Get
// treats an expired file as absent, and expired files are removed at open and whenever a Put
// would pass the size bound. Temporary files left by a crash are removed at
// open: only names of that exact form; other files in the folder are never touched.
//
// Reads never block on what is not a snapshot: Get opens with O_NOFOLLOW | O_NONBLOCK and
// takes only a regular file of at most max_snapshot_bytes; a symbolic link, a folder, a FIFO,
// a socket or a larger file under a session's name is DATA_LOSS (without reading it), and
// other open or read errors (permissions, I/O) UNAVAILABLE. Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "server/sessions/session_store.h"

namespace attnserve::server {

class DirSessionStore final : public SessionStore {
 public:
  // Creates `folder` (and its parents) when missing; sweeps it. `max_bytes` bounds the sum of
  // the snapshots' sizes, `max_snapshot_bytes` each one's (Put and Get).
  static absl::StatusOr<std::unique_ptr<DirSessionStore>> Open(
      const std::string& folder, int64_t max_bytes,
      int64_t max_snapshot_bytes = kDefaultMaxSnapshotBytes);

  absl::Status Put(const std::string& id, std::string_view snapshot, absl::Duration ttl) override;
  absl::StatusOr<std::string> Get(const std::string& id) override;
  absl::Status Delete(const std::string& id) override;
  std::string Describe() const override;

  // Bytes of snapshots in the folder, as this store counts them.
  int64_t bytes() const;

 private:
  DirSessionStore(std::string folder, int64_t max_bytes, int64_t max_snapshot_bytes);
  std::string PathOf(const std::string& id) const;
  // Removes expired snapshots and (with `temporaries`) this store's leftover temporary files;
  // returns the bytes freed.
  int64_t Sweep(absl::Time now, bool temporaries);
  void Forget(const std::string& id);  // drops `id` from the size accounting

  const std::string folder_;
  const int64_t max_bytes_;
  const int64_t max_snapshot_bytes_;
  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, int64_t> sizes_ ABSL_GUARDED_BY(mu_);  // id -> file bytes
  int64_t total_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_temporary_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace attnserve::server
