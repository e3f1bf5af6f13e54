// GRPCInferenceService.ModelStreamInfer (Triton's decoupled streaming): requests are read and
// run one at a time, in order (the next read starts when the previous request is done, so a
// sequence's requests apply in order and a slow model holds the client back); a generation
// answers one response per token (output_ids [1, 1], triton_final_response false) and then a
// last one with the request's other outputs (triton_final_response true); a request without
// max_tokens answers one response. A request's error is a response with error_message (and
// the request's id), and the stream goes on, as Triton's does. Responses are queued and
// written one at a time. A cancelled stream ends its generation within one scheduler step.
#include <deque>
#include <memory>

#include "absl/synchronization/mutex.h"
#include "server/grpc_status.h"
#include "server/rpc/oip/infer_request.h"
#include "server/rpc/oip/infer_response.h"
#include "server/rpc/oip/oip_service.h"

namespace attnserve::server::oip {

class OipService::StreamReactor final
    : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                     inference::ModelStreamInferResponse> {
 public:
  StreamReactor(OipService* service, grpc::CallbackServerContext* context, Caller caller)
      : service_(service), context_(context), caller_(std::move(caller)) {
    service_->inflight_.fetch_add(1);
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client is done writing (or gone)
      absl::MutexLock lock(&mu_);
      reads_done_ = true;
      MaybeFinishLocked();
      return;
    }
    arrival_ = std::chrono::steady_clock::now();
    Call call;
    call.context = context_;
    call.request = &request_;
    call.caller = caller_;
    call.arrival = arrival_;
    call.cancelled = [this] { return cancelled_.load(); };
    const bool generates = [&] {
      auto it = request_.parameters().find("max_tokens");
      return it != request_.parameters().end() &&
             (it->second.int64_param() > 0 || it->second.uint64_param() > 0);
    }();
    call.tokens_streamed = generates;
    const bool raw = request_.raw_input_contents_size() > 0;
    const std::string model = request_.model_name(), id = request_.id();
    call.on_token = [this, raw, model, id](const std::vector<int64_t>& tokens, int,
                                           const std::string* piece) {
      inference::ModelStreamInferResponse r;
      inference::ModelInferResponse* infer = r.mutable_infer_response();
      infer->set_model_name(model);
      infer->set_model_version("1");
      infer->set_id(id);
      AddOutputIds(tokens, raw, infer);
      if (piece != nullptr) AddTextOutput({*piece}, raw, infer);
      SetBoolParameter("triton_final_response", false, infer);
      Queue(std::move(r));
    };
    call.done = [this](const absl::Status& status, inference::ModelInferResponse response) {
      Answer(status, std::move(response));
    };
    {
      absl::MutexLock lock(&mu_);
      busy_ = true;
    }
    service_->Dispatch(std::move(call), [this](const absl::Status& refused) {
      inference::ModelInferResponse response;
      response.set_model_name(request_.model_name());
      response.set_id(request_.id());
      Answer(refused, std::move(response));
    });
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {  // the client is gone: nothing more reaches it
      write_failed_ = true;
      cancelled_.store(true);
      queue_.clear();
    }
    WriteNextLocked();
    MaybeFinishLocked();
  }

  void OnCancel() override { cancelled_.store(true); }

  void OnDone() override {
    service_->inflight_.fetch_sub(1);
    delete this;
  }

 private:
  // The end of one request: its last response (or its error), then the next read.
  void Answer(const absl::Status& status, inference::ModelInferResponse response) {
    service_->Record("ModelStreamInfer", status.ok() ? response.model_name() : "", status,
                     arrival_);
    inference::ModelStreamInferResponse r;
    if (!status.ok()) {
      r.set_error_message(std::string(status.message()));
      response.clear_outputs();
      response.clear_raw_output_contents();
    }
    SetBoolParameter("triton_final_response", true, &response);
    *r.mutable_infer_response() = std::move(response);
    Queue(std::move(r));
    absl::MutexLock lock(&mu_);
    busy_ = false;
    if (cancelled_.load() || write_failed_) {
      reads_done_ = true;  // no more reads on a stream that is going away
      MaybeFinishLocked();
      return;
    }
    StartRead(&request_);
  }

  void Queue(inference::ModelStreamInferResponse r) {
    absl::MutexLock lock(&mu_);
    if (write_failed_) return;
    queue_.push_back(std::move(r));
    WriteNextLocked();
  }

  void WriteNextLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || queue_.empty()) return;
    writing_ = true;
    current_ = std::move(queue_.front());
    queue_.pop_front();
    StartWrite(&current_);
  }

  void MaybeFinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || !reads_done_ || busy_ || writing_ || !queue_.empty()) return;
    finished_ = true;
    Finish(context_->IsCancelled() ? grpc::Status::CANCELLED : grpc::Status::OK);
  }

  OipService* const service_;
  grpc::CallbackServerContext* const context_;
  const Caller caller_;
  inference::ModelInferRequest request_;  // the one being served (read into, then borrowed)
  std::chrono::steady_clock::time_point arrival_;
  std::atomic<bool> cancelled_{false};

  absl::Mutex mu_;
  std::deque<inference::ModelStreamInferResponse> queue_ ABSL_GUARDED_BY(mu_);
  inference::ModelStreamInferResponse current_;  // the write in flight
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool busy_ ABSL_GUARDED_BY(mu_) = false;  // a request is being served
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  bool write_failed_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
OipService::ModelStreamInfer(grpc::CallbackServerContext* context) {
  Caller caller;
  absl::Status gate = Gate(context, &caller);
  if (!gate.ok()) {
    Record("ModelStreamInfer", "", gate, std::chrono::steady_clock::now());
    class Refused final : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                                         inference::ModelStreamInferResponse> {
     public:
      explicit Refused(const absl::Status& status) { Finish(ToGrpcStatus(status)); }
      void OnDone() override { delete this; }
    };
    return new Refused(gate);
  }
  return new StreamReactor(this, context, std::move(caller));
}

}  // namespace attnserve::server::oip
