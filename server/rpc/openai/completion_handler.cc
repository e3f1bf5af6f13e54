// OpenAiServer::HandleCompletion: POST /v1/completions and /v1/chat/completions.
//
// On the handler's worker: the body is parsed (openai_request.h); the prompts become ids (a
// chat's messages through the model's chat template, then its tokenizer without added special
// tokens, as transformers' apply_chat_template does; a completion's text with them, as vLLM
// does); lengths are checked against the model (400 context_length_exceeded); each prompt's
// choices are started (completion_runner.h); then the response is written, whole or streamed,
// from the choices' events (completion_response.h).
#include <httplib.h>

#include <chrono>
#include <memory>
#include <utility>

#include "absl/random/random.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "kernels/common/status_macros.h"
#include "nlohmann/json.hpp"
#include "server/client_text.h"
#include "server/rpc/openai/completion_response.h"
#include "server/rpc/openai/connection_probe.h"
#include "server/rpc/openai/openai_error.h"
#include "server/rpc/openai/openai_server.h"
#include "server/rpc/text_requests.h"
#include "server/scheduler/token_sampler.h"

namespace attnserve::server::openai {
namespace {

using json = nlohmann::json;

// How often a stream with nothing new checks on its client (an SSE comment line: a client
// gone is found at the next write).
constexpr absl::Duration kStreamPoll = absl::Milliseconds(50);
constexpr int kKeepAlivePolls = 100;  // 5 s

std::string RandomId(const char* prefix) {
  absl::BitGen gen;
  return absl::StrFormat("%s-%016x%016x", prefix, absl::Uniform<uint64_t>(gen),
                         absl::Uniform<uint64_t>(gen));
}

// What the request's prompts became.
struct PreparedPrompts {
  const model::Model* model = nullptr;
  std::vector<std::vector<int64_t>> ids;
  std::vector<std::string> echo;  // per prompt: its text (for echo)
  std::vector<bool> is_ids;       // per prompt: given as token ids
  std::optional<SessionUse> session;
};

}  // namespace

void OpenAiServer::HandleCompletion(const httplib::Request& http_request,
                                    httplib::Response& response, bool chat, const Caller& caller) {
  const auto arrival = std::chrono::steady_clock::now();
  const int64_t created = std::chrono::duration_cast<std::chrono::seconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                              .count();
  CompletionRequest request;
  PreparedPrompts prepared;
  // Reading the request: every error is the request's (400 for limits too).
  absl::Status read = [&]() -> absl::Status {
    ASSIGN_OR_RETURN(nlohmann::ordered_json body, ParseJsonBody(http_request.body));
    ASSIGN_OR_RETURN(request, ParseCompletionRequest(body, chat, options_.limits));
    if (const std::string header = http_request.get_header_value("x-attnserve-session");
        !header.empty()) {
      request.session_id = header;
    }
    if (!request.seeded) request.sampling.seed = absl::Uniform<uint64_t>(absl::BitGen());
    if (request.echo && request.logprobs >= 0) {
      return FieldError("echo", "echo with logprobs (the prompt's logprobs) is not supported yet");
    }
    if (request.session_id == "new" && (request.n > 1 || request.prompts.size() > 1)) {
      return FieldError("session_id", "a new session takes one prompt and n = 1");
    }
    if (!request.session_id.empty() && request.session_id != "new") {
      RETURN_IF_ERROR(ValidateSessionId(request.session_id));
      ASSIGN_OR_RETURN(SessionUse use, sessions_.Get(request.session_id, caller));
      if (!request.model.empty() && request.model != "auto" &&
          request.model != use->model()->name()) {
        return FieldError("model",
                          absl::StrCat("session '", use->id(), "' belongs to model '",
                                       use->model()->name(), "', not ", ClientText(request.model)));
      }
      if (request.prompts.size() > 1) {
        return FieldError("prompt", "one prompt when continuing a session");
      }
      prepared.model = use->model();
      prepared.session.emplace(std::move(use));
    }
    const TextLimits& limits = options_.runner.text_limits;
    const int64_t max_ids = options_.max_tokens_per_request;
    if (chat) {
      if (prepared.model == nullptr) {
        // The policy's choice by the conversation's bytes (a first estimate of its length).
        ASSIGN_OR_RETURN(
            prepared.model,
            ModelFor(request.model, static_cast<int64_t>(request.messages.dump().size() / 4 + 1)));
      }
      const model::ModelText* text = prepared.model->text();
      if (text == nullptr) {
        return NoTokenizerError(*prepared.model, "use /v1/completions with token ids");
      }
      if (!text->chat_template.has_value()) {
        return FieldError("messages", absl::StrCat("model '", prepared.model->name(),
                                                   "': ", text->chat_template_error));
      }
      text::ChatTemplateInputs inputs;
      inputs.messages = request.messages;
      inputs.add_generation_prompt = request.add_generation_prompt;
      inputs.bos_token = text->bos_token;
      inputs.eos_token = text->eos_token;
      inputs.extra = request.chat_template_kwargs;
      inputs.now = std::chrono::system_clock::now();
      absl::StatusOr<std::string> rendered = text->chat_template->Render(inputs);
      if (!rendered.ok()) {
        return FieldError("messages", std::string(rendered.status().message()));
      }
      // A session's new messages continue its text: no second BOS.
      if (prepared.session.has_value() && !text->bos_token.empty() &&
          absl::StartsWith(*rendered, text->bos_token)) {
        rendered->erase(0, text->bos_token.size());
      }
      ASSIGN_OR_RETURN(std::vector<int64_t> ids,
                       TokenizeForModel(*prepared.model, *rendered, /*add_special_tokens=*/false,
                                        max_ids, limits, "the rendered conversation"));
      prepared.ids.push_back(std::move(ids));
      prepared.is_ids.push_back(false);
      prepared.echo.emplace_back();
    } else {
      for (const Prompt& p : request.prompts) {
        if (prepared.model == nullptr) {
          const int64_t length = p.is_ids ? static_cast<int64_t>(p.ids.size())
                                          : static_cast<int64_t>(p.text.size() / 4 + 1);
          ASSIGN_OR_RETURN(prepared.model, ModelFor(request.model, length));
        }
        const model::Model& m = *prepared.model;
        if (p.is_ids) {
          if (static_cast<int64_t>(p.ids.size()) > max_ids) {
            return FieldError(
                "prompt",
                absl::StrCat(p.ids.size(), " ids, above --max_tokens_per_request=", max_ids));
          }
          for (const int64_t id : p.ids) {
            if (id < 0 || id >= m.vocab_size()) {
              return FieldError(
                  "prompt", absl::StrCat("token id ", id, " is outside [0, ", m.vocab_size(), ")"));
            }
          }
          prepared.ids.push_back(p.ids);
          prepared.is_ids.push_back(true);
          prepared.echo.push_back(request.echo && m.text() != nullptr
                                      ? m.text()->tokenizer->Decode(p.ids, false)
                                      : std::string());
        } else {
          // A session's prompt continues its text: no BOS in the middle.
          ASSIGN_OR_RETURN(std::vector<int64_t> ids,
                           TokenizeForModel(m, p.text, !prepared.session.has_value(), max_ids,
                                            limits, "prompt"));
          prepared.ids.push_back(std::move(ids));
          prepared.is_ids.push_back(false);
          prepared.echo.push_back(request.echo ? p.text : std::string());
        }
      }
    }
    const model::Model& m = *prepared.model;
    const int64_t position = prepared.session.has_value() ? (*prepared.session)->position() : 0;
    for (const std::vector<int64_t>& ids : prepared.ids) {
      const int64_t room = m.max_sequence_length() - position - static_cast<int64_t>(ids.size());
      if (!request.max_tokens_given && chat)
        request.max_tokens =
            static_cast<int>(std::min<int64_t>(request.max_tokens, std::max<int64_t>(room, 0)));
      if (room < request.max_tokens || room <= 0) {
        absl::Status too_long = absl::InvalidArgumentError(absl::StrCat(
            "This model's maximum context length is ", m.max_sequence_length(),
            " tokens. However, you requested ", position + ids.size() + request.max_tokens,
            " tokens (", position, " in the session, ", ids.size(), " in the prompt, ",
            request.max_tokens, " for the completion). Please reduce the length."));
        too_long.SetPayload(kParamPayload, absl::Cord(chat ? "messages" : "prompt"));
        return too_long;
      }
    }
    if (absl::Status valid = scheduler::ValidateSampling(request.sampling, m.vocab_size());
        !valid.ok()) {
      // Its message starts with the field's name ("top_p = 0 is outside ...").
      const std::string message(valid.message());
      const size_t end = message.find_first_not_of("abcdefghijklmnopqrstuvwxyz_");
      valid.SetPayload(kParamPayload, absl::Cord(message.substr(0, end)));
      return valid;
    }
    return absl::OkStatus();
  }();
  if (!read.ok()) {
    HttpError e = ToHttpError(read, ErrorPhase::kRequest);
    if (read.code() == absl::StatusCode::kResourceExhausted ||
        absl::StrContains(read.message(), "maximum context length")) {
      e.code = "context_length_exceeded";
    }
    SendError(response, e);
    return;
  }
  const model::Model& m = *prepared.model;
  response.set_header("x-attnserve-model", m.name());
  std::string session_id = prepared.session.has_value() ? (*prepared.session)->id() : "";
  if (request.session_id == "new") {
    absl::StatusOr<SessionUse> created =
        sessions_.Create(&m, absl::ZeroDuration(), caller.principal);
    if (!created.ok()) {
      SendError(response, ToHttpError(created.status(), ErrorPhase::kServing));
      return;
    }
    session_id = (*created)->id();
    prepared.session.emplace(*std::move(created));
  }
  if (!session_id.empty()) response.set_header("x-attnserve-session", session_id);
  const int choices = static_cast<int>(prepared.ids.size()) * request.n;
  auto events = std::make_shared<ChoiceEvents>(choices);
  int64_t prompt_tokens = 0;
  int started = 0;
  absl::Status start;
  for (size_t p = 0; p < prepared.ids.size() && start.ok(); ++p) {
    prompt_tokens += static_cast<int64_t>(prepared.ids[p].size());
    PromptRun run;
    run.model = &m;
    run.ids = prepared.ids[p];
    if (p == 0 && prepared.session.has_value()) run.session.emplace(std::move(*prepared.session));
    run.first_index = static_cast<int>(p) * request.n;
    // As every door: a text prompt stops at the model's end-of-text and samples only ids with
    // text; a prompt of ids neither (the same ids give the same tokens through every door).
    run.text_prompt = m.text() != nullptr && !prepared.is_ids[p];
    start = runner_.Start(caller, request, std::move(run), events);
    if (start.ok()) ++started;
  }
  if (!start.ok()) {
    // Choices already running end (cancelled) before the answer.
    events->Cancel();
    for (int k = started * request.n; k < choices; ++k) {
      events->Push({k, "", {}, true, "", start});
    }
    while (!events->Done()) events->Take(kStreamPoll);
    if (request.session_id == "new") sessions_.Close(session_id, caller).IgnoreError();
    SendError(response, ToHttpError(start, start.code() == absl::StatusCode::kInvalidArgument
                                               ? ErrorPhase::kRequest
                                               : ErrorPhase::kServing));
    return;
  }
  std::vector<std::string> echo;
  for (size_t p = 0; p < prepared.ids.size(); ++p) {
    for (int j = 0; j < request.n; ++j) echo.push_back(prepared.echo[p]);
  }
  ResponseHeader header{RandomId(chat ? "chatcmpl" : "cmpl"), m.name(), created, session_id};
  const text::Tokenizer* tokenizer = m.text() != nullptr ? m.text()->tokenizer.get() : nullptr;
  auto assembler = std::make_shared<CompletionAssembler>(request, header, tokenizer, choices,
                                                         std::move(echo), prompt_tokens);
  if (!request.stream) {
    // Nothing is written before the end: poll the connection, so that a client that goes
    // away stops its generation and frees its sessions.
    const int socket = FindConnectionSocket(http_request.remote_addr, http_request.remote_port,
                                            http_request.local_port);
    while (!events->Done()) {
      assembler->Add(events->Take(kStreamPoll));
      if (socket >= 0 && !events->cancelled() && PeerClosed(socket)) events->Cancel();
    }
    if (!assembler->error().ok()) {
      SendError(response, ToHttpError(assembler->error(), ErrorPhase::kServing));
      return;
    }
    response.status = 200;
    response.set_content(assembler->Body(), "application/json");
    return;
  }
  response.status = 200;
  response.set_header("Cache-Control", "no-cache");
  response.set_header("X-Accel-Buffering", "no");
  auto polls = std::make_shared<int>(0);
  response.set_chunked_content_provider(
      "text/event-stream",
      [events, assembler, polls](size_t, httplib::DataSink& sink) {
        const std::vector<ChoiceEvent> batch = events->Take(kStreamPoll);
        std::string out = assembler->StreamChunks(batch);
        if (out.empty() && ++*polls >= kKeepAlivePolls) out = ": keep-alive\n\n";
        if (!out.empty()) {
          *polls = 0;
          if (!sink.write(out.data(), out.size())) return false;  // the client went away
        }
        if (!events->Done()) return true;
        const std::string end = assembler->error().ok()
                                    ? assembler->StreamEnd()
                                    : CompletionAssembler::StreamError(
                                          ToHttpError(assembler->error(), ErrorPhase::kServing));
        if (!sink.write(end.data(), end.size())) return false;
        sink.done();
        return true;
      },
      [this, events, assembler, caller, chat, arrival, model = m.name()](bool success) {
        if (!success) {
          // Cut short (the client went away or stopped reading past --http_write_timeout_s):
          // the jobs stop at their next step and their temporary sessions close; wait for
          // them, so that the request's in-flight count covers its jobs.
          events->Cancel();
          while (!events->Done()) events->Take(kStreamPoll);
        }
        Release(caller);
        // A stream ends 200; one cut short is CANCELLED, one that ended with an error event
        // that error's code.
        const int status = !success ? 499
                           : assembler->error().ok()
                               ? 200
                               : ToHttpError(assembler->error(), ErrorPhase::kServing).status;
        Record(chat ? "ChatCompletions" : "Completions", model, status, arrival);
      });
}

}  // namespace attnserve::server::openai
