// attnserve-cli models, infer and health: one call each.
#include "client/cli/commands.h"

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
#include "client/cli/flags.h"
#include "client/cli/request_input.h"
#include "client/cli/text_input.h"
#include "client/common/channel.h"
#include "client/common/grpc_status.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace attnserve::cli {
namespace {

namespace v1 = attnserve::v1;

std::string FormatModel(const v1::ModelInfo& m) {
  const v1::ModelConfig& c = m.config();
  return absl::StrFormat(
      "%-12s layers=[%s] vocab=%d hidden=%d causal=%s stream=%s max_len=%d "
      "state/session=%dB state/token=%dB",
      m.name(), absl::StrJoin(c.layers(), ","), c.vocab_size(), c.hidden_size(),
      m.causal() ? "yes" : "no", m.can_stream() ? "yes" : "no", m.max_sequence_length(),
      m.state_bytes_per_session(), m.state_bytes_per_token());
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
