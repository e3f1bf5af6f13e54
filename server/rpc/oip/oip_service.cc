#include "server/rpc/oip/oip_service.h"

#include <ATen/ATen.h>

#include <cstring>
#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/client_text.h"
#include "server/grpc_status.h"
#include "server/rpc/call_gate.h"
#include "server/rpc/call_job.h"
#include "server/rpc/oip/infer_response.h"
#include "server/rpc/oip/sequences.h"

namespace attnserve::server::oip {
namespace {

constexpr char kVersion[] = "1";  // every attnserve model is served as version 1

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context,
                                    const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

}  // namespace

OipService::OipService(const model::ModelRepository& repository, const Policy& policy,
                       SessionTable& sessions, scheduler::BatchScheduler& scheduler,
                       OipOptions options)
    : repository_(repository),
      policy_(policy),
      sessions_(sessions),
      scheduler_(scheduler),
      options_(std::move(options)) {}

const std::vector<std::string>& OipService::Extensions() {
  static const auto* extensions = new std::vector<std::string>{
      "model_configuration", "statistics", "sequence", "parameters", "binary_tensor_data"};
  return *extensions;
}

absl::Status OipService::Gate(grpc::CallbackServerContext* context, Caller* caller) const {
  if (draining_.load()) {
    return absl::UnavailableError("the server is draining; retry on another replica");
  }
  absl::StatusOr<Caller> c =
      AuthenticateCall(*context, options_.authenticator, options_.max_metadata_bytes);
  if (!c.ok()) return c.status();
  *caller = *std::move(c);
  return absl::OkStatus();
}

void OipService::Record(const char* rpc, const std::string& variant, const absl::Status& status,
                        std::chrono::steady_clock::time_point arrival) const {
  if (options_.metrics == nullptr) return;
  // Only served variants become label values: a client's made-up model name must not.
  const std::string label = repository_.Find(variant) != nullptr ? variant : "none";
  options_.metrics->RecordRequest(
      "oip", rpc, label, GrpcCodeName(ToGrpcStatus(status).error_code()), SecondsSince(arrival));
}

absl::StatusOr<const model::Model*> OipService::FindModel(const std::string& name,
                                                          const std::string& version) const {
  const model::Model* m = repository_.Find(name);
  if (m == nullptr) {
    return absl::NotFoundError(absl::StrCat("unknown model ", ClientText(name),
                                            "; ModelMetadata or the repository "
                                            "index names the served ones"));
  }
  if (!version.empty() && version != kVersion) {
    return absl::NotFoundError(absl::StrCat("model '", name, "' has no version ",
                                            ClientText(version), "; it serves version 1"));
  }
  return m;
}

grpc::ServerUnaryReactor* OipService::ServerLive(grpc::CallbackServerContext* context,
                                                 const inference::ServerLiveRequest*,
                                                 inference::ServerLiveResponse* response) {
  // No credentials needed, as for gRPC health checking: probes carry none.
  const auto arrival = std::chrono::steady_clock::now();
  response->set_live(true);  // a draining server is still live
  Record("ServerLive", "", absl::OkStatus(), arrival);
  return FinishNow(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* OipService::ServerReady(grpc::CallbackServerContext* context,
                                                  const inference::ServerReadyRequest*,
                                                  inference::ServerReadyResponse* response) {
  // No credentials needed, as for gRPC health checking: probes carry none.
  const auto arrival = std::chrono::steady_clock::now();
  response->set_ready(!draining_.load());
  Record("ServerReady", "", absl::OkStatus(), arrival);
  return FinishNow(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* OipService::ModelReady(grpc::CallbackServerContext* context,
                                                 const inference::ModelReadyRequest* request,
                                                 inference::ModelReadyResponse* response) {
  const auto arrival = std::chrono::steady_clock::now();
  Caller caller;
  absl::Status s = Gate(context, &caller);
  if (s.ok() || s.code() == absl::StatusCode::kUnavailable) {
    const bool serving = s.ok();
    absl::StatusOr<const model::Model*> m = FindModel(request->name(), request->version());
    s = m.status();
    if (s.ok()) response->set_ready(serving);
  }
  Record("ModelReady", request->name(), s, arrival);
  return FinishNow(context, s);
}

grpc::ServerUnaryReactor* OipService::ServerMetadata(grpc::CallbackServerContext* context,
                                                     const inference::ServerMetadataRequest*,
                                                     inference::ServerMetadataResponse* response) {
  const auto arrival = std::chrono::steady_clock::now();
  Caller caller;
  absl::Status s = Gate(context, &caller);
  if (s.ok()) {
    response->set_name("attnserve");
    response->set_version(options_.server_version);
    for (const std::string& e : Extensions()) response->add_extensions(e);
  }
  Record("ServerMetadata", "", s, arrival);
  return FinishNow(context, s);
}

grpc::ServerUnaryReactor* OipService::ModelMetadata(grpc::CallbackServerContext* context,
                                                    const inference::ModelMetadataRequest* request,
                                                    inference::ModelMetadataResponse* response) {
  const auto arrival = std::chrono::steady_clock::now();
  Caller caller;
  absl::Status s = Gate(context, &caller);
  absl::StatusOr<const model::Model*> m =
      s.ok() ? FindModel(request->name(), request->version()) : s;
  if (m.ok()) {
    response->set_name((*m)->name());
    response->add_versions(kVersion);
    response->set_platform("attnserve");
    auto* in = response->add_inputs();
    in->set_name(kInputIds);
    in->set_datatype("INT64");
    in->add_shape(1);
    in->add_shape(-1);
    auto* logits = response->add_outputs();
    logits->set_name(kLogits);
    logits->set_datatype("FP32");
    logits->add_shape(1);
    logits->add_shape((*m)->vocab_size());
    auto* ids = response->add_outputs();
    ids->set_name(kOutputIds);
    ids->set_datatype("INT64");
    ids->add_shape(1);
    ids->add_shape(-1);
    if ((*m)->text() != nullptr) {  // a tokenizer: text in and out
      auto* text_in = response->add_inputs();
      text_in->set_name(kTextInput);
      text_in->set_datatype("BYTES");
      text_in->add_shape(1);
      auto* text_out = response->add_outputs();
      text_out->set_name(kTextOutput);
      text_out->set_datatype("BYTES");
      text_out->add_shape(1);
    }
  }
  Record("ModelMetadata", request->name(), m.status(), arrival);
  return FinishNow(context, m.status());
}

grpc::ServerUnaryReactor* OipService::ModelConfig(grpc::CallbackServerContext* context,
                                                  const inference::ModelConfigRequest* request,
                                                  inference::ModelConfigResponse* response) {
  const auto arrival = std::chrono::steady_clock::now();
  Caller caller;
  absl::Status s = Gate(context, &caller);
  absl::StatusOr<const model::Model*> m =
      s.ok() ? FindModel(request->name(), request->version()) : s;
  if (m.ok()) {
    const model::Model& model = **m;
    inference::ModelConfig* c = response->mutable_config();
    c->set_name(model.name());
    c->set_platform("attnserve");
    c->set_backend("attnserve");
    c->set_max_batch_size(0);  // inputs are [1, L] as declared; batching is across sequences
    auto* in = c->add_input();
    in->set_name(kInputIds);
    in->set_data_type(inference::TYPE_INT64);
    in->add_dims(1);
    in->add_dims(-1);
    auto* logits = c->add_output();
    logits->set_name(kLogits);
    logits->set_data_type(inference::TYPE_FP32);
    logits->add_dims(1);
    logits->add_dims(model.vocab_size());
    auto* ids = c->add_output();
    ids->set_name(kOutputIds);
    ids->set_data_type(inference::TYPE_INT64);
    ids->add_dims(1);
    ids->add_dims(-1);
    if (model.text() != nullptr) {  // a tokenizer: text in and out
      auto* text_in = c->add_input();
      text_in->set_name(kTextInput);
      text_in->set_data_type(inference::TYPE_STRING);
      text_in->add_dims(1);
      text_in->set_optional(true);
      in->set_optional(true);  // one of the two
      auto* text_out = c->add_output();
      text_out->set_name(kTextOutput);
      text_out->set_data_type(inference::TYPE_STRING);
      text_out->add_dims(1);
    }
    if (model.can_stream()) {
      // A sequence is a session: its state stays between requests until sequence_end or the
      // session's TTL.
      inference::ModelSequenceBatching* seq = c->mutable_sequence_batching();
      seq->mutable_direct();
      seq->set_max_sequence_idle_microseconds(
          static_cast<uint64_t>(absl::ToInt64Microseconds(sessions_.limits().default_ttl)));
    }
    // ModelStreamInfer answers a generation with one response per token.
    c->mutable_model_transaction_policy()->set_decoupled(model.can_stream());
    auto& params = *c->mutable_parameters();
    params["vocab_size"].set_string_value(std::to_string(model.vocab_size()));
    params["can_stream"].set_string_value(model.can_stream() ? "true" : "false");
    params["max_sequence_length"].set_string_value(std::to_string(model.max_sequence_length()));
  }
  Record("ModelConfig", request->name(), m.status(), arrival);
  return FinishNow(context, m.status());
}

grpc::ServerUnaryReactor* OipService::ModelStatistics(
    grpc::CallbackServerContext* context, const inference::ModelStatisticsRequest* request,
    inference::ModelStatisticsResponse* response) {
  const auto arrival = std::chrono::steady_clock::now();
  Caller caller;
  absl::Status s = Gate(context, &caller);
  if (s.ok() && request->name().empty()) {
    for (const model::Model* m : repository_.models()) {
      *response->add_model_stats() = statistics_.Get(m->name());
    }
  } else if (s.ok()) {
    absl::StatusOr<const model::Model*> m = FindModel(request->name(), request->version());
    s = m.status();
    if (s.ok()) *response->add_model_stats() = statistics_.Get((*m)->name());
  }
  Record("ModelStatistics", request->name(), s, arrival);
  return FinishNow(context, s);
}

grpc::ServerUnaryReactor* OipService::ModelInfer(grpc::CallbackServerContext* context,
                                                 const inference::ModelInferRequest* request,
                                                 inference::ModelInferResponse* response) {
  Call call;
  call.arrival = std::chrono::steady_clock::now();
  if (absl::Status s = Gate(context, &call.caller); !s.ok()) {
    Record("ModelInfer", request->model_name(), s, call.arrival);
    return FinishNow(context, s);
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  call.context = context;
  call.request = request;
  const auto arrival = call.arrival;
  call.done = [this, reactor, response, arrival](const absl::Status& status,
                                                 inference::ModelInferResponse result) {
    Record("ModelInfer", result.model_name(), status, arrival);
    if (status.ok()) *response = std::move(result);
    inflight_.fetch_sub(1);
    reactor->Finish(ToGrpcStatus(status));
  };
  inflight_.fetch_add(1);
  Dispatch(
      std::move(call), [this, context, reactor, request, arrival](const absl::Status& refused) {
        inflight_.fetch_sub(1);
        Record("ModelInfer", request->model_name(), refused, arrival);
        reactor->Finish(ToGrpcStatus(refused, context));  // a sequence leased elsewhere names it
      });
  return reactor;
}

}  // namespace attnserve::server::oip
