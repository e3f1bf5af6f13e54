// The Prometheus endpoint: GET /metrics answers with the text exposition format of the given
// collectables (prometheus-cpp's TextSerializer); GET /ready answers 200 "ready" until
// SetReady(false) (the drain), then 503 "draining", for HTTP health checks that cannot speak
// gRPC's (a gateway's: deploy/gateway/haproxy.cfg); any other path is 404.
//
// HTTP is libmicrohttpd's (Debian's libmicrohttpd-dev): one internal thread polls every
// connection without blocking, so a client that sends its request a byte at a time does not
// hold up other scrapes; a connection idle for kIdleTimeoutSeconds is closed, at most
// kMaxConnections are open (kMaxConnectionsPerIp from one address), and stopping closes every
// connection at once, so no client delays shutdown.
//
// Why not prometheus-cpp's Exposer: it runs civetweb, whose worker threads are created with a
// fixed ~100 KiB stack, and glibc refuses (EINVAL) a stack smaller than the process's static
// TLS, which LibTorch's OpenBLAS (60 KiB) and glog (30 KiB) alone nearly fill. libmicrohttpd
// takes the stack size of its thread as an option (kThreadStackBytes).
#pragma once

#include <prometheus/collectable.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

struct MHD_Daemon;

namespace attnserve::server {

class MetricsEndpoint {
 public:
  static constexpr unsigned kIdleTimeoutSeconds = 5;
  static constexpr unsigned kMaxConnections = 64;
  static constexpr unsigned kMaxConnectionsPerIp = 8;
  static constexpr size_t kThreadStackBytes = size_t{1} << 20;

  // Listens on host:port (port 0: any free port) and serves until destroyed.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& host, int port,
      std::vector<std::weak_ptr<prometheus::Collectable>> collectables);
  ~MetricsEndpoint();  // closes every connection and joins the thread
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

  int port() const { return port_; }
  // What GET /ready says (any thread).
  void SetReady(bool ready) { ready_.store(ready); }
  bool ready() const { return ready_.load(); }
  // The exposition text of every collectable (what GET /metrics returns).
  std::string Render() const;

 private:
  MetricsEndpoint(int port, std::vector<std::weak_ptr<prometheus::Collectable>> c)
      : port_(port), collectables_(std::move(c)) {}

  const int port_;
  const std::vector<std::weak_ptr<prometheus::Collectable>> collectables_;
  MHD_Daemon* daemon_ = nullptr;
  std::atomic<bool> ready_{true};
};

}  // namespace attnserve::server
