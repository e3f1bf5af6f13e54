#include "server/sessions/session_persistence.h"

#include <iostream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/thread_name.h"
#include "server/metrics.h"

namespace attnserve::server {
namespace {

const char* ResultName(const absl::Status& status) {
  if (status.ok()) return "ok";
  if (IsLeaseLost(status)) return "fenced";
  if (LeaseOwnerOf(status).has_value()) return "held_elsewhere";
  return status.code() == absl::StatusCode::kNotFound ? "not_found" : "error";
}

}  // namespace

SessionPersistence::SessionPersistence(std::unique_ptr<SessionStore> store,
                                       const model::ModelRepository& models,
                                       PersistenceOptions options, ServerMetrics* metrics)
    : store_(std::move(store)),
      models_(models),
      options_(options),
      metrics_(metrics),
      leases_(store_->leases()) {
  writer_ = std::thread([this] {
    NameThisThread("session-writer");
    WriterLoop();
  });
  if (leases_ != nullptr) {
    renewer_ = std::thread([this] {
      NameThisThread("lease-renewer");
      RenewerLoop();
    });
  }
}

SessionPersistence::~SessionPersistence() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  writer_.join();
  std::vector<StoredCallback> waiting;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, op] : queued_) {
      for (StoredCallback& callback : op.on_stored) waiting.push_back(std::move(callback));
    }
  }
  Notify(waiting, absl::UnavailableError("the server stopped before the checkpoint was written"));
  if (renewer_.joinable()) {
    {
      absl::MutexLock lock(&lease_mu_);
      stop_renewer_ = true;
    }
    renewer_.join();
  }
}

int64_t SessionPersistence::queued_bytes() const {
  absl::MutexLock lock(&mu_);
  return queued_bytes_;
}

void SessionPersistence::Count(const char* op, const absl::Status& status, absl::Time start) {
  if (metrics_ != nullptr) {
    metrics_->RecordStoreOperation(op, ResultName(status),
                                   absl::ToDoubleSeconds(absl::Now() - start));
  }
  if (status.ok() || status.code() == absl::StatusCode::kNotFound) return;
  if (LeaseOwnerOf(status).has_value() && !IsLeaseLost(status)) return;  // an answer, not a fault
  absl::MutexLock lock(&log_mu_);
  if (absl::Now() - last_log_ < absl::Seconds(1)) return;
  last_log_ = absl::Now();
  std::cerr << "attnserve-server: session store " << op << " failed: " << status.message()
            << std::endl;
}

void SessionPersistence::Notify(std::vector<StoredCallback>& callbacks,
                                const absl::Status& status) {
  for (StoredCallback& callback : callbacks) callback(status);
  callbacks.clear();
}

void SessionPersistence::Queue(const std::string& id, Operation op) {
  op.generation = next_generation_++;
  const int64_t size = op.snapshot != nullptr ? static_cast<int64_t>(op.snapshot->size()) : 0;
  auto [it, inserted] = queued_.try_emplace(id);
  if (!inserted && it->second.snapshot != nullptr) {
    queued_bytes_ -= static_cast<int64_t>(it->second.snapshot->size());
  }
  // What waited for the replaced operation waits for this one (a newer snapshot holds it; a
  // removal answers that the session was closed).
  if (!inserted) {
    for (StoredCallback& callback : it->second.on_stored)
      op.on_stored.push_back(std::move(callback));
  }
  it->second = std::move(op);
  queued_bytes_ += size;
  // Always at the back: if the writer is writing an older operation of `id` now, this entry
  // makes it write the newer one after (a repeated id whose operation is gone is skipped).
  order_.push_back(id);
  if (metrics_ != nullptr) metrics_->SetStoreQueuedBytes(queued_bytes_);
}

bool SessionPersistence::Save(Session& session, absl::Time wait_until, bool release,
                              StoredCallback on_stored) {
  if (session.closed()) return false;  // a closed session must not come back
  const int64_t changes = session.changes();
  std::shared_ptr<const std::string> snapshot;
  try {
    snapshot = std::make_shared<const std::string>(EncodeSessionSnapshot(session));
  } catch (const std::exception& e) {  // out of memory, a device copy that failed
    Count("put",
          absl::ResourceExhaustedError(
              absl::StrCat("cannot encode session ", session.id(), ": ", e.what())),
          absl::Now());
    return false;
  }
  const absl::Time now = absl::Now();
  const absl::Duration ttl =
      std::max(absl::Seconds(1), session.ttl() - (now - session.last_used()));
  {
    absl::MutexLock lock(&mu_);
    // Checked again under the lock: Close marks the session closed before it queues the
    // removal, so either this Save is refused or the removal comes after it.
    if (session.closed()) return false;
    auto room = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      auto it = queued_.find(session.id());
      const int64_t replaced =
          it != queued_.end() && it->second.snapshot != nullptr ? it->second.snapshot->size() : 0;
      return queued_bytes_ - replaced + static_cast<int64_t>(snapshot->size()) <=
                 options_.max_queued_bytes ||
             (queued_.empty() && writing_ == 0);  // one snapshot larger than the queue: alone
    };
    if (!room() && wait_until > absl::Now()) {
      mu_.AwaitWithDeadline(absl::Condition(&room), wait_until);
    }
    if (!room()) {
      if (metrics_ != nullptr) metrics_->RecordStoreOperation("put", "dropped", 0);
      return false;
    }
    Operation op;
    op.snapshot = std::move(snapshot);
    op.ttl = ttl;
    op.release = release;
    if (on_stored != nullptr) op.on_stored.push_back(std::move(on_stored));
    Queue(session.id(), std::move(op));
    // Under the lock, so that the writer cannot finish (or fail) this write first.
    session.MarkSaved(changes, now + ttl);
  }
  return true;
}

void SessionPersistence::Remove(const std::string& id) {
  if (leases_ != nullptr) {
    // Stop renewing: the removal deletes the lease with the snapshot (until then it is still
    // this process's, so the removal passes the fence).
    absl::MutexLock lease_lock(&lease_mu_);
    auto held = held_.find(id);
    if (held != held_.end()) held->second.in_memory = false;
  }
  absl::MutexLock lock(&mu_);
  Queue(id, Operation{});
}

absl::Status SessionPersistence::RemoveNow(const std::string& id) {
  bool was_queued = false;
  {
    absl::MutexLock lock(&mu_);
    auto it = queued_.find(id);
    was_queued = it != queued_.end() && it->second.snapshot != nullptr;
  }
  const absl::Time start = absl::Now();
  absl::Status removed = store_->Delete(id);
  Count("delete", removed, start);
  if (was_queued) {
    // A write still queued (or being written) must not bring the snapshot back: queue the
    // removal after it.
    Remove(id);
    return absl::OkStatus();
  }
  return removed;
}

absl::StatusOr<SessionSnapshot> SessionPersistence::Load(const std::string& id) {
  std::shared_ptr<const std::string> queued;
  {
    absl::MutexLock lock(&mu_);
    auto it = queued_.find(id);
    if (it != queued_.end()) {
      if (it->second.snapshot == nullptr) {
        return absl::NotFoundError(absl::StrCat("session ", id, " was removed"));
      }
      queued = it->second.snapshot;
    }
  }
  absl::StatusOr<std::string> stored;
  if (queued == nullptr) {
    const absl::Time start = absl::Now();
    stored = store_->Get(id);
    Count("get", stored.status(), start);
    if (!stored.ok()) return stored.status();
  }
  absl::StatusOr<SessionSnapshot> snapshot =
      DecodeSessionSnapshot(queued != nullptr ? *queued : *stored, models_);
  if (!snapshot.ok()) return snapshot.status();
  if (snapshot->session_id != id) {
    return absl::DataLossError(
        absl::StrCat("the snapshot stored as session ", id, " is of another session"));
  }
  if (snapshot->expired()) {
    Remove(id);
    return absl::NotFoundError(absl::StrCat("session ", id, " expired after its TTL"));
  }
  return snapshot;
}

int64_t SessionPersistence::Flush(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  auto done = [this]()
                  ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return queued_.empty() && writing_ == 0; };
  mu_.AwaitWithDeadline(absl::Condition(&done), deadline);
  return static_cast<int64_t>(queued_.size()) + writing_;
}

std::vector<std::string> SessionPersistence::QueuedWrites() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::string> ids;
  for (const auto& [id, op] : queued_) {
    if (op.snapshot != nullptr) ids.push_back(id);
  }
  return ids;
}

SessionPersistence::Progress SessionPersistence::ProgressOf(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  auto it = queued_.find(id);
  if (it == queued_.end()) return Progress::kDone;
  return it->second.attempts > 0 ? Progress::kFailing : Progress::kQueued;
}

int64_t SessionPersistence::leases_held() const {
  absl::MutexLock lock(&lease_mu_);
  return static_cast<int64_t>(held_.size());
}

void SessionPersistence::SetLeaseLostListener(std::function<void(const std::string&)> listener) {
  absl::MutexLock lock(&listener_mu_);
  lease_lost_ = std::move(listener);
}

std::vector<SessionPersistence::StoredCallback> SessionPersistence::DropQueued(
    const std::string& id) {
  std::vector<StoredCallback> waiting;
  {
    absl::MutexLock lock(&mu_);
    auto it = queued_.find(id);
    if (it == queued_.end()) return waiting;
    if (it->second.snapshot != nullptr) {
      queued_bytes_ -= static_cast<int64_t>(it->second.snapshot->size());
    }
    waiting = std::move(it->second.on_stored);
    queued_.erase(it);  // its entries in order_ and retries_ are skipped when they come up
    if (metrics_ != nullptr) metrics_->SetStoreQueuedBytes(queued_bytes_);
  }
  return waiting;
}

void SessionPersistence::LeaseLostNow(const std::string& id) {
  std::vector<StoredCallback> waiting = DropQueued(id);
  Notify(waiting, LeaseLost(id, ""));
  {
    absl::MutexLock lock(&lease_mu_);
    held_.erase(id);
  }
  std::cerr << "attnserve-server: lost the lease of session " << id
            << " to another replica: dropped this replica's copy" << std::endl;
  absl::MutexLock lock(&listener_mu_);
  if (lease_lost_) lease_lost_(id);
}

absl::Status SessionPersistence::AcquireLease(const std::string& id, bool fresh) {
  if (leases_ == nullptr) return absl::OkStatus();
  NotifyOnExit dropped{{}, LeaseLost(id, "")};
  absl::MutexLock call_lock(&lease_call_mu_);
  const absl::Time start = absl::Now();
  absl::StatusOr<SessionLeases::Acquired> acquired = leases_->Acquire(id);
  Count("lease", acquired.status(), start);
  if (!acquired.ok()) {
    if (!fresh || LeaseOwnerOf(acquired.status()).has_value()) return acquired.status();
    absl::MutexLock lock(&lease_mu_);  // leased at the next renewal
    held_[id] = LeaseEntry{absl::InfiniteFuture(), true};
    return absl::OkStatus();
  }
  // Another holder (or none) had it last: what this process has queued of `id` is older
  // than the store's copy.
  if (*acquired == SessionLeases::Acquired::kTaken) dropped.callbacks = DropQueued(id);
  absl::MutexLock lock(&lease_mu_);
  held_[id] = LeaseEntry{start + leases_->duration() * 0.9, true};
  return absl::OkStatus();
}

absl::Status SessionPersistence::CheckNotLeasedElsewhere(const std::string& id) {
  if (leases_ == nullptr) return absl::OkStatus();
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> holder = leases_->Holder(id);
  Count("lease", holder.status(), start);
  if (!holder.ok()) return holder.status();
  if (holder->empty() || *holder == leases_->token()) return absl::OkStatus();
  return LeaseHeldElsewhere(id, LeaseTokenAddress(*holder));
}

void SessionPersistence::ReleaseLease(const std::string& id) {
  if (leases_ == nullptr) return;
  absl::MutexLock call_lock(&lease_call_mu_);
  {
    absl::MutexLock lock(&lease_mu_);
    if (held_.erase(id) == 0) return;
  }
  leases_->Release(id).IgnoreError();  // else it expires
}

void SessionPersistence::ForgetLease(const std::string& id) {
  if (leases_ == nullptr) return;
  absl::MutexLock call_lock(&lease_call_mu_);
  {
    absl::MutexLock lock(&lease_mu_);
    held_.erase(id);
  }
  store_->Delete(id).IgnoreError();  // fenced: the snapshot (absent), the lease, its holder
}

void SessionPersistence::SpilledLease(const std::string& id) {
  if (leases_ == nullptr) return;
  absl::MutexLock lock(&lease_mu_);
  auto held = held_.find(id);
  if (held != held_.end()) held->second.in_memory = false;
}

bool SessionPersistence::LeaseFresh(const std::string& id) const {
  if (leases_ == nullptr) return true;
  absl::MutexLock lock(&lease_mu_);
  auto held = held_.find(id);
  return held != held_.end() && held->second.in_memory && absl::Now() < held->second.fresh_until;
}

absl::Status SessionPersistence::ConfirmLease(const std::string& id) {
  if (leases_ == nullptr) return absl::OkStatus();
  NotifyOnExit dropped{{}, LeaseLost(id, "")};
  absl::MutexLock call_lock(&lease_call_mu_);
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<bool>> lost = leases_->Renew({id});
  Count("lease", lost.status(), start);
  if (!lost.ok()) {
    return absl::UnavailableError(absl::StrCat("cannot confirm this replica's lease on session '",
                                               id, "': ", lost.status().message()));
  }
  if ((*lost)[0]) {
    dropped.callbacks = DropQueued(id);
    absl::MutexLock lock(&lease_mu_);
    held_.erase(id);
    return LeaseLost(id, "");
  }
  absl::MutexLock lock(&lease_mu_);
  held_[id] = LeaseEntry{start + leases_->duration() * 0.9, true};
  return absl::OkStatus();
}

int SessionPersistence::ReleaseLeases() {
  if (leases_ == nullptr) return 0;
  std::vector<std::string> ids;
  {
    absl::MutexLock lock(&lease_mu_);
    for (const auto& [id, entry] : held_) {
      if (ProgressOf(id) == Progress::kDone) ids.push_back(id);
    }
  }
  int released = 0;
  for (const std::string& id : ids) {
    absl::MutexLock call_lock(&lease_call_mu_);
    {
      absl::MutexLock lock(&lease_mu_);
      if (held_.erase(id) == 0) continue;
    }
    released += leases_->Release(id).ok() ? 1 : 0;
  }
  return released;
}

void SessionPersistence::RenewerLoop() {
  const absl::Duration every = std::max(absl::Milliseconds(20), leases_->duration() / 3);
  absl::Time next = absl::Now() + every;
  while (true) {
    {
      absl::MutexLock lock(&lease_mu_);
      if (lease_mu_.AwaitWithDeadline(absl::Condition(&stop_renewer_), next)) return;
    }
    next = absl::Now() + every;
    std::vector<std::string> lost_ids;
    {
      absl::MutexLock call_lock(&lease_call_mu_);
      std::vector<std::string> ids;
      {
        absl::MutexLock lock(&lease_mu_);
        ids.reserve(held_.size());
        for (const auto& [id, entry] : held_) ids.push_back(id);
      }
      // In batches, so that one script does not hold Redis for long.
      constexpr size_t kBatch = 512;
      for (size_t begin = 0; begin < ids.size(); begin += kBatch) {
        const std::vector<std::string> batch(ids.begin() + begin,
                                             ids.begin() + std::min(ids.size(), begin + kBatch));
        const absl::Time start = absl::Now();
        absl::StatusOr<std::vector<bool>> lost = leases_->Renew(batch);
        Count("lease", lost.status(), start);
        if (!lost.ok()) break;  // the leases stay fresh until their time; tried again next round
        absl::MutexLock lock(&lease_mu_);
        for (size_t i = 0; i < batch.size(); ++i) {
          auto held = held_.find(batch[i]);
          if (held == held_.end()) continue;
          if ((*lost)[i]) {
            lost_ids.push_back(batch[i]);
          } else {
            held->second.fresh_until = start + leases_->duration() * 0.9;
          }
        }
      }
    }
    for (const std::string& id : lost_ids) LeaseLostNow(id);
  }
}

void SessionPersistence::WriterLoop() {
  absl::MutexLock lock(&mu_);
  auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || !order_.empty(); };
  while (true) {
    const absl::Time next_retry =
        retries_.empty() ? absl::InfiniteFuture() : retries_.begin()->first;
    mu_.AwaitWithDeadline(absl::Condition(&wake), next_retry);
    if (stop_) return;
    // Failed operations whose time has come go to the back of the order.
    for (auto due = retries_.begin(); due != retries_.end() && due->first <= absl::Now();
         due = retries_.erase(due)) {
      order_.push_back(due->second);
    }
    if (order_.empty()) continue;
    const std::string id = std::move(order_.front());
    order_.pop_front();
    auto it = queued_.find(id);
    if (it == queued_.end()) continue;  // a repeated id, already written
    std::vector<StoredCallback> waiting = std::move(it->second.on_stored);
    it->second.on_stored.clear();
    const Operation op = it->second;
    ++writing_;
    mu_.Unlock();
    const absl::Time start = absl::Now();
    absl::Status status;
    if (op.snapshot != nullptr) {
      status = store_->Put(id, *op.snapshot, op.ttl);
      Count("put", status, start);
    } else {
      {
        // Not while a renewal runs: it would take the lease that this removal deletes again.
        std::optional<absl::MutexLock> call_lock;
        if (leases_ != nullptr) call_lock.emplace(&lease_call_mu_);
        status = store_->Delete(id);
      }
      Count("delete", status, start);
      if (status.code() == absl::StatusCode::kNotFound) status = absl::OkStatus();
    }
    // Those waiting for this write hear of it now: written, refused by the fence, or failed
    // once (a retry is not waited for). A removal means the session was closed meanwhile.
    const absl::Status answer =
        status.ok() && op.snapshot == nullptr
            ? absl::NotFoundError("the session was closed before its checkpoint was written")
            : status;
    if (IsLeaseLost(status)) {
      // Another replica holds the session: this copy is stale. Never retried. Counted as
      // writing until the table has dropped it, so that Flush returns after that. Those
      // waiting hear of it once the table has dropped its copy.
      LeaseLostNow(id);
      Notify(waiting, answer);
      mu_.Lock();
      --writing_;
      continue;
    }
    Notify(waiting, answer);
    mu_.Lock();
    --writing_;
    it = queued_.find(id);
    if (status.ok() && op.release && leases_ != nullptr) {
      // The spill is written: give the lease up, unless the session came back meanwhile.
      mu_.Unlock();
      {
        absl::MutexLock call_lock(&lease_call_mu_);
        bool release = false;
        {
          absl::MutexLock lease_lock(&lease_mu_);
          auto held = held_.find(id);
          release = held != held_.end() && !held->second.in_memory;
          if (release) held_.erase(held);
        }
        if (release) leases_->Release(id).IgnoreError();  // else it expires
      }
      mu_.Lock();
      it = queued_.find(id);
    }
    if (!status.ok() && it != queued_.end() && it->second.generation == op.generation) {
      // Kept queued, and so visible to Load (a spilled session lives on in the queue), and
      // tried again later: 0.5 s, doubling to 30 s. A newer operation of `id` replaces it.
      const int attempts = ++it->second.attempts;
      const absl::Duration backoff =
          std::min(absl::Seconds(30), absl::Milliseconds(500) * (1 << std::min(attempts - 1, 6)));
      retries_.emplace(absl::Now() + backoff, id);
      continue;
    }
    if (status.ok() && op.snapshot == nullptr && leases_ != nullptr) {
      // A close or an expiry: the script deleted the lease with the snapshot.
      mu_.Unlock();
      {
        absl::MutexLock lease_lock(&lease_mu_);
        auto held = held_.find(id);
        if (held != held_.end() && !held->second.in_memory) held_.erase(held);
      }
      mu_.Lock();
      it = queued_.find(id);
    }
    if (it != queued_.end() && it->second.generation == op.generation) {
      if (it->second.snapshot != nullptr) {
        queued_bytes_ -= static_cast<int64_t>(it->second.snapshot->size());
      }
      queued_.erase(it);
      if (metrics_ != nullptr) metrics_->SetStoreQueuedBytes(queued_bytes_);
    }
  }
}

}  // namespace attnserve::server
