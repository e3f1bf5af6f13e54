// attnserve_step_bench: the model's batched decode step in-process (no gRPC, no scheduler):
// Model::StepBatch of B sessions' states, for each B in --batches, on every model of a
// repository folder (or the built-in defaults). With the server's figures from
// attnserve_decode_bench, it tells the model's time from the serving overhead.
//
//   attnserve_step_bench [--repository=DIR] [--batches=1,4,16,64] [--steps=20] [--threads=2]
//                        [--models=mamba,rwkv] [--bf16 | --bf16-dot | --int8] [--parts=1,2]
//                        [--kv-bf16]
// (--parts: Model::StepBatch's data-parallel parts, each figure measured at each; auto: what the
// server's scheduler picks, server/scheduler/decode_parts.h; default auto.)
// (--models: only these models of the repository; default: every streaming one.)
// (--bf16-dot: bfloat16 weights and activations, --activation_precision=bf16.)
// (--kv-bf16: bfloat16 KV caches, --kv_cache_precision=bf16.)
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "kernels/common/blas_kernels.h"
#include "server/model/model_repository.h"
#include "server/scheduler/decode_parts.h"

int main(int argc, char** argv) {
  // Before anything: the CPU's own OpenBLAS kernels (may re-execute; see blas_kernels.h).
  std::printf("%s\n", attnserve::kernels::UseTheCpusBlasKernels(argv).c_str());
  using namespace attnserve;
  std::string repository, batches = "1,4,16,64", models, parts_list = "auto";
  int steps = 20, threads = 2;
  model::ModelOptions options;
  options.exportable = false;  // as the server: each matrix kept once
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help") {
      std::printf(
          "usage: attnserve_step_bench [--repository=DIR] [--batches=1,4,16,64] [--steps=20]\n"
          "         [--threads=2] [--models=mamba,rwkv] [--bf16 | --bf16-dot | --int8]\n"
          "         [--parts=auto|1,2] [--kv-bf16]\n"
          "  Model::StepBatch of B sessions in process (no gRPC, no scheduler): ms a step and\n"
          "  tokens/s for each batch size and part count.\n");
      return 0;
    }
    if (arg.rfind("--repository=", 0) == 0) repository = arg.substr(13);
    if (arg.rfind("--batches=", 0) == 0) batches = arg.substr(10);
    if (arg.rfind("--models=", 0) == 0) models = "," + arg.substr(9) + ",";
    if (arg.rfind("--steps=", 0) == 0) steps = std::atoi(arg.c_str() + 8);
    if (arg.rfind("--parts=", 0) == 0) parts_list = arg.substr(8);
    if (arg.rfind("--threads=", 0) == 0) threads = std::atoi(arg.c_str() + 10);
    if (arg == "--bf16") options.precision = model::WeightPrecision::kBfloat16;
    if (arg == "--bf16-dot") options.precision = model::WeightPrecision::kBfloat16Dot;
    if (arg == "--int8") options.precision = model::WeightPrecision::kInt8;
    if (arg == "--kv-bf16") options.kv_cache_dtype = at::kBFloat16;
  }
  at::set_num_threads(threads);
  auto repo = repository.empty() ? model::ModelRepository::BuildDefault(options)
                                 : model::ModelRepository::LoadFolder(repository, options);
  if (!repo.ok()) {
    std::cerr << repo.status() << std::endl;
    return 1;
  }
  const std::optional<std::vector<int64_t>> batch_sizes = bench::PositiveList(batches);
  if (!batch_sizes) {
    std::cerr << "--batches: expected positive integers, got " << batches << std::endl;
    return 2;
  }
  // 0 stands for auto.
  const std::optional<std::vector<int64_t>> part_counts =
      parts_list == "auto" ? std::vector<int64_t>{0} : bench::PositiveList(parts_list);
  if (!part_counts) {
    std::cerr << "--parts: expected positive integers, got " << parts_list << std::endl;
    return 2;
  }
  std::printf("%-12s %12s %6s %6s %12s %14s\n", "model", "weights MB", "B", "parts", "ms/step",
              "tokens/s");
  for (const model::Model* m : (*repo)->models()) {
    if (!m->can_stream()) continue;
    if (!models.empty() && models.find("," + m->name() + ",") == std::string::npos) continue;
    for (const int64_t b : *batch_sizes) {
      // A different token a row (spread over the vocabulary): rows of one token would all route
      // to the same experts of a mixture-of-experts layer, reading fewer weights than sessions do.
      std::vector<int64_t> tokens(b);
      for (int64_t i = 0; i < b; ++i) tokens[i] = (1 + 7919 * i) % m->vocab_size();
      // Each part count in turn, so that the machine's drift touches all, each on fresh states
      // (a KV cache's step grows with its position).
      for (int64_t parts : *part_counts) {
        if (parts == 0) {
          parts =
              server::scheduler::DecodeParts(b, threads, m->DecodeWeightBytes(),
                                             server::scheduler::kDefaultDecodeSplitMaxBytesPerRow);
        }
        std::vector<model::ModelState> states;
        std::vector<model::ModelState*> pointers;
        for (int64_t i = 0; i < b; ++i) states.push_back(*m->NewState());
        for (auto& s : states) pointers.push_back(&s);
        for (int i = 0; i < 3; ++i) (void)m->StepBatch(tokens, pointers, parts);  // warm
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < steps; ++i) {
          absl::StatusOr<at::Tensor> logits = m->StepBatch(tokens, pointers, parts);
          if (!logits.ok()) {
            std::cerr << logits.status() << std::endl;
            return 1;
          }
        }
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                .count() /
            steps;
        std::printf("%-12s %12.1f %6lld %6lld %12.2f %14.1f\n", m->name().c_str(),
                    m->DecodeWeightBytes() / 1e6, static_cast<long long>(b),
                    static_cast<long long>(parts), ms, b * 1000.0 / ms);
      }
    }
  }
  return 0;
}
