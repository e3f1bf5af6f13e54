#include "server/sessions/session_lease.h"

#include "absl/random/random.h"
#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace attnserve::server {
namespace {

// The payload's type URL: what carries the owner's address inside an absl::Status.
constexpr char kOwnerPayload[] = "type.attnserve/session_owner";
constexpr char kLostPayload[] = "type.attnserve/lease_lost";
constexpr char kSessionPayload[] = "type.attnserve/held_session";

absl::Status WithOwner(absl::Status status, const std::string& owner_address) {
  status.SetPayload(kOwnerPayload, absl::Cord(owner_address));
  return status;
}

}  // namespace

absl::Status LeaseHeldElsewhere(const std::string& id, const std::string& owner_address) {
  absl::Status status =
      WithOwner(absl::UnavailableError(absl::StrCat(
                    "session '", id, "' is held by another replica",
                    owner_address.empty() ? std::string(" (which advertises no address)")
                                          : absl::StrCat(" at ", owner_address),
                    "; retry there (trailing metadata ", kSessionOwnerMetadata,
                    "), or here once its lease has expired")),
                owner_address);
  status.SetPayload(kSessionPayload, absl::Cord(id));
  return status;
}

absl::Status LeaseLost(const std::string& id, const std::string& owner_address) {
  absl::Status status =
      WithOwner(absl::FailedPreconditionError(absl::StrCat(
                    "this replica's lease on session '", id, "' was taken by another replica",
                    owner_address.empty() ? std::string() : absl::StrCat(" (", owner_address, ")"),
                    ": its write is refused and its copy dropped")),
                owner_address);
  status.SetPayload(kLostPayload, absl::Cord("1"));
  return status;
}

std::optional<std::string> LeaseOwnerOf(const absl::Status& status) {
  const auto owner = status.GetPayload(kOwnerPayload);
  if (!owner.has_value()) return std::nullopt;
  return std::string(*owner);
}

std::optional<std::string> LeaseSessionOf(const absl::Status& status) {
  const auto id = status.GetPayload(kSessionPayload);
  if (!id.has_value()) return std::nullopt;
  return std::string(*id);
}

bool IsLeaseLost(const absl::Status& status) { return status.GetPayload(kLostPayload).has_value(); }

std::string NewLeaseToken(const std::string& address) {
  absl::BitGen gen;
  return absl::StrFormat("%016x@%s", absl::Uniform<uint64_t>(gen), address);
}

std::string LeaseTokenAddress(const std::string& token) {
  const size_t at = token.find('@');
  return at == std::string::npos ? std::string() : token.substr(at + 1);
}

}  // namespace attnserve::server
