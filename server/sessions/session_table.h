// The session table: each client's conversation with one variant (its recurrent state or KV
// cache, its position, its last use), sharded so that lookups on different sessions do not
// contend. It enforces a session count and a state-memory budget, expires idle sessions
// after their TTL (a reaper thread), and evicts the least recently used idle session when
// full if so configured. Thread-safe.
//
// With a session store (SessionPersistence, session_persistence.h) sessions outlive the
// process: when full, the least recently used idle sessions spill to the store instead of
// being refused or dropped; a session changed by --checkpoint_every_appends appends is written
// to it; SaveChanged writes every changed session (at drain); closing or expiry removes the
// stored copy; and a session that is not in memory is looked up in the store (Get, Peek,
// Close) and restored whole, so a client resumes it after a restart, on any replica that
// shares the store.
//
// With a store that has leases (session_lease.h) a session is in memory only under its lease:
// Create, a restore and Import take it (a session leased by another replica is
// LeaseHeldElsewhere: UNAVAILABLE naming that replica), Get and ConfirmLease ask the store
// again when it was last confirmed longer ago than its duration (after a pause such as SIGSTOP),
// and a lease found taken drops this copy (EvictionReason::kLeaseLost) without touching the
// store's (the implementation of these is in session_table_leases.cc).
//
// Ownership: the table and the callers running a request share a Session through
// shared_ptr; a closed or evicted session is marked closed and dropped from the table, and
// whoever still holds it sees `closed()` and stops.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "attnserve/v1/inference.pb.h"
#include "server/model/model.h"
#include "server/security/authenticator.h"

namespace attnserve::server {

class SessionPersistence;
struct SessionSnapshot;

// Why a session left memory: its TTL passed; dropped or spilled to the session store to make
// room; closed; its lease was taken by another replica (session_lease.h: this copy is stale).
enum class EvictionReason { kTtl, kCapacity, kSpilled, kClosed, kLeaseLost };
// "ttl", "capacity", "spilled", "closed", "lease_lost"
const char* EvictionReasonName(EvictionReason reason);

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(std::string id, const model::Model* model, absl::Duration ttl, model::ModelState state,
          std::string owner = "");

  const std::string& id() const { return id_; }
  const model::Model* model() const { return model_; }
  absl::Duration ttl() const { return ttl_; }
  // The principal that opened the session (empty: the server has no authentication).
  const std::string& owner() const { return owner_; }

  // The session's computation state. Read and written only by the job at the head of the
  // session's queue in the scheduler (server/scheduler/batch_scheduler.h), on the scheduler's
  // thread, so one session's requests run one at a time without a lock of their own.
  model::ModelState state;
  int64_t last_sequence_number = 0;
  // The results of the last appends, for retries (at most the service's retry window, default
  // kDefaultRetryWindow), each with a hash of the append it answered (tokens, output and
  // generate specs), so that a retry that differs from what was applied is refused.
  static constexpr int kDefaultRetryWindow = 8;
  struct StoredResult {
    uint64_t request_hash = 0;
    v1::AppendResult result;
  };
  std::deque<StoredResult> recent_results;

  // Readable from any thread (for listings and the reaper).
  int64_t position() const { return position_.load(); }
  int64_t state_bytes() const { return state_bytes_.load(); }
  int64_t last_sequence() const { return last_sequence_.load(); }
  bool closed() const { return closed_.load(); }
  // Closed because another replica took its lease (this copy is stale; the session lives on
  // there).
  bool moved() const { return moved_.load(); }
  bool attached() const { return attached_.load() > 0; }
  absl::Time last_used() const { return absl::FromUnixNanos(last_used_ns_.load()); }
  // In use: a request is running or queued, or a stream is attached. Such a session is never
  // expired or evicted.
  bool in_use() const { return users_.load() > 0 || attached_.load() > 0; }

  void Touch() { last_used_ns_.store(absl::GetCurrentTimeNanos()); }
  void Attach() { attached_.fetch_add(1); }
  void Detach() {
    attached_.fetch_sub(1);
    Touch();
  }
  // After a job changed the state (on the scheduler's thread): publish position and sequence
  // number.
  void Publish() {
    position_.store(state.position);
    last_sequence_.store(last_sequence_number);
  }

  v1::SessionInfo Info() const;

  // Changes (applied requests) to the session, and whether the session store has its latest:
  // MarkSaved when its snapshot is queued for writing (a write that fails stays queued, and is
  // tried again, until a newer one replaces it).
  // saved(): the store has (or its write queue holds) the latest changes, and that copy
  // expires no sooner than the session itself (its expiry is fixed when it is written, while a
  // session in use lives on).
  int64_t changes() const { return changes_.load(); }
  int64_t unsaved_changes() const { return changes_.load() - std::max<int64_t>(saved_.load(), 0); }
  bool saved() const {
    return saved_.load() == changes_.load() &&
           stored_until_ns_.load() >= last_used_ns_.load() + absl::ToInt64Nanoseconds(ttl_);
  }
  void MarkSaved(int64_t changes, absl::Time stored_until) {
    saved_.store(changes);
    stored_until_ns_.store(absl::ToUnixNanos(stored_until));
  }

 private:
  friend class SessionTable;
  friend class SessionUse;
  const std::string id_;
  const model::Model* const model_;
  const absl::Duration ttl_;
  const std::string owner_;
  std::atomic<int64_t> changes_{0};
  std::atomic<int64_t> saved_{-1};           // changes() when last saved; -1: the store lacks it
  std::atomic<int64_t> stored_until_ns_{0};  // when the stored copy expires
  std::atomic<int64_t> position_{0};
  std::atomic<int64_t> state_bytes_{0};
  std::atomic<int64_t> last_sequence_{0};
  std::atomic<int64_t> last_used_ns_;
  std::atomic<int> users_{0};
  std::atomic<int> attached_{0};
  std::atomic<bool> closed_{false};
  std::atomic<bool> moved_{false};
};

struct SessionLimits {
  int64_t max_sessions = 10000;
  int64_t state_budget_bytes = int64_t{8} << 30;
  absl::Duration default_ttl = absl::Minutes(10);
  absl::Duration max_ttl = absl::Hours(24);
  // When full, evict the least recently used idle session instead of refusing.
  bool evict_when_full = false;
  absl::Duration reap_interval = absl::Seconds(1);
};

// What SessionTable::SaveAtDrain did, in sessions: saved + failed + unwritten == changed.
struct DrainSaveCounts {
  int changed = 0;          // sessions the store lacked: changed since queued for writing, or whose
                            // write (a checkpoint, a spill) was still queued
  int saved = 0;            // written to the store by the deadline
  int failed = 0;           // whose write the store refused (tried again until the deadline)
  int unwritten = 0;        // otherwise not written: no room in the write queue, or not yet tried
  int leases_released = 0;  // with leases: released once their sessions' writes were done
};

// Marks a session in use for the lifetime of the guard (it cannot expire or be evicted).
class SessionUse {
 public:
  explicit SessionUse(std::shared_ptr<Session> session);
  ~SessionUse();
  SessionUse(SessionUse&&) = default;
  Session* operator->() const { return session_.get(); }
  Session& operator*() const { return *session_; }
  const std::shared_ptr<Session>& get() const { return session_; }

 private:
  std::shared_ptr<Session> session_;
};

class SessionTable {
 public:
  // Called after a session leaves the table (closed, expired or evicted), outside the shard
  // locks but possibly under the admission lock: it must not call back into the table.
  using EvictionListener = std::function<void(const Session&, EvictionReason)>;

  // `persistence` (borrowed, may be null: memory only) must outlive the table.
  explicit SessionTable(SessionLimits limits, EvictionListener listener = nullptr,
                        SessionPersistence* persistence = nullptr);
  ~SessionTable();  // stops the reaper

  // A new session of `model` with a fresh state and an id of 128 random bits, or `id` when
  // given (of the table's format, ValidateSessionId: an Open Inference Protocol sequence's id,
  // derived from its principal and sequence_id; ALREADY_EXISTS while the table holds that id
  // in memory). `ttl` zero means the default; above max_ttl is INVALID_ARGUMENT.
  // RESOURCE_EXHAUSTED when the count or the memory budget is full (after evicting idle
  // sessions, when configured).
  absl::StatusOr<SessionUse> Create(const model::Model* model, absl::Duration ttl,
                                    const std::string& owner = "", const std::string& id = "");

  // NOT_FOUND for an unknown, expired or closed session (the message says which it may be);
  // INVALID_ARGUMENT for an id not of the table's format (ValidateSessionId), here and in Peek
  // and Close, before any lookup (and so before the store sees it). A session that is not in
  // memory is restored from the store when there is one (its errors: SessionPersistence::Load;
  // RESOURCE_EXHAUSTED when it does not fit).
  // A session `caller` may not access (Caller::CanAccess of its owner) is NOT_FOUND with the
  // same message as an unknown id, here and in Peek, Close and Import: nothing tells another
  // principal that it exists.
  absl::StatusOr<SessionUse> Get(const std::string& id, const Caller& caller = {});

  // The session for reading its info only: no use is recorded, so its idle time goes on. A
  // session only in the store is read from it but not restored (a client asking every
  // replica where a session is must not pull a copy into each); `*in_memory` (may be null)
  // says which. One whose lease another replica holds is LeaseHeldElsewhere, naming it, as
  // Get answers (that replica holds the newest state).
  absl::StatusOr<std::shared_ptr<const Session>> Peek(const std::string& id,
                                                      const Caller& caller = {},
                                                      bool* in_memory = nullptr);

  // Removes the session, and its stored copy; NOT_FOUND when neither is there.
  absl::Status Close(const std::string& id, const Caller& caller = {});

  // Makes the session of `snapshot` (ImportSession) a session of this table: ALREADY_EXISTS
  // when the table holds its id, RESOURCE_EXHAUSTED when it does not fit.
  absl::StatusOr<SessionUse> Import(SessionSnapshot snapshot, const Caller& caller = {});

  // After a request changed `session` (on the scheduler's thread, once its results are
  // stored, before the session's next job): counts the change, and writes a checkpoint to the
  // store every --checkpoint_every_appends changes. True when it queued one: then `on_stored`
  // (may be null) is called once its write is done (SessionPersistence::Save says how), and
  // the caller answers the request then, so that an acknowledged append is in the store.
  bool Applied(Session& session, std::function<void(const absl::Status&)> on_stored = nullptr);

  // Queues a write of every session with changes the store lacks, waiting for room in the
  // write queue until `wait_until`. Returns how many were queued.
  int SaveChanged(absl::Time wait_until = absl::InfinitePast());
  // At drain, once no job runs: SaveChanged, then waits until `deadline` for the writes, and
  // counts the sessions (each once, however often its write was tried).
  DrainSaveCounts SaveAtDrain(absl::Time deadline);

  // A fork: `to` gets a copy of `from`'s state (its KV entries shared, not copied: `from` goes
  // on appending past them), its bytes reserved in the budget, and counts as changed. On the
  // scheduler's thread, at the head of `from`'s queue (nothing computes on either meanwhile).
  absl::Status CopyState(const Session& from, Session& to);

  // Before a request grows a session's state to `new_bytes`: reserves the difference in the
  // budget (evicting idle sessions when configured), or RESOURCE_EXHAUSTED naming the budget.
  absl::Status Reserve(Session& session, int64_t new_bytes);

  // Before a request on a session in memory (a stream's append): OK when this replica holds
  // its lease (asking the store when it was not confirmed within its duration). Else the
  // session is dropped from memory and the answer is LeaseHeldElsewhere (UNAVAILABLE with the
  // holder's address) or UNAVAILABLE (the store cannot confirm it). Always OK without leases.
  absl::Status ConfirmLease(Session& session);

  // Removes the sessions idle beyond their TTL; returns how many. The reaper calls it.
  int ReapExpired(absl::Time now);

  // The sessions in memory that `caller` may access (of `model` when not empty), at most
  // `limit`; `total` and `state_bytes` (when not null) count all of them.
  std::vector<v1::SessionInfo> List(const std::string& model, int limit, const Caller& caller = {},
                                    int64_t* total = nullptr, int64_t* state_bytes = nullptr) const;

  struct ModelStats {
    int64_t sessions = 0;
    int64_t state_bytes = 0;
  };
  // Sessions and state bytes by model name (only models with sessions).
  std::map<std::string, ModelStats> StatsByModel() const;
  int64_t size() const { return count_.load(); }
  // Sessions in use now (a request queued or running, or a stream attached): a scan.
  int64_t InUse() const;
  int64_t state_bytes() const { return bytes_.load(); }
  const SessionLimits& limits() const { return limits_; }

 private:
  static constexpr int kShards = 16;
  struct Shard {
    mutable absl::Mutex mu;
    absl::flat_hash_map<std::string, std::shared_ptr<Session>> sessions ABSL_GUARDED_BY(mu);
  };
  Shard& ShardFor(const std::string& id);
  const Shard& ShardFor(const std::string& id) const;
  // Takes the session out of the table and marks it closed; with only_if_idle, not when it
  // is in use; with a store, queues the removal of its stored copy first, under the shard's
  // lock, so a Get that misses it cannot restore an older copy. Null when nothing was removed
  // (or `caller` may not access it).
  std::shared_ptr<Session> Remove(const std::string& id, bool only_if_idle,
                                  const Caller* caller = nullptr);
  void Evicted(const std::shared_ptr<Session>& session, EvictionReason reason);
  // Admits a restored or imported session: the existing one when `existing_ok` and the table
  // holds its id already (a concurrent restore), else ALREADY_EXISTS.
  absl::StatusOr<SessionUse> Admit(SessionSnapshot snapshot, bool existing_ok);
  // Counts and inserts a new session of `bytes` state (evicting or spilling idle ones to make
  // room), or RESOURCE_EXHAUSTED. Under admission_mu_.
  absl::Status InsertLocked(const std::shared_ptr<Session>& session, int64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(admission_mu_);
  absl::StatusOr<SessionUse> Restore(const std::string& id, const Caller& caller);
  // The snapshot of `id` from the store, when `caller` may access it (NOT_FOUND otherwise).
  absl::StatusOr<SessionSnapshot> LoadFor(const std::string& id, const Caller& caller);
  // The session of a snapshot, not in the table (its last use the snapshot's).
  static std::shared_ptr<Session> FromSnapshot(SessionSnapshot snapshot);
  // Takes an idle session out of the table to make room: spilled to the store when there is
  // one (and the write queue takes it), else dropped when evict_when_full. Null when neither.
  std::shared_ptr<Session> TakeForRoom(const std::string& id, EvictionReason* reason);
  // Evicts least recently used idle sessions until `count` sessions and `bytes` more bytes
  // fit. Returns whether they fit.
  bool MakeRoom(int64_t extra_sessions, int64_t extra_bytes, const Session* keep);
  std::string NewId();
  // Takes `id` out of memory after its lease was lost, leaving the store alone; the session is
  // marked closed. Whether it was there.
  bool DropLost(const std::string& id);
  // The error for a session whose lease this replica lost: where it is now held.
  absl::Status LostTo(const std::string& id);
  // The sessions whose changes the store lacks.
  std::vector<std::shared_ptr<Session>> Unsaved() const;

  const SessionLimits limits_;
  const EvictionListener listener_;
  SessionPersistence* const persistence_;
  Shard shards_[kShards];
  std::atomic<int64_t> count_{0};
  std::atomic<int64_t> bytes_{0};
  absl::Mutex admission_mu_;  // serialises Create and Reserve's check-then-add
  absl::Mutex id_mu_;
  absl::BitGen id_gen_ ABSL_GUARDED_BY(id_mu_);

  absl::Mutex reaper_mu_;
  bool stop_reaper_ ABSL_GUARDED_BY(reaper_mu_) = false;
  std::thread reaper_;
};

}  // namespace attnserve::server
