// The attnserve.v1.AttnServe gRPC service (callback API). Handlers parse and validate, then
// hand the model work to the WorkerPool: no model runs on a gRPC thread, and no reactor
// blocks. Session lookups and listings are cheap and answered inline.
#pragma once

#include <atomic>
#include <cstdint>

#include "attnserve/v1/inference.grpc.pb.h"
#include "server/metrics.h"
#include "server/model/model_repository.h"
#include "server/policy.h"
#include "server/session_table.h"
#include "server/worker_pool.h"

namespace attnserve::server {

struct ServiceOptions {
  int64_t max_tokens_per_request = 65536;
  int max_new_tokens = 1024;
  ServerMetrics* metrics = nullptr;  // borrowed; null: no metrics
  // Returned with every session (StreamOpened, SessionInfo) and Infer response, and named in
  // NOT_FOUND for a session this instance does not hold, so that clients route a session's
  // calls to the instance holding it and a misrouted call says where it went.
  v1::ServerIdentity identity;
};

class AttnServeService final : public v1::AttnServe::CallbackService {
 public:
  // Borrows everything; all must outlive the service.
  AttnServeService(const model::ModelRepository& repository, const Policy& policy,
                   SessionTable& sessions, WorkerPool& workers, ServiceOptions options);

  // From now on new calls get UNAVAILABLE; calls in flight finish.
  void StartDraining() { draining_.store(true); }
  // Calls and streams not yet finished.
  int64_t inflight() const { return inflight_.load(); }

  grpc::ServerUnaryReactor* Infer(grpc::CallbackServerContext* context,
                                  const v1::InferRequest* request,
                                  v1::InferResponse* response) override;
  grpc::ServerBidiReactor<v1::StreamRequest, v1::StreamResponse>* Stream(
      grpc::CallbackServerContext* context) override;
  grpc::ServerUnaryReactor* GetSession(grpc::CallbackServerContext* context,
                                       const v1::GetSessionRequest* request,
                                       v1::SessionInfo* response) override;
  grpc::ServerUnaryReactor* CloseSession(grpc::CallbackServerContext* context,
                                         const v1::CloseSessionRequest* request,
                                         v1::CloseSessionResponse* response) override;
  grpc::ServerUnaryReactor* ListSessions(grpc::CallbackServerContext* context,
                                         const v1::ListSessionsRequest* request,
                                         v1::ListSessionsResponse* response) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext* context,
                                       const v1::ListModelsRequest* request,
                                       v1::ListModelsResponse* response) override;
  grpc::ServerUnaryReactor* GetModel(grpc::CallbackServerContext* context,
                                     const v1::GetModelRequest* request,
                                     v1::ModelInfo* response) override;

 private:
  class StreamReactor;

  absl::Status CheckServing() const;
  // A session lookup's NOT_FOUND with the instance that answered appended (other statuses
  // unchanged): with several instances, "no session" alone does not say where it was asked.
  absl::Status OnThisInstance(absl::Status status) const;
  // Runs `tokens` on a session whose run_mu the caller holds: reserves the state memory for
  // the session's new length plus `extra_tokens` to come, continues the state, publishes
  // the new position.
  absl::StatusOr<at::Tensor> ContinueSession(Session& session, const at::Tensor& tokens,
                                             model::OutputKind output, int64_t extra_tokens);
  // Metrics hooks (no-ops without metrics).
  void Record(const char* rpc, const std::string& variant, const absl::Status& status,
              double seconds) const;
  void CountTokens(const std::string& variant, int64_t tokens, bool on_session) const;
  void CountDecision(const PolicyDecision& decision) const;

  absl::Status RunInfer(const v1::InferRequest& request, v1::InferResponse* response);
  v1::ModelInfo Describe(const model::Model& model) const;

  const model::ModelRepository& repository_;
  const Policy& policy_;
  SessionTable& sessions_;
  WorkerPool& workers_;
  const ServiceOptions options_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> inflight_{0};
};

}  // namespace attnserve::server
