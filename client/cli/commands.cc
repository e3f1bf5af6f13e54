#include "client/cli/commands.h"

#include <fcntl.h>
#include <google/protobuf/struct.pb.h>
#include <grpcpp/grpcpp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "attnserve/v1/inference.grpc.pb.h"
#include "client/cli/flags.h"
#include "client/cli/text_input.h"
#include "client/cli/token_reader.h"
#include "client/common/channel.h"
#include "client/common/grpc_status.h"
#include "client/common/session_router.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace attnserve::cli {
namespace {

namespace v1 = attnserve::v1;
using Stub = v1::AttnServe::Stub;
using Route = client::SessionRouter::Route;

std::unique_ptr<Stub> NewStub() {
  return v1::AttnServe::NewStub(client::MakeChannel(absl::GetFlag(FLAGS_target)));
}

void SetDeadline(grpc::ClientContext& ctx) {
  if (absl::GetFlag(FLAGS_timeout) > 0) {
    ctx.set_deadline(client::DeadlineAfter(absl::GetFlag(FLAGS_timeout)));
  }
}

// Where a session-bearing subcommand's calls go: straight to --target, or, with
// --route_sessions (or a --target list), through a SessionRouter to the instance that holds
// the session.
class Calls {
 public:
  // False (after printing why) when the target cannot be routed.
  bool Init(Printer& out, const std::string& sub) {
    const std::string target = absl::GetFlag(FLAGS_target);
    if (!absl::GetFlag(FLAGS_route_sessions) && !client::SessionRouter::IsList(target)) {
      direct_ = NewStub();
      return true;
    }
    client::SessionRouter::Options options;
    if (absl::GetFlag(FLAGS_timeout) > 0) options.lookup_timeout_s = absl::GetFlag(FLAGS_timeout);
    absl::StatusOr<std::unique_ptr<client::SessionRouter>> router =
        client::SessionRouter::Create(target, options);
    if (!router.ok()) {
      out.Error(sub, client::ToGrpcStatus(router.status()));
      return false;
    }
    router_ = *std::move(router);
    return true;
  }

  client::SessionRouter* router() { return router_.get(); }

  // New sessions (and calls without one) go to the next instance in turn.
  Route NewSession() {
    return router_ ? router_->ForNewSession() : Route{absl::GetFlag(FLAGS_target), direct_.get()};
  }
  // How many instances a new session may try (each answering UNAVAILABLE sends it to the next).
  int NewSessionAttempts() {
    return router_ ? static_cast<int>(router_->AllEndpoints().size()) : 1;
  }
  // Some instance, for questions every instance answers alike (the models' vocabularies).
  Route AnyInstance() { return router_ ? router_->AllEndpoints().front() : NewSession(); }

  // The instance that holds `session_id`; false (after printing why) when none does.
  bool ForSession(Printer& out, const std::string& sub, const std::string& session_id,
                  Route* route) {
    if (!router_) {
      *route = NewSession();
      return true;
    }
    absl::StatusOr<Route> found = router_->ForSession(session_id);
    if (!found.ok()) {
      out.Error(sub, client::ToGrpcStatus(found.status()));
      return false;
    }
    *route = *found;
    return true;
  }

  void Remember(const std::string& session_id, const v1::ServerIdentity& server,
                const Route& route) {
    if (router_) router_->Remember(session_id, server, route.endpoint);
  }

  // A failed call, with the instance named when routing.
  grpc::Status Failed(const Route& route, const std::string& session_id,
                      const grpc::Status& status) {
    return router_ ? router_->CallFailed(route, session_id, status) : status;
  }

 private:
  std::unique_ptr<Stub> direct_;
  std::unique_ptr<client::SessionRouter> router_;
};

// " on instance NAME (ADDRESS)", or "" when the server did not say.
std::string FormatServer(const v1::ServerIdentity& server) {
  if (server.instance_name().empty() && server.advertise_address().empty()) return "";
  std::string out = absl::StrCat(" on instance ", server.instance_name());
  if (!server.advertise_address().empty())
    absl::StrAppend(&out, " (", server.advertise_address(), ")");
  return out;
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
  std::string out = absl::StrFormat(
      "%s model=%s position=%d state_bytes=%d last_seq=%d idle=%.1fs ttl=%ds attached=%s",
      s.session_id(), s.model(), s.position(), s.state_bytes(), s.last_sequence_number(),
      s.idle_seconds(), s.ttl_seconds(), s.attached() ? "yes" : "no");
  if (!s.server().instance_name().empty()) {
    absl::StrAppend(&out, " instance=", s.server().instance_name());
  }
  return out;
}

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

// Largest piece of a snapshot per SessionSnapshotChunk sent (ImportSession).
constexpr size_t kSnapshotChunkBytes = size_t{1} << 20;

// "cannot VERB FILE: reason" for the errno of a failed system call.
std::string FileProblem(const std::string& verb, const std::string& path) {
  return absl::StrCat("cannot ", verb, " ", path, ": ", std::strerror(errno));
}

// The whole of `path` into `data`; false (with `problem` set) when it cannot be read.
bool ReadWholeFile(const std::string& path, std::string* data, std::string* problem) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    *problem = FileProblem("read", path);
    return false;
  }
  struct stat st;
  if (fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    close(fd);
    *problem = absl::StrCat("cannot read ", path, ": it is a directory");
    return false;
  }
  if (st.st_size > 0) data->reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      *problem = FileProblem("read", path);
      close(fd);
      return false;
    }
    if (n == 0) break;
    data->append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return true;
}

// A file written atomically: the bytes go to PATH.tmp (mode 0600), which Commit fsyncs and
// renames to PATH; without a Commit (an error, a failed call) PATH.tmp is removed and PATH is
// left as it was.
class AtomicFile {
 public:
  explicit AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp") {}
  ~AtomicFile() { Discard(); }

  // False (with `problem` set) when PATH.tmp cannot be created.
  bool Open(std::string* problem) {
    fd_ = open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    // An existing PATH.tmp keeps its mode through O_TRUNC: make it the owner's alone.
    if (fd_ < 0 || fchmod(fd_, 0600) != 0) {
      *problem = FileProblem("write", tmp_);
      Discard();
      return false;
    }
    return true;
  }

  bool Write(const std::string& data, std::string* problem) {
    for (size_t done = 0; done < data.size();) {
      const ssize_t n = write(fd_, data.data() + done, data.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        *problem = FileProblem("write", tmp_);
        return false;
      }
      done += static_cast<size_t>(n);
    }
    return true;
  }

  // fsync, close, rename to PATH (and fsync its directory, so that the rename lasts too).
  bool Commit(std::string* problem) {
    if (fsync(fd_) != 0) {
      *problem = FileProblem("write", tmp_);
      return false;
    }
    const int fd = fd_;
    fd_ = -1;
    if (close(fd) != 0) {
      *problem = FileProblem("write", tmp_);
      unlink(tmp_.c_str());
      return false;
    }
    if (rename(tmp_.c_str(), path_.c_str()) != 0) {
      *problem = absl::StrCat("cannot rename ", tmp_, " to ", path_, ": ", std::strerror(errno));
      unlink(tmp_.c_str());
      return false;
    }
    const size_t slash = path_.rfind('/');
    const std::string dir =
        slash == std::string::npos ? "." : path_.substr(0, std::max<size_t>(slash, 1));
    const int dir_fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd >= 0) {
      fsync(dir_fd);  // best effort: the file itself is complete either way
      close(dir_fd);
    }
    return true;
  }

 private:
  void Discard() {
    if (fd_ < 0) return;
    close(fd_);
    fd_ = -1;
    unlink(tmp_.c_str());
  }

  const std::string path_;
  const std::string tmp_;
  int fd_ = -1;
};

// sessions --id=ID --export=FILE: ExportSession on the instance that holds ID, the chunks
// written to FILE as they arrive.
int ExportSession(Printer& out, Calls& calls, const std::string& id, const std::string& path) {
  AtomicFile file(path);
  std::string problem;
  if (!file.Open(&problem)) {
    out.Problem("sessions", problem);
    return kExitUsage;
  }
  Route route;
  if (!calls.ForSession(out, "sessions", id, &route)) return kExitCallFailed;
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  client::AddSessionHeader(ctx, id);
  v1::ExportSessionRequest req;
  req.set_session_id(id);
  std::unique_ptr<grpc::ClientReader<v1::SessionSnapshotChunk>> reader =
      route.stub->ExportSession(&ctx, req);
  v1::SessionSnapshotChunk chunk;
  int64_t total = -1;  // from the first chunk
  int64_t received = 0;
  bool written = true;
  while (reader->Read(&chunk)) {
    if (total < 0) total = chunk.total_bytes();
    received += static_cast<int64_t>(chunk.data().size());
    if (written && !file.Write(chunk.data(), &problem)) {
      written = false;
      ctx.TryCancel();  // the rest has nowhere to go
    }
  }
  grpc::Status status = reader->Finish();
  if (!written) {
    out.Problem("sessions", problem);
    return kExitUsage;
  }
  status = calls.Failed(route, id, status);
  if (status.ok() && (total <= 0 || received != total)) {
    status = grpc::Status(grpc::StatusCode::DATA_LOSS,
                          absl::StrFormat("the export of session %s sent %d bytes of the %d "
                                          "its first chunk announced",
                                          id, received, std::max<int64_t>(total, 0)));
  }
  if (!status.ok()) {
    out.Error("sessions", status);
    return kExitCallFailed;
  }
  if (!file.Commit(&problem)) {
    out.Problem("sessions", problem);
    return kExitUsage;
  }
  google::protobuf::Struct exported;
  auto& fields = *exported.mutable_fields();
  fields["session_id"].set_string_value(id);
  fields["total_bytes"].set_string_value(absl::StrCat(received));  // 64-bit: a string
  fields["file"].set_string_value(path);
  out.Message(exported,
              absl::StrFormat("exported session %s (%d bytes) to %s", id, received, path));
  return kExitOk;
}

// sessions --import=FILE: ImportSession of FILE's snapshot on the next instance, as a new
// session goes (one answering UNAVAILABLE passes it to the next).
int ImportSession(Printer& out, Calls& calls, const std::string& path) {
  std::string snapshot;
  std::string problem;
  if (!ReadWholeFile(path, &snapshot, &problem)) {
    out.Problem("sessions", problem);
    return kExitUsage;
  }
  const int attempts = calls.NewSessionAttempts();
  for (int attempt = 1;; ++attempt) {
    const Route route = calls.NewSession();
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    v1::SessionInfo info;
    std::unique_ptr<grpc::ClientWriter<v1::SessionSnapshotChunk>> writer =
        route.stub->ImportSession(&ctx, &info);
    size_t offset = 0;
    do {  // at least one chunk, which carries total_bytes
      v1::SessionSnapshotChunk chunk;
      if (offset == 0) chunk.set_total_bytes(static_cast<int64_t>(snapshot.size()));
      const size_t n = std::min(kSnapshotChunkBytes, snapshot.size() - offset);
      chunk.set_data(snapshot.data() + offset, n);
      offset += n;
      if (!writer->Write(chunk)) break;  // the server ended the call; Finish says why
    } while (offset < snapshot.size());
    writer->WritesDone();
    grpc::Status status = writer->Finish();
    if (status.ok()) {
      calls.Remember(info.session_id(), info.server(), route);
      out.Message(info, FormatSession(info));
      return kExitOk;
    }
    status = calls.Failed(route, "", status);
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE && attempt < attempts) continue;
    out.Error("sessions", status);
    return kExitCallFailed;
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
  v1::InferRequest req;
  if (!OutputSpecFromFlags(out, "infer", req.mutable_output())) return kExitUsage;
  Calls calls;
  if (!calls.Init(out, "infer")) return kExitCallFailed;
  const std::string session = absl::GetFlag(FLAGS_session);
  Route route;
  if (session.empty()) {
    route = calls.NewSession();
  } else if (!calls.ForSession(out, "infer", session, &route)) {
    return kExitCallFailed;
  }
  std::vector<int64_t> tokens;
  if (TextGiven()) {
    if (!ReadText(out, "infer", req.mutable_text())) return kExitUsage;
    req.set_no_special_tokens(absl::GetFlag(FLAGS_no_special_tokens));
  } else {
    TokenSource source;
    if (!source.Open(out, "infer", *route.stub) || !source.ReadAll(out, "infer", &tokens)) {
      return kExitUsage;
    }
  }
  req.set_model(absl::GetFlag(FLAGS_model));
  req.set_session_id(session);
  req.mutable_tokens()->Add(tokens.begin(), tokens.end());
  // Without a session any instance serves; one that answers UNAVAILABLE passes to the next.
  const int attempts = session.empty() ? calls.NewSessionAttempts() : 1;
  v1::InferResponse resp;
  for (int attempt = 1;; ++attempt) {
    grpc::ClientContext ctx;
    SetDeadline(ctx);
    client::AddSessionHeader(ctx, session);
    grpc::Status status = route.stub->Infer(&ctx, req, &resp);
    if (status.ok()) break;
    status = calls.Failed(route, session, status);
    if (status.error_code() == grpc::StatusCode::UNAVAILABLE && attempt < attempts) {
      route = calls.NewSession();
      continue;
    }
    out.Error("infer", status);
    return kExitCallFailed;
  }
  std::string text = absl::StrFormat(
      "model: %s (%s)%s\n%s", resp.model(), resp.policy_reason(), FormatServer(resp.server()),
      req.text().empty() ? absl::StrCat("tokens: ", tokens.size())
                         : absl::StrCat("text: ", req.text().size(), " bytes"));
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

int RunSessions(Printer& out) {
  const std::string id = absl::GetFlag(FLAGS_id);
  const std::string close = absl::GetFlag(FLAGS_close);
  const std::string export_file = absl::GetFlag(FLAGS_export);
  const std::string import_file = absl::GetFlag(FLAGS_import);
  const int actions = static_cast<int>(!close.empty()) + static_cast<int>(!export_file.empty()) +
                      static_cast<int>(!import_file.empty());
  if (actions > 1) {
    out.Problem("sessions", "give one of --close, --export and --import, not several");
    return kExitUsage;
  }
  if (!id.empty() && !close.empty()) {
    out.Problem("sessions", "give --id or --close, not both");
    return kExitUsage;
  }
  if (!export_file.empty() && id.empty()) {
    out.Problem("sessions", "--export needs --id, the session to export");
    return kExitUsage;
  }
  if (!import_file.empty() && !id.empty()) {
    out.Problem("sessions", "--import takes the session id from the snapshot: give no --id");
    return kExitUsage;
  }
  Calls calls;
  if (!calls.Init(out, "sessions")) return kExitCallFailed;
  if (!export_file.empty()) return ExportSession(out, calls, id, export_file);
  if (!import_file.empty()) return ImportSession(out, calls, import_file);
  grpc::ClientContext ctx;
  SetDeadline(ctx);
  grpc::Status status;
  if (!close.empty()) {
    Route route;
    if (!calls.ForSession(out, "sessions", close, &route)) return kExitCallFailed;
    client::AddSessionHeader(ctx, close);
    v1::CloseSessionRequest req;
    req.set_session_id(close);
    v1::CloseSessionResponse resp;
    status = calls.Failed(route, close, route.stub->CloseSession(&ctx, req, &resp));
    if (status.ok()) out.Message(resp, absl::StrCat("closed session ", close));
  } else if (!id.empty()) {
    Route route;
    if (!calls.ForSession(out, "sessions", id, &route)) return kExitCallFailed;
    client::AddSessionHeader(ctx, id);
    v1::GetSessionRequest req;
    req.set_session_id(id);
    v1::SessionInfo info;
    status = calls.Failed(route, id, route.stub->GetSession(&ctx, req, &info));
    if (status.ok()) out.Message(info, FormatSession(info));
  } else {
    v1::ListSessionsRequest req;
    req.set_model(absl::GetFlag(FLAGS_model) == "auto" ? "" : absl::GetFlag(FLAGS_model));
    req.set_limit(absl::GetFlag(FLAGS_limit));
    // Routed: every instance's sessions, one listing (each entry names its instance).
    std::vector<Route> routes;
    if (calls.router() != nullptr) {
      routes = calls.router()->AllEndpoints();
    } else {
      routes.push_back(calls.NewSession());
    }
    v1::ListSessionsResponse all;
    bool any_listed = false;
    for (const Route& route : routes) {
      grpc::ClientContext one;
      SetDeadline(one);
      v1::ListSessionsResponse resp;
      grpc::Status listed = route.stub->ListSessions(&one, req, &resp);
      if (!listed.ok()) {
        status = calls.Failed(route, "", listed);
        out.Error("sessions", status);
        continue;
      }
      any_listed = true;
      for (v1::SessionInfo& info : *resp.mutable_sessions()) *all.add_sessions() = std::move(info);
      all.set_total(all.total() + resp.total());
      all.set_state_bytes(all.state_bytes() + resp.state_bytes());
    }
    std::string text;
    for (const v1::SessionInfo& s : all.sessions()) absl::StrAppend(&text, FormatSession(s), "\n");
    absl::StrAppendFormat(&text, "%d session(s), %d bytes of state", all.total(),
                          all.state_bytes());
    // Some instances failed (said above): the others' sessions still show.
    if (any_listed) out.Message(all, text);
    return status.ok() ? kExitOk : kExitCallFailed;
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
