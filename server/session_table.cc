#include "server/session_table.h"

#include <algorithm>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/client_text.h"

namespace attnserve::server {

const char* EvictionReasonName(EvictionReason reason) {
  switch (reason) {
    case EvictionReason::kTtl:
      return "ttl";
    case EvictionReason::kCapacity:
      return "capacity";
    case EvictionReason::kClosed:
      return "closed";
  }
  return "unknown";
}

Session::Session(std::string id, const model::Model* model, absl::Duration ttl,
                 model::ModelState initial)
    : state(std::move(initial)),
      id_(std::move(id)),
      model_(model),
      ttl_(ttl),
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

SessionTable::SessionTable(SessionLimits limits, EvictionListener listener)
    : limits_(limits), listener_(std::move(listener)) {
  reaper_ = std::thread([this] {
    absl::MutexLock lock(&reaper_mu_);
    while (!reaper_mu_.AwaitWithTimeout(absl::Condition(&stop_reaper_), limits_.reap_interval)) {
      reaper_mu_.Unlock();
      ReapExpired(absl::Now());
      reaper_mu_.Lock();
    }
  });
}

SessionTable::~SessionTable() {
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

absl::StatusOr<SessionUse> SessionTable::Create(const model::Model* model, absl::Duration ttl) {
  if (ttl == absl::ZeroDuration()) ttl = limits_.default_ttl;
  if (ttl < absl::ZeroDuration() || ttl > limits_.max_ttl) {
    return absl::InvalidArgumentError(absl::StrCat("session ttl must be in (0, ",
                                                   absl::ToInt64Seconds(limits_.max_ttl),
                                                   "] seconds, got ", absl::ToInt64Seconds(ttl)));
  }
  absl::StatusOr<model::ModelState> state = model->NewState();
  if (!state.ok()) return state.status();
  const int64_t bytes = model->StateBytesPerSequence(0);
  auto session = std::make_shared<Session>(NewId(), model, ttl, *std::move(state));
  SessionUse use(session);
  {
    absl::MutexLock admission(&admission_mu_);
    const bool full = count_.load() + 1 > limits_.max_sessions ||
                      bytes_.load() + bytes > limits_.state_budget_bytes;
    if (full && !(limits_.evict_when_full && MakeRoom(1, bytes, nullptr))) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "session table is full: ", count_.load(), " of --max_sessions=", limits_.max_sessions,
          " sessions, ", bytes_.load(), " of --state_budget_bytes=", limits_.state_budget_bytes,
          " state bytes; close idle sessions or retry later"));
    }
    count_.fetch_add(1);
    bytes_.fetch_add(bytes);
    session->state_bytes_.store(bytes);
    Shard& shard = ShardFor(session->id());
    absl::MutexLock lock(&shard.mu);
    shard.sessions[session->id()] = session;
  }
  return use;
}

namespace {
absl::Status NoSession(const std::string& id) {
  return absl::NotFoundError(
      absl::StrCat("no session '", id,
                   "': it never existed, was closed, expired after its TTL, or was evicted"));
}
}  // namespace

absl::StatusOr<SessionUse> SessionTable::Get(const std::string& id) {
  if (absl::Status valid = ValidateSessionId(id); !valid.ok()) return valid;
  Shard& shard = ShardFor(id);
  absl::MutexLock lock(&shard.mu);
  auto it = shard.sessions.find(id);
  if (it == shard.sessions.end()) return NoSession(id);
  return SessionUse(it->second);
}

absl::StatusOr<std::shared_ptr<const Session>> SessionTable::Peek(const std::string& id) const {
  if (absl::Status valid = ValidateSessionId(id); !valid.ok()) return valid;
  const Shard& shard = ShardFor(id);
  absl::MutexLock lock(&shard.mu);
  auto it = shard.sessions.find(id);
  if (it == shard.sessions.end()) return NoSession(id);
  return std::shared_ptr<const Session>(it->second);
}

std::shared_ptr<Session> SessionTable::Remove(const std::string& id, bool only_if_idle) {
  Shard& shard = ShardFor(id);
  absl::MutexLock lock(&shard.mu);
  auto it = shard.sessions.find(id);
  // New users come only through Get, under this lock: an idle session stays idle until
  // it is gone.
  if (it == shard.sessions.end() || (only_if_idle && it->second->in_use())) return nullptr;
  std::shared_ptr<Session> session = std::move(it->second);
  shard.sessions.erase(it);
  session->closed_.store(true);
  count_.fetch_sub(1);
  bytes_.fetch_sub(session->state_bytes_.load());
  return session;
}

void SessionTable::Evicted(const std::shared_ptr<Session>& session, EvictionReason reason) {
  if (listener_) listener_(*session, reason);
}

absl::Status SessionTable::Close(const std::string& id) {
  if (absl::Status valid = ValidateSessionId(id); !valid.ok()) return valid;
  std::shared_ptr<Session> session = Remove(id, /*only_if_idle=*/false);
  if (session == nullptr) {
    return absl::NotFoundError(absl::StrCat("no session '", id, "' to close"));
  }
  Evicted(session, EvictionReason::kClosed);
  return absl::OkStatus();
}

absl::Status SessionTable::Reserve(Session& session, int64_t new_bytes) {
  absl::MutexLock admission(&admission_mu_);
  if (session.closed()) {
    return absl::NotFoundError(absl::StrCat("session '", session.id(), "' was closed"));
  }
  const int64_t delta = new_bytes - session.state_bytes_.load();
  if (delta > 0 && bytes_.load() + delta > limits_.state_budget_bytes &&
      !(limits_.evict_when_full && MakeRoom(0, delta, &session))) {
    return absl::ResourceExhaustedError(
        absl::StrCat("state memory budget exhausted: session '", session.id(), "' needs ", delta,
                     " more bytes, ", bytes_.load(),
                     " of --state_budget_bytes=", limits_.state_budget_bytes, " are in use"));
  }
  bytes_.fetch_add(delta);
  session.state_bytes_.store(new_bytes);
  return absl::OkStatus();
}

bool SessionTable::MakeRoom(int64_t extra_sessions, int64_t extra_bytes, const Session* keep) {
  auto fits = [&] {
    return count_.load() + extra_sessions <= limits_.max_sessions &&
           bytes_.load() + extra_bytes <= limits_.state_budget_bytes;
  };
  if (fits()) return true;
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
    if (std::shared_ptr<Session> removed = Remove(s->id(), /*only_if_idle=*/true)) {
      Evicted(removed, EvictionReason::kCapacity);
    }
  }
  return fits();
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

std::vector<v1::SessionInfo> SessionTable::List(const std::string& model, int limit) const {
  std::vector<v1::SessionInfo> out;
  for (const Shard& shard : shards_) {
    absl::MutexLock lock(&shard.mu);
    for (const auto& [id, s] : shard.sessions) {
      if (!model.empty() && s->model()->name() != model) continue;
      if (static_cast<int>(out.size()) >= limit) return out;
      out.push_back(s->Info());
    }
  }
  return out;
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
