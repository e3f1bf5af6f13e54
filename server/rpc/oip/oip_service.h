// The Open Inference Protocol door: inference.GRPCInferenceService (KServe's predict protocol
// v2, with Triton's ModelStreamInfer, ModelConfig and ModelStatistics), served on the gRPC port
// next to attnserve.v1.AttnServe. It is an adapter over the same protocol-neutral path as that
// door: the call gate (server/rpc/call_gate.h: metadata limit, authentication), the policy,
// the session table and the scheduler's jobs (server/scheduler/job.h), with the same limits,
// deadlines and cancellation; it knows nothing of the other door.
//
// Tensors: input input_ids (INT64 or INT32, [1, L]) or text_input (BYTES, tokenized with the
// model's tokenizer, server/rpc/text_requests.h); outputs logits (FP32, [1, vocab] or with
// positions "all" [1, L, vocab]), output_ids (INT64, [1, n] generated) and text_output (BYTES,
// the generated text; on a stream each token's piece); parameters max_tokens, temperature,
// top_k, seed, stop, stop_token_ids, ignore_eos (infer_request.h), generation ending at the
// model's end-of-text by default, as through the AttnServe door. The
// response answers in raw_output_contents when the request sent raw_input_contents, else in
// typed contents. A sequence (sequence_id with sequence_start, later requests, sequence_end) is
// one session of the caller (sequences.h); a continuing request of an unknown sequence is
// INVALID_ARGUMENT, as Triton answers it.
//
// Threads: handlers parse, check and submit on gRPC's threads and return (a request with a
// large text_input or raw contents on the request work pool's, request_work_pool.h); the job's
// hooks run on the scheduler's thread and finish the call (as server/rpc/attnserve/ does).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "inference/grpc_predict_v2.grpc.pb.h"
#include "server/metrics.h"
#include "server/model/model_repository.h"
#include "server/policy.h"
#include "server/rpc/oip/infer_request.h"
#include "server/rpc/oip/model_statistics.h"
#include "server/rpc/request_work_pool.h"
#include "server/rpc/text_requests.h"
#include "server/scheduler/batch_scheduler.h"
#include "server/security/authenticator.h"
#include "server/sessions/session_table.h"

namespace attnserve::server::oip {

struct OipOptions {
  InferLimits limits;
  TextLimits text_limits;  // text_input, stop strings (server/rpc/text_requests.h)
  // Largest response (--max_message_bytes): RESOURCE_EXHAUSTED beyond, from the service. 0: none.
  int64_t max_message_bytes = 0;
  // Per-call metadata limit (--max_metadata_bytes; call_gate.h). 0: none.
  int64_t max_metadata_bytes = 0;
  bool prefix_cache_global = false;        // --prefix_cache_scope=global
  std::string server_version;              // ServerMetadata.version
  ServerMetrics* metrics = nullptr;        // borrowed; null: no metrics
  Authenticator* authenticator = nullptr;  // borrowed; null: no authentication
  // Where a large text_input is tokenized (server/rpc/request_work_pool.h); borrowed; null:
  // on the gRPC thread.
  RequestWorkPool* work_pool = nullptr;
};

class OipService final : public inference::GRPCInferenceService::CallbackService {
 public:
  // Borrows everything; all must outlive the service.
  OipService(const model::ModelRepository& repository, const Policy& policy, SessionTable& sessions,
             scheduler::BatchScheduler& scheduler, OipOptions options);

  // From now on new calls get UNAVAILABLE and ServerReady answers false; calls in flight finish.
  void StartDraining() { draining_.store(true); }
  int64_t inflight() const { return inflight_.load(); }

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* context,
                                       const inference::ServerLiveRequest* request,
                                       inference::ServerLiveResponse* response) override;
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* context,
                                        const inference::ServerReadyRequest* request,
                                        inference::ServerReadyResponse* response) override;
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* context,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) override;
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* context,
                                           const inference::ServerMetadataRequest* request,
                                           inference::ServerMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* context,
                                        const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) override;
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* context,
                                            const inference::ModelStatisticsRequest* request,
                                            inference::ModelStatisticsResponse* response) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override;
  // stream_infer_reactor.cc: requests one at a time, in order; with max_tokens one response
  // per generated token (output_ids [1, 1]) and a last one with the other outputs; every
  // response carries the parameter triton_final_response. A request's error is a response
  // with error_message, and the stream goes on.
  grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext* context) override;

  // The extensions ServerMetadata lists.
  static const std::vector<std::string>& Extensions();

 private:
  class StreamReactor;

  // One inference, from either RPC. `on_token` (may be empty) gets the generated tokens on
  // the scheduler's thread (or a kernel thread after a decode step), one call a token, or with
  // the parameter stream_interval N > 1 a call for every N and one for what is left before
  // `done`; `done` gets the end, exactly once, on the scheduler's thread, unless
  // Submit returns an error (then nothing was submitted and `done` is never called).
  struct Call {
    grpc::CallbackServerContext* context = nullptr;
    const inference::ModelInferRequest* request = nullptr;  // borrowed until `done`
    Caller caller;
    std::chrono::steady_clock::time_point arrival;
    std::function<bool()> cancelled;  // besides the context's own cancellation; may be empty
    // The generated tokens went out in streamed responses (on_token): the last response
    // leaves out output_ids.
    bool tokens_streamed = false;
    // `first_index`: of tokens[0] among the generated tokens; `text`: the text they make
    // final (text_generation.h's pieces), null when text_output is not asked for.
    std::function<void(const std::vector<int64_t>& tokens, int first_index,
                       const std::string* text)>
        on_token;
    std::function<void(const absl::Status&, inference::ModelInferResponse)> done;
  };
  absl::Status Submit(Call call);
  // Submit where the request work pool says: inline for a small request, else on a pool
  // thread in the caller's turn (a large text_input is tokenized there, not on gRPC's thread).
  // `refused` gets Submit's error, or the pool's, exactly once when nothing was submitted.
  void Dispatch(Call call, std::function<void(const absl::Status&)> refused);

  // NOT_FOUND for an unknown model or a version other than "" and "1"; "auto" goes through
  // the policy in Submit, not here.
  absl::StatusOr<const model::Model*> FindModel(const std::string& name,
                                                const std::string& version) const;
  absl::Status Gate(grpc::CallbackServerContext* context, Caller* caller) const;
  void Record(const char* rpc, const std::string& variant, const absl::Status& status,
              std::chrono::steady_clock::time_point arrival) const;

  const model::ModelRepository& repository_;
  const Policy& policy_;
  SessionTable& sessions_;
  scheduler::BatchScheduler& scheduler_;
  const OipOptions options_;
  ModelStatisticsTable statistics_;
  std::atomic<bool> draining_{false};
  std::atomic<int64_t> inflight_{0};
};

}  // namespace attnserve::server::oip
