// The attnserve.v1.AttnServe gRPC service (callback API). Handlers parse and validate, then
// hand the model work to the scheduler as a job (server/scheduler/): no model runs on a gRPC
// thread, no reactor blocks, and a request waiting for its session holds no thread. The
// job's completion (on the scheduler's thread) fills the response and finishes the call.
// Session lookups, listings, stream open and close are cheap and answered inline.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>

#include "attnserve/v1/inference.grpc.pb.h"
#include "server/metrics.h"
#include "server/model/model_repository.h"
#include "server/policy.h"
#include "server/prefix_cache/prefix_cache.h"
#include "server/rpc/request_work_pool.h"
#include "server/rpc/text_requests.h"
#include "server/scheduler/batch_scheduler.h"
#include "server/security/authenticator.h"
#include "server/sessions/session_table.h"

namespace attnserve::server {

struct ServiceOptions {
  int64_t max_tokens_per_request = 65536;
  int max_new_tokens = 1024;
  // Largest message the server sends (--max_message_bytes): a response above it is refused
  // with RESOURCE_EXHAUSTED by the service itself, so the code counted is the one the client
  // gets. 0: no limit.
  int64_t max_message_bytes = 0;
  // Bytes of responses one stream may have waiting for its client before the server stops
  // reading that stream's requests (--max_stream_buffer_bytes).
  int64_t max_stream_buffer_bytes = int64_t{16} << 20;
  // Largest metadata one call may send (--max_metadata_bytes; names, values and 32 bytes an
  // entry, as HPACK counts): RESOURCE_EXHAUSTED for that call alone. 0: no limit here. The
  // transport's own limit is set above it (TransportMetadataLimit).
  int64_t max_metadata_bytes = 0;
  // Appends whose results a session keeps for retries (--retry_window).
  int retry_window = Session::kDefaultRetryWindow;
  // Largest snapshot ImportSession takes (--max_snapshot_bytes): RESOURCE_EXHAUSTED beyond.
  int64_t max_snapshot_bytes = int64_t{1} << 30;
  // Whether every principal shares cached prefixes (--prefix_cache_scope=global); otherwise a
  // job's cache scope is its principal.
  bool prefix_cache_global = false;
  // Text in requests and generation (--max_text_bytes, --max_stop_strings, ...).
  TextLimits text_limits;
  ServerMetrics* metrics = nullptr;  // borrowed; null: no metrics
  // The scheduler's prefix state cache, for ListModels to show (borrowed; null: none).
  const PrefixCache* prefix_cache = nullptr;
  // Who is calling (server/security/authenticator.h); borrowed; null: no authentication, every
  // call is the anonymous principal.
  Authenticator* authenticator = nullptr;
  // Where large requests' text work runs (request_work_pool.h); borrowed; null: inline.
  RequestWorkPool* work_pool = nullptr;
  // Returned with every session (StreamOpened, SessionInfo) and Infer response, and named in
  // NOT_FOUND for a session this instance does not hold, so that clients route a session's
  // calls to the instance holding it and a misrouted call says where it went.
  v1::ServerIdentity identity;
};

// gRPC's own metadata limit (GRPC_ARG_MAX_METADATA_SIZE) for a per-call limit of
// `per_call_bytes`: 4 times it, and at least 64 KiB. gRPC 1.51 answers metadata above its limit
// by failing the other calls open on the connection as well, so the service enforces the
// per-call limit itself and gRPC's is only the hard bound on what a call's headers hold in
// memory (x --max_concurrent_streams a connection).
inline int TransportMetadataLimit(int64_t per_call_bytes) {
  const int64_t limit = std::max<int64_t>(int64_t{64} << 10, 4 * per_call_bytes);
  return static_cast<int>(std::min<int64_t>(limit, int64_t{1} << 30));
}

// The callback service with Stream registered raw (ByteBuffer in and out), so that the
// reactor parses each message itself and can answer a corrupted one with INVALID_ARGUMENT
// (stream_reactor.cc); every other method as v1::AttnServe::CallbackService has it.
using AttnServeBase =
    v1::AttnServe::WithCallbackMethod_Infer<v1::AttnServe::WithRawCallbackMethod_Stream<
        v1::AttnServe::WithCallbackMethod_GetSession<v1::AttnServe::WithCallbackMethod_CloseSession<
            v1::AttnServe::WithCallbackMethod_ListSessions<
                v1::AttnServe::WithCallbackMethod_ListModels<
                    v1::AttnServe::WithCallbackMethod_GetModel<
                        v1::AttnServe::WithCallbackMethod_ExportSession<
                            v1::AttnServe::WithCallbackMethod_ImportSession<
                                v1::AttnServe::WithCallbackMethod_Tokenize<
                                    v1::AttnServe::WithCallbackMethod_Detokenize<
                                        v1::AttnServe::Service>>>>>>>>>>>;

class AttnServeService final : public AttnServeBase {
 public:
  // Borrows everything; all must outlive the service.
  AttnServeService(const model::ModelRepository& repository, const Policy& policy,
                   SessionTable& sessions, scheduler::BatchScheduler& scheduler,
                   ServiceOptions options);

  // From now on new calls get UNAVAILABLE; calls in flight finish.
  void StartDraining() { draining_.store(true); }
  // Calls and streams not yet finished.
  int64_t inflight() const { return inflight_.load(); }

  grpc::ServerUnaryReactor* Infer(grpc::CallbackServerContext* context,
                                  const v1::InferRequest* request,
                                  v1::InferResponse* response) override;
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Stream(
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
  // session_transfer.cc: the snapshot is taken by a state-only job at the head of the
  // session's queue (between its requests), so it never holds part of an append.
  grpc::ServerWriteReactor<v1::SessionSnapshotChunk>* ExportSession(
      grpc::CallbackServerContext* context, const v1::ExportSessionRequest* request) override;
  grpc::ServerReadReactor<v1::SessionSnapshotChunk>* ImportSession(
      grpc::CallbackServerContext* context, v1::SessionInfo* response) override;
  // text_rpcs.cc: a large text or many ids on the request work pool, a small one inline.
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext* context,
                                     const v1::TokenizeRequest* request,
                                     v1::TokenizeResponse* response) override;
  grpc::ServerUnaryReactor* Detokenize(grpc::CallbackServerContext* context,
                                       const v1::DetokenizeRequest* request,
                                       v1::DetokenizeResponse* response) override;

 private:
  class StreamReactor;
  class ExportReactor;
  class ImportReactor;

  absl::Status CheckServing() const;
  // A unary text RPC (Tokenize, Detokenize; text_rpcs.cc): serving and caller checks inline,
  // then `work` on the request work pool when `work_bytes` is large, else inline; its status
  // finishes the call, recorded as `rpc` of `model`.
  grpc::ServerUnaryReactor* RunTextRpc(grpc::CallbackServerContext* context, const char* rpc,
                                       const std::string& model, int64_t work_bytes,
                                       std::function<absl::Status()> work);
  // The caller of a call, or UNAUTHENTICATED (every RPC of the service asks first; health
  // checking is another service and stays open).
  absl::StatusOr<Caller> Authenticate(const grpc::ServerContextBase& context) const;
  // RESOURCE_EXHAUSTED when `message` is larger than max_message_bytes.
  absl::Status CheckResponseSize(const google::protobuf::Message& message) const;
  // A session lookup's NOT_FOUND with the instance that answered appended (other statuses
  // unchanged): with several instances, "no session" alone does not say where it was asked.
  absl::Status OnThisInstance(absl::Status status) const;
  // Metrics hooks (no-ops without metrics).
  void Record(const char* rpc, const std::string& variant, const absl::Status& status,
              double seconds) const;
  void CountDecision(const PolicyDecision& decision) const;

  // Validates an Infer and submits its job; the job finishes the call. An error means nothing
  // was submitted.
  absl::Status SubmitInfer(grpc::CallbackServerContext* context, grpc::ServerUnaryReactor* reactor,
                           const v1::InferRequest* request, v1::InferResponse* response,
                           std::chrono::steady_clock::time_point arrival, const Caller& caller);
  // Ends an Infer whose job is done (and whose session's checkpoint, if it queued one, is
  // written): counts, times and finishes the call with `status`.
  void AnswerInfer(grpc::ServerUnaryReactor* reactor, v1::InferResponse& response,
                   std::chrono::steady_clock::time_point arrival, const Session* session,
                   int64_t session_position, const std::optional<PolicyDecision>& decision,
                   const absl::Status& status, const scheduler::JobResult& result);
  v1::ModelInfo Describe(const model::Model& model) const;
  // The model `name` names (not "auto"): NOT_FOUND, or INVALID_ARGUMENT for "auto".
  absl::StatusOr<const model::Model*> NamedModel(const std::string& name) const;

  const model::ModelRepository& repository_;
  const Policy& policy_;
  SessionTable& sessions_;
  scheduler::BatchScheduler& scheduler_;
  const ServiceOptions options_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> inflight_{0};
};

}  // namespace attnserve::server
