// AttnServe.Tokenize and Detokenize: a model's tokenizer over gRPC, answered inline on the
// gRPC thread (a text is bounded by --max_text_bytes; ids by --max_tokens_per_request).
#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "server/grpc_status.h"
#include "server/rpc/attnserve/service.h"
#include "server/rpc/text_requests.h"

namespace attnserve::server {
namespace {

grpc::ServerUnaryReactor* Answer(grpc::CallbackServerContext* context, const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status));
  return reactor;
}

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

grpc::ServerUnaryReactor* AttnServeService::Tokenize(grpc::CallbackServerContext* context,
                                                     const v1::TokenizeRequest* request,
                                                     v1::TokenizeResponse* response) {
  const auto arrival = std::chrono::steady_clock::now();
  const absl::Status status = [&]() -> absl::Status {
    RETURN_IF_ERROR(CheckServing());
    RETURN_IF_ERROR(Authenticate(*context).status());
    ASSIGN_OR_RETURN(const model::Model* m, NamedModel(request->model()));
    ASSIGN_OR_RETURN(std::vector<int64_t> ids,
                     TokenizeForModel(*m, request->text(), !request->no_special_tokens(),
                                      options_.max_tokens_per_request, options_.text_limits));
    response->mutable_tokens()->Add(ids.begin(), ids.end());
    response->set_count(static_cast<int64_t>(ids.size()));
    return CheckResponseSize(*response);
  }();
  Record("Tokenize", request->model(), status, SecondsSince(arrival));
  return Answer(context, status);
}

grpc::ServerUnaryReactor* AttnServeService::Detokenize(grpc::CallbackServerContext* context,
                                                       const v1::DetokenizeRequest* request,
                                                       v1::DetokenizeResponse* response) {
  const auto arrival = std::chrono::steady_clock::now();
  const absl::Status status = [&]() -> absl::Status {
    RETURN_IF_ERROR(CheckServing());
    RETURN_IF_ERROR(Authenticate(*context).status());
    ASSIGN_OR_RETURN(const model::Model* m, NamedModel(request->model()));
    const model::ModelText* text = m->text();
    if (text == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model '", m->name(), "' has no tokenizer (no tokenizer.json in its folder)"));
    }
    if (request->tokens_size() > options_.max_tokens_per_request) {
      return absl::ResourceExhaustedError(absl::StrCat(
          request->tokens_size(),
          " tokens, above --max_tokens_per_request=", options_.max_tokens_per_request));
    }
    for (int i = 0; i < request->tokens_size(); ++i) {
      const int64_t id = request->tokens(i);
      if (id < 0 || id >= m->vocab_size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("tokens[", i, "] = ", id, " is outside [0, ", m->vocab_size(), ")"));
      }
    }
    response->set_text(text->tokenizer->Decode(
        absl::MakeConstSpan(request->tokens().data(), request->tokens_size()),
        request->skip_special_tokens()));
    return CheckResponseSize(*response);
  }();
  Record("Detokenize", request->model(), status, SecondsSince(arrival));
  return Answer(context, status);
}

}  // namespace attnserve::server
