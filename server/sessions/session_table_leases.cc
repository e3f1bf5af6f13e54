// SessionTable's side of leases (session_table.h, session_lease.h): confirming a lease before a
// session in memory serves a request, and dropping a copy whose lease another replica took.
#include "absl/strings/str_cat.h"
#include "server/sessions/session_lease.h"
#include "server/sessions/session_persistence.h"
#include "server/sessions/session_table.h"

namespace attnserve::server {

absl::Status SessionTable::ConfirmLease(Session& session) {
  if (persistence_ == nullptr || !persistence_->leased()) return absl::OkStatus();
  const std::string& id = session.id();
  if (session.moved()) return LostTo(id);         // dropped meanwhile: where it is now
  if (session.closed()) return absl::OkStatus();  // closed here: the caller says so
  if (persistence_->LeaseFresh(id)) return absl::OkStatus();
  absl::Status confirmed = persistence_->ConfirmLease(id);
  if (confirmed.ok()) return confirmed;
  if (!IsLeaseLost(confirmed)) return confirmed;  // the store cannot say: not served meanwhile
  DropLost(id);
  return LostTo(id);
}

absl::Status SessionTable::LostTo(const std::string& id) {
  // Who holds it now: asking for the lease answers that (and, should it be free again, takes
  // it; it is given back at once, since this copy is gone).
  absl::Status acquired = persistence_->AcquireLease(id, /*fresh=*/false);
  if (!acquired.ok()) return acquired;
  persistence_->ReleaseLease(id);
  return absl::UnavailableError(absl::StrCat(
      "session '", id, "' moved to another replica and back while this call waited; resume it"));
}

bool SessionTable::DropLost(const std::string& id) {
  std::shared_ptr<Session> session;
  {
    Shard& shard = ShardFor(id);
    absl::MutexLock lock(&shard.mu);
    auto it = shard.sessions.find(id);
    if (it == shard.sessions.end()) return false;
    session = std::move(it->second);
    shard.sessions.erase(it);
    session->moved_.store(true);
    session->closed_.store(true);  // whoever still runs it stops; nothing of it is saved again
    count_.fetch_sub(1);
    bytes_.fetch_sub(session->state_bytes_.load());
  }
  Evicted(session, EvictionReason::kLeaseLost);
  return true;
}

}  // namespace attnserve::server
