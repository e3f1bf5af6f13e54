// One attnserve-load request, issued with gRPC's callback API so that an open-loop schedule
// never waits for a response before sending the next request.
//
//   unary:    Infer(model, tokens, output).
//   stream:   Stream: open (expected_length = the length), appends of `chunk` tokens
//             (output NONE but the last, which asks for `output`), close; the writes are
//             pipelined, the server answers them in order.
//   generate: Stream: open, one append with all the tokens and a greedy GenerateSpec of
//             `max_new_tokens`, close.
#ifndef ATTNSERVE_CLIENT_LOAD_REQUEST_H_
#define ATTNSERVE_CLIENT_LOAD_REQUEST_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "attnserve/v1/inference.grpc.pb.h"
#include "client/load/oip_request.h"
#include "client/load/phase_stats.h"

namespace attnserve::load {

enum class Mode { kUnary, kStream, kGenerate };
// Which door: attnserve.v1.AttnServe (this file's calls) or the Open Inference Protocol
// (oip_request.h: ModelInfer, ModelStreamInfer).
enum class Protocol { kAttnServe, kOip };

struct RequestPlan {
  Mode mode = Mode::kUnary;
  std::string model;  // a variant name or "auto"
  std::shared_ptr<const std::vector<int64_t>> tokens;
  // Non-null: the prompt as text instead of `tokens` (--text_file), sent whole (InferRequest.text,
  // or one append's text: a text is not cut into chunks).
  std::shared_ptr<const std::string> text;
  int64_t chunk = 64;
  attnserve::v1::OutputKind output = attnserve::v1::OUTPUT_KIND_LAST_LOGITS;
  int max_new_tokens = 16;
  int stream_interval = 0;  // generated tokens per streamed message (0 or 1: one each)
  double timeout_s = 60;    // deadline of the whole call, from its actual start
  Protocol protocol = Protocol::kAttnServe;
  std::shared_ptr<OipStubs> oip;  // with Protocol::kOip: the stubs it goes through
};

// Starts one request now. `done` runs exactly once, on a gRPC thread, with the outcome; the
// latencies in it are measured from `intended` (the send time the schedule wanted, which is
// now or earlier), with std::chrono::steady_clock. `stub` must outlive the request. With
// Protocol::kOip the request goes through plan.oip's next stub instead of `stub`.
void StartRequest(attnserve::v1::AttnServe::Stub* stub, const RequestPlan& plan,
                  std::chrono::steady_clock::time_point intended,
                  std::function<void(RequestOutcome)> done);

}  // namespace attnserve::load

#endif  // ATTNSERVE_CLIENT_LOAD_REQUEST_H_
