// attnserve-cli tokenize and detokenize: a model's tokenizer over gRPC (AttnServe.Tokenize,
// Detokenize).
#include <grpcpp/grpcpp.h>

#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "attnserve/v1/inference.grpc.pb.h"
#include "client/cli/commands.h"
#include "client/cli/flags.h"
#include "client/cli/text_input.h"
#include "client/cli/token_reader.h"
#include "client/common/channel.h"

namespace attnserve::cli {
int RunTokenize(Printer& out) {
  v1::TokenizeRequest req;
  req.set_model(absl::GetFlag(FLAGS_model));
  if (req.model().empty() || req.model() == "auto") {
    out.Problem("tokenize", "name a model with --model (each model has its own tokenizer)");
    return kExitUsage;
  }
  if (!ReadText(out, "tokenize", req.mutable_text())) return kExitUsage;
  req.set_no_special_tokens(absl::GetFlag(FLAGS_no_special_tokens));
  auto stub = v1::AttnServe::NewStub(client::MakeChannel(absl::GetFlag(FLAGS_target)));
  grpc::ClientContext ctx;
  if (absl::GetFlag(FLAGS_timeout) > 0)
    ctx.set_deadline(client::DeadlineAfter(absl::GetFlag(FLAGS_timeout)));
  v1::TokenizeResponse resp;
  if (grpc::Status status = stub->Tokenize(&ctx, req, &resp); !status.ok()) {
    out.Error("tokenize", status);
    return kExitCallFailed;
  }
  out.Message(resp,
              absl::StrCat(absl::StrJoin(resp.tokens(), " "), "\n(", resp.count(), " tokens)"));
  return kExitOk;
}

int RunDetokenize(Printer& out) {
  v1::DetokenizeRequest req;
  req.set_model(absl::GetFlag(FLAGS_model));
  if (req.model().empty() || req.model() == "auto") {
    out.Problem("detokenize", "name a model with --model (each model has its own tokenizer)");
    return kExitUsage;
  }
  absl::StatusOr<std::vector<int64_t>> ids = ParseTokens(absl::GetFlag(FLAGS_tokens));
  if (!ids.ok() || ids->empty()) {
    out.Problem("detokenize", ids.ok() ? "give the ids with --tokens=1,2,3"
                                       : std::string(ids.status().message()));
    return kExitUsage;
  }
  req.mutable_tokens()->Add(ids->begin(), ids->end());
  req.set_skip_special_tokens(absl::GetFlag(FLAGS_skip_special_tokens));
  auto stub = v1::AttnServe::NewStub(client::MakeChannel(absl::GetFlag(FLAGS_target)));
  grpc::ClientContext ctx;
  if (absl::GetFlag(FLAGS_timeout) > 0)
    ctx.set_deadline(client::DeadlineAfter(absl::GetFlag(FLAGS_timeout)));
  v1::DetokenizeResponse resp;
  if (grpc::Status status = stub->Detokenize(&ctx, req, &resp); !status.ok()) {
    out.Error("detokenize", status);
    return kExitCallFailed;
  }
  out.Message(resp, resp.text());
  return kExitOk;
}

}  // namespace attnserve::cli
