#include "server/metrics_endpoint.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <prometheus/text_serializer.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace attnserve::server {
namespace {

void WriteAll(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(
    const std::string& host, int port,
    std::vector<std::weak_ptr<prometheus::Collectable>> collectables) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  if (getaddrinfo(host.c_str(), port_text.c_str(), &hints, &found) != 0 || found == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("metrics: cannot resolve host '", host, "'"));
  }
  const int fd = socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC, 0);
  const int one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (fd < 0 || bind(fd, found->ai_addr, found->ai_addrlen) != 0 || listen(fd, 64) != 0) {
    const std::string error = std::strerror(errno);
    freeaddrinfo(found);
    if (fd >= 0) close(fd);
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", host, ":", port, ": ", error));
  }
  freeaddrinfo(found);
  sockaddr_storage bound{};
  socklen_t len = sizeof(bound);
  getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &len);
  const int bound_port =
      ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  return std::unique_ptr<MetricsEndpoint>(
      new MetricsEndpoint(fd, bound_port, std::move(collectables)));
}

MetricsEndpoint::MetricsEndpoint(int fd, int port,
                                 std::vector<std::weak_ptr<prometheus::Collectable>> c)
    : fd_(fd), port_(port), collectables_(std::move(c)) {
  thread_ = std::thread([this] { Serve(); });
}

MetricsEndpoint::~MetricsEndpoint() {
  stop_.store(true);
  thread_.join();
  close(fd_);
}

void MetricsEndpoint::Serve() {
  while (!stop_.load()) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 100) <= 0) continue;  // wake up to check stop_
    const int client = accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) continue;
    const timeval timeout{2, 0};
    setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
    setsockopt(client, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
    Handle(client);
    close(client);
  }
}

void MetricsEndpoint::Handle(int client) const {
  // Read the request head (up to 8 KiB); only its first line matters.
  std::string head;
  char buf[1024];
  while (head.size() < 8192 && !absl::StrContains(head, "\r\n\r\n") &&
         !absl::StrContains(head, "\n\n")) {
    const ssize_t n = recv(client, buf, sizeof(buf), 0);
    if (n <= 0) break;
    head.append(buf, static_cast<size_t>(n));
  }
  const bool metrics =
      absl::StartsWith(head, "GET /metrics ") || absl::StartsWith(head, "GET /metrics?");
  const std::string body = metrics ? Render() : "not found; try /metrics\n";
  WriteAll(
      client,
      absl::StrCat(metrics ? "HTTP/1.1 200 OK\r\n" : "HTTP/1.1 404 Not Found\r\n", "Content-Type: ",
                   metrics ? "text/plain; version=0.0.4; charset=utf-8" : "text/plain",
                   "\r\nContent-Length: ", body.size(), "\r\nConnection: close\r\n\r\n", body));
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
