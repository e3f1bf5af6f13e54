#include "server/rpc/attnserve/service.h"

#include <ATen/ATen.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "server/client_text.h"
#include "server/grpc_status.h"
#include "server/inference.h"
#include "server/rpc/call_gate.h"
#include "server/sessions/session_lease.h"

namespace attnserve::server {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Finishes a unary call inline with `status`.
grpc::ServerUnaryReactor* FinishNow(grpc::CallbackServerContext* context,
                                    const absl::Status& status) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  reactor->Finish(ToGrpcStatus(status, context));
  return reactor;
}

}  // namespace

AttnServeService::AttnServeService(const model::ModelRepository& repository, const Policy& policy,
                                   SessionTable& sessions, scheduler::BatchScheduler& scheduler,
                                   ServiceOptions options)
    : repository_(repository),
      policy_(policy),
      sessions_(sessions),
      scheduler_(scheduler),
      options_(options) {}

absl::Status AttnServeService::CheckServing() const {
  if (draining_.load()) {
    return absl::UnavailableError("the server is draining; retry on another replica");
  }
  return absl::OkStatus();
}

absl::StatusOr<Caller> AttnServeService::Authenticate(
    const grpc::ServerContextBase& context) const {
  return AuthenticateCall(context, options_.authenticator, options_.max_metadata_bytes);
}

absl::Status AttnServeService::CheckResponseSize(const google::protobuf::Message& message) const {
  const size_t bytes = message.ByteSizeLong();
  if (options_.max_message_bytes <= 0 || bytes <= static_cast<size_t>(options_.max_message_bytes)) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(
      absl::StrCat("the response would be ", bytes,
                   " bytes, above --max_message_bytes=", options_.max_message_bytes,
                   "; ask for less (last logits or top-k instead of all logits, "
                   "or fewer tokens per request)"));
}

absl::Status AttnServeService::OnThisInstance(absl::Status status) const {
  const v1::ServerIdentity& id = options_.identity;
  if (status.code() != absl::StatusCode::kNotFound ||
      (id.instance_name().empty() && id.advertise_address().empty())) {
    return status;
  }
  std::string where = id.instance_name().empty()
                          ? std::string("the instance")
                          : absl::StrCat("instance '", id.instance_name(), "'");
  if (!id.advertise_address().empty()) absl::StrAppend(&where, " at ", id.advertise_address());
  return absl::NotFoundError(absl::StrCat(status.message(), " (asked ", where, ")"));
}

void AttnServeService::Record(const char* rpc, const std::string& variant,
                              const absl::Status& status, double seconds) const {
  if (options_.metrics == nullptr) return;
  // Only served variants become label values: a client's made-up model name must not.
  const std::string label = repository_.Find(variant) != nullptr ? variant : "none";
  options_.metrics->RecordRequest("attnserve", rpc, label,
                                  GrpcCodeName(ToGrpcStatus(status).error_code()), seconds);
}

void AttnServeService::CountDecision(const PolicyDecision& decision) const {
  if (options_.metrics == nullptr) return;
  options_.metrics->RecordPolicyDecision(
      decision.model->name(), decision.rule > 0 ? std::to_string(decision.rule) : "named");
}

absl::Status AttnServeService::SubmitInfer(grpc::CallbackServerContext* context,
                                           grpc::ServerUnaryReactor* reactor,
                                           const v1::InferRequest* request,
                                           v1::InferResponse* response,
                                           std::chrono::steady_clock::time_point arrival,
                                           const Caller& caller) {
  RETURN_IF_ERROR(ValidateOutputSpec(request->output()));
  const bool text = !request->text().empty();
  if (text && !request->tokens().empty()) {
    return absl::InvalidArgumentError("set tokens or text, not both");
  }
  at::Tensor tokens;
  if (!text) {
    ASSIGN_OR_RETURN(tokens, TokensTensor(request->tokens(), options_.max_tokens_per_request));
  }
  auto job = std::make_unique<scheduler::Job>();
  job->client = caller.client;
  job->cache_scope = options_.prefix_cache_global ? "" : caller.principal;
  job->tokens = std::move(tokens);
  job->output = ModelOutputKind(request->output());
  *response->mutable_server() = options_.identity;
  std::shared_ptr<Session> session;
  std::optional<PolicyDecision> decision;
  if (!request->session_id().empty()) {
    absl::StatusOr<SessionUse> found = sessions_.Get(request->session_id(), caller);
    if (!found.ok()) return OnThisInstance(found.status());
    const std::string& name = (*found)->model()->name();
    if (!request->model().empty() && request->model() != "auto" && request->model() != name) {
      return absl::InvalidArgumentError(absl::StrCat("session '", (*found)->id(),
                                                     "' belongs to model '", name, "', not ",
                                                     ClientText(request->model())));
    }
    response->set_model(name);
    response->set_policy_reason(absl::StrCat("session ", (*found)->id(), " of model ", name));
    job->model = (*found)->model();
    if (text) {
      ASSIGN_OR_RETURN(std::vector<int64_t> ids,
                       TokenizeForModel(*job->model, request->text(), /*add_special_tokens=*/false,
                                        options_.max_tokens_per_request, options_.text_limits));
      job->tokens = IdsTensor(ids);
    }
    session = found->get();
    job->session.emplace(*std::move(found));
  } else if (text) {
    ASSIGN_OR_RETURN(
        TextDecision chosen,
        ResolveText(policy_, request->model(), request->text(), !request->no_special_tokens(),
                    /*stream=*/false, options_.max_tokens_per_request, options_.text_limits));
    decision = std::move(chosen.decision);
    job->tokens = IdsTensor(chosen.ids);
    response->set_model(decision->model->name());
    response->set_policy_reason(decision->reason);
    job->model = decision->model;
  } else {
    ASSIGN_OR_RETURN(decision,
                     policy_.Resolve(request->model(), job->tokens.size(1), /*stream=*/false));
    response->set_model(decision->model->name());
    response->set_policy_reason(decision->reason);
    job->model = decision->model;
  }
  // Past a layer's trained length (an interpolating Linformer), the response says so.
  if (const std::string note = job->model->LengthNote(job->tokens.size(1)); !note.empty()) {
    response->set_policy_reason(absl::StrCat(response->policy_reason(), "; ", note));
  }
  job->deadline = CallDeadline(*context);
  job->is_cancelled = [context] { return context->IsCancelled(); };
  job->on_done = [this, reactor, request, response, arrival, session, decision](
                     const absl::Status& done, scheduler::JobResult result) {
    absl::Status status = done;
    if (status.ok())
      status = FillOutputs(result.output, request->output(), response->mutable_outputs());
    if (status.ok()) status = CheckResponseSize(*response);
    const int64_t position = session != nullptr ? session->position() : 0;
    auto answer = [this, reactor, response, arrival, session, position, decision](
                      const absl::Status& status, const scheduler::JobResult& result) {
      AnswerInfer(reactor, *response, arrival, session.get(), position, decision, status, result);
    };
    if (session != nullptr && result.prompt_applied) {
      // A checkpoint this queues is written before the answer (InferResponse.stored).
      auto computed = std::make_shared<scheduler::JobResult>(std::move(result));
      if (sessions_.Applied(
              *session, [answer, status, computed, response, session](const absl::Status& stored) {
                absl::Status answered = status;
                if (IsLeaseLost(stored)) {
                  answered = absl::UnavailableError(
                      "this replica lost the session's lease before the request's checkpoint was "
                      "written; resume the session where it is now and send the request again");
                } else if (stored.code() == absl::StatusCode::kNotFound) {
                  answered = stored;
                }
                response->set_stored(stored.ok());
                answer(answered, *computed);
              })) {
        return;
      }
      answer(status, *computed);
      return;
    }
    answer(status, result);
  };
  return scheduler_.Submit(std::move(job));
}

void AttnServeService::AnswerInfer(grpc::ServerUnaryReactor* reactor, v1::InferResponse& response,
                                   std::chrono::steady_clock::time_point arrival,
                                   const Session* session, int64_t session_position,
                                   const std::optional<PolicyDecision>& decision,
                                   const absl::Status& status, const scheduler::JobResult& result) {
  if (status.ok()) {
    if (session != nullptr) {
      response.set_session_position(session_position);
      if (options_.metrics != nullptr) {
        options_.metrics->RecordPolicyDecision(session->model()->name(), "session");
      }
    } else {
      CountDecision(*decision);
    }
  }
  v1::Timings* t = response.mutable_timings();
  t->set_queue_seconds(result.queue_seconds);
  t->set_compute_seconds(result.compute_seconds);
  t->set_total_seconds(SecondsSince(arrival));
  Record("Infer", response.model(), status, t->total_seconds());
  inflight_.fetch_sub(1);
  reactor->Finish(ToGrpcStatus(status));
}

grpc::ServerUnaryReactor* AttnServeService::Infer(grpc::CallbackServerContext* context,
                                                  const v1::InferRequest* request,
                                                  v1::InferResponse* response) {
  const auto arrival = std::chrono::steady_clock::now();
  if (absl::Status s = CheckServing(); !s.ok()) {
    Record("Infer", request->model(), s, SecondsSince(arrival));
    return FinishNow(context, s);
  }
  absl::StatusOr<Caller> caller = Authenticate(*context);
  if (!caller.ok()) {
    Record("Infer", request->model(), caller.status(), SecondsSince(arrival));
    return FinishNow(context, caller.status());
  }
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  inflight_.fetch_add(1);
  auto refuse = [this, context, reactor, request, response, arrival](const absl::Status& status) {
    inflight_.fetch_sub(1);
    Record("Infer", response->model().empty() ? request->model() : response->model(), status,
           SecondsSince(arrival));
    reactor->Finish(ToGrpcStatus(status, context));
  };
  // A text prompt is tokenized where the request work pool says (inline when small).
  absl::Status queued = RunRequestWork(
      options_.work_pool, caller->client, static_cast<int64_t>(request->text().size()),
      [this, context, reactor, request, response, arrival, caller = *caller, refuse] {
        if (context->IsCancelled()) {  // gone while its text waited: no tokenizing
          refuse(absl::CancelledError("the call was cancelled"));
          return;
        }
        absl::Status submitted = SubmitInfer(context, reactor, request, response, arrival, caller);
        if (!submitted.ok()) refuse(submitted);
      });
  if (!queued.ok()) refuse(queued);
  return reactor;
}

grpc::ServerUnaryReactor* AttnServeService::GetSession(grpc::CallbackServerContext* context,
                                                       const v1::GetSessionRequest* request,
                                                       v1::SessionInfo* response) {
  const auto arrival = std::chrono::steady_clock::now();
  absl::StatusOr<Caller> caller = Authenticate(*context);
  if (!caller.ok()) {
    Record("GetSession", "", caller.status(), SecondsSince(arrival));
    return FinishNow(context, caller.status());
  }
  bool in_memory = false;
  absl::StatusOr<std::shared_ptr<const Session>> session =
      sessions_.Peek(request->session_id(), *caller, &in_memory);
  if (session.ok()) {
    *response = (*session)->Info();
    // `server` is the instance holding the session: this one, or none for a session only in
    // the session store (any replica resumes it). One another replica holds is UNAVAILABLE
    // naming it (x-attnserve-session-owner), as every other call about it answers.
    if (in_memory) *response->mutable_server() = options_.identity;
  }
  Record("GetSession", "", session.status(), SecondsSince(arrival));
  return FinishNow(context, OnThisInstance(session.status()));
}

grpc::ServerUnaryReactor* AttnServeService::CloseSession(grpc::CallbackServerContext* context,
                                                         const v1::CloseSessionRequest* request,
                                                         v1::CloseSessionResponse*) {
  const auto arrival = std::chrono::steady_clock::now();
  absl::StatusOr<Caller> caller = Authenticate(*context);
  absl::Status status = caller.ok()
                            ? OnThisInstance(sessions_.Close(request->session_id(), *caller))
                            : caller.status();
  Record("CloseSession", "", status, SecondsSince(arrival));
  return FinishNow(context, status);
}

grpc::ServerUnaryReactor* AttnServeService::ListSessions(grpc::CallbackServerContext* context,
                                                         const v1::ListSessionsRequest* request,
                                                         v1::ListSessionsResponse* response) {
  absl::StatusOr<Caller> caller = Authenticate(*context);
  if (!caller.ok()) {
    Record("ListSessions", "", caller.status(), 0);
    return FinishNow(context, caller.status());
  }
  if (request->limit() < 0) {
    return FinishNow(context, absl::InvalidArgumentError("limit must be >= 0 (0: 1000)"));
  }
  int64_t total = 0, state_bytes = 0;
  for (v1::SessionInfo& info :
       sessions_.List(request->model(), request->limit() > 0 ? request->limit() : 1000, *caller,
                      &total, &state_bytes)) {
    *info.mutable_server() = options_.identity;
    *response->add_sessions() = std::move(info);
  }
  response->set_total(total);
  response->set_state_bytes(state_bytes);
  Record("ListSessions", "", absl::OkStatus(), 0);
  return FinishNow(context, absl::OkStatus());
}

v1::ModelInfo AttnServeService::Describe(const model::Model& m) const {
  v1::ModelInfo info;
  info.set_name(m.name());
  *info.mutable_config() = m.config();
  info.set_causal(m.can_stream());
  info.set_can_stream(m.can_stream());
  info.set_max_sequence_length(m.max_sequence_length());
  const int64_t empty = m.StateBytesPerSequence(0);
  info.set_state_bytes_per_session(empty);
  info.set_state_bytes_per_token(m.StateBytesPerSequence(1) - empty);
  if (m.can_stream()) {
    info.set_step_keys_read_at_1k(m.StepKeysRead(1023));
    info.set_step_keys_read_at_32k(m.StepKeysRead(32767));
  }
  if (const model::ModelText* text = m.text(); text != nullptr) {
    v1::TokenizerInfo* t = info.mutable_tokenizer();
    t->set_present(true);
    t->set_vocab_size(text->tokenizer->vocab_size());
    for (const int64_t id : text->end_of_text_ids) t->add_end_of_text_ids(id);
    for (const text::AddedToken& a : text->tokenizer->added_tokens()) {
      if (a.special) t->add_special_tokens(a.content);
    }
  }
  return info;
}

absl::StatusOr<const model::Model*> AttnServeService::NamedModel(const std::string& name) const {
  if (const model::Model* m = repository_.Find(name); m != nullptr) return m;
  RETURN_IF_ERROR(policy_.Resolve(name, 1, false).status());
  return absl::InvalidArgumentError("name a model, not auto");
}

grpc::ServerUnaryReactor* AttnServeService::ListModels(grpc::CallbackServerContext* context,
                                                       const v1::ListModelsRequest*,
                                                       v1::ListModelsResponse* response) {
  if (absl::StatusOr<Caller> caller = Authenticate(*context); !caller.ok()) {
    return FinishNow(context, caller.status());
  }
  for (const model::Model* m : repository_.models()) *response->add_models() = Describe(*m);
  if (const PrefixCache* cache = options_.prefix_cache; cache != nullptr) {
    v1::PrefixCacheInfo* info = response->mutable_prefix_cache();
    info->set_max_bytes(cache->max_bytes());
    info->set_bytes(cache->bytes());
    info->set_entries(cache->entries());
    info->set_lookups(cache->lookups());
    info->set_hits(cache->hits());
    info->set_hit_tokens(cache->hit_tokens());
    info->set_evictions(cache->evictions());
  }
  Record("ListModels", "", absl::OkStatus(), 0);
  return FinishNow(context, absl::OkStatus());
}

grpc::ServerUnaryReactor* AttnServeService::GetModel(grpc::CallbackServerContext* context,
                                                     const v1::GetModelRequest* request,
                                                     v1::ModelInfo* response) {
  if (absl::StatusOr<Caller> caller = Authenticate(*context); !caller.ok()) {
    return FinishNow(context, caller.status());
  }
  absl::StatusOr<const model::Model*> m = NamedModel(request->name());
  if (!m.ok()) return FinishNow(context, m.status());
  *response = Describe(**m);
  return FinishNow(context, absl::OkStatus());
}

}  // namespace attnserve::server
