#include "server/sessions/session_store.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "server/client_text.h"
#include "server/sessions/dir_session_store.h"
#include "server/sessions/redis_session_store.h"
#include "server/sessions/session_lease.h"

namespace attnserve::server {

absl::Status CheckSnapshotSize(const std::string& id, int64_t size, int64_t limit, bool writing) {
  if (size <= limit) return absl::OkStatus();
  const std::string message = absl::StrCat("the snapshot of session ", id, " is ", size,
                                           " bytes, above --max_snapshot_bytes=", limit);
  return writing ? absl::ResourceExhaustedError(message) : absl::DataLossError(message);
}

absl::StatusOr<std::unique_ptr<SessionStore>> OpenSessionStore(const std::string& spec,
                                                               const SessionStoreOptions& options) {
  if (absl::StartsWith(spec, "dir:")) {
    auto store =
        DirSessionStore::Open(spec.substr(4), options.max_bytes, options.max_snapshot_bytes);
    if (!store.ok()) return store.status();
    return std::unique_ptr<SessionStore>(*std::move(store));
  }
  if (absl::StartsWith(spec, "redis://")) {
    std::string address = spec.substr(8);
    if (!address.empty() && address.back() == '/') address.pop_back();
    auto store =
        RedisSessionStore::Open(address, options.timeout, options.max_snapshot_bytes,
                                options.lease_duration, NewLeaseToken(options.lease_address));
    if (!store.ok()) return store.status();
    return std::unique_ptr<SessionStore>(*std::move(store));
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--session_store must be dir:PATH or redis://HOST:PORT, got ", ClientText(spec)));
}

}  // namespace attnserve::server
