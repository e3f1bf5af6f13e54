// attnserve-load's requests through the Open Inference Protocol door (--protocol=oip): the
// same phases as request.h's, as a Triton client would send them.
//
//   unary:    ModelInfer(model, input_ids INT64 [1, L] in raw_input_contents, logits).
//   stream:   ModelStreamInfer: a sequence (a fresh uint64 sequence_id) of `chunk`-token
//             requests, sequence_start on the first and sequence_end on the last, the writes
//             pipelined (the server answers them in order).
//   generate: ModelStreamInfer: one request with all the tokens and max_tokens (greedy); one
//             response per generated token, then the final one.
#ifndef ATTNSERVE_CLIENT_LOAD_OIP_REQUEST_H_
#define ATTNSERVE_CLIENT_LOAD_OIP_REQUEST_H_

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "client/load/phase_stats.h"
#include "inference/grpc_predict_v2.grpc.pb.h"

namespace attnserve::load {

struct RequestPlan;

// The Open Inference Protocol stubs a run uses, in turn (one per channel). Thread-safe.
class OipStubs {
 public:
  explicit OipStubs(std::vector<std::unique_ptr<inference::GRPCInferenceService::Stub>> stubs)
      : stubs_(std::move(stubs)) {}
  inference::GRPCInferenceService::Stub* Next() {
    return stubs_[next_.fetch_add(1) % stubs_.size()].get();
  }

 private:
  std::vector<std::unique_ptr<inference::GRPCInferenceService::Stub>> stubs_;
  std::atomic<uint64_t> next_{0};
};

// As StartRequest (request.h), through `stub`.
void StartOipRequest(inference::GRPCInferenceService::Stub* stub, const RequestPlan& plan,
                     std::chrono::steady_clock::time_point intended,
                     std::function<void(RequestOutcome)> done);

}  // namespace attnserve::load

#endif  // ATTNSERVE_CLIENT_LOAD_OIP_REQUEST_H_
