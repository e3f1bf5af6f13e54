#include "client/load/oip_request.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <random>
#include <string>

#include "client/common/channel.h"
#include "client/common/grpc_status.h"
#include "client/load/request.h"

namespace attnserve::load {
namespace {

using Clock = std::chrono::steady_clock;

uint64_t NanosSince(Clock::time_point from) {
  const auto d = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - from);
  return d.count() < 0 ? 0 : static_cast<uint64_t>(d.count());
}

// A fresh sequence id for each stream-mode request (never 0: 0 is no sequence).
uint64_t NewSequenceId() {
  static std::atomic<uint64_t> next{std::random_device{}() | 1};
  return next.fetch_add(0x9e3779b97f4a7c15ULL) | 1;
}

inference::ModelInferRequest NewRequest(const RequestPlan& plan, const int64_t* ids, int64_t n) {
  inference::ModelInferRequest r;
  r.set_model_name(plan.model);
  auto* input = r.add_inputs();
  input->set_name("input_ids");
  input->set_datatype("INT64");
  input->add_shape(1);
  input->add_shape(n);
  r.add_raw_input_contents()->assign(reinterpret_cast<const char*>(ids), n * sizeof(int64_t));
  auto* logits = r.add_outputs();
  logits->set_name("logits");
  if (plan.output == attnserve::v1::OUTPUT_KIND_ALL_LOGITS) {
    (*logits->mutable_parameters())["positions"].set_string_param("all");
  }
  return r;
}

class UnaryCall {
 public:
  static void Start(inference::GRPCInferenceService::Stub* stub, const RequestPlan& plan,
                    Clock::time_point intended, std::function<void(RequestOutcome)> done) {
    auto* call = new UnaryCall(intended, std::move(done));
    const std::vector<int64_t>& tokens = *plan.tokens;
    call->request_ = NewRequest(plan, tokens.data(), static_cast<int64_t>(tokens.size()));
    call->tokens_ = static_cast<int64_t>(tokens.size());
    call->context_.set_deadline(client::DeadlineAfter(plan.timeout_s));
    stub->async()->ModelInfer(&call->context_, &call->request_, &call->response_,
                              [call](grpc::Status status) { call->Finish(status); });
  }

 private:
  UnaryCall(Clock::time_point intended, std::function<void(RequestOutcome)> done)
      : intended_(intended), done_(std::move(done)) {}

  void Finish(const grpc::Status& status) {
    RequestOutcome o;
    o.latency_ns = NanosSince(intended_);
    o.ok = status.ok();
    if (o.ok) {
      o.tokens_in = tokens_;
      o.served_by = response_.model_name();
    } else {
      o.error_code = client::StatusCodeName(status.error_code());
    }
    auto done = std::move(done_);
    delete this;
    done(std::move(o));
  }

  grpc::ClientContext context_;
  inference::ModelInferRequest request_;
  inference::ModelInferResponse response_;
  int64_t tokens_ = 0;
  Clock::time_point intended_;
  std::function<void(RequestOutcome)> done_;
};

// The generated ids in a streamed (not final) response: its output_ids' length (1 without
// one; N with the parameter stream_interval).
int64_t GeneratedIds(const inference::ModelInferResponse& r) {
  for (const auto& o : r.outputs()) {
    if (o.name() == "output_ids" && o.shape_size() == 2) return o.shape(1);
  }
  return 1;
}

// The reactor deletes itself in OnDone, which gRPC calls last, after every other callback.
class StreamCall : public grpc::ClientBidiReactor<inference::ModelInferRequest,
                                                  inference::ModelStreamInferResponse> {
 public:
  static void Start(inference::GRPCInferenceService::Stub* stub, const RequestPlan& plan,
                    Clock::time_point intended, std::function<void(RequestOutcome)> done) {
    auto* call = new StreamCall(plan, intended, std::move(done));
    call->context_.set_deadline(client::DeadlineAfter(plan.timeout_s));
    stub->async()->ModelStreamInfer(&call->context_, call);
    call->StartRead(&call->response_);
    call->StartWrite(&call->writes_[0]);
    call->StartCall();
  }

  void OnWriteDone(bool ok) override {
    if (!ok) return;  // the stream is broken; OnDone brings the status
    if (++next_write_ < writes_.size()) {
      StartWrite(&writes_[next_write_]);
    } else {
      StartWritesDone();
    }
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (first_result_ns_ == 0) first_result_ns_ = std::max<uint64_t>(1, NanosSince(intended_));
    if (!response_.error_message().empty()) {
      error_ = true;  // the server answered one request with an error and goes on
    } else {
      const inference::ModelInferResponse& r = response_.infer_response();
      served_by_ = r.model_name();
      auto it = r.parameters().find("triton_final_response");
      const bool final = it == r.parameters().end() || it->second.bool_param();
      if (final) {
        if (answered_ < chunk_sizes_.size()) tokens_in_ += chunk_sizes_[answered_];
        ++answered_;
      } else {
        tokens_out_ += GeneratedIds(r);
      }
    }
    StartRead(&response_);
  }

  void OnDone(const grpc::Status& status) override {
    RequestOutcome o;
    o.latency_ns = NanosSince(intended_);
    o.ok = status.ok() && !error_ && answered_ == chunk_sizes_.size();
    o.served_by = served_by_;
    if (o.ok) {
      o.tokens_in = tokens_in_;
      o.tokens_out = tokens_out_;
      o.has_first_result = first_result_ns_ > 0;
      o.first_result_ns = first_result_ns_;
    } else {
      o.error_code = !status.ok() ? client::StatusCodeName(status.error_code())
                                  : std::string("STREAM_ERROR_RESPONSE");
    }
    auto done = std::move(done_);
    delete this;
    done(std::move(o));
  }

 private:
  StreamCall(const RequestPlan& plan, Clock::time_point intended,
             std::function<void(RequestOutcome)> done)
      : intended_(intended), done_(std::move(done)) {
    const std::vector<int64_t>& tokens = *plan.tokens;
    const int64_t n = static_cast<int64_t>(tokens.size());
    const bool generate = plan.mode == Mode::kGenerate;
    const int64_t chunk = generate ? std::max<int64_t>(n, 1) : std::max<int64_t>(plan.chunk, 1);
    const uint64_t sequence = generate ? 0 : NewSequenceId();
    for (int64_t begin = 0; begin < n; begin += chunk) {
      const int64_t end = std::min(n, begin + chunk);
      inference::ModelInferRequest r = NewRequest(plan, tokens.data() + begin, end - begin);
      auto& params = *r.mutable_parameters();
      if (generate) {
        params["max_tokens"].set_int64_param(plan.max_new_tokens);
        if (plan.stream_interval > 1) {
          params["stream_interval"].set_int64_param(plan.stream_interval);
        }
      } else {
        params["sequence_id"].set_uint64_param(sequence);
        params["sequence_start"].set_bool_param(begin == 0);
        params["sequence_end"].set_bool_param(end == n);
      }
      chunk_sizes_.push_back(end - begin);
      writes_.push_back(std::move(r));
    }
  }

  grpc::ClientContext context_;
  std::vector<inference::ModelInferRequest> writes_;
  std::vector<int64_t> chunk_sizes_;  // tokens of request i
  size_t next_write_ = 0;
  inference::ModelStreamInferResponse response_;
  Clock::time_point intended_;
  std::function<void(RequestOutcome)> done_;
  // Touched by OnReadDone only, then read in OnDone (which gRPC orders after it).
  std::string served_by_;
  size_t answered_ = 0;  // requests whose final response came
  bool error_ = false;
  int64_t tokens_in_ = 0;
  int64_t tokens_out_ = 0;
  uint64_t first_result_ns_ = 0;
};

}  // namespace

void StartOipRequest(inference::GRPCInferenceService::Stub* stub, const RequestPlan& plan,
                     Clock::time_point intended, std::function<void(RequestOutcome)> done) {
  if (plan.mode == Mode::kUnary) {
    UnaryCall::Start(stub, plan, intended, std::move(done));
  } else {
    StreamCall::Start(stub, plan, intended, std::move(done));
  }
}

}  // namespace attnserve::load
