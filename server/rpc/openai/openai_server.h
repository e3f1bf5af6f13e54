// The OpenAI-compatible HTTP door (--http_port): /v1/models, /v1/completions,
// /v1/chat/completions, /tokenize, /detokenize and /health over the same policy, sessions and
// scheduler as the gRPC doors. HTTP/1.1 from cpp-httplib (Debian's libcpp-httplib, the library
// llama.cpp's server uses), TLS from the same certificate as gRPC, the same bearer tokens.
//
// Threads: cpp-httplib accepts on the thread that runs Start's loop and hands each connection
// to a pool of `threads` workers (BoundedTaskQueue: at most `max_queued_connections` wait for a
// worker; past that, accepting waits, and the kernel's backlog holds the rest). A handler runs
// on its worker: it parses, tokenizes and renders there, submits jobs, and writes its response
// (a stream at its client's pace: a client that stops reading holds its worker until
// `write_timeout`, then its jobs are cancelled and their sessions freed; the scheduler never
// waits for a client). Limits: body bytes (413), header bytes (431), requests in flight per
// client (429) and in all (503), read/write/keep-alive timeouts.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "server/metrics.h"
#include "server/model/model_repository.h"
#include "server/policy.h"
#include "server/rpc/openai/completion_runner.h"
#include "server/rpc/openai/openai_request.h"
#include "server/scheduler/batch_scheduler.h"
#include "server/security/authenticator.h"
#include "server/sessions/session_table.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace attnserve::server::openai {

struct HttpOptions {
  std::string host = "0.0.0.0";
  int port = 8000;                               // 0: pick a free one (port() tells which)
  std::string tls_cert, tls_key, tls_client_ca;  // PEM files; empty cert: plain HTTP
  int threads = 64;                              // --http_threads
  int max_queued_connections = 256;              // --http_max_queued_connections
  int64_t max_body_bytes = int64_t{8} << 20;     // --http_max_body_bytes (413 beyond)
  int64_t max_header_bytes = 16 << 10;           // --http_max_header_bytes (431 beyond)
  int max_requests_per_client = 32;              // --http_max_requests_per_client (429)
  int max_requests = 512;                        // --http_max_requests (503)
  int read_timeout_s = 30;                       // --http_read_timeout_s
  int write_timeout_s = 30;                      // --http_write_timeout_s
  int keep_alive_s = 5;                          // --http_keep_alive_s
  int64_t max_tokens_per_request = 65536;        // --max_tokens_per_request
  RequestLimits limits;
  RunnerOptions runner;
  Authenticator* authenticator = nullptr;  // borrowed; null: no authentication
  ServerMetrics* metrics = nullptr;        // borrowed; null: no metrics
};

class OpenAiServer {
 public:
  // Borrows everything; all must outlive the server.
  OpenAiServer(const model::ModelRepository& repository, const Policy& policy,
               SessionTable& sessions, scheduler::BatchScheduler& scheduler, HttpOptions options);
  ~OpenAiServer();

  // Binds and starts serving on a thread of its own. An error when it cannot bind or the TLS
  // files do not load.
  absl::Status Start();
  int port() const { return port_; }
  // New requests get 503 from now on; those in flight finish.
  void StartDraining() { draining_.store(true); }
  int64_t inflight() const { return inflight_.load(); }
  // Stops accepting and joins (after draining: a stream still open is cut).
  void Stop();

 private:
  // Authentication and the in-flight limits; false: `response` holds the error. A true one
  // must be paired with Release(caller) when the response is done.
  bool Admit(const httplib::Request& request, httplib::Response& response, Caller* caller);
  void Release(const Caller& caller);
  // attnserve_requests_total and its duration, protocol "openai": `rpc` (Completions,
  // ChatCompletions, Models, ...), the model that answered (the x-attnserve-model header the
  // handlers set; "none" for others), the HTTP status as a gRPC code name.
  void Record(const char* rpc, const std::string& model, int http_status,
              std::chrono::steady_clock::time_point start) const;
  // The model `name` names (404 model_not_found otherwise); "" or "auto": the policy's choice
  // for `length` tokens.
  absl::StatusOr<const model::Model*> ModelFor(const std::string& name, int64_t length) const;
  void HandleModels(httplib::Response& response) const;
  void HandleTokenize(const httplib::Request& request, httplib::Response& response) const;
  void HandleDetokenize(const httplib::Request& request, httplib::Response& response) const;
  // /v1/completions (chat false) and /v1/chat/completions: completion_handler.cc.
  void HandleCompletion(const httplib::Request& request, httplib::Response& response, bool chat,
                        const Caller& caller);

  const model::ModelRepository& repository_;
  const Policy& policy_;
  SessionTable& sessions_;
  scheduler::BatchScheduler& scheduler_;
  HttpOptions options_;
  CompletionRunner runner_;
  std::unique_ptr<httplib::Server> http_;
  std::thread thread_;
  int port_ = 0;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> inflight_{0};
  absl::Mutex mu_;
  absl::flat_hash_map<std::string, int> per_client_ ABSL_GUARDED_BY(mu_);
};

}  // namespace attnserve::server::openai
