// Leases on sessions in a shared session store (README: Several instances): with one, a replica
// holds a session in memory only under a lease in the store, so that two replicas never serve
// diverging copies of it.
//
// A lease is a key in the store naming its holder's token ("<64 random bits>@<advertised
// address>", one per process), created if absent with an expiry, renewed while the replica
// holds the session (in memory, or spilled with its write still queued) and released when it
// leaves (spill written, drain, close, expiry). A second key, the session's last holder, stays
// after the lease expires: a write or a renewal by a token whose lease has lapsed passes only
// when no other token took the lease since (nothing newer can exist). Every write and removal
// of the session's snapshot is fenced by the token in the same atomic step (one Redis script),
// so a replica paused past its lease (SIGSTOP, a long stall) cannot overwrite the newer state
// when it wakes: its write is refused (LeaseLost) and it drops its copy.
//
// The stores without leases (dir:, one replica) return null from SessionStore::leases().
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace attnserve::server {

// The trailing metadata key that carries a session's holder's advertised address with
// UNAVAILABLE (a router or client retries there).
inline constexpr char kSessionOwnerMetadata[] = "x-attnserve-session-owner";
// Sent with it: the session the owner holds (the id the answer is about), so that a gateway
// learns the holder of that session only, whatever header the request carried.
inline constexpr char kHeldSessionMetadata[] = "x-attnserve-held-session";

// UNAVAILABLE: session `id` is leased by the replica advertised as `owner_address` (empty when
// it advertises none); the address travels as a payload (LeaseOwnerOf).
absl::Status LeaseHeldElsewhere(const std::string& id, const std::string& owner_address);
// FAILED_PRECONDITION: a write or removal of `id` fenced by a lease this process no longer
// holds (another replica took it, `owner_address`); the write must not be retried and the
// copy in memory must be dropped. Also carries the owner (LeaseOwnerOf).
absl::Status LeaseLost(const std::string& id, const std::string& owner_address);
// The owner's address carried by one of the two errors above; nullopt for any other status.
std::optional<std::string> LeaseOwnerOf(const absl::Status& status);
// The session id LeaseHeldElsewhere's status is about; nullopt for any other status.
std::optional<std::string> LeaseSessionOf(const absl::Status& status);
// Whether `status` is LeaseLost's.
bool IsLeaseLost(const absl::Status& status);

// "<16 hex random digits>@<address>": a token of this process; `address` is what it
// advertises (--advertise_address, else its instance name).
std::string NewLeaseToken(const std::string& address);
// The address part of a token (after its first '@'; empty when it has none).
std::string LeaseTokenAddress(const std::string& token);

class SessionLeases {
 public:
  virtual ~SessionLeases() = default;

  // How Acquire found the lease.
  enum class Acquired {
    kOwn,      // this token held it already (renewed)
    kResumed,  // it had lapsed, and this token was its last holder: nothing newer was stored
    kTaken,    // it was free and last held by another token (or never): the store's copy is
               // the newest there is
  };
  // Takes or renews the lease of `id` for this process's token. LeaseHeldElsewhere when another
  // token holds it; UNAVAILABLE when the store cannot be reached.
  virtual absl::StatusOr<Acquired> Acquire(const std::string& id) = 0;
  // Renews the leases of `ids` in one step (a lapsed one is taken again when no other token
  // took it since). Returns, for each id, whether it is lost (held or last taken by another
  // token); UNAVAILABLE when the store cannot be reached.
  virtual absl::StatusOr<std::vector<bool>> Renew(const std::vector<std::string>& ids) = 0;
  // Gives the lease of `id` up if this token holds it (the last-holder key stays).
  virtual absl::Status Release(const std::string& id) = 0;
  // The token holding the lease of `id` now (empty: none), without taking or renewing it.
  // UNAVAILABLE when the store cannot be reached.
  virtual absl::StatusOr<std::string> Holder(const std::string& id) = 0;

  virtual const std::string& token() const = 0;
  virtual absl::Duration duration() const = 0;
};

}  // namespace attnserve::server
