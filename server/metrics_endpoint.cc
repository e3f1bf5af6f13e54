#include "server/metrics_endpoint.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace attnserve::server {
namespace {

// A listening socket on host:port, or -1 with `error` set. Ours rather than libmicrohttpd's so
// that a host name resolves as for the gRPC port.
int Listen(const std::string& host, int port, std::string* error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  if (getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found) != 0 || found == nullptr) {
    *error = absl::StrCat("cannot resolve host '", host, "'");
    return -1;
  }
  const int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (fd < 0 || bind(fd, found->ai_addr, found->ai_addrlen) != 0 || listen(fd, 64) != 0) {
    *error = absl::StrCat("cannot listen on ", host, ":", port, ": ", std::strerror(errno));
    freeaddrinfo(found);
    if (fd >= 0) close(fd);
    return -1;
  }
  freeaddrinfo(found);
  return fd;
}

int BoundPort(int fd) {
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  return ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                           : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
}

MHD_Result Respond(MHD_Connection* connection, unsigned status, const std::string& body,
                   const char* content_type) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, content_type);
  const MHD_Result queued = MHD_queue_response(connection, status, response);
  MHD_destroy_response(response);
  return queued;
}

// libmicrohttpd's request callback (on its thread).
MHD_Result HandleRequest(void* cls, MHD_Connection* connection, const char* url, const char* method,
                         const char* /*version*/, const char* /*upload*/, size_t* upload_size,
                         void** /*state*/) {
  const auto* endpoint = static_cast<const MetricsEndpoint*>(cls);
  if (*upload_size != 0) {  // a body we do not want: drop it
    *upload_size = 0;
    return MHD_YES;
  }
  if (std::strcmp(method, MHD_HTTP_METHOD_GET) != 0 &&
      std::strcmp(method, MHD_HTTP_METHOD_HEAD) != 0) {
    return Respond(connection, MHD_HTTP_METHOD_NOT_ALLOWED, "GET /metrics or /ready\n",
                   "text/plain");
  }
  if (std::strcmp(url, "/ready") == 0) {
    return endpoint->ready()
               ? Respond(connection, MHD_HTTP_OK, "ready\n", "text/plain")
               : Respond(connection, MHD_HTTP_SERVICE_UNAVAILABLE, "draining\n", "text/plain");
  }
  if (std::strcmp(url, "/metrics") != 0) {
    return Respond(connection, MHD_HTTP_NOT_FOUND, "not found; try /metrics or /ready\n",
                   "text/plain");
  }
  return Respond(connection, MHD_HTTP_OK, endpoint->Render(),
                 "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& host, int port,
    std::vector<std::weak_ptr<prometheus::Collectable>> collectables) {
  std::string error;
  const int fd = Listen(host, port, &error);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("metrics: ", error));
  std::unique_ptr<MetricsEndpoint> endpoint(
      new MetricsEndpoint(BoundPort(fd), std::move(collectables)));
  endpoint->daemon_ = MHD_start_daemon(
      MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ITC, 0, nullptr, nullptr,
      &HandleRequest, endpoint.get(), MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_TIMEOUT,
      kIdleTimeoutSeconds, MHD_OPTION_CONNECTION_LIMIT, kMaxConnections,
      MHD_OPTION_PER_IP_CONNECTION_LIMIT, kMaxConnectionsPerIp, MHD_OPTION_CONNECTION_MEMORY_LIMIT,
      static_cast<size_t>(64 << 10), MHD_OPTION_THREAD_STACK_SIZE, kThreadStackBytes,
      MHD_OPTION_END);
  if (endpoint->daemon_ == nullptr) {
    close(fd);
    return absl::UnavailableError(
        absl::StrCat("metrics: libmicrohttpd did not start on ", host, ":", endpoint->port()));
  }
  return endpoint;
}

MetricsEndpoint::~MetricsEndpoint() {
  if (daemon_ == nullptr) return;
  // MHD_quiesce_daemon hands the listening socket back; stopping closes every connection.
  const MHD_socket fd = MHD_quiesce_daemon(daemon_);
  MHD_stop_daemon(daemon_);
  if (fd != MHD_INVALID_SOCKET) close(fd);
}

std::string MetricsEndpoint::Render() const {
  std::vector<prometheus::MetricFamily> families;
  for (const auto& weak : collectables_) {
    if (auto collectable = weak.lock()) {
      std::vector<prometheus::MetricFamily> f = collectable->Collect();
      families.insert(families.end(), std::make_move_iterator(f.begin()),
                      std::make_move_iterator(f.end()));
    }
  }
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace attnserve::server
