#include "client/load/request.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>

#include "client/common/channel.h"
#include "client/common/grpc_status.h"

namespace attnserve::load {
namespace {

namespace v1 = attnserve::v1;
using Clock = std::chrono::steady_clock;

uint64_t NanosSince(Clock::time_point from) {
  const auto d = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - from);
  return d.count() < 0 ? 0 : static_cast<uint64_t>(d.count());
}

class UnaryCall {
 public:
  static void Start(v1::AttnServe::Stub* stub, const RequestPlan& plan, Clock::time_point intended,
                    std::function<void(RequestOutcome)> done) {
    auto* call = new UnaryCall(intended, std::move(done));
    call->request_.set_model(plan.model);
    if (plan.text != nullptr) {
      call->request_.set_text(*plan.text);
    } else {
      call->request_.mutable_tokens()->Add(plan.tokens->begin(), plan.tokens->end());
    }
    call->request_.mutable_output()->set_kind(plan.output);
    call->context_.set_deadline(client::DeadlineAfter(plan.timeout_s));
    stub->async()->Infer(&call->context_, &call->request_, &call->response_,
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
      o.tokens_in = request_.tokens_size();
      o.served_by = response_.model();
    } else {
      o.error_code = client::StatusCodeName(status.error_code());
    }
    auto done = std::move(done_);
    delete this;
    done(std::move(o));
  }

  grpc::ClientContext context_;
  v1::InferRequest request_;
  v1::InferResponse response_;
  Clock::time_point intended_;
  std::function<void(RequestOutcome)> done_;
};

// The reactor deletes itself in OnDone, which gRPC calls last, after every other callback.
class StreamCall : public grpc::ClientBidiReactor<v1::StreamRequest, v1::StreamResponse> {
 public:
  static void Start(v1::AttnServe::Stub* stub, const RequestPlan& plan, Clock::time_point intended,
                    std::function<void(RequestOutcome)> done) {
    auto* call = new StreamCall(plan, intended, std::move(done));
    call->context_.set_deadline(client::DeadlineAfter(plan.timeout_s));
    stub->async()->Stream(&call->context_, call);
    call->StartRead(&call->response_);
    call->StartWrite(&call->writes_[0]);
    call->StartCall();
  }

  void OnWriteDone(bool ok) override {
    // !ok: the stream is broken; OnDone brings the status.
    if (!ok) return;
    if (++next_write_ < writes_.size()) {
      StartWrite(&writes_[next_write_]);
    } else {
      StartWritesDone();
    }
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    switch (response_.kind_case()) {
      case v1::StreamResponse::kOpened:
        served_by_ = response_.opened().model();
        state_bytes_ = response_.opened().state_bytes();
        break;
      case v1::StreamResponse::kResult: {
        MarkFirstResult();
        const v1::AppendResult& r = response_.result();
        state_bytes_ = r.state_bytes();
        const int64_t seq = r.sequence_number();
        if (seq >= 1 && seq <= static_cast<int64_t>(chunk_sizes_.size())) {
          tokens_in_ += chunk_sizes_[seq - 1];
        }
        break;
      }
      case v1::StreamResponse::kGenerated:
        MarkFirstResult();
        ++tokens_out_;
        break;
      case v1::StreamResponse::kGeneratedTokens:
        MarkFirstResult();
        tokens_out_ += response_.generated_tokens().tokens_size();
        break;
      default:
        break;
    }
    StartRead(&response_);
  }

  void OnDone(const grpc::Status& status) override {
    RequestOutcome o;
    o.latency_ns = NanosSince(intended_);
    o.ok = status.ok();
    o.served_by = served_by_;
    o.state_bytes = state_bytes_;
    if (o.ok) {
      o.tokens_in = tokens_in_;
      o.tokens_out = tokens_out_;
      o.has_first_result = first_result_ns_ > 0;
      o.first_result_ns = first_result_ns_;
    } else {
      o.error_code = client::StatusCodeName(status.error_code());
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
    // A text prompt is one append (its bytes bound its tokens, for the policy).
    const int64_t n = plan.text != nullptr ? static_cast<int64_t>(plan.text->size())
                                           : static_cast<int64_t>(tokens.size());
    v1::StreamRequest open;
    open.mutable_open()->set_model(plan.model);
    open.mutable_open()->set_expected_length(
        n + (plan.mode == Mode::kGenerate ? plan.max_new_tokens : 0));
    writes_.push_back(std::move(open));
    // Generation sends the prompt as one append; streaming cuts it into chunks.
    const int64_t chunk = plan.mode == Mode::kGenerate || plan.text != nullptr
                              ? std::max<int64_t>(n, 1)
                              : std::max<int64_t>(plan.chunk, 1);
    int64_t seq = 0;
    for (int64_t begin = 0; begin < n || (n == 0 && seq == 0); begin += chunk) {
      const int64_t end = std::min(n, begin + chunk);
      v1::StreamRequest req;
      v1::StreamAppend* append = req.mutable_append();
      append->set_sequence_number(++seq);
      if (plan.text != nullptr) {
        append->set_text(*plan.text);
      } else {
        append->mutable_tokens()->Add(tokens.begin() + begin, tokens.begin() + end);
      }
      append->mutable_output()->set_kind(end == n ? plan.output : v1::OUTPUT_KIND_NONE);
      if (plan.mode == Mode::kGenerate) {
        append->mutable_generate()->set_max_new_tokens(plan.max_new_tokens);
        append->mutable_generate()->set_stream_interval(plan.stream_interval);
      }
      chunk_sizes_.push_back(end - begin);
      writes_.push_back(std::move(req));
    }
    v1::StreamRequest close;
    close.mutable_close();
    writes_.push_back(std::move(close));
  }

  void MarkFirstResult() {
    if (first_result_ns_ == 0) first_result_ns_ = std::max<uint64_t>(1, NanosSince(intended_));
  }

  grpc::ClientContext context_;
  std::vector<v1::StreamRequest> writes_;
  std::vector<int64_t> chunk_sizes_;  // tokens of append i+1
  size_t next_write_ = 0;
  v1::StreamResponse response_;
  Clock::time_point intended_;
  std::function<void(RequestOutcome)> done_;
  // Touched by OnReadDone only, then read in OnDone (which gRPC orders after it).
  std::string served_by_;
  int64_t state_bytes_ = -1;
  int64_t tokens_in_ = 0;
  int64_t tokens_out_ = 0;
  uint64_t first_result_ns_ = 0;
};

}  // namespace

void StartRequest(v1::AttnServe::Stub* stub, const RequestPlan& plan, Clock::time_point intended,
                  std::function<void(RequestOutcome)> done) {
  if (plan.protocol == Protocol::kOip) {
    StartOipRequest(plan.oip->Next(), plan, intended, std::move(done));
  } else if (plan.mode == Mode::kUnary) {
    UnaryCall::Start(stub, plan, intended, std::move(done));
  } else {
    StreamCall::Start(stub, plan, intended, std::move(done));
  }
}

}  // namespace attnserve::load
