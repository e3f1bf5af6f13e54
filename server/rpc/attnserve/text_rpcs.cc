// AttnServe.Tokenize and Detokenize: a model's tokenizer over gRPC. A text above
// --request_work_inline_bytes (or that many bytes of ids) is tokenized on the request work pool
// (server/rpc/request_work_pool.h), in turn with other clients' work, never on the thread that
// answers calls; a small one inline. A text is bounded by --max_text_bytes, ids by
// --max_tokens_per_request.
#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "server/grpc_status.h"
#include "server/rpc/attnserve/service.h"
#include "server/rpc/text_requests.h"

namespace attnserve::server {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

grpc::ServerUnaryReactor* AttnServeService::RunTextRpc(grpc::CallbackServerContext* context,
                                                       const char* rpc, const std::string& model,
                                                       int64_t work_bytes,
                                                       std::function<absl::Status()> work) {
  const auto arrival = std::chrono::steady_clock::now();
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  // Counted in flight until answered, so that a drain waits for a text on the pool.
  inflight_.fetch_add(1);
  auto finish = [this, reactor, rpc, model, arrival](const absl::Status& status) {
    Record(rpc, model, status, SecondsSince(arrival));
    inflight_.fetch_sub(1);
    reactor->Finish(ToGrpcStatus(status));
  };
  absl::Status admitted = CheckServing();
  absl::StatusOr<Caller> caller = admitted.ok() ? Authenticate(*context) : admitted;
  if (!caller.ok()) {
    finish(caller.status());
    return reactor;
  }
  absl::Status queued = RunRequestWork(
      options_.work_pool, caller->client, work_bytes, [context, finish, work = std::move(work)] {
        // A client gone while its text waited costs no tokenizing.
        finish(context->IsCancelled() ? absl::CancelledError("the call was cancelled") : work());
      });
  if (!queued.ok()) finish(queued);
  return reactor;
}

grpc::ServerUnaryReactor* AttnServeService::Tokenize(grpc::CallbackServerContext* context,
                                                     const v1::TokenizeRequest* request,
                                                     v1::TokenizeResponse* response) {
  return RunTextRpc(
      context, "Tokenize", request->model(), static_cast<int64_t>(request->text().size()),
      [this, request, response]() -> absl::Status {
        ASSIGN_OR_RETURN(const model::Model* m, NamedModel(request->model()));
        ASSIGN_OR_RETURN(std::vector<int64_t> ids,
                         TokenizeForModel(*m, request->text(), !request->no_special_tokens(),
                                          options_.max_tokens_per_request, options_.text_limits));
        response->mutable_tokens()->Add(ids.begin(), ids.end());
        response->set_count(static_cast<int64_t>(ids.size()));
        return CheckResponseSize(*response);
      });
}

grpc::ServerUnaryReactor* AttnServeService::Detokenize(grpc::CallbackServerContext* context,
                                                       const v1::DetokenizeRequest* request,
                                                       v1::DetokenizeResponse* response) {
  return RunTextRpc(
      context, "Detokenize", request->model(),
      static_cast<int64_t>(request->tokens_size()) * static_cast<int64_t>(sizeof(int64_t)),
      [this, request, response]() -> absl::Status {
        ASSIGN_OR_RETURN(const model::Model* m, NamedModel(request->model()));
        const model::ModelText* text = m->text();
        if (text == nullptr) {
          return NoTokenizerError(*m, "send and read token ids");
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
      });
}

}  // namespace attnserve::server
