#include "server/sessions/session_table.h"

#include <algorithm>

#include "absl/container/flat_hash_set.h"
#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/thread_name.h"
#include "kernels/common/status_macros.h"
#include "server/client_text.h"
#include "server/sessions/session_lease.h"
#include "server/sessions/session_persistence.h"
#include "server/sessions/session_snapshot.h"

namespace attnserve::server {

const char* EvictionReasonName(EvictionReason reason) {
  switch (reason) {
    case EvictionReason::kTtl:
      return "ttl";
    case EvictionReason::kCapacity:
      return "capacity";
    case EvictionReason::kSpilled:
      return "spilled";
    case EvictionReason::kClosed:
      return "closed";
    case EvictionReason::kLeaseLost:
      return "lease_lost";
  }
  return "unknown";
}

Session::Session(std::string id, const model::Model* model, absl::Duration ttl,
                 model::ModelState initial, std::string owner)
    : state(std::move(initial)),
      id_(std::move(id)),
      model_(model),
      ttl_(ttl),
      owner_(std::move(owner)),
      position_(state.position),
      last_used_ns_(absl::GetCurrentTimeNanos()) {}

v1::SessionInfo Session::Info() const {
  v1::SessionInfo info;
  info.set_session_id(id_);
  info.set_model(model_->name());
  info.set_position(position());
  info.set_state_bytes(state_bytes());
  info.set_last_sequence_number(last_sequence());
  info.set_idle_seconds(absl::ToDoubleSeconds(absl::Now() - last_used()));
  info.set_ttl_seconds(static_cast<int32_t>(absl::ToInt64Seconds(ttl_)));
  info.set_attached(attached());
  return info;
}

SessionUse::SessionUse(std::shared_ptr<Session> session) : session_(std::move(session)) {
  session_->users_.fetch_add(1);
  session_->Touch();
}

SessionUse::~SessionUse() {
  if (session_ == nullptr) return;  // moved from
  session_->Touch();
  session_->users_.fetch_sub(1);
}

SessionTable::SessionTable(SessionLimits limits, EvictionListener listener,
                           SessionPersistence* persistence)
    : limits_(limits), listener_(std::move(listener)), persistence_(persistence) {
  if (persistence_ != nullptr && persistence_->leased()) {
    persistence_->SetLeaseLostListener([this](const std::string& id) { DropLost(id); });
  }
  reaper_ = std::thread([this] {
    NameThisThread("session-reaper");
    absl::MutexLock lock(&reaper_mu_);
    while (!reaper_mu_.AwaitWithTimeout(absl::Condition(&stop_reaper_), limits_.reap_interval)) {
      reaper_mu_.Unlock();
      ReapExpired(absl::Now());
      reaper_mu_.Lock();
    }
  });
}

SessionTable::~SessionTable() {
  if (persistence_ != nullptr) persistence_->SetLeaseLostListener(nullptr);
  {
    absl::MutexLock lock(&reaper_mu_);
    stop_reaper_ = true;
  }
  reaper_.join();
}

SessionTable::Shard& SessionTable::ShardFor(const std::string& id) {
  return shards_[absl::Hash<std::string>{}(id) % kShards];
}

const SessionTable::Shard& SessionTable::ShardFor(const std::string& id) const {
  return shards_[absl::Hash<std::string>{}(id) % kShards];
}

std::string SessionTable::NewId() {
  // A shared generator rather than a thread_local one: static TLS is scarce in this process
  // (civetweb's threads under the metrics endpoint have small stacks that must hold it).
  absl::MutexLock lock(&id_mu_);
  const uint64_t hi = absl::Uniform<uint64_t>(id_gen_), lo = absl::Uniform<uint64_t>(id_gen_);
  return absl::StrFormat("%016x%016x", hi, lo);
}

absl::StatusOr<SessionUse> SessionTable::Create(const model::Model* model, absl::Duration ttl,
                                                const std::string& owner, const std::string& id) {
  if (!id.empty()) {
    if (absl::Status valid = ValidateSessionId(id); !valid.ok()) return valid;
  }
  if (ttl == absl::ZeroDuration()) ttl = limits_.default_ttl;
  if (ttl < absl::ZeroDuration() || ttl > limits_.max_ttl) {
    return absl::InvalidArgumentError(absl::StrCat("session ttl must be in (0, ",
                                                   absl::ToInt64Seconds(limits_.max_ttl),
                                                   "] seconds, got ", absl::ToInt64Seconds(ttl)));
  }
  absl::StatusOr<model::ModelState> state = model->NewState();
  if (!state.ok()) return state.status();
  const int64_t bytes = model->StateBytesPerSequence(0);
  auto session =
      std::make_shared<Session>(id.empty() ? NewId() : id, model, ttl, *std::move(state), owner);
  // Its lease first (outside the admission lock: a call to the store). A given id may be
  // another replica's session (LeaseHeldElsewhere); a new random one is nobody's.
  if (persistence_ != nullptr) {
    if (absl::Status leased = persistence_->AcquireLease(session->id(), /*fresh=*/id.empty());
        !leased.ok()) {
      return leased;
    }
  }
  SessionUse use(session);
  absl::MutexLock admission(&admission_mu_);
  if (!id.empty()) {
    // Every insertion holds admission_mu_, so the id cannot appear between this and the insert.
    Shard& shard = ShardFor(id);
    absl::MutexLock lock(&shard.mu);
    if (shard.sessions.contains(id)) {  // the lease stays: it is the open session's
      return absl::AlreadyExistsError(absl::StrCat("session '", id, "' is open"));
    }
  }
  if (absl::Status admitted = InsertLocked(session, bytes); !admitted.ok()) {
    if (persistence_ != nullptr) persistence_->ReleaseLease(session->id());
    return admitted;
  }
  return use;
}

absl::Status SessionTable::InsertLocked(const std::shared_ptr<Session>& session, int64_t bytes) {
  const bool full = count_.load() + 1 > limits_.max_sessions ||
                    bytes_.load() + bytes > limits_.state_budget_bytes;
  if (full && !MakeRoom(1, bytes, nullptr)) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "session table is full: ", count_.load(), " of --max_sessions=", limits_.max_sessions,
        " sessions, ", bytes_.load(), " of --state_budget_bytes=", limits_.state_budget_bytes,
        " state bytes (session '", session->id(), "' needs ", bytes,
        "); close idle sessions or retry later"));
  }
  count_.fetch_add(1);
  bytes_.fetch_add(bytes);
  session->state_bytes_.store(bytes);
  Shard& shard = ShardFor(session->id());
  absl::MutexLock lock(&shard.mu);
  shard.sessions[session->id()] = session;
  return absl::OkStatus();
}

namespace {
absl::Status NoSession(const std::string& id) {
  return absl::NotFoundError(
      absl::StrCat("no session '", id,
                   "': it never existed, was closed, expired after its TTL, or was evicted"));
}
}  // namespace

absl::StatusOr<SessionUse> SessionTable::Get(const std::string& id, const Caller& caller) {
  if (absl::Status valid = ValidateSessionId(id); !valid.ok()) return valid;
  {
    Shard& shard = ShardFor(id);
    absl::MutexLock lock(&shard.mu);
    auto it = shard.sessions.find(id);
    if (it != shard.sessions.end()) {
      if (!caller.CanAccess(it->second->owner())) return NoSession(id);
      if (persistence_ == nullptr || persistence_->LeaseFresh(id)) return SessionUse(it->second);
    }
  }
  if (persistence_ != nullptr && persistence_->leased()) {
    // In memory with a lease not confirmed lately (or being restored): ask the store.
    std::shared_ptr<Session> held;
    {
      Shard& shard = ShardFor(id);
      absl::MutexLock lock(&shard.mu);
      auto it = shard.sessions.find(id);
      if (it != shard.sessions.end()) held = it->second;
    }
    if (held != nullptr) {
      if (absl::Status confirmed = ConfirmLease(*held); !confirmed.ok()) return confirmed;
      return SessionUse(held);
    }
  }
  return Restore(id, caller);
}

absl::StatusOr<std::shared_ptr<const Session>> SessionTable::Peek(const std::string& id,
                                                                  const Caller& caller,
                                                                  bool* in_memory) {
  if (absl::Status valid = ValidateSessionId(id); !valid.ok()) return valid;
  if (in_memory != nullptr) *in_memory = false;
  std::shared_ptr<Session> found;
  {
    const Shard& shard = ShardFor(id);
    absl::MutexLock lock(&shard.mu);
    auto it = shard.sessions.find(id);
    if (it != shard.sessions.end()) {
      if (!caller.CanAccess(it->second->owner())) return NoSession(id);
      found = it->second;
    }
  }
  if (found != nullptr) {
    // A copy whose lease is not known fresh (this replica paused past it) may be stale: asked
    // as Get asks, without taking the lease.
    if (persistence_ != nullptr && !persistence_->LeaseFresh(id)) {
      if (absl::Status elsewhere = persistence_->CheckNotLeasedElsewhere(id); !elsewhere.ok()) {
        return elsewhere;
      }
    }
    if (in_memory != nullptr) *in_memory = true;
    return std::shared_ptr<const Session>(found);
  }
  if (persistence_ != nullptr) {
    if (absl::Status elsewhere = persistence_->CheckNotLeasedElsewhere(id); !elsewhere.ok()) {
      return elsewhere;
    }
  }
  absl::StatusOr<SessionSnapshot> snapshot = LoadFor(id, caller);
  if (!snapshot.ok()) return snapshot.status();
  return std::shared_ptr<const Session>(FromSnapshot(*std::move(snapshot)));
}

absl::StatusOr<SessionSnapshot> SessionTable::LoadFor(const std::string& id, const Caller& caller) {
  if (persistence_ == nullptr) return NoSession(id);
  absl::StatusOr<SessionSnapshot> snapshot = persistence_->Load(id);
  if (!snapshot.ok()) {
    return snapshot.status().code() == absl::StatusCode::kNotFound ? NoSession(id)
                                                                   : snapshot.status();
  }
  if (!caller.CanAccess(snapshot->owner)) return NoSession(id);
  return snapshot;
}

std::shared_ptr<Session> SessionTable::FromSnapshot(SessionSnapshot snapshot) {
  auto session = std::make_shared<Session>(snapshot.session_id, snapshot.model, snapshot.ttl,
                                           std::move(snapshot.state), snapshot.owner);
  session->last_sequence_number = snapshot.last_sequence_number;
  session->recent_results = std::move(snapshot.recent_results);
  session->Publish();
  session->state_bytes_.store(snapshot.model->StateBytesPerSequence(session->state.position));
  session->last_used_ns_.store(absl::ToUnixNanos(absl::Now() - snapshot.idle));
  return session;
}

absl::StatusOr<SessionUse> SessionTable::Restore(const std::string& id, const Caller& caller) {
  if (persistence_ == nullptr) return NoSession(id);
  if (absl::Status leased = persistence_->AcquireLease(id, /*fresh=*/false); !leased.ok()) {
    return leased;
  }
  absl::StatusOr<SessionSnapshot> snapshot = persistence_->Load(id);
  if (!snapshot.ok() || !caller.CanAccess(snapshot->owner)) {
    if (snapshot.status().code() == absl::StatusCode::kNotFound) {
      persistence_->ForgetLease(id);  // nothing to protect: leave no keys behind
    } else {
      persistence_->ReleaseLease(id);
    }
    return snapshot.ok() || snapshot.status().code() == absl::StatusCode::kNotFound
               ? NoSession(id)
               : snapshot.status();
  }
  absl::StatusOr<SessionUse> use = Admit(*std::move(snapshot), /*existing_ok=*/true);
  if (!use.ok()) persistence_->ReleaseLease(id);
  // Restored meanwhile by another call: that one's owner is the snapshot's too.
  if (use.ok() && !caller.CanAccess((*use)->owner())) return NoSession(id);
  return use;
}

absl::StatusOr<SessionUse> SessionTable::Import(SessionSnapshot snapshot, const Caller& caller) {
  const std::string id = snapshot.session_id;
  if (!caller.CanAccess(snapshot.owner)) return NoSession(id);
  // A snapshot is checksummed, not signed: its owner field is the importer's word. A session
  // that exists already (in memory or in the store) decides: another principal's is NOT_FOUND,
  // like any session it may not see, and cannot be replaced.
  {
    Shard& shard = ShardFor(id);
    absl::MutexLock lock(&shard.mu);
    auto it = shard.sessions.find(id);
    if (it != shard.sessions.end() && !caller.CanAccess(it->second->owner())) {
      return NoSession(id);
    }
  }
  if (persistence_ != nullptr) {
    absl::StatusOr<SessionSnapshot> stored = persistence_->Load(id);
    if (stored.ok() && !caller.CanAccess(stored->owner)) return NoSession(id);
    if (stored.ok()) {
      return absl::AlreadyExistsError(
          absl::StrCat("session '", id, "' is already in this instance's session store"));
    }
  }
  const bool leased = persistence_ != nullptr && persistence_->leased();
  if (snapshot.ttl > limits_.max_ttl) {
    return absl::InvalidArgumentError(absl::StrCat(
        "session '", id, "' in the snapshot has a TTL of ", absl::ToInt64Seconds(snapshot.ttl),
        " s, above --max_session_ttl_s=", absl::ToInt64Seconds(limits_.max_ttl)));
  }
  if (snapshot.expired()) {
    return absl::FailedPreconditionError(
        absl::StrCat("session '", snapshot.session_id, "' in the snapshot has expired (idle ",
                     absl::ToInt64Seconds(snapshot.idle), " s, TTL ",
                     absl::ToInt64Seconds(snapshot.ttl), " s)"));
  }
  if (leased) {
    if (absl::Status lease = persistence_->AcquireLease(id, /*fresh=*/false); !lease.ok()) {
      return lease;
    }
  }
  absl::StatusOr<SessionUse> use = Admit(std::move(snapshot), /*existing_ok=*/false);
  if (!use.ok() && leased && use.status().code() != absl::StatusCode::kAlreadyExists) {
    persistence_->ReleaseLease(id);
  }
  return use;
}

absl::StatusOr<SessionUse> SessionTable::Admit(SessionSnapshot snapshot, bool existing_ok) {
  const absl::Duration idle = snapshot.idle;
  std::shared_ptr<Session> session = FromSnapshot(std::move(snapshot));
  const int64_t bytes = session->state_bytes_.load();
  session->state_bytes_.store(0);  // counted in the table's bytes once admitted, below
  // Restored: the store has it as it is, expiring when the session would.
  if (existing_ok) session->MarkSaved(0, absl::Now() - idle + session->ttl());
  SessionUse use(session);
  // Its last use is the snapshot's (restoring is not a use of its own).
  session->last_used_ns_.store(absl::ToUnixNanos(absl::Now() - idle));
  absl::MutexLock admission(&admission_mu_);
  {
    Shard& shard = ShardFor(session->id());
    absl::MutexLock lock(&shard.mu);
    auto it = shard.sessions.find(session->id());
    if (it != shard.sessions.end()) {
      if (existing_ok) return SessionUse(it->second);  // restored meanwhile by another call
      return absl::AlreadyExistsError(
          absl::StrCat("session '", session->id(), "' is already on this instance"));
    }
  }
  if (absl::Status admitted = InsertLocked(session, bytes); !admitted.ok()) return admitted;
  return use;
}

std::shared_ptr<Session> SessionTable::Remove(const std::string& id, bool only_if_idle,
                                              const Caller* caller) {
  Shard& shard = ShardFor(id);
  absl::MutexLock lock(&shard.mu);
  auto it = shard.sessions.find(id);
  // New users come only through Get, under this lock: an idle session stays idle until
  // it is gone.
  if (it == shard.sessions.end() || (only_if_idle && it->second->in_use()) ||
      (caller != nullptr && !caller->CanAccess(it->second->owner()))) {
    return nullptr;
  }
  std::shared_ptr<Session> session = std::move(it->second);
  shard.sessions.erase(it);
  session->closed_.store(true);  // before the removal is queued: no Save after it
  if (persistence_ != nullptr) persistence_->Remove(id);
  count_.fetch_sub(1);
  bytes_.fetch_sub(session->state_bytes_.load());
  return session;
}

void SessionTable::Evicted(const std::shared_ptr<Session>& session, EvictionReason reason) {
  if (listener_) listener_(*session, reason);
}

absl::Status SessionTable::Close(const std::string& id, const Caller& caller) {
  if (absl::Status valid = ValidateSessionId(id); !valid.ok()) return valid;
  const absl::Status not_found =
      absl::NotFoundError(absl::StrCat("no session '", id, "' to close"));
  {
    Shard& shard = ShardFor(id);
    absl::MutexLock lock(&shard.mu);
    auto it = shard.sessions.find(id);
    if (it != shard.sessions.end() && !caller.CanAccess(it->second->owner())) return not_found;
  }
  std::shared_ptr<Session> session = Remove(id, /*only_if_idle=*/false, &caller);
  if (session != nullptr) {
    Evicted(session, EvictionReason::kClosed);
    return absl::OkStatus();
  }
  if (persistence_ != nullptr) {
    if (!caller.admin) {  // only its owner closes a stored session: read it first
      absl::StatusOr<SessionSnapshot> stored = LoadFor(id, caller);
      if (!stored.ok()) {
        return stored.status().code() == absl::StatusCode::kNotFound ? not_found : stored.status();
      }
    }
    absl::Status removed = persistence_->RemoveNow(id);
    if (IsLeaseLost(removed)) return LeaseHeldElsewhere(id, *LeaseOwnerOf(removed));
    // A restore that raced with this Close may have admitted it meanwhile: take it out too.
    if (std::shared_ptr<Session> restored = Remove(id, /*only_if_idle=*/false, &caller)) {
      Evicted(restored, EvictionReason::kClosed);
      return absl::OkStatus();
    }
    if (removed.code() != absl::StatusCode::kNotFound) return removed;
  }
  return not_found;
}

absl::Status SessionTable::CopyState(const Session& from, Session& to) {
  RETURN_IF_ERROR(Reserve(to, to.model()->StateBytesPerSequence(from.state.position)));
  ASSIGN_OR_RETURN(to.state, from.model()->CloneSharingPrefix(from.state, 0));
  to.Publish();
  Applied(to);
  return absl::OkStatus();
}

absl::Status SessionTable::Reserve(Session& session, int64_t new_bytes) {
  absl::MutexLock admission(&admission_mu_);
  if (session.closed()) {
    return absl::NotFoundError(absl::StrCat("session '", session.id(), "' was closed"));
  }
  const int64_t delta = new_bytes - session.state_bytes_.load();
  if (delta > 0 && bytes_.load() + delta > limits_.state_budget_bytes &&
      !MakeRoom(0, delta, &session)) {
    return absl::ResourceExhaustedError(
        absl::StrCat("state memory budget exhausted: session '", session.id(), "' needs ", delta,
                     " more bytes, ", bytes_.load(),
                     " of --state_budget_bytes=", limits_.state_budget_bytes, " are in use"));
  }
  bytes_.fetch_add(delta);
  session.state_bytes_.store(new_bytes);
  return absl::OkStatus();
}

std::shared_ptr<Session> SessionTable::TakeForRoom(const std::string& id, EvictionReason* reason) {
  Shard& shard = ShardFor(id);
  absl::MutexLock lock(&shard.mu);
  auto it = shard.sessions.find(id);
  // Idle, and staying so: new users come only through Get, under this lock.
  if (it == shard.sessions.end() || it->second->in_use()) return nullptr;
  if (persistence_ != nullptr &&
      persistence_->Save(*it->second, absl::InfinitePast(), /*release=*/true)) {
    // Queued before it leaves the table, so a Get that misses it finds the queued snapshot.
    // Its lease is released once that write is done.
    persistence_->SpilledLease(id);
    *reason = EvictionReason::kSpilled;
  } else if (limits_.evict_when_full) {
    *reason = EvictionReason::kCapacity;
  } else {
    return nullptr;
  }
  std::shared_ptr<Session> session = std::move(it->second);
  shard.sessions.erase(it);
  session->closed_.store(true);
  count_.fetch_sub(1);
  bytes_.fetch_sub(session->state_bytes_.load());
  return session;
}

bool SessionTable::MakeRoom(int64_t extra_sessions, int64_t extra_bytes, const Session* keep) {
  auto fits = [&] {
    return count_.load() + extra_sessions <= limits_.max_sessions &&
           bytes_.load() + extra_bytes <= limits_.state_budget_bytes;
  };
  if (fits()) return true;
  if (!limits_.evict_when_full && persistence_ == nullptr) return false;
  std::vector<std::shared_ptr<Session>> idle;
  for (Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    for (const auto& [id, s] : shard.sessions) {
      if (s.get() != keep && !s->in_use()) idle.push_back(s);
    }
  }
  std::sort(idle.begin(), idle.end(),
            [](const auto& a, const auto& b) { return a->last_used() < b->last_used(); });
  for (const std::shared_ptr<Session>& s : idle) {
    if (fits()) break;
    EvictionReason reason;
    if (std::shared_ptr<Session> removed = TakeForRoom(s->id(), &reason)) {
      Evicted(removed, reason);
    }
  }
  return fits();
}

bool SessionTable::Applied(Session& session, std::function<void(const absl::Status&)> on_stored) {
  session.changes_.fetch_add(1);
  if (persistence_ == nullptr) return false;
  const int every = persistence_->checkpoint_every_appends();
  if (every <= 0 || session.unsaved_changes() < every) return false;
  return persistence_->Save(session, absl::InfinitePast(), /*release=*/false, std::move(on_stored));
}

std::vector<std::shared_ptr<Session>> SessionTable::Unsaved() const {
  std::vector<std::shared_ptr<Session>> unsaved;
  for (const Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    for (const auto& [id, s] : shard.sessions) {
      if (!s->saved()) unsaved.push_back(s);
    }
  }
  return unsaved;
}

int SessionTable::SaveChanged(absl::Time wait_until) {
  if (persistence_ == nullptr) return 0;
  int queued = 0;
  for (const std::shared_ptr<Session>& s : Unsaved()) {
    queued += persistence_->Save(*s, wait_until) ? 1 : 0;
  }
  return queued;
}

DrainSaveCounts SessionTable::SaveAtDrain(absl::Time deadline) {
  DrainSaveCounts counts;
  if (persistence_ == nullptr) return counts;
  // The sessions the store lacks: those changed since they were queued for writing, and those
  // whose write is still queued (a checkpoint or a spill not yet written, or failing).
  absl::flat_hash_set<std::string> dropped;  // no room in the queue by the deadline
  // Queued here, and already queued before: the writer may finish some before they are listed,
  // so the ones queued here count whatever QueuedWrites says afterwards.
  absl::flat_hash_set<std::string> queued_here;
  for (const std::shared_ptr<Session>& s : Unsaved()) {
    if (persistence_->Save(*s, deadline)) {
      queued_here.insert(s->id());
    } else {
      dropped.insert(s->id());
    }
  }
  std::vector<std::string> writing = persistence_->QueuedWrites();
  writing.erase(std::remove_if(writing.begin(), writing.end(),
                               [&](const std::string& id) {
                                 return dropped.contains(id) || queued_here.contains(id);
                               }),
                writing.end());
  writing.insert(writing.end(), queued_here.begin(), queued_here.end());
  counts.changed = static_cast<int>(dropped.size() + writing.size());
  counts.unwritten = static_cast<int>(dropped.size());
  persistence_->Flush(deadline);
  counts.leases_released = persistence_->ReleaseLeases();
  for (const std::string& id : writing) {
    switch (persistence_->ProgressOf(id)) {
      case SessionPersistence::Progress::kDone:
        ++counts.saved;
        break;
      case SessionPersistence::Progress::kFailing:
        ++counts.failed;
        break;
      case SessionPersistence::Progress::kQueued:
        ++counts.unwritten;
        break;
    }
  }
  return counts;
}

int SessionTable::ReapExpired(absl::Time now) {
  std::vector<std::string> expired;
  for (Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    for (const auto& [id, s] : shard.sessions) {
      if (!s->in_use() && now - s->last_used() > s->ttl()) expired.push_back(id);
    }
  }
  int removed_count = 0;
  for (const std::string& id : expired) {
    std::shared_ptr<Session> s = Remove(id, /*only_if_idle=*/true);
    if (s == nullptr) continue;  // picked up again since the scan
    Evicted(s, EvictionReason::kTtl);
    ++removed_count;
  }
  return removed_count;
}

std::vector<v1::SessionInfo> SessionTable::List(const std::string& model, int limit,
                                                const Caller& caller, int64_t* total,
                                                int64_t* state_bytes) const {
  std::vector<v1::SessionInfo> out;
  int64_t count = 0, bytes = 0;
  for (const Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    for (const auto& [id, s] : shard.sessions) {
      if (!caller.CanAccess(s->owner())) continue;
      ++count;
      bytes += s->state_bytes();
      if (!model.empty() && s->model()->name() != model) continue;
      if (static_cast<int>(out.size()) < limit) out.push_back(s->Info());
    }
  }
  if (total != nullptr) *total = count;
  if (state_bytes != nullptr) *state_bytes = bytes;
  return out;
}

int64_t SessionTable::InUse() const {
  int64_t in_use = 0;
  for (const Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    for (const auto& [id, s] : shard.sessions) in_use += s->in_use() ? 1 : 0;
  }
  return in_use;
}

std::map<std::string, SessionTable::ModelStats> SessionTable::StatsByModel() const {
  std::map<std::string, ModelStats> stats;
  for (const Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    for (const auto& [id, s] : shard.sessions) {
      ModelStats& m = stats[s->model()->name()];
      ++m.sessions;
      m.state_bytes += s->state_bytes();
    }
  }
  return stats;
}

}  // namespace attnserve::server
