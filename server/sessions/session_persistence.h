// Moves sessions between the session table's memory and a session store (session_store.h):
// the one place that decides how, so the table only says when (sessions/session_table.h:
// spill when full, checkpoint every N appends, save at drain, remove on close and expiry).
//
// Writes are write-behind: Save encodes the snapshot at once (the caller makes sure that the
// session's state is not being written: it is idle, or this runs at the head of its queue, on
// the scheduler's thread) and queues it for one writer thread, so no request waits on the
// store. The queue holds the latest operation per session (a newer Save or Remove replaces an
// older one not yet written) and at most `max_queued_bytes`; a Save beyond is refused (and
// counted as dropped). A snapshot stays visible to Load while it is queued or being written,
// so a spilled session comes back at once, never from an older copy in the store.
//
// Loads (Load, RemoveNow) run on the caller's thread (a gRPC thread for a restore) and take as
// long as the store does: bounded by its timeout (Redis) or by a read of at most
// --max_snapshot_bytes from a local regular file (dir:; what is not one is refused without
// waiting, see dir_session_store.h). A store that fails never fails a request that did not need it:
// errors are logged once a second at most and counted
// (attnserve_session_store_operations_total{op, result}); a failed write or removal stays
// queued (a spilled session lives on in the queue, visible to Load) and is tried again after
// 0.5 s, doubling to 30 s, until it succeeds or a newer operation of its session replaces it.
// A closed session is never saved. Thread-safe.
//
// Leases (a store with SessionStore::leases(), session_lease.h): a session enters memory only
// under its lease (AcquireLease), which a renewal thread renews every third of its duration
// while the session is in memory or its spill is still queued; a spill's lease is released
// once its write is done, a closed or expired session's is deleted with its snapshot, and the
// drain releases the rest (ReleaseLeases). A write refused by the fence (LeaseLost), or a
// renewal that finds the lease taken, drops the session's queued operations and tells the
// lease-lost listener (the table drops its copy); such a write is not retried.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/model/model_repository.h"
#include "server/sessions/session_lease.h"
#include "server/sessions/session_snapshot.h"
#include "server/sessions/session_store.h"

namespace attnserve::server {

class ServerMetrics;

struct PersistenceOptions {
  // Write a session every N appends applied to it (--checkpoint_every_appends; 0: never,
  // only when it spills or at drain).
  int checkpoint_every_appends = 0;
  // Most bytes of snapshots waiting for the writer.
  int64_t max_queued_bytes = int64_t{1} << 30;
};

class SessionPersistence {
 public:
  // Borrows `models` and `metrics` (may be null); both must outlive this.
  SessionPersistence(std::unique_ptr<SessionStore> store, const model::ModelRepository& models,
                     PersistenceOptions options, ServerMetrics* metrics);
  ~SessionPersistence();  // stops the writer; what is still queued is not written (see Flush)
  SessionPersistence(const SessionPersistence&) = delete;
  SessionPersistence& operator=(const SessionPersistence&) = delete;

  // Encodes `session` now and queues its write; marks it saved. When the queue is full, waits
  // for room until `wait_until` (the drain waits; spills and checkpoints do not), then gives
  // up: false, counted as dropped.
  // With `release` (a spill), the session's lease is released once this write is done, unless
  // the session came back into memory meanwhile.
  // `on_stored` (when Save returns true; may be null) is called exactly once, on the writer
  // thread (or the caller's, for a drop) with no lock of this class held: OK once the store
  // holds this snapshot or a newer one of the session (a newer Save that replaces this one
  // before it is written carries the callback on); LeaseLost (IsLeaseLost) or UNAVAILABLE when
  // this replica lost the session's lease, so the store will never hold it from here; another
  // error when the store refused the first attempt (the write is retried; the callback is not
  // kept waiting for that), or when the session was closed or this object is destroyed first.
  // The durable acknowledgement of --checkpoint_every_appends (AppendResult.stored).
  using StoredCallback = std::function<void(const absl::Status&)>;
  bool Save(Session& session, absl::Time wait_until = absl::InfinitePast(), bool release = false,
            StoredCallback on_stored = nullptr);
  // Queues the removal of `id`'s snapshot (replacing a queued write of it).
  void Remove(const std::string& id);
  // Removes `id`'s snapshot now, from the queue and the store: NOT_FOUND when neither had it.
  absl::Status RemoveNow(const std::string& id);

  // The session `id` from the queue or the store. NOT_FOUND when neither holds it or it has
  // expired; the snapshot's own error (DATA_LOSS, FAILED_PRECONDITION) when it does not decode;
  // UNAVAILABLE and the like when the store fails.
  absl::StatusOr<SessionSnapshot> Load(const std::string& id);

  // Waits until every queued operation is done or `deadline` passes; returns how many are left.
  int64_t Flush(absl::Time deadline);

  // For the drain's count of sessions: the ids whose latest queued operation is a write
  // (spilled sessions among them), and where one stands: kDone when nothing of `id` is queued
  // (written, or never queued), kFailing when its latest operation is queued after the store
  // refused it at least once (it is tried again), kQueued when it is queued and not tried yet
  // (or being tried the first time).
  std::vector<std::string> QueuedWrites() const;
  enum class Progress { kDone, kFailing, kQueued };
  Progress ProgressOf(const std::string& id) const;

  // ---- Leases (all no-ops, OK, when the store has none) ----
  bool leased() const { return leases_ != nullptr; }
  // Before session `id` enters memory (created, restored, imported): takes its lease.
  // LeaseHeldElsewhere when another replica holds it; UNAVAILABLE when the store cannot be
  // reached, except for a `fresh` id (a new session: nobody else can know it), which is
  // admitted and leased at the next renewal. A lease taken from another holder drops the queued
  // operations of `id` (older than the store's copy).
  absl::Status AcquireLease(const std::string& id, bool fresh);
  // Without taking it: LeaseHeldElsewhere when another replica holds the lease of `id` now,
  // OK when this one or none does (or the store has no leases); UNAVAILABLE when the store
  // cannot be reached.
  absl::Status CheckNotLeasedElsewhere(const std::string& id);
  // Session `id` left memory without a queued write to release its lease (a restore that failed,
  // a drop): releases it now. A spill instead marks it (SpilledLease) and its write releases it.
  void ReleaseLease(const std::string& id);
  void SpilledLease(const std::string& id);
  // A restore found no session `id`: deletes the lease and last-holder keys it made.
  void ForgetLease(const std::string& id);
  // Whether `id` may be served from memory without asking the store: its lease was confirmed
  // less than its duration ago (with a margin), or it is a fresh one not leased yet.
  bool LeaseFresh(const std::string& id) const;
  // Renews `id`'s lease now: OK; LeaseLost when another replica took it (the caller drops its
  // copy; the listener is not called); UNAVAILABLE when the store cannot be reached.
  absl::Status ConfirmLease(const std::string& id);
  // At drain, once the writes are done: releases every lease whose session has nothing queued
  // (a failing write keeps its lease until it expires). Returns how many were released.
  int ReleaseLeases();
  // Called with the id of a session whose lease was lost (by the renewal or writer thread, no
  // lock held); null to stop. The table drops its copy.
  void SetLeaseLostListener(std::function<void(const std::string&)> listener);
  int64_t leases_held() const;

  int checkpoint_every_appends() const { return options_.checkpoint_every_appends; }
  std::string Describe() const { return store_->Describe(); }
  int64_t queued_bytes() const;

 private:
  struct Operation {
    std::shared_ptr<const std::string> snapshot;  // null: remove
    absl::Duration ttl;
    int64_t generation = 0;
    int attempts = 0;                       // failed so far
    bool release = false;                   // a spill: release the lease once written
    std::vector<StoredCallback> on_stored;  // taken by the writer when it starts the operation
  };
  struct LeaseEntry {
    absl::Time fresh_until;  // confirmed by the store until then (InfiniteFuture: fresh id)
    bool in_memory = true;   // false once spilled: its write releases it
  };
  void RenewerLoop();
  // Drops the queued operations of `id` (its lease was lost or taken from another holder) and
  // returns their on_stored callbacks, for the caller to call with LeaseLost once it holds no
  // lock of this class (a callback may call ConfirmLease, which takes lease_call_mu_).
  [[nodiscard]] std::vector<StoredCallback> DropQueued(const std::string& id);
  // Calls each callback with `status` (no lock held).
  static void Notify(std::vector<StoredCallback>& callbacks, const absl::Status& status);
  // Calls its callbacks with `status` when it goes: declared before a lock, after the lock is
  // released.
  struct NotifyOnExit {
    std::vector<StoredCallback> callbacks;
    absl::Status status;
    ~NotifyOnExit() { Notify(callbacks, status); }
  };
  void LeaseLostNow(const std::string& id);
  void WriterLoop();
  void Queue(const std::string& id, Operation op) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Records one operation's outcome: metrics, and a log line for an error (at most once a
  // second).
  void Count(const char* op, const absl::Status& status, absl::Time start);

  const std::unique_ptr<SessionStore> store_;
  const model::ModelRepository& models_;
  const PersistenceOptions options_;
  ServerMetrics* const metrics_;

  mutable absl::Mutex mu_;
  absl::flat_hash_map<std::string, Operation> queued_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> order_ ABSL_GUARDED_BY(mu_);  // ids, oldest first (may repeat)
  std::multimap<absl::Time, std::string> retries_ ABSL_GUARDED_BY(mu_);  // failed: when again
  int64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t next_generation_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t writing_ ABSL_GUARDED_BY(mu_) = 0;  // operations taken by the writer, not yet done
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Mutex log_mu_;
  absl::Time last_log_ ABSL_GUARDED_BY(log_mu_) = absl::InfinitePast();
  std::thread writer_;

  SessionLeases* const leases_;  // the store's, or null
  // Held across the store's lease calls (and fenced removals), taken before lease_mu_: one at a
  // time, so that a release and an acquire of one session cannot cross.
  absl::Mutex lease_call_mu_;
  mutable absl::Mutex lease_mu_;  // never held across a call to the store
  absl::flat_hash_map<std::string, LeaseEntry> held_ ABSL_GUARDED_BY(lease_mu_);
  bool stop_renewer_ ABSL_GUARDED_BY(lease_mu_) = false;
  absl::Mutex listener_mu_;
  std::function<void(const std::string&)> lease_lost_ ABSL_GUARDED_BY(listener_mu_);
  std::thread renewer_;
};

}  // namespace attnserve::server
