#include "client/cli/commands.h"

#include <grpcpp/grpcpp.h>

#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "attnserve/v1/inference.grpc.pb.h"
#include "client/cli/flags.h"
#include "client/cli/token_reader.h"
#include "client/common/channel.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace attnserve::cli {
namespace {

namespace v1 = attnserve::v1;
using Stub = v1::AttnServe::Stub;

std::unique_ptr<Stub> NewStub() {
  return v1::AttnServe::NewStub(client::MakeChannel(absl::GetFlag(FLAGS_target)));
}

void SetDeadline(grpc::ClientContext& ctx) {
  if (absl::GetFlag(FLAGS_timeout) > 0) {
    ctx.set_deadline(client::DeadlineAfter(absl::GetFlag(FLAGS_timeout)));
  }
}

bool ParseOutputKind(const std::string& s, v1::OutputKind* kind) {
  static const std::pair<const char*, v1::OutputKind> kKinds[] = {
      {"last_logits", v1::OUTPUT_KIND_LAST_LOGITS},
      {"all_logits", v1::OUTPUT_KIND_ALL_LOGITS},
      {"hidden", v1::OUTPUT_KIND_HIDDEN},
      {"top_k", v1::OUTPUT_KIND_TOP_K},
      {"none", v1::OUTPUT_KIND_NONE}};
  for (const auto& [name, k] : kKinds) {
    if (s == name) {
      *kind = k;
      return true;
    }
  }
  return false;
}

// The --output and --top_k flags as an OutputSpec; false (after printing why) when invalid.
bool OutputSpecFromFlags(Printer& out, const std::string& sub, v1::OutputSpec* spec) {
  v1::OutputKind kind;
  if (!ParseOutputKind(absl::GetFlag(FLAGS_output), &kind)) {
    out.Problem(sub, absl::StrCat("--output: unknown kind '", absl::GetFlag(FLAGS_output),
                                  "' (last_logits, all_logits, hidden, top_k, none)"));
    return false;
  }
  spec->set_kind(kind);
  if (kind == v1::OUTPUT_KIND_TOP_K) spec->set_top_k(absl::GetFlag(FLAGS_top_k));
  return true;
}

// The vocabulary size of --model (for --random_tokens); for "auto", the smallest of all.
int64_t VocabSize(Stub& stub) {
  const std::string model = absl::GetFlag(FLAGS_model);
  int64_t vocab = 0;
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  if (model.empty() || model == "auto") {
    v1::ListModelsResponse models;
    if (stub.ListModels(&ctx, v1::ListModelsRequest(), &models).ok()) {
      for (const v1::ModelInfo& m : models.models()) {
        const int64_t v = m.config().vocab_size();
        if (v > 0 && (vocab == 0 || v < vocab)) vocab = v;
      }
    }
  } else {
    v1::GetModelRequest req;
    req.set_name(model);
    v1::ModelInfo info;
    if (stub.GetModel(&ctx, req, &info).ok()) vocab = info.config().vocab_size();
  }
  return vocab > 0 ? vocab : 2;  // unknown model: ids 0 and 1, the server says what is wrong
}

// Where the token ids come from: --tokens, --random_tokens, or --tokens_file (stdin: "-").
class TokenSource {
 public:
  // False (after printing why) when the source cannot be opened.
  bool Open(Printer& out, const std::string& sub, Stub& stub) {
    const std::string inline_tokens = absl::GetFlag(FLAGS_tokens);
    const int64_t random = absl::GetFlag(FLAGS_random_tokens);
    if (!inline_tokens.empty()) {
      text_ = std::make_unique<std::istringstream>(inline_tokens);
      in_ = text_.get();
    } else if (random > 0) {
      std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
      std::uniform_int_distribution<int64_t> id(0, VocabSize(stub) - 1);
      std::vector<std::string> ids;
      for (int64_t i = 0; i < random; ++i) ids.push_back(absl::StrCat(id(rng)));
      text_ = std::make_unique<std::istringstream>(absl::StrJoin(ids, " "));
      in_ = text_.get();
    } else if (absl::GetFlag(FLAGS_tokens_file) == "-") {
      in_ = &std::cin;
    } else {
      file_ = std::make_unique<std::ifstream>(absl::GetFlag(FLAGS_tokens_file));
      if (!*file_) {
        out.Problem(sub, absl::StrCat("cannot read ", absl::GetFlag(FLAGS_tokens_file)));
        return false;
      }
      in_ = file_.get();
    }
    reader_ = std::make_unique<TokenReader>(*in_);
    return true;
  }

  TokenReader& reader() { return *reader_; }

  // Every remaining id; false (after printing why) on a malformed one.
  bool ReadAll(Printer& out, const std::string& sub, std::vector<int64_t>* ids) {
    absl::StatusOr<int64_t> n = reader_->Next(INT64_MAX, *ids);
    if (!n.ok()) out.Problem(sub, std::string(n.status().message()));
    return n.ok();
  }

 private:
  std::unique_ptr<std::istringstream> text_;
  std::unique_ptr<std::ifstream> file_;
  std::istream* in_ = nullptr;
  std::unique_ptr<TokenReader> reader_;
};

std::string FormatModel(const v1::ModelInfo& m) {
  const v1::ModelConfig& c = m.config();
  return absl::StrFormat(
      "%-12s layers=[%s] vocab=%d hidden=%d causal=%s stream=%s max_len=%d "
      "state/session=%dB state/token=%dB",
      m.name(), absl::StrJoin(c.layers(), ","), c.vocab_size(), c.hidden_size(),
      m.causal() ? "yes" : "no", m.can_stream() ? "yes" : "no", m.max_sequence_length(),
      m.state_bytes_per_session(), m.state_bytes_per_token());
}

std::string FormatSession(const v1::SessionInfo& s) {
  return absl::StrFormat(
      "%s model=%s position=%d state_bytes=%d last_seq=%d idle=%.1fs ttl=%ds attached=%s",
      s.session_id(), s.model(), s.position(), s.state_bytes(), s.last_sequence_number(),
      s.idle_seconds(), s.ttl_seconds(), s.attached() ? "yes" : "no");
}

std::string FormatStreamResponse(const v1::StreamResponse& r) {
  switch (r.kind_case()) {
    case v1::StreamResponse::kOpened: {
      const v1::StreamOpened& o = r.opened();
      return absl::StrFormat(
          "opened session %s on %s (%s); position %d, last append %d, state %d bytes",
          o.session_id(), o.model(), o.policy_reason(), o.position(), o.last_sequence_number(),
          o.state_bytes());
    }
    case v1::StreamResponse::kResult: {
      const v1::AppendResult& a = r.result();
      return absl::StrFormat("append %d%s: position %d, state %d bytes, %s; %s",
                             a.sequence_number(), a.replayed() ? " (replayed)" : "", a.position(),
                             a.state_bytes(), FormatTimings(a.timings()),
                             FormatOutputs(a.outputs()));
    }
    case v1::StreamResponse::kGenerated: {
      const v1::GeneratedToken& g = r.generated();
      return absl::StrFormat("generated #%d: %d (logprob %.3f)", g.index(), g.token(), g.logprob());
    }
    case v1::StreamResponse::kClosed:
      return absl::StrCat("closed session ", r.closed().session_id());
    default:
      return "(empty response)";
  }
}

// Opens a stream: writes the open message and reads the StreamOpened answer. Returns false
// (after printing the error) when the server refuses; `opened` then holds nothing.
bool OpenStream(Printer& out, const std::string& sub,
                grpc::ClientReaderWriter<v1::StreamRequest, v1::StreamResponse>& stream,
                int64_t expected_length, v1::StreamResponse* opened) {
  v1::StreamRequest open;
  open.mutable_open()->set_model(absl::GetFlag(FLAGS_model));
  open.mutable_open()->set_session_id(absl::GetFlag(FLAGS_session));
  open.mutable_open()->set_expected_length(expected_length);
  open.mutable_open()->set_ttl_seconds(absl::GetFlag(FLAGS_ttl));
  if (stream.Write(open) && stream.Read(opened) && opened->has_opened()) return true;
  stream.WritesDone();
  grpc::Status status = stream.Finish();
  if (status.ok()) {
    status = grpc::Status(grpc::StatusCode::INTERNAL, "the stream ended before it was opened");
  }
  out.Error(sub, status);
  return false;
}

}  // namespace

int RunModels(Printer& out) {
  auto stub = NewStub();
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  const std::string name = absl::GetFlag(FLAGS_name);
  if (!name.empty()) {
    v1::GetModelRequest req;
    req.set_name(name);
    v1::ModelInfo info;
    grpc::Status status = stub->GetModel(&ctx, req, &info);
    if (!status.ok()) {
      out.Error("models", status);
      return kExitCallFailed;
    }
    out.Message(info, FormatModel(info));
    return kExitOk;
  }
  v1::ListModelsResponse models;
  grpc::Status status = stub->ListModels(&ctx, v1::ListModelsRequest(), &models);
  if (!status.ok()) {
    out.Error("models", status);
    return kExitCallFailed;
  }
  std::string text;
  for (const v1::ModelInfo& m : models.models()) absl::StrAppend(&text, FormatModel(m), "\n");
  if (models.models_size() == 0) text = "(no models)";
  out.Message(models, text);
  return kExitOk;
}

int RunInfer(Printer& out) {
  auto stub = NewStub();
  v1::InferRequest req;
  if (!OutputSpecFromFlags(out, "infer", req.mutable_output())) return kExitUsage;
  TokenSource source;
  std::vector<int64_t> tokens;
  if (!source.Open(out, "infer", *stub) || !source.ReadAll(out, "infer", &tokens)) {
    return kExitUsage;
  }
  req.set_model(absl::GetFlag(FLAGS_model));
  req.set_session_id(absl::GetFlag(FLAGS_session));
  req.mutable_tokens()->Add(tokens.begin(), tokens.end());
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  v1::InferResponse resp;
  grpc::Status status = stub->Infer(&ctx, req, &resp);
  if (!status.ok()) {
    out.Error("infer", status);
    return kExitCallFailed;
  }
  std::string text = absl::StrFormat("model: %s (%s)\ntokens: %d", resp.model(),
                                     resp.policy_reason(), tokens.size());
  if (!req.session_id().empty()) {
    absl::StrAppend(&text, "\nsession position: ", resp.session_position());
  }
  absl::StrAppend(&text, "\ntimings: ", FormatTimings(resp.timings()),
                  "\noutputs: ", FormatOutputs(resp.outputs()));
  out.Message(resp, text);
  return kExitOk;
}

int RunStream(Printer& out) {
  const int64_t chunk = absl::GetFlag(FLAGS_chunk);
  if (chunk < 1) {
    out.Problem("stream", "--chunk must be >= 1");
    return kExitUsage;
  }
  v1::OutputSpec output;
  if (!OutputSpecFromFlags(out, "stream", &output)) return kExitUsage;
  auto stub = NewStub();
  TokenSource source;
  if (!source.Open(out, "stream", *stub)) return kExitUsage;

  grpc::ClientContext ctx;
  SetDeadline(ctx);
  auto stream = stub->Stream(&ctx);
  v1::StreamResponse opened;
  if (!OpenStream(out, "stream", *stream, absl::GetFlag(FLAGS_expected_length), &opened)) {
    return kExitCallFailed;
  }
  out.Message(opened, FormatStreamResponse(opened));

  // Responses are printed by this thread as they arrive, while the main thread reads input.
  std::thread reader([&] {
    v1::StreamResponse resp;
    while (stream->Read(&resp)) out.Message(resp, FormatStreamResponse(resp));
  });

  int64_t seq = opened.opened().last_sequence_number();
  bool input_ok = true;
  for (;;) {
    std::vector<int64_t> ids;
    absl::StatusOr<int64_t> n = source.reader().Next(chunk, ids);
    if (!n.ok()) {
      out.Problem("stream", std::string(n.status().message()));
      input_ok = false;
      break;
    }
    if (*n == 0) break;
    v1::StreamRequest req;
    v1::StreamAppend* append = req.mutable_append();
    append->set_sequence_number(++seq);
    append->mutable_tokens()->Add(ids.begin(), ids.end());
    *append->mutable_output() = output;
    if (!stream->Write(req)) break;  // the server ended the stream; Finish says why
  }
  if (!absl::GetFlag(FLAGS_keep_session) && input_ok) {
    v1::StreamRequest close;
    close.mutable_close();
    stream->Write(close);
  }
  stream->WritesDone();
  reader.join();
  grpc::Status status = stream->Finish();
  if (!status.ok()) {
    out.Error("stream", status);
    return kExitCallFailed;
  }
  return input_ok ? kExitOk : kExitUsage;
}

int RunGenerate(Printer& out) {
  const int32_t max_new = absl::GetFlag(FLAGS_max_new_tokens);
  auto stub = NewStub();
  TokenSource source;
  std::vector<int64_t> prompt;
  if (!source.Open(out, "generate", *stub) || !source.ReadAll(out, "generate", &prompt)) {
    return kExitUsage;
  }
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  auto stream = stub->Stream(&ctx);
  v1::StreamResponse opened;
  if (!OpenStream(out, "generate", *stream, static_cast<int64_t>(prompt.size()) + max_new,
                  &opened)) {
    return kExitCallFailed;
  }
  if (out.json()) {
    out.Message(opened, "");
  } else {
    std::cerr << FormatStreamResponse(opened) << "\n";
  }

  v1::StreamRequest req;
  v1::StreamAppend* append = req.mutable_append();
  append->set_sequence_number(opened.opened().last_sequence_number() + 1);
  append->mutable_tokens()->Add(prompt.begin(), prompt.end());
  append->mutable_output()->set_kind(v1::OUTPUT_KIND_NONE);
  v1::GenerateSpec* gen = append->mutable_generate();
  gen->set_max_new_tokens(max_new);
  gen->set_temperature(static_cast<float>(absl::GetFlag(FLAGS_temperature)));
  gen->set_top_k(absl::GetFlag(FLAGS_sample_top_k));
  gen->set_seed(absl::GetFlag(FLAGS_seed));
  const bool written = stream->Write(req);
  if (written && !absl::GetFlag(FLAGS_keep_session)) {
    v1::StreamRequest close;
    close.mutable_close();
    stream->Write(close);
  }
  stream->WritesDone();

  // Text mode: the generated ids on stdout as they come, space-separated, on one line; the
  // other responses on stderr.
  v1::StreamResponse resp;
  bool line_open = false;
  while (stream->Read(&resp)) {
    if (out.json()) {
      out.Message(resp, "");
    } else if (resp.has_generated()) {
      std::cout << (line_open ? " " : "") << resp.generated().token() << std::flush;
      line_open = true;
    } else {
      if (line_open) std::cout << "\n" << std::flush;
      line_open = false;
      std::cerr << FormatStreamResponse(resp) << "\n";
    }
  }
  if (line_open) std::cout << "\n" << std::flush;
  grpc::Status status = stream->Finish();
  if (!status.ok()) {
    out.Error("generate", status);
    return kExitCallFailed;
  }
  return kExitOk;
}

int RunSessions(Printer& out) {
  auto stub = NewStub();
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  const std::string id = absl::GetFlag(FLAGS_id);
  const std::string close = absl::GetFlag(FLAGS_close);
  if (!id.empty() && !close.empty()) {
    out.Problem("sessions", "give --id or --close, not both");
    return kExitUsage;
  }
  grpc::Status status;
  if (!close.empty()) {
    v1::CloseSessionRequest req;
    req.set_session_id(close);
    v1::CloseSessionResponse resp;
    status = stub->CloseSession(&ctx, req, &resp);
    if (status.ok()) out.Message(resp, absl::StrCat("closed session ", close));
  } else if (!id.empty()) {
    v1::GetSessionRequest req;
    req.set_session_id(id);
    v1::SessionInfo info;
    status = stub->GetSession(&ctx, req, &info);
    if (status.ok()) out.Message(info, FormatSession(info));
  } else {
    v1::ListSessionsRequest req;
    req.set_model(absl::GetFlag(FLAGS_model) == "auto" ? "" : absl::GetFlag(FLAGS_model));
    req.set_limit(absl::GetFlag(FLAGS_limit));
    v1::ListSessionsResponse resp;
    status = stub->ListSessions(&ctx, req, &resp);
    if (status.ok()) {
      std::string text;
      for (const v1::SessionInfo& s : resp.sessions())
        absl::StrAppend(&text, FormatSession(s), "\n");
      absl::StrAppendFormat(&text, "%d session(s), %d bytes of state", resp.total(),
                            resp.state_bytes());
      out.Message(resp, text);
    }
  }
  if (!status.ok()) {
    out.Error("sessions", status);
    return kExitCallFailed;
  }
  return kExitOk;
}

int RunHealth(Printer& out) {
  auto stub = grpc::health::v1::Health::NewStub(client::MakeChannel(absl::GetFlag(FLAGS_target)));
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  grpc::health::v1::HealthCheckRequest req;
  req.set_service(absl::GetFlag(FLAGS_service));
  grpc::health::v1::HealthCheckResponse resp;
  grpc::Status status = stub->Check(&ctx, req, &resp);
  if (!status.ok()) {
    out.Error("health", status);
    return kExitCallFailed;
  }
  out.Message(resp, grpc::health::v1::HealthCheckResponse::ServingStatus_Name(resp.status()));
  return resp.status() == grpc::health::v1::HealthCheckResponse::SERVING ? kExitOk
                                                                         : kExitCallFailed;
}

}  // namespace attnserve::cli
