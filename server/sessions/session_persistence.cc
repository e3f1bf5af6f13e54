#include "server/sessions/session_persistence.h"

#include <iostream>

#include "absl/strings/str_cat.h"
#include "common/thread_name.h"
#include "server/metrics.h"

namespace attnserve::server {
namespace {

const char* ResultName(const absl::Status& status) {
  if (status.ok()) return "ok";
  return status.code() == absl::StatusCode::kNotFound ? "not_found" : "error";
}

}  // namespace

SessionPersistence::SessionPersistence(std::unique_ptr<SessionStore> store,
                                       const model::ModelRepository& models,
                                       PersistenceOptions options, ServerMetrics* metrics)
    : store_(std::move(store)), models_(models), options_(options), metrics_(metrics) {
  writer_ = std::thread([this] {
    NameThisThread("session-writer");
    WriterLoop();
  });
}

SessionPersistence::~SessionPersistence() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  writer_.join();
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
  absl::MutexLock lock(&log_mu_);
  if (absl::Now() - last_log_ < absl::Seconds(1)) return;
  last_log_ = absl::Now();
  std::cerr << "attnserve-server: session store " << op << " failed: " << status.message()
            << std::endl;
}

void SessionPersistence::Queue(const std::string& id, Operation op) {
  op.generation = next_generation_++;
  const int64_t size = op.snapshot != nullptr ? static_cast<int64_t>(op.snapshot->size()) : 0;
  auto [it, inserted] = queued_.try_emplace(id);
  if (!inserted && it->second.snapshot != nullptr) {
    queued_bytes_ -= static_cast<int64_t>(it->second.snapshot->size());
  }
  it->second = std::move(op);
  queued_bytes_ += size;
  // Always at the back: if the writer is writing an older operation of `id` now, this entry
  // makes it write the newer one after (a repeated id whose operation is gone is skipped).
  order_.push_back(id);
  if (metrics_ != nullptr) metrics_->SetStoreQueuedBytes(queued_bytes_);
}

bool SessionPersistence::Save(Session& session, absl::Time wait_until) {
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
    Queue(session.id(), std::move(op));
    // Under the lock, so that the writer cannot finish (or fail) this write first.
    session.MarkSaved(changes, now + ttl);
  }
  return true;
}

void SessionPersistence::Remove(const std::string& id) {
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
    const Operation op = it->second;
    ++writing_;
    mu_.Unlock();
    const absl::Time start = absl::Now();
    absl::Status status;
    if (op.snapshot != nullptr) {
      status = store_->Put(id, *op.snapshot, op.ttl);
      Count("put", status, start);
    } else {
      status = store_->Delete(id);
      Count("delete", status, start);
      if (status.code() == absl::StatusCode::kNotFound) status = absl::OkStatus();
    }
    mu_.Lock();
    --writing_;
    it = queued_.find(id);
    if (!status.ok() && it != queued_.end() && it->second.generation == op.generation) {
      // Kept queued, and so visible to Load (a spilled session lives on in the queue), and
      // tried again later: 0.5 s, doubling to 30 s. A newer operation of `id` replaces it.
      const int attempts = ++it->second.attempts;
      const absl::Duration backoff =
          std::min(absl::Seconds(30), absl::Milliseconds(500) * (1 << std::min(attempts - 1, 6)));
      retries_.emplace(absl::Now() + backoff, id);
      continue;
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
