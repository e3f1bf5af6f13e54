#include "client/common/session_router.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/blocking_counter.h"
#include "client/common/channel.h"
#include "client/common/grpc_status.h"

namespace attnserve::client {
namespace {

namespace v1 = attnserve::v1;

// "ip:port" for IPv4, "[ip]:port" for IPv6, as gRPC targets write them.
std::string EndpointOf(const sockaddr* addr) {
  char text[INET6_ADDRSTRLEN] = {};
  if (addr->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(addr);
    inet_ntop(AF_INET, &in->sin_addr, text, sizeof(text));
    return absl::StrCat(text, ":", ntohs(in->sin_port));
  }
  const auto* in6 = reinterpret_cast<const sockaddr_in6*>(addr);
  inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof(text));
  return absl::StrCat("[", text, "]:", ntohs(in6->sin6_port));
}

absl::StatusOr<std::vector<std::string>> GetAddrInfo(const std::string& host,
                                                     const std::string& port) {
  addrinfo hints = {};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
  if (rc != 0) {
    return absl::UnavailableError(absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  std::vector<std::string> endpoints;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET || a->ai_family == AF_INET6) {
      endpoints.push_back(EndpointOf(a->ai_addr));
    }
  }
  freeaddrinfo(found);
  return endpoints;
}

// One element of a target list; see SessionRouter::Create.
absl::Status ParseItem(absl::string_view text, bool* dns, std::string* host, std::string* port,
                       std::string* literal) {
  text = absl::StripAsciiWhitespace(text);
  if (text.empty()) return absl::InvalidArgumentError("an empty address in the list");
  *dns = absl::ConsumePrefix(&text, "dns:");
  if (!*dns) {
    absl::string_view rest = text;
    if (absl::ConsumePrefix(&rest, "ipv4:") || absl::ConsumePrefix(&rest, "ipv6:")) text = rest;
    if (text.empty()) return absl::InvalidArgumentError("an address without host and port");
    *literal = std::string(text);
    return absl::OkStatus();
  }
  if (absl::ConsumePrefix(&text, "//")) {  // dns://authority/name:port; the authority is unused
    const size_t slash = text.find('/');
    if (slash == absl::string_view::npos) {
      return absl::InvalidArgumentError("dns://AUTHORITY/name:port needs the '/' before the name");
    }
    text.remove_prefix(slash + 1);
  }
  size_t colon;
  if (absl::StartsWith(text, "[")) {
    const size_t close = text.find("]:");
    if (close == absl::string_view::npos) {
      return absl::InvalidArgumentError("dns:[ipv6]:port needs ']:' and a port");
    }
    *host = std::string(text.substr(1, close - 1));
    colon = close + 1;
  } else {
    colon = text.rfind(':');
    if (colon == absl::string_view::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("'dns:", text, "' has no port: write dns:///name:port"));
    }
    *host = std::string(text.substr(0, colon));
  }
  *port = std::string(text.substr(colon + 1));
  if (host->empty() || port->empty() ||
      !std::all_of(port->begin(), port->end(), [](char c) { return absl::ascii_isdigit(c); })) {
    return absl::InvalidArgumentError(
        absl::StrCat("'dns:", text, "' is not name:port with a numeric port"));
  }
  return absl::OkStatus();
}

}  // namespace

bool SessionRouter::IsList(const std::string& target) { return absl::StrContains(target, ','); }

absl::StatusOr<std::unique_ptr<SessionRouter>> SessionRouter::Create(const std::string& target,
                                                                     Options options) {
  std::vector<Item> items;
  for (absl::string_view part : absl::StrSplit(target, ',')) {
    Item item;
    absl::Status parsed = ParseItem(part, &item.dns, &item.host, &item.port, &item.literal);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("target '", target, "': ", parsed.message(),
                       " (expected a comma list of dns:///name:port or host:port)"));
    }
    items.push_back(std::move(item));
  }
  std::unique_ptr<SessionRouter> router(
      new SessionRouter(target, std::move(items), std::move(options)));
  absl::Status resolved = router->Resolve();
  if (!resolved.ok()) return resolved;
  return router;
}

absl::StatusOr<std::unique_ptr<SessionRouter>> SessionRouter::Create(const std::string& target) {
  return Create(target, Options());
}

SessionRouter::SessionRouter(std::string target, std::vector<Item> items, Options options)
    : target_(std::move(target)),
      options_(std::move(options)),
      resolver_(options_.resolver ? options_.resolver : Resolver(GetAddrInfo)),
      has_dns_(std::any_of(items.begin(), items.end(), [](const Item& i) { return i.dns; })),
      items_(std::move(items)) {
  next_ = options_.first_endpoint >= 0 ? static_cast<uint64_t>(options_.first_endpoint)
                                       : std::random_device()();
}

absl::Status SessionRouter::Resolve() {
  absl::MutexLock resolving(&resolve_mu_);
  return ResolveLocked();
}

void SessionRouter::ResolveIfStale() {
  if (!Stale()) return;
  absl::MutexLock resolving(&resolve_mu_);
  // Another thread may have resolved while this one waited.
  if (Stale()) ResolveLocked().IgnoreError();  // on failure the last endpoints stay
}

absl::Status SessionRouter::ResolveLocked() {
  std::vector<std::string> endpoints;
  std::vector<std::string> errors;
  for (Item& item : items_) {
    if (!item.dns) {
      endpoints.push_back(item.literal);
      continue;
    }
    absl::StatusOr<std::vector<std::string>> found = resolver_(item.host, item.port);
    if (found.ok() && !found->empty()) {
      item.last = *std::move(found);
    } else {
      // Keep the last addresses: a failed lookup says nothing about the pods.
      errors.push_back(found.ok() ? absl::StrCat("'", item.host, "' has no address")
                                  : std::string(found.status().message()));
    }
    endpoints.insert(endpoints.end(), item.last.begin(), item.last.end());
  }
  std::sort(endpoints.begin(), endpoints.end());
  endpoints.erase(std::unique(endpoints.begin(), endpoints.end()), endpoints.end());
  absl::MutexLock lock(&mu_);
  resolved_at_ = Clock::now();
  force_resolve_ = false;
  if (endpoints.empty()) {
    return absl::UnavailableError(absl::StrCat(
        "target '", target_, "' resolves to no address: ", absl::StrJoin(errors, "; ")));
  }
  endpoints_ = std::move(endpoints);
  return absl::OkStatus();
}

bool SessionRouter::Stale() {
  absl::MutexLock lock(&mu_);
  return force_resolve_ ||
         (has_dns_ && Clock::now() - resolved_at_ >
                          std::chrono::duration<double>(std::max(0.0, options_.refresh_s)));
}

std::vector<std::string> SessionRouter::CurrentEndpoints() {
  ResolveIfStale();
  absl::MutexLock lock(&mu_);
  return endpoints_;
}

v1::AttnServe::Stub* SessionRouter::StubLocked(const std::string& endpoint, bool next) {
  Stubs& s = stubs_[endpoint];
  if (s.stubs.empty()) {
    for (int i = 0; i < std::max(1, options_.channels_per_endpoint); ++i) {
      s.stubs.push_back(v1::AttnServe::NewStub(MakeChannel(endpoint, i)));
    }
  }
  return s.stubs[next ? s.next++ % s.stubs.size() : 0].get();
}

SessionRouter::Route SessionRouter::RouteTo(const std::string& endpoint) {
  absl::MutexLock lock(&mu_);
  return {endpoint, StubLocked(endpoint, /*next=*/false)};
}

std::vector<SessionRouter::Route> SessionRouter::AllEndpoints() {
  std::vector<Route> routes;
  for (const std::string& e : CurrentEndpoints()) routes.push_back(RouteTo(e));
  return routes;
}

SessionRouter::Route SessionRouter::ForNewSession() {
  ResolveIfStale();
  absl::MutexLock lock(&mu_);
  const size_t n = endpoints_.size();  // never 0: Create fails without endpoints
  const Clock::time_point now = Clock::now();
  for (size_t tries = 0; tries + 1 < n; ++tries) {
    const std::string& e = endpoints_[next_ % n];
    auto avoided = avoid_until_.find(e);
    if (avoided == avoid_until_.end() || avoided->second <= now) break;
    ++next_;
  }
  // Every endpoint avoided: the one in turn, rather than none.
  const std::string endpoint = endpoints_[next_++ % n];
  return {endpoint, StubLocked(endpoint, /*next=*/true)};
}

void SessionRouter::Remember(const std::string& session_id, const v1::ServerIdentity& server,
                             const std::string& dialled) {
  if (session_id.empty()) return;
  const std::string& endpoint =
      server.advertise_address().empty() ? dialled : server.advertise_address();
  absl::MutexLock lock(&mu_);
  const uint64_t serial = ++serial_;
  sessions_[session_id] = {endpoint, serial};
  remembered_order_.emplace_back(session_id, serial);
  const auto live = [this](const std::pair<std::string, uint64_t>& entry) {
    auto it = sessions_.find(entry.first);
    return it != sessions_.end() && it->second.serial == entry.second;
  };
  while (sessions_.size() > std::max<size_t>(1, options_.max_remembered)) {
    if (live(remembered_order_.front())) sessions_.erase(remembered_order_.front().first);
    remembered_order_.pop_front();
  }
  // Forgotten sessions leave entries behind; drop them before they outnumber the live ones.
  if (remembered_order_.size() > 2 * sessions_.size() + 64) {
    std::deque<std::pair<std::string, uint64_t>> kept;
    for (auto& entry : remembered_order_) {
      if (live(entry)) kept.push_back(std::move(entry));
    }
    remembered_order_ = std::move(kept);
  }
}

void SessionRouter::Forget(const std::string& session_id) {
  absl::MutexLock lock(&mu_);
  sessions_.erase(session_id);
}

void SessionRouter::Ask(const std::string& session_id, const std::vector<std::string>& endpoints,
                        Lookup& lookup) {
  if (endpoints.empty()) return;
  struct Call {
    std::string endpoint;
    grpc::ClientContext context;
    v1::SessionInfo info;
    grpc::Status status;
  };
  v1::GetSessionRequest request;
  request.set_session_id(session_id);
  std::vector<std::unique_ptr<Call>> calls;
  absl::BlockingCounter pending(static_cast<int>(endpoints.size()));
  for (const std::string& endpoint : endpoints) {
    calls.push_back(std::make_unique<Call>());
    Call* call = calls.back().get();
    call->endpoint = endpoint;
    call->context.set_deadline(DeadlineAfter(options_.lookup_timeout_s));
    RouteTo(endpoint).stub->async()->GetSession(&call->context, &request, &call->info,
                                                [call, &pending](grpc::Status status) {
                                                  call->status = std::move(status);
                                                  pending.DecrementCount();
                                                });
  }
  pending.Wait();
  for (const std::unique_ptr<Call>& call : calls) {
    lookup.asked.push_back(call->endpoint);
    if (call->status.ok()) {
      if (lookup.found.empty()) {
        lookup.found = call->info.server().advertise_address().empty()
                           ? call->endpoint
                           : call->info.server().advertise_address();
      }
    } else if (call->status.error_code() == grpc::StatusCode::NOT_FOUND) {
      lookup.not_found.push_back(call->endpoint);
    } else {
      lookup.failed.emplace_back(call->endpoint, call->status);
    }
  }
}

absl::StatusOr<SessionRouter::Route> SessionRouter::ForSession(const std::string& session_id) {
  if (session_id.empty()) return absl::InvalidArgumentError("no session id given");
  {
    absl::MutexLock lock(&mu_);
    auto it = sessions_.find(session_id);
    if (it != sessions_.end()) {
      return Route{it->second.endpoint, StubLocked(it->second.endpoint, /*next=*/false)};
    }
  }
  Lookup lookup;
  Ask(session_id, CurrentEndpoints(), lookup);
  if (lookup.found.empty()) {
    // Not where the endpoints were when last resolved: ask any that appeared since (a pod the
    // autoscaler added after this process resolved the name).
    {
      absl::MutexLock lock(&mu_);
      force_resolve_ = true;
    }
    std::vector<std::string> more;
    for (const std::string& e : CurrentEndpoints()) {
      if (std::find(lookup.asked.begin(), lookup.asked.end(), e) == lookup.asked.end()) {
        more.push_back(e);
      }
    }
    Ask(session_id, more, lookup);
  }
  if (!lookup.found.empty()) {
    v1::ServerIdentity found;
    found.set_advertise_address(lookup.found);
    Remember(session_id, found, lookup.found);
    return RouteTo(lookup.found);
  }
  if (lookup.failed.empty()) {
    return absl::NotFoundError(absl::StrCat(
        "no instance of '", target_, "' holds session '", session_id, "' (asked ",
        absl::StrJoin(lookup.not_found, ", "),
        "): it never existed, was closed, expired after its TTL, was evicted, or its instance "
        "restarted"));
  }
  std::vector<std::string> failed;
  for (const auto& [endpoint, status] : lookup.failed) {
    failed.push_back(absl::StrCat(endpoint, " (", FormatStatus(status), ")"));
  }
  if (lookup.not_found.empty()) {
    return absl::UnavailableError(absl::StrCat("no instance of '", target_,
                                               "' could be asked for session '", session_id,
                                               "': ", absl::StrJoin(failed, ", ")));
  }
  return absl::UnavailableError(
      absl::StrCat("session '", session_id, "' was not found on ",
                   absl::StrJoin(lookup.not_found, ", "), ", and ", absl::StrJoin(failed, ", "),
                   " could not be asked: it may be held there; retry when that instance answers"));
}

grpc::Status SessionRouter::CallFailed(const Route& route, const std::string& session_id,
                                       const grpc::Status& status) {
  if (status.ok()) return status;
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
    absl::MutexLock lock(&mu_);
    avoid_until_[route.endpoint] =
        Clock::now() + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(std::max(0.0, options_.avoid_s)));
    force_resolve_ = true;
  }
  if (status.error_code() == grpc::StatusCode::NOT_FOUND && !session_id.empty()) {
    Forget(session_id);
  }
  std::string message;
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE && !session_id.empty()) {
    message = absl::StrCat("session '", session_id, "' is held by ", route.endpoint,
                           ", which is unavailable (the session is lost if that instance "
                           "stopped): ",
                           status.error_message());
  } else {
    message = absl::StrCat(route.endpoint, ": ", status.error_message());
  }
  return grpc::Status(status.error_code(), message, status.error_details());
}

}  // namespace attnserve::client
