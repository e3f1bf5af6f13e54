// attnserve_chunked_prefill_bench: what streaming a prompt costs the model, in-process (no
// gRPC, no scheduler): Model::Forward of L tokens in chunks of C tokens on one session's
// state, for each C in --chunks, against the same L tokens in one pass without a state (the
// baseline, "whole"). The server cuts a unary request into --max_batch_tokens chunks (256 by
// default) and a stream arrives in its appends' chunks, so the ratios here are the model's
// share of what a stream costs over a unary request; the rest is serving (round trips, the
// scheduler). Every model of a repository folder that can stream (or the built-in defaults).
//
//   attnserve_chunked_prefill_bench [--repository=DIR] [--lengths=1024,4096]
//                                   [--chunks=256,64,16] [--threads=2] [--reps=3]
//                                   [--models=standard,sparse] (default: every one)
//                                   [--precision=fp32|bf16|int8] (the server's --weight_precision)
// The models are measured length by length, in rounds of every model once (best of --reps
// rounds), so their ratios at one length come from the same minutes of a noisy machine.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "bench/bench_util.h"
#include "kernels/common/blas_kernels.h"
#include "server/model/model_repository.h"

namespace {

using attnserve::model::Model;
using attnserve::model::ModelState;
using attnserve::model::OutputKind;

// Seconds for the L tokens in chunks of `chunk` on a fresh state (chunk 0: one pass, no
// state); the last chunk asks for the last logits, the others for the hidden state (as the
// load test's appends ask for nothing but the last). Best of `reps`.
double Seconds(const Model& m, const at::Tensor& tokens, int64_t chunk, int reps) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    absl::StatusOr<ModelState> state = m.NewState();
    if (!state.ok()) attnserve::bench::Die("NewState", state.status());
    const int64_t length = tokens.size(1);
    const auto start = std::chrono::steady_clock::now();
    if (chunk == 0) {
      if (absl::StatusOr<at::Tensor> out = m.Forward(tokens, nullptr, OutputKind::kLastLogits);
          !out.ok()) {
        attnserve::bench::Die("Forward", out.status());
      }
    } else {
      for (int64_t at = 0; at < length; at += chunk) {
        const int64_t n = std::min(chunk, length - at);
        const OutputKind kind = at + n == length ? OutputKind::kLastLogits : OutputKind::kHidden;
        if (absl::StatusOr<at::Tensor> out = m.Forward(tokens.narrow(1, at, n), &*state, kind);
            !out.ok()) {
          attnserve::bench::Die("Forward", out.status());
        }
      }
    }
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything: the CPU's own OpenBLAS kernels (may re-execute; see blas_kernels.h).
  std::printf("%s\n", attnserve::kernels::UseTheCpusBlasKernels(argv).c_str());
  using namespace attnserve;
  bench::SweepFlags flags;
  flags.lengths = "1024,4096";
  std::string repository, chunk_list = "256,64,16", model_list;
  model::ModelOptions options;
  options.exportable = false;  // as the server: each matrix kept once
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (flags.Parse(arg)) continue;
    if (const char* v = bench::FlagValue(arg, "--repository")) {
      repository = v;
    } else if (const char* v = bench::FlagValue(arg, "--chunks")) {
      chunk_list = v;
    } else if (const char* v = bench::FlagValue(arg, "--models")) {
      model_list = v;
    } else if (const char* v = bench::FlagValue(arg, "--precision")) {
      const std::string p = v;
      if (p == "bf16") {
        options.precision = model::WeightPrecision::kBfloat16;
      } else if (p == "int8") {
        options.precision = model::WeightPrecision::kInt8;
      } else if (p != "fp32") {
        std::fprintf(stderr, "--precision: expected fp32, bf16 or int8, got %s\n", v);
        return 2;
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", arg.c_str());
      return 2;
    }
  }
  const std::vector<int64_t> lengths = flags.Lengths();
  const std::optional<std::vector<int64_t>> chunks = bench::PositiveList(chunk_list);
  if (!chunks) {
    std::fprintf(stderr, "--chunks: expected positive integers, got %s\n", chunk_list.c_str());
    return 2;
  }
  const int reps = flags.reps;
  flags.Start();
  auto repo = repository.empty() ? model::ModelRepository::BuildDefault(options)
                                 : model::ModelRepository::LoadFolder(repository, options);
  if (!repo.ok()) {
    std::cerr << repo.status() << std::endl;
    return 1;
  }
  std::printf("%-15s %7s %12s", "model", "tokens", "whole tok/s");
  for (int64_t c : *chunks)
    std::printf(" %10s%-4lld %7s", "chunk ", static_cast<long long>(c), "x");
  std::printf("\n");
  const std::vector<std::string> wanted = absl::StrSplit(model_list, ',', absl::SkipEmpty());
  std::vector<const model::Model*> models;
  for (const model::Model* m : (*repo)->models()) {
    if (!m->can_stream()) continue;
    if (wanted.empty() || std::find(wanted.begin(), wanted.end(), m->name()) != wanted.end()) {
      models.push_back(m);
    }
  }
  for (int64_t length : lengths) {
    // Best of `reps` rounds, each round every model once (whole, then each chunk size): a
    // slow minute of a shared machine then weighs on every model of the length alike.
    const size_t n = models.size(), columns = 1 + chunks->size();
    std::vector<at::Tensor> tokens;
    for (const model::Model* m : models) {
      tokens.push_back(
          at::randint(0, m->config().vocab_size(), {1, length}, at::TensorOptions(at::kLong)));
      Seconds(*m, tokens.back(), 0, 1);  // warm
    }
    std::vector<double> best(n * columns, 1e30);
    for (int r = 0; r < reps; ++r) {
      for (size_t i = 0; i < n; ++i) {
        best[i * columns] = std::min(best[i * columns], Seconds(*models[i], tokens[i], 0, 1));
        for (size_t c = 0; c < chunks->size(); ++c) {
          best[i * columns + 1 + c] =
              std::min(best[i * columns + 1 + c], Seconds(*models[i], tokens[i], (*chunks)[c], 1));
        }
      }
    }
    for (size_t i = 0; i < n; ++i) {
      const double whole = best[i * columns];
      std::printf("%-15s %7lld %12.0f", models[i]->name().c_str(), static_cast<long long>(length),
                  length / whole);
      for (size_t c = 0; c < chunks->size(); ++c) {
        const double s = best[i * columns + 1 + c];
        std::printf(" %14.0f %6.2fx", length / s, s / whole);
      }
      std::printf("\n");
    }
    std::fflush(stdout);
  }
  return 0;
}
