// attnserve-cli sessions: list, get, close, export and import sessions.
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
#include "client/cli/snapshot_files.h"
#include "client/common/channel.h"
#include "client/common/grpc_status.h"
#include "google/protobuf/struct.pb.h"

namespace attnserve::cli {
namespace {

namespace v1 = attnserve::v1;

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

// Largest piece of a snapshot per SessionSnapshotChunk sent (ImportSession).
constexpr size_t kSnapshotChunkBytes = size_t{1} << 20;

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

}  // namespace

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

}  // namespace attnserve::cli
