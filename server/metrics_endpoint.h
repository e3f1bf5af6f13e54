// A minimal HTTP/1.1 server for Prometheus scrapes: GET /metrics answers with the text
// exposition format of the given collectables (prometheus-cpp's TextSerializer); anything
// else is 404. One thread, one connection at a time, bounded reads and timeouts.
//
// Why not prometheus-cpp's Exposer: it runs civetweb, whose worker threads are created with a
// fixed ~100 KiB stack, and glibc refuses (EINVAL) a stack smaller than the process's static
// TLS, which LibTorch's OpenBLAS (60 KiB) and glog (30 KiB) alone nearly fill.
#pragma once

#include <prometheus/collectable.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace attnserve::server {

class MetricsEndpoint {
 public:
  // Listens on host:port (port 0: any free port) and serves until destroyed.
  static absl::StatusOr<std::unique_ptr<MetricsEndpoint>> Start(
      const std::string& host, int port,
      std::vector<std::weak_ptr<prometheus::Collectable>> collectables);
  ~MetricsEndpoint();

  int port() const { return port_; }

 private:
  MetricsEndpoint(int fd, int port, std::vector<std::weak_ptr<prometheus::Collectable>> c);
  void Serve();
  void Handle(int client) const;
  std::string Render() const;

  const int fd_;
  const int port_;
  const std::vector<std::weak_ptr<prometheus::Collectable>> collectables_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace attnserve::server
