// OipService::Submit: one inference of either RPC (ModelInfer, ModelStreamInfer) as a
// scheduler job, with its sequence as a session (sequences.h).
#include <ATen/ATen.h>

#include <cstring>
#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "server/client_text.h"
#include "server/rpc/call_job.h"
#include "server/rpc/generated_token_groups.h"
#include "server/rpc/oip/infer_response.h"
#include "server/rpc/oip/oip_service.h"
#include "server/rpc/oip/sequences.h"
#include "server/rpc/text_requests.h"

namespace attnserve::server::oip {
namespace {

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

std::string SequenceName(const std::string& key) {
  // "u:5" -> 5, "s:abc" -> 'abc' (escaped, short)
  return key.rfind("u:", 0) == 0 ? key.substr(2) : ClientText(key.substr(2));
}

}  // namespace

absl::Status OipService::Submit(Call call) {
  const inference::ModelInferRequest& request = *call.request;
  absl::StatusOr<ParsedInfer> parsed_or = ParseInferRequest(request, options_.limits);
  if (!parsed_or.ok()) return parsed_or.status();
  auto parsed = std::make_shared<const ParsedInfer>(*std::move(parsed_or));
  const std::string& name = request.model_name();
  if (name != "auto" && !name.empty()) {
    absl::StatusOr<const model::Model*> found = FindModel(name, request.model_version());
    if (!found.ok()) return found.status();
  } else if (!request.model_version().empty() && request.model_version() != "1") {
    return absl::NotFoundError(absl::StrCat("no version ", ClientText(request.model_version()),
                                            "; every model is served as version 1"));
  }
  bool wants_text = false;
  for (OutputName o : parsed->outputs) wants_text = wants_text || o == OutputName::kTextOutput;
  const int64_t max_ids = options_.limits.max_tokens_per_request;
  // The prompt's ids: given, or the text's with the model's tokenizer (its template's tokens,
  // a BOS, only where a sequence starts or there is none).
  std::vector<int64_t> ids = parsed->input_ids;
  std::unique_ptr<scheduler::Job> job =
      NewCallJob(call.context, call.caller, options_.prefix_cache_global, call.cancelled);
  std::optional<PolicyDecision> decision;
  std::string reason;
  bool created = false;
  // The policy's choice, for ids or a text (a text's length is its tokenizer's count).
  auto resolve = [&](bool stream) -> absl::StatusOr<PolicyDecision> {
    if (!parsed->has_text) return policy_.Resolve(name, static_cast<int64_t>(ids.size()), stream);
    absl::StatusOr<TextDecision> t =
        ResolveText(policy_, name, parsed->text_input, true, stream, max_ids, options_.text_limits);
    if (!t.ok()) return t.status();
    ids = std::move(t->ids);
    return std::move(t->decision);
  };
  if (parsed->sequence_key.empty()) {
    // Generation steps a state: it needs a variant that streams, as a sequence does.
    absl::StatusOr<PolicyDecision> d = resolve(/*stream=*/parsed->max_tokens > 0);
    if (!d.ok()) return d.status();
    decision = *std::move(d);
    job->model = decision->model;
    reason = decision->reason;
  } else {
    const std::string id = SequenceSessionId(call.caller.principal, parsed->sequence_key);
    if (parsed->sequence_start) {
      absl::StatusOr<PolicyDecision> d = resolve(/*stream=*/true);
      if (!d.ok()) return d.status();
      decision = *std::move(d);
      // A new start of a sequence ends its previous one, as Triton's sequence batcher does.
      if (absl::Status closed = sessions_.Close(id, call.caller);
          !closed.ok() && closed.code() != absl::StatusCode::kNotFound) {
        return closed;
      }
      absl::StatusOr<SessionUse> use =
          sessions_.Create(decision->model, absl::ZeroDuration(), call.caller.principal, id);
      if (!use.ok()) return use.status();
      created = true;
      reason = absl::StrCat(decision->reason, "; sequence ", SequenceName(parsed->sequence_key),
                            " starts session ", id);
      job->session.emplace(*std::move(use));
    } else {
      absl::StatusOr<SessionUse> use = sessions_.Get(id, call.caller);
      if (!use.ok() && use.status().code() == absl::StatusCode::kNotFound) {
        return absl::InvalidArgumentError(absl::StrCat(
            "inference request for sequence ", SequenceName(parsed->sequence_key), " to model ",
            ClientText(name),
            " must specify the sequence_start flag on the first request of the sequence (no "
            "open sequence has that id: never started, ended, or expired)"));
      }
      if (!use.ok()) return use.status();
      const std::string& model_name = (*use)->model()->name();
      if (!name.empty() && name != "auto" && name != model_name) {
        return absl::InvalidArgumentError(
            absl::StrCat("sequence ", SequenceName(parsed->sequence_key), " belongs to model '",
                         model_name, "', not ", ClientText(name)));
      }
      reason = absl::StrCat("sequence ", SequenceName(parsed->sequence_key), ": session ", id,
                            " of model ", model_name);
      if (parsed->has_text) {
        absl::StatusOr<std::vector<int64_t>> t = TokenizeForModel(
            *(*use)->model(), parsed->text_input, false, max_ids, options_.text_limits, kTextInput);
        if (!t.ok()) return t.status();
        ids = *std::move(t);
      }
      job->session.emplace(*std::move(use));
    }
    job->model = (*job->session)->model();
  }
  std::shared_ptr<Session> session = job->session ? job->session->get() : nullptr;
  if (wants_text && job->model->text() == nullptr) {
    return NoTokenizerError(*job->model, "ask for output_ids, not text_output");
  }
  job->tokens = IdsTensor(ids);
  job->output = parsed->logits == LogitsOutput::kAll ? model::OutputKind::kAllLogits
                                                     : model::OutputKind::kLastLogits;
  job->max_new_tokens = parsed->max_tokens;
  job->sampling.temperature = parsed->temperature;
  job->sampling.top_k = parsed->top_k;
  job->sampling.seed = parsed->seed;
  job->sampling.top_p = parsed->top_p;
  job->sampling.min_p = parsed->min_p;
  job->sampling.repetition_penalty = parsed->repetition_penalty;
  job->sampling.presence_penalty = parsed->presence_penalty;
  job->sampling.frequency_penalty = parsed->frequency_penalty;
  job->sampling.logit_bias = parsed->logit_bias;
  // Stop strings and tokens, the vocabulary limit and the text pieces, as the AttnServe door.
  std::shared_ptr<text::GenerationText> generation;
  if (parsed->max_tokens > 0) {
    absl::StatusOr<std::shared_ptr<text::GenerationText>> g = AttachGenerationText(
        *job->model, {parsed->stop_strings, parsed->stop, parsed->ignore_eos, parsed->has_text},
        options_.text_limits, job.get());
    if (!g.ok()) return g.status();
    generation = *std::move(g);
  }
  // The tokens handed to call.on_token, grouped by stream_interval (the text is kept for
  // ModelInfer's response too).
  std::shared_ptr<GeneratedTokenGroups> groups;
  if (generation != nullptr) {
    groups = std::make_shared<GeneratedTokenGroups>(generation, parsed->stream_interval,
                                                    parsed->max_tokens);
    job->on_token = [groups, wants_text, on_token = call.on_token](
                        const scheduler::SampledToken& sampled, int index) {
      if (!groups->Add(sampled.token, sampled.logprob, index)) return;
      const GeneratedTokenGroups::Group& group = groups->group();
      if (on_token) on_token(group.tokens, group.first_index, wants_text ? &group.text : nullptr);
      groups->Clear();
    };
  }
  const std::string model_name = job->model->name();
  const std::string request_id = request.id();
  // Set just before the job is queued: arrival to there is the statistics' compute_input.
  auto input_seconds = std::make_shared<double>(0);
  job->on_done = [this, parsed, session, decision, reason, model_name, request_id, generation,
                  groups, wants_text, input_seconds, on_token = call.on_token, caller = call.caller,
                  arrival = call.arrival, streamed = call.tokens_streamed,
                  done = std::move(call.done)](const absl::Status& finished,
                                               scheduler::JobResult result) {
    const auto output_start = std::chrono::steady_clock::now();
    // A last, shorter group goes before the final response.
    if (groups != nullptr && on_token && !groups->group().tokens.empty()) {
      const GeneratedTokenGroups::Group& group = groups->group();
      on_token(group.tokens, group.first_index, wants_text ? &group.text : nullptr);
      groups->Clear();
    }
    absl::Status status = finished;
    inference::ModelInferResponse response;
    response.set_model_name(model_name);
    response.set_model_version("1");
    response.set_id(request_id);
    if (session != nullptr && result.prompt_applied) sessions_.Applied(*session);
    for (OutputName o : parsed->outputs) {
      if (!status.ok()) break;
      if (o == OutputName::kLogits) {
        status = AddLogits(result.output, parsed->raw, &response);
      } else if (o == OutputName::kOutputIds && !streamed) {
        AddOutputIds(result.generated, parsed->raw, &response);
      } else if (o == OutputName::kTextOutput && !streamed) {
        // Without max_tokens nothing was generated: one empty text.
        if (generation == nullptr) {
          AddTextOutput({std::string()}, parsed->raw, &response);
          continue;
        }
        if (generation->stop_reason() == text::StopReason::kNone) generation->Finish();
        AddTextOutput({generation->text()}, parsed->raw, &response);
      }
    }
    SetStringParameter("attnserve_policy_reason", reason, &response);
    if (session != nullptr) {
      SetIntParameter("attnserve_sequence_position", session->position(), &response);
    }
    if (status.ok() && options_.max_message_bytes > 0 &&
        response.ByteSizeLong() > static_cast<size_t>(options_.max_message_bytes)) {
      status = absl::ResourceExhaustedError(absl::StrCat(
          "the response would be ", response.ByteSizeLong(), " bytes, above --max_message_bytes=",
          options_.max_message_bytes, "; ask for less (last logits instead of all)"));
    }
    if (session != nullptr && parsed->sequence_end) {
      sessions_.Close(session->id(), caller).IgnoreError();  // the sequence ends, whatever came
    }
    if (status.ok() && options_.metrics != nullptr) {
      const std::string rule = !decision.has_value() ? "session"
                               : decision->rule > 0  ? std::to_string(decision->rule)
                                                     : "named";
      options_.metrics->RecordPolicyDecision(model_name, rule);
    }
    statistics_.Record(model_name, status.ok(),
                       {SecondsSince(arrival), *input_seconds, result.queue_seconds,
                        result.compute_seconds, SecondsSince(output_start)});
    done(status, std::move(response));
  };
  const std::string session_id = session != nullptr ? session->id() : "";
  *input_seconds = SecondsSince(call.arrival);
  absl::Status submitted = scheduler_.Submit(std::move(job));
  if (!submitted.ok() && created) sessions_.Close(session_id, call.caller).IgnoreError();
  return submitted;
}

void OipService::Dispatch(Call call, std::function<void(const absl::Status&)> refused) {
  // The request's text and raw bytes: what tokenizing and parsing it costs.
  int64_t bytes = 0;
  for (const std::string& raw : call.request->raw_input_contents()) {
    bytes += static_cast<int64_t>(raw.size());
  }
  for (const auto& input : call.request->inputs()) {
    for (const std::string& b : input.contents().bytes_contents()) {
      bytes += static_cast<int64_t>(b.size());
    }
  }
  const std::string client = call.caller.client;
  auto pending = std::make_shared<Call>(std::move(call));
  absl::Status queued = RunRequestWork(options_.work_pool, client, bytes, [this, pending, refused] {
    const bool gone =
        pending->context->IsCancelled() || (pending->cancelled && pending->cancelled());
    if (gone) {  // the client left while its request waited: no tokenizing
      refused(absl::CancelledError("the call was cancelled"));
      return;
    }
    if (absl::Status submitted = Submit(std::move(*pending)); !submitted.ok()) {
      refused(submitted);
    }
  });
  if (!queued.ok()) refused(queued);
}

}  // namespace attnserve::server::oip
