// attnserve_logits_dump: a model folder's logits as the server computes them while streaming,
// for bench/int8_accuracy.py: the first --prompt ids of --tokens as one chunk, then one decode
// step per remaining id (teacher-forced), and separately --generate greedy ids after the prompt.
//
//   attnserve_logits_dump --folder=DIR --precision=fp32|bf16|bf16dot|int8|int8_row --tokens=FILE
//                         [--prompt=8] [--generate=32] [--threads=2] --out=PREFIX
//
// FILE: whitespace-separated token ids (T of them). Writes PREFIX.logits, float32 little-endian
// (T - prompt + 1, vocab): the last logits after the prompt chunk and after each step; and
// PREFIX.greedy, the greedy ids on one line.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "kernels/common/blas_kernels.h"
#include "kernels/common/int8_gemm.h"
#include "server/model/model_io.h"

namespace {

at::Tensor Ids(const std::vector<int64_t>& ids, int64_t begin, int64_t n) {
  return at::tensor(std::vector<int64_t>(ids.begin() + begin, ids.begin() + begin + n))
      .view({1, n});
}

}  // namespace

int main(int argc, char** argv) {
  std::fprintf(stderr, "%s\n", attnserve::kernels::UseTheCpusBlasKernels(argv).c_str());
  using namespace attnserve;
  std::string folder, precision = "fp32", tokens_file, out;
  int64_t prompt = 8, generate = 32;
  int threads = 2;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&](const char* flag) -> const char* {
      const size_t n = std::string(flag).size();
      return arg.compare(0, n, flag) == 0 ? arg.c_str() + n : nullptr;
    };
    if (const char* v = value("--folder=")) folder = v;
    if (const char* v = value("--precision=")) precision = v;
    if (const char* v = value("--tokens=")) tokens_file = v;
    if (const char* v = value("--out=")) out = v;
    if (const char* v = value("--prompt=")) prompt = std::atoll(v);
    if (const char* v = value("--generate=")) generate = std::atoll(v);
    if (const char* v = value("--threads=")) threads = std::atoi(v);
  }
  model::ModelOptions options;
  options.exportable = false;  // as the server: each matrix kept once
  if (precision == "bf16") {
    options.precision = model::WeightPrecision::kBfloat16;
  } else if (precision == "bf16dot") {  // --weight_precision=bf16 --activation_precision=bf16
    options.precision = model::WeightPrecision::kBfloat16Dot;
  } else if (precision == "int8") {
    options.precision = model::WeightPrecision::kInt8;
  } else if (precision == "int8_row") {
    options.precision = model::WeightPrecision::kInt8PerRow;
  } else if (precision != "fp32") {
    std::cerr << "--precision: expected fp32, bf16, bf16dot, int8 or int8_row" << std::endl;
    return 2;
  }
  std::vector<int64_t> ids;
  std::ifstream in(tokens_file);
  for (int64_t id; in >> id;) ids.push_back(id);
  const int64_t total = static_cast<int64_t>(ids.size());
  if (folder.empty() || out.empty() || prompt < 1 || total < prompt) {
    std::cerr << "usage: --folder=DIR --tokens=FILE (at least --prompt ids) --out=PREFIX"
              << std::endl;
    return 2;
  }
  at::set_num_threads(threads);
  auto m = model::LoadModelFolder(folder, "model", options);
  if (!m.ok()) {
    std::cerr << m.status() << std::endl;
    return 1;
  }
  std::cerr << "int8 products: " << kernels::Int8IsaName(kernels::Int8IsaInUse()) << std::endl;
  const model::Model& model = **m;
  auto run = [&](const at::Tensor& chunk, model::ModelState* state) {
    auto logits = model.Forward(chunk, state, model::OutputKind::kLastLogits);
    if (!logits.ok()) {
      std::cerr << logits.status() << std::endl;
      std::exit(1);
    }
    return *logits;
  };
  std::vector<at::Tensor> rows;
  auto state = model.NewState();
  rows.push_back(run(Ids(ids, 0, prompt), &*state));
  for (int64_t t = prompt; t < total; ++t) rows.push_back(run(Ids(ids, t, 1), &*state));
  const at::Tensor logits = at::cat(rows).contiguous();
  std::ofstream(out + ".logits", std::ios::binary)
      .write(reinterpret_cast<const char*>(logits.data_ptr<float>()), logits.numel() * 4);

  auto greedy_state = model.NewState();
  at::Tensor last = run(Ids(ids, 0, prompt), &*greedy_state);
  std::ofstream greedy(out + ".greedy");
  for (int64_t g = 0; g < generate; ++g) {
    const int64_t next = last.argmax(-1).item<int64_t>();
    greedy << next << (g + 1 < generate ? " " : "\n");
    last = run(at::tensor({next}).view({1, 1}), &*greedy_state);
  }
  return 0;
}
