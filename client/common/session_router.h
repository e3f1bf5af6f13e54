// SessionRouter: sends each session's calls to the attnserve instance that holds it, when
// several instances serve (the pods behind a Kubernetes headless Service, or a list of
// addresses).
//
// A session lives in one instance's memory. A stream keeps its session on its own connection,
// but a resumed session (a new stream, perhaps from a new process) or an Infer with a session
// id must reach that same instance. The router:
//   - resolves the target to endpoints: "dns:///name:port" to every address of the name (a
//     headless Service's name resolves to one address per ready pod), "host:port" to itself,
//     and a comma list to the union; names are resolved again every `refresh_s`, when a
//     session is found nowhere, and after an endpoint was reported unavailable, and a name
//     that fails to resolve keeps its last addresses;
//   - opens new sessions round-robin over the endpoints, from a random first one (so that
//     many one-shot clients spread too), skipping endpoints reported unavailable lately;
//   - remembers session id -> endpoint from the identity the server returns with the session:
//     its advertised address, or, when it advertises none, the endpoint that was dialled;
//   - finds a session it does not know (a resume from a new process) by asking every endpoint
//     GetSession in parallel and pinning the one that holds it.
// It is client-side rather than a consistent-hash ring over the pods because a ring remaps
// sessions whenever the autoscaler adds or removes a pod, and a remapped session is one the
// ring no longer finds; here where a session lives is a fact the server reports.
//
// Thread-safe. Channels and stubs are cached per endpoint for the router's lifetime.
#ifndef ATTNSERVE_CLIENT_COMMON_SESSION_ROUTER_H_
#define ATTNSERVE_CLIENT_COMMON_SESSION_ROUTER_H_

#include <grpcpp/channel.h>
#include <grpcpp/support/status.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "attnserve/v1/inference.grpc.pb.h"

namespace attnserve::client {

class SessionRouter {
 public:
  // Resolves `host` and `port` of a "dns:" target to "ip:port" endpoints ("[ip6]:port").
  using Resolver = std::function<absl::StatusOr<std::vector<std::string>>(const std::string& host,
                                                                          const std::string& port)>;

  struct Options {
    double lookup_timeout_s = 10;  // deadline of each GetSession of a lookup
    double refresh_s = 30;         // resolve names again after this long
    // After a call to an endpoint failed with UNAVAILABLE, new sessions avoid it this long
    // (unless every endpoint is avoided).
    double avoid_s = 5;
    // Sessions remembered at most; beyond, the oldest are forgotten (and found again by a
    // lookup when used).
    size_t max_remembered = 100000;
    // Channels (connections) per endpoint; new sessions take them in turn.
    int channels_per_endpoint = 1;
    // The first endpoint new sessions go to (an index into the sorted endpoints); -1: random.
    int first_endpoint = -1;
    Resolver resolver;  // empty: getaddrinfo
  };

  struct Route {
    std::string endpoint;                            // host:port, as dialled
    attnserve::v1::AttnServe::Stub* stub = nullptr;  // owned by the router
  };

  // `target`: a comma list of "dns:///name:port" (also "dns://authority/name:port", whose
  // authority is ignored: the system resolver answers), "host:port" (dialled as it is; gRPC
  // resolves it and uses one address), "ipv4:a.b.c.d:port" or "ipv6:[addr]:port".
  // INVALID_ARGUMENT for a malformed target; UNAVAILABLE when it resolves to no endpoint.
  static absl::StatusOr<std::unique_ptr<SessionRouter>> Create(const std::string& target,
                                                               Options options);
  static absl::StatusOr<std::unique_ptr<SessionRouter>> Create(const std::string& target);

  // Whether `target` names several endpoints by itself (a comma list): only a router can
  // dial it, so the tools route sessions for such a target whatever their flag says.
  static bool IsList(const std::string& target);

  // Where a new session (or a call without a session) goes: the next endpoint in turn.
  Route ForNewSession();

  // Where the session `session_id` lives: remembered, or found by asking every endpoint.
  // NOT_FOUND when every endpoint answered that it holds no such session; UNAVAILABLE when it
  // was found nowhere but some endpoints could not be asked (it may be on one of them). The
  // messages name the endpoints and what each answered.
  absl::StatusOr<Route> ForSession(const std::string& session_id);

  // Records where a session lives, from a reply that carried it (StreamOpened, SessionInfo):
  // the server's advertised address, or `dialled` when it advertises none.
  void Remember(const std::string& session_id, const attnserve::v1::ServerIdentity& server,
                const std::string& dialled);
  void Forget(const std::string& session_id);

  // A call on `route` failed: returns the status with the endpoint named (and, for a session,
  // that it lives there), forgets the session on NOT_FOUND, and after UNAVAILABLE keeps new
  // sessions off the endpoint for a while and resolves names again.
  grpc::Status CallFailed(const Route& route, const std::string& session_id,
                          const grpc::Status& status);

  // Every current endpoint, for calls that go to all of them (ListSessions).
  std::vector<Route> AllEndpoints();
  // The stub for `endpoint` (cached).
  Route RouteTo(const std::string& endpoint);

  const std::string& target() const { return target_; }

 private:
  using Clock = std::chrono::steady_clock;

  // One element of the target list.
  struct Item {
    bool dns = false;
    std::string host, port;         // dns
    std::string literal;            // otherwise: dialled as it is
    std::vector<std::string> last;  // dns: the last addresses it resolved to
  };
  struct Stubs {
    std::vector<std::unique_ptr<attnserve::v1::AttnServe::Stub>> stubs;
    size_t next = 0;
  };
  // What one lookup learnt.
  struct Lookup {
    std::string found;  // the endpoint that holds the session ("" when none)
    std::vector<std::string> asked;
    std::vector<std::string> not_found;
    std::vector<std::pair<std::string, grpc::Status>> failed;
  };

  SessionRouter(std::string target, std::vector<Item> items, Options options);

  // Resolves the items again (no mu_ held while resolving: getaddrinfo may take a while).
  // Fails only when nothing resolves and no earlier addresses are known.
  absl::Status Resolve() ABSL_LOCKS_EXCLUDED(resolve_mu_, mu_);
  absl::Status ResolveLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(resolve_mu_) ABSL_LOCKS_EXCLUDED(mu_);
  // Resolves again when refresh_s has passed or a failure asked for it (once, however many
  // threads notice); keeps the last endpoints when resolution fails.
  void ResolveIfStale() ABSL_LOCKS_EXCLUDED(resolve_mu_, mu_);
  bool Stale() ABSL_LOCKS_EXCLUDED(mu_);
  std::vector<std::string> CurrentEndpoints() ABSL_LOCKS_EXCLUDED(mu_);
  attnserve::v1::AttnServe::Stub* StubLocked(const std::string& endpoint, bool next)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Asks each of `endpoints` GetSession(session_id) in parallel; adds to `lookup`.
  void Ask(const std::string& session_id, const std::vector<std::string>& endpoints,
           Lookup& lookup);

  const std::string target_;
  const Options options_;
  const Resolver resolver_;
  const bool has_dns_;  // some item is a name, resolved again every refresh_s

  absl::Mutex resolve_mu_;
  std::vector<Item> items_ ABSL_GUARDED_BY(resolve_mu_);

  absl::Mutex mu_;
  std::vector<std::string> endpoints_ ABSL_GUARDED_BY(mu_);  // sorted, distinct
  Clock::time_point resolved_at_ ABSL_GUARDED_BY(mu_);
  bool force_resolve_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<std::string, Clock::time_point> avoid_until_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Stubs> stubs_ ABSL_GUARDED_BY(mu_);
  struct Remembered {
    std::string endpoint;
    uint64_t serial = 0;  // which Remember call; matches its entry in remembered_order_
  };
  absl::flat_hash_map<std::string, Remembered> sessions_ ABSL_GUARDED_BY(mu_);
  // (session id, serial) in the order remembered, oldest first; entries whose serial no
  // longer matches were forgotten or remembered again, and are skipped.
  std::deque<std::pair<std::string, uint64_t>> remembered_order_ ABSL_GUARDED_BY(mu_);
  uint64_t serial_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace attnserve::client

#endif  // ATTNSERVE_CLIENT_COMMON_SESSION_ROUTER_H_
