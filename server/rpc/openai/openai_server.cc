#include "server/rpc/openai/openai_server.h"

#include <httplib.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "nlohmann/json.hpp"
#include "server/client_text.h"
#include "server/rpc/openai/bounded_task_queue.h"
#include "server/rpc/openai/openai_error.h"
#include "server/rpc/text_requests.h"

namespace attnserve::server::openai {
namespace {

using json = nlohmann::json;

void SendStatus(httplib::Response& response, const absl::Status& status, ErrorPhase phase) {
  SendError(response, ToHttpError(status, phase));
}

void SendJson(httplib::Response& response, const json& body) {
  response.status = 200;
  response.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace),
                       "application/json");
}

}  // namespace

OpenAiServer::OpenAiServer(const model::ModelRepository& repository, const Policy& policy,
                           SessionTable& sessions, scheduler::BatchScheduler& scheduler,
                           HttpOptions options)
    : repository_(repository),
      policy_(policy),
      sessions_(sessions),
      scheduler_(scheduler),
      options_(std::move(options)),
      runner_(sessions, scheduler, options_.runner) {}

OpenAiServer::~OpenAiServer() { Stop(); }

absl::Status OpenAiServer::Start() {
  if (!options_.tls_cert.empty()) {
    auto tls = std::make_unique<httplib::SSLServer>(
        options_.tls_cert.c_str(), options_.tls_key.c_str(),
        options_.tls_client_ca.empty() ? nullptr : options_.tls_client_ca.c_str());
    if (!tls->is_valid()) {
      return absl::InvalidArgumentError(
          "--http_port: the TLS certificate or key (--tls_cert, --tls_key) does not load");
    }
    http_ = std::move(tls);
  } else {
    http_ = std::make_unique<httplib::Server>();
  }
  httplib::Server& http = *http_;
  const int threads = options_.threads, queued = options_.max_queued_connections;
  http.new_task_queue = [threads, queued] { return new BoundedTaskQueue(threads, queued); };
  http.set_payload_max_length(static_cast<size_t>(options_.max_body_bytes));
  http.set_read_timeout(options_.read_timeout_s, 0);
  http.set_write_timeout(options_.write_timeout_s, 0);
  http.set_keep_alive_timeout(options_.keep_alive_s);
  http.set_keep_alive_max_count(1000);
  http.set_tcp_nodelay(true);
  // SO_REUSEADDR, not cpp-httplib's default SO_REUSEPORT: a second server on the same port must
  // fail to start, not silently share its connections.
  http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // Errors cpp-httplib answers itself (413 body too large, 400 bad request, 404 no route)
  // get OpenAI's error body too.
  http.set_error_handler([](const httplib::Request&, httplib::Response& response) {
    if (!response.body.empty()) return;
    const int status = response.status;
    SendError(
        response,
        status == 413 ? MakeHttpError(413, "invalid_request_error",
                                      "the request body is larger than --http_max_body_bytes",
                                      "request_too_large")
        : status == 404
            ? MakeHttpError(404, "not_found_error", "no such endpoint", "unknown_url")
            : MakeHttpError(status, "invalid_request_error", absl::StrCat("HTTP status ", status)));
  });
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& response, std::exception_ptr) {
        SendError(response, MakeHttpError(500, "internal_error", "internal error"));
      });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& response) {
    if (draining_.load()) {
      SendError(response, MakeHttpError(503, "service_unavailable", "draining"));
      return;
    }
    response.status = 200;
    response.set_content("", "text/plain");
  });
  auto admitted = [this](const char* rpc, auto handle) {
    return [this, rpc, handle](const httplib::Request& request, httplib::Response& response) {
      const auto start = std::chrono::steady_clock::now();
      Caller caller;
      if (!Admit(request, response, &caller)) {
        Record(rpc, "", response.status, start);
        return;
      }
      handle(request, response, caller);
      // A streamed response releases and records when its stream ends (completion_handler.cc).
      if (!response.is_chunked_content_provider_) {
        Release(caller);
        Record(rpc, response.get_header_value("x-attnserve-model"), response.status, start);
      }
    };
  };
  http.Get("/v1/models",
           admitted("Models", [this](const httplib::Request&, httplib::Response& response,
                                     const Caller&) { HandleModels(response); }));
  http.Post("/tokenize", admitted("Tokenize", [this](const httplib::Request& request,
                                                     httplib::Response& response, const Caller&) {
              HandleTokenize(request, response);
            }));
  http.Post(
      "/detokenize",
      admitted("Detokenize", [this](const httplib::Request& request, httplib::Response& response,
                                    const Caller&) { HandleDetokenize(request, response); }));
  http.Post("/v1/completions",
            admitted("Completions", [this](const httplib::Request& request,
                                           httplib::Response& response, const Caller& caller) {
              HandleCompletion(request, response, /*chat=*/false, caller);
            }));
  http.Post("/v1/chat/completions",
            admitted("ChatCompletions", [this](const httplib::Request& request,
                                               httplib::Response& response, const Caller& caller) {
              HandleCompletion(request, response, /*chat=*/true, caller);
            }));
  // attnserve's extension: closes a session (one made with session_id "new", or over gRPC).
  http.Delete(R"(/v1/sessions/([0-9a-f]+))",
              admitted("DeleteSession", [this](const httplib::Request& request,
                                               httplib::Response& response, const Caller& caller) {
                const std::string id = request.matches[1];
                absl::Status closed = ValidateSessionId(id);
                if (closed.ok()) closed = sessions_.Close(id, caller);
                if (!closed.ok()) {
                  SendStatus(response, closed, ErrorPhase::kRequest);
                  return;
                }
                SendJson(response, json{{"id", id}, {"object", "session"}, {"deleted", true}});
              }));
  port_ = options_.port == 0
              ? http.bind_to_any_port(options_.host)
              : (http.bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options_.host, ":", options_.port, " (--http_port)"));
  }
  thread_ = std::thread([this] { http_->listen_after_bind(); });
  return absl::OkStatus();
}

void OpenAiServer::Stop() {
  if (http_ != nullptr) http_->stop();
  if (thread_.joinable()) thread_.join();
}

bool OpenAiServer::Admit(const httplib::Request& request, httplib::Response& response,
                         Caller* caller) {
  if (draining_.load()) {
    SendError(response, [] {
      HttpError e = MakeHttpError(503, "service_unavailable",
                                  "the server is shutting down; retry on another replica");
      e.retry_after_s = 1;
      return e;
    }());
    return false;
  }
  int64_t header_bytes = static_cast<int64_t>(request.target.size());
  for (const auto& [name, value] : request.headers) {
    header_bytes += static_cast<int64_t>(name.size() + value.size() + 4);
  }
  if (header_bytes > options_.max_header_bytes) {
    SendError(response, MakeHttpError(431, "invalid_request_error",
                                      absl::StrCat("the request's headers are ", header_bytes,
                                                   " bytes, above --http_max_header_bytes=",
                                                   options_.max_header_bytes)));
    return false;
  }
  if (options_.authenticator != nullptr && options_.authenticator->enabled()) {
    absl::StatusOr<Caller> who =
        options_.authenticator->Authenticate(request.get_header_value("Authorization"), "");
    if (!who.ok()) {
      SendStatus(response, who.status(), ErrorPhase::kRequest);
      return false;
    }
    *caller = *std::move(who);
    caller->client = absl::StrCat("principal:", caller->principal);
  } else {
    caller->client = absl::StrCat("peer:", request.remote_addr);
  }
  absl::MutexLock lock(&mu_);
  if (inflight_.load() >= options_.max_requests) {
    HttpError e =
        MakeHttpError(503, "service_unavailable",
                      absl::StrCat("the server has --http_max_requests=", options_.max_requests,
                                   " requests in flight; retry"));
    e.retry_after_s = 1;
    SendError(response, e);
    return false;
  }
  int& mine = per_client_[caller->client];
  if (mine >= options_.max_requests_per_client) {
    HttpError e = MakeHttpError(
        429, "rate_limit_error",
        absl::StrCat("this client has --http_max_requests_per_client=",
                     options_.max_requests_per_client, " requests in flight; wait for them"),
        "rate_limit_exceeded");
    e.retry_after_s = 1;
    SendError(response, e);
    return false;
  }
  ++mine;
  inflight_.fetch_add(1);
  return true;
}

void OpenAiServer::Record(const char* rpc, const std::string& model, int http_status,
                          std::chrono::steady_clock::time_point start) const {
  if (options_.metrics == nullptr) return;
  // Only served models become label values: a client's made-up name must not.
  const std::string label = repository_.Find(model) != nullptr ? model : "none";
  options_.metrics->RecordRequest(
      "openai", rpc, label, CodeName(http_status),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

void OpenAiServer::Release(const Caller& caller) {
  absl::MutexLock lock(&mu_);
  auto it = per_client_.find(caller.client);
  if (it != per_client_.end() && --it->second <= 0) per_client_.erase(it);
  inflight_.fetch_sub(1);
}

absl::StatusOr<const model::Model*> OpenAiServer::ModelFor(const std::string& name,
                                                           int64_t length) const {
  if (name.empty() || name == "auto") {
    ASSIGN_OR_RETURN(PolicyDecision d, policy_.Resolve("auto", length, /*stream=*/true));
    return d.model;
  }
  if (const model::Model* m = repository_.Find(name); m != nullptr) return m;
  absl::Status missing = absl::NotFoundError(
      absl::StrCat("The model ", ClientText(name), " does not exist (GET /v1/models lists them)"));
  missing.SetPayload(kParamPayload, absl::Cord("model"));
  missing.SetPayload(kCodePayload, absl::Cord("model_not_found"));
  return missing;
}

void OpenAiServer::HandleModels(httplib::Response& response) const {
  json data = json::array();
  for (const model::Model* m : repository_.models()) {
    data.push_back(json{{"id", m->name()},
                        {"object", "model"},
                        {"created", 0},
                        {"owned_by", "attnserve"},
                        {"max_model_len", m->max_sequence_length()}});
  }
  SendJson(response, json{{"object", "list"}, {"data", data}});
}

void OpenAiServer::HandleTokenize(const httplib::Request& request,
                                  httplib::Response& response) const {
  absl::Status status = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(nlohmann::ordered_json body, ParseJsonBody(request.body));
    const std::string name = body.value("model", std::string());
    ASSIGN_OR_RETURN(const model::Model* m, ModelFor(name, 1));
    const json& prompt = body.contains("prompt") ? body["prompt"] : body["content"];
    if (!prompt.is_string()) return FieldError("prompt", "expected a string");
    const bool special = body.value("add_special_tokens", true);
    ASSIGN_OR_RETURN(
        std::vector<int64_t> ids,
        TokenizeForModel(*m, prompt.get<std::string>(), special, options_.max_tokens_per_request,
                         options_.runner.text_limits, "prompt"));
    response.set_header("x-attnserve-model", m->name());
    SendJson(response, json{{"tokens", ids},
                            {"count", ids.size()},
                            {"max_model_len", m->max_sequence_length()},
                            {"model", m->name()}});
    return absl::OkStatus();
  }();
  if (!status.ok()) SendStatus(response, status, ErrorPhase::kRequest);
}

void OpenAiServer::HandleDetokenize(const httplib::Request& request,
                                    httplib::Response& response) const {
  absl::Status status = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(nlohmann::ordered_json body, ParseJsonBody(request.body));
    ASSIGN_OR_RETURN(const model::Model* m, ModelFor(body.value("model", std::string()), 1));
    if (m->text() == nullptr) return NoTokenizerError(*m, "send and read token ids");
    if (!body.contains("tokens") || !body["tokens"].is_array()) {
      return FieldError("tokens", "expected a list of token ids");
    }
    const json& tokens = body["tokens"];
    if (static_cast<int64_t>(tokens.size()) > options_.max_tokens_per_request) {
      return FieldError("tokens",
                        absl::StrCat(tokens.size(), " ids, above --max_tokens_per_request=",
                                     options_.max_tokens_per_request));
    }
    std::vector<int64_t> ids;
    for (const json& t : tokens) {
      if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= m->vocab_size()) {
        return FieldError("tokens",
                          absl::StrCat("ids must be integers in [0, ", m->vocab_size(), ")"));
      }
      ids.push_back(t.get<int64_t>());
    }
    SendJson(response,
             json{{"prompt", m->text()->tokenizer->Decode(ids, false)}, {"model", m->name()}});
    return absl::OkStatus();
  }();
  if (!status.ok()) SendStatus(response, status, ErrorPhase::kRequest);
}

}  // namespace attnserve::server::openai
