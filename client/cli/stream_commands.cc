// attnserve-cli stream and generate: a session's stream, opened on the instance that holds
// it (or the next, for a new session), appends sent as the input comes, answers printed as
// they arrive.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "attnserve/v1/inference.grpc.pb.h"
#include "client/cli/calls.h"
#include "client/cli/commands.h"
#include "client/cli/flags.h"
#include "client/cli/request_input.h"
#include "client/cli/text_input.h"
#include "client/common/channel.h"
#include "client/common/grpc_status.h"

namespace attnserve::cli {
namespace {

namespace v1 = attnserve::v1;

std::string FormatStreamResponse(const v1::StreamResponse& r) {
  switch (r.kind_case()) {
    case v1::StreamResponse::kOpened: {
      const v1::StreamOpened& o = r.opened();
      return absl::StrFormat(
          "opened session %s on %s (%s)%s; position %d, last append %d, state %d bytes",
          o.session_id(), o.model(), o.policy_reason(), FormatServer(o.server()), o.position(),
          o.last_sequence_number(), o.state_bytes());
    }
    case v1::StreamResponse::kResult: {
      const v1::AppendResult& a = r.result();
      std::string finish;
      if (a.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) {
        finish = absl::StrCat("; ", a.generated_tokens_size(), " generated, finished by ",
                              v1::FinishReason_Name(a.finish_reason()).substr(14));
        if (!a.stop_string().empty()) {
          absl::StrAppend(&finish, " '", absl::CEscape(a.stop_string()), "'");
        }
      }
      return absl::StrFormat("append %d%s: position %d, state %d bytes, %s; %s%s",
                             a.sequence_number(), a.replayed() ? " (replayed)" : "", a.position(),
                             a.state_bytes(), FormatTimings(a.timings()),
                             FormatOutputs(a.outputs()), finish);
    }
    case v1::StreamResponse::kGenerated: {
      const v1::GeneratedToken& g = r.generated();
      return absl::StrFormat("generated #%d: %d (logprob %.3f)", g.index(), g.token(), g.logprob());
    }
    case v1::StreamResponse::kGeneratedTokens: {
      const v1::GeneratedTokens& g = r.generated_tokens();
      return absl::StrFormat("generated #%d-%d: %s", g.first_index(),
                             g.first_index() + g.tokens_size() - 1, absl::StrJoin(g.tokens(), " "));
    }
    case v1::StreamResponse::kClosed:
      return absl::StrCat("closed session ", r.closed().session_id());
    default:
      return "(empty response)";
  }
}

// Whether a stream closes its session at the end: a new one unless --keep_session, a resumed
// one (--session) only with --close_session.
bool CloseSessionAtEnd() {
  return absl::GetFlag(FLAGS_session).empty() ? !absl::GetFlag(FLAGS_keep_session)
                                              : absl::GetFlag(FLAGS_close_session);
}

// A stream after its open was answered.
struct OpenedStream {
  Route route;
  std::unique_ptr<grpc::ClientContext> context;  // outlives the stream (declared first)
  std::unique_ptr<grpc::ClientReaderWriter<v1::StreamRequest, v1::StreamResponse>> stream;
  v1::StreamResponse opened;
};

// Opens a stream on --session's instance, or for a new session on the next instance, and
// reads the StreamOpened answer. A new session that meets UNAVAILABLE (an instance gone or
// draining) tries the next instance, since it is bound to none yet. Returns false (after
// printing the error) when the server refuses.
bool OpenStream(Printer& out, const std::string& sub, Calls& calls, int64_t expected_length,
                OpenedStream* s) {
  // A fork is a new session, but it must be opened where its source is.
  const std::string fork_from = absl::GetFlag(FLAGS_fork_from);
  if (!fork_from.empty() && !absl::GetFlag(FLAGS_session).empty()) {
    out.Problem(sub, "--session (resume) and --fork_from (fork) go apart");
    return false;
  }
  const std::string session = fork_from.empty() ? absl::GetFlag(FLAGS_session) : fork_from;
  v1::StreamRequest open;
  open.mutable_open()->set_model(absl::GetFlag(FLAGS_model));
  if (fork_from.empty()) {
    open.mutable_open()->set_session_id(session);
  } else {
    open.mutable_open()->set_fork_from(fork_from);
  }
  open.mutable_open()->set_expected_length(expected_length);
  open.mutable_open()->set_ttl_seconds(absl::GetFlag(FLAGS_ttl));
  const int attempts = session.empty() ? calls.NewSessionAttempts() : 1;
  for (int attempt = 1;; ++attempt) {
    if (session.empty()) {
      s->route = calls.NewSession();
    } else if (!calls.ForSession(out, sub, session, &s->route)) {
      return false;
    }
    s->stream.reset();
    s->context = std::make_unique<grpc::ClientContext>();
    SetDeadline(*s->context);
    // A fork is made where its source is.
    client::AddSessionHeader(*s->context, session.empty() ? fork_from : session);
    s->stream = s->route.stub->Stream(s->context.get());
    if (s->stream->Write(open) && s->stream->Read(&s->opened) && s->opened.has_opened()) {
      calls.Remember(s->opened.opened().session_id(), s->opened.opened().server(), s->route);
      return true;
    }
    s->stream->WritesDone();
    grpc::Status status = s->stream->Finish();
    if (status.ok()) {
      status = grpc::Status(grpc::StatusCode::INTERNAL, "the stream ended before it was opened");
    }
    status = calls.Failed(s->route, session, status);
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE && attempt < attempts) continue;
    out.Error(sub, status);
    return false;
  }
}

}  // namespace

int RunStream(Printer& out) {
  const int64_t chunk = absl::GetFlag(FLAGS_chunk);
  if (chunk < 1) {
    out.Problem("stream", "--chunk must be >= 1");
    return kExitUsage;
  }
  v1::OutputSpec output;
  if (!OutputSpecFromFlags(out, "stream", &output)) return kExitUsage;
  Calls calls;
  if (!calls.Init(out, "stream")) return kExitCallFailed;
  OpenedStream s;
  if (!OpenStream(out, "stream", calls, absl::GetFlag(FLAGS_expected_length), &s)) {
    return kExitCallFailed;
  }
  // The token source after the open: --random_tokens asks the instance for its vocabulary.
  TokenSource source;
  TextLines lines;
  const bool text = TextGiven();
  if (text ? !lines.Open(out, "stream") : !source.Open(out, "stream", *s.route.stub)) {
    return kExitUsage;
  }
  const v1::StreamResponse& opened = s.opened;
  auto& stream = s.stream;
  out.Message(opened, FormatStreamResponse(opened));

  // Responses are printed by this thread as they arrive, while the main thread reads input.
  std::thread reader([&] {
    v1::StreamResponse resp;
    while (stream->Read(&resp)) out.Message(resp, FormatStreamResponse(resp));
  });

  int64_t seq = opened.opened().last_sequence_number();
  bool input_ok = true;
  for (;;) {
    v1::StreamRequest req;
    v1::StreamAppend* append = req.mutable_append();
    if (text) {
      // One append a line of text.
      if (!lines.Next(append->mutable_text())) break;
      append->set_no_special_tokens(absl::GetFlag(FLAGS_no_special_tokens));
    } else {
      std::vector<int64_t> ids;
      absl::StatusOr<int64_t> n = source.reader().Next(chunk, ids);
      if (!n.ok()) {
        out.Problem("stream", std::string(n.status().message()));
        input_ok = false;
        break;
      }
      if (*n == 0) break;
      append->mutable_tokens()->Add(ids.begin(), ids.end());
    }
    append->set_sequence_number(++seq);
    *append->mutable_output() = output;
    if (!stream->Write(req)) break;  // the server ended the stream; Finish says why
  }
  if (CloseSessionAtEnd() && input_ok) {
    v1::StreamRequest close;
    close.mutable_close();
    stream->Write(close);
  }
  stream->WritesDone();
  reader.join();
  grpc::Status status = stream->Finish();
  if (!status.ok()) {
    out.Error("stream", calls.Failed(s.route, opened.opened().session_id(), status));
    return kExitCallFailed;
  }
  return input_ok ? kExitOk : kExitUsage;
}

int RunGenerate(Printer& out) {
  const int32_t max_new = absl::GetFlag(FLAGS_max_new_tokens);
  Calls calls;
  if (!calls.Init(out, "generate")) return kExitCallFailed;
  // The prompt first (its length is the open's expected length); --random_tokens asks an
  // instance for the vocabulary: every instance serves the same models.
  std::vector<int64_t> prompt;
  std::string prompt_text;
  const bool text = TextGiven();
  if (text) {
    if (!ReadText(out, "generate", &prompt_text)) return kExitUsage;
  } else {
    TokenSource source;
    if (!source.Open(out, "generate", *calls.AnyInstance().stub) ||
        !source.ReadAll(out, "generate", &prompt)) {
      return kExitUsage;
    }
  }
  v1::GenerateSpec spec;
  if (!StopsFromFlags(out, "generate", &spec)) return kExitUsage;
  // A text's bytes bound its tokens, for the policy's choice.
  const int64_t prompt_length =
      text ? static_cast<int64_t>(prompt_text.size()) : static_cast<int64_t>(prompt.size());
  OpenedStream s;
  if (!OpenStream(out, "generate", calls, prompt_length + max_new, &s)) {
    return kExitCallFailed;
  }
  const v1::StreamResponse& opened = s.opened;
  auto& stream = s.stream;
  if (out.json()) {
    out.Message(opened, "");
  } else {
    std::cerr << FormatStreamResponse(opened) << "\n";
  }

  v1::StreamRequest req;
  v1::StreamAppend* append = req.mutable_append();
  append->set_sequence_number(opened.opened().last_sequence_number() + 1);
  append->mutable_tokens()->Add(prompt.begin(), prompt.end());
  if (text) {
    append->set_text(prompt_text);
    append->set_no_special_tokens(absl::GetFlag(FLAGS_no_special_tokens));
  }
  append->mutable_output()->set_kind(v1::OUTPUT_KIND_NONE);
  v1::GenerateSpec* gen = append->mutable_generate();
  *gen = spec;
  gen->set_max_new_tokens(max_new);
  gen->set_temperature(static_cast<float>(absl::GetFlag(FLAGS_temperature)));
  gen->set_top_k(absl::GetFlag(FLAGS_sample_top_k));
  gen->set_seed(absl::GetFlag(FLAGS_seed));
  gen->set_stream_interval(absl::GetFlag(FLAGS_stream_interval));
  const bool written = stream->Write(req);
  if (written && CloseSessionAtEnd()) {
    v1::StreamRequest close;
    close.mutable_close();
    stream->Write(close);
  }
  stream->WritesDone();

  // Text mode: the generated text (a text prompt) or ids (space-separated, on one line) on
  // stdout as they come; the other responses on stderr.
  v1::StreamResponse resp;
  bool line_open = false;
  while (stream->Read(&resp)) {
    if (out.json()) {
      out.Message(resp, "");
    } else if (resp.has_generated() && text) {
      std::cout << resp.generated().text() << std::flush;
      line_open = true;
    } else if (resp.has_generated()) {
      std::cout << (line_open ? " " : "") << resp.generated().token() << std::flush;
      line_open = true;
    } else if (resp.has_generated_tokens() && text) {
      std::cout << resp.generated_tokens().text() << std::flush;
      line_open = true;
    } else if (resp.has_generated_tokens()) {
      for (const int64_t token : resp.generated_tokens().tokens()) {
        std::cout << (line_open ? " " : "") << token;
        line_open = true;
      }
      std::cout << std::flush;
    } else {
      if (line_open) std::cout << "\n" << std::flush;
      line_open = false;
      std::cerr << FormatStreamResponse(resp) << "\n";
    }
  }
  if (line_open) std::cout << "\n" << std::flush;
  grpc::Status status = stream->Finish();
  if (!status.ok()) {
    out.Error("generate", calls.Failed(s.route, opened.opened().session_id(), status));
    return kExitCallFailed;
  }
  return kExitOk;
}

}  // namespace attnserve::cli
