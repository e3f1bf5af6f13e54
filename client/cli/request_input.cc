#include "client/cli/request_input.h"

#include <iostream>
#include <random>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/cli/flags.h"

namespace attnserve::cli {
namespace {

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

}  // namespace

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

bool TokenSource::Open(Printer& out, const std::string& sub, Stub& stub) {
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

bool TokenSource::ReadAll(Printer& out, const std::string& sub, std::vector<int64_t>* ids) {
  absl::StatusOr<int64_t> n = reader_->Next(INT64_MAX, *ids);
  if (!n.ok()) out.Problem(sub, std::string(n.status().message()));
  return n.ok();
}

}  // namespace attnserve::cli
