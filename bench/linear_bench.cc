// attnserve_linear_bench: y = x Wᵀ for the decode-batch row counts, on mamba-130m's largest
// matrix (the tied lm_head, 50280 x 768), its in_proj (3072 x 768) and the default models'
// projections (256 x 256, 1024 x 256), three ways in one run:
//   skinny f32                kernels/common/skinny_gemm.h (kernels::Linear on a float32 tensor
//                             without a LinearWeight: steps up to 64 rows, sequences up to 32)
//   panel f32 / panel bf16    kernels/common/panel_gemm.h (LinearWeight's float32 and
//                             --weight_precision=bf16 weights: every row count)
//   openblas                  at::mv for one row, at::linear (sgemm) for more: the baseline
//   int8                      kernels/common/int8_gemm.h (--weight_precision=int8: the int8
//                             products on the CPU's best instruction set, activations quantized
//                             inside the timing)
// Prints ms per product, GB/s of weights read and GFLOP/s, best of --repeats.
//
//   attnserve_linear_bench [--threads=2] [--repeats=7]
//                          [--int8_isa=avx512-vnni|avx-vnni|avx2|scalar]
// (--int8_isa: the int8 products on that instruction set instead of the best this CPU has, to
// time the fallbacks other CPUs take.)
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/common/blas_kernels.h"
#include "kernels/common/int8_gemm.h"
#include "kernels/common/panel_gemm.h"
#include "kernels/common/skinny_gemm.h"

namespace {

double BestMs(const std::function<void()>& fn, int repeats) {
  fn();  // warm
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    best = std::min(
        best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                  .count());
  }
  return best;
}

// W (out, in) bfloat16 in panel_gemm.h's layout.
at::Tensor PackPanels(const at::Tensor& w_bf16) {
  const int64_t out = w_bf16.size(0), in = w_bf16.size(1);
  at::Tensor panels = at::empty({attnserve::kernels::Bf16PanelWords(out, in)}, at::kInt);
  attnserve::kernels::PackBf16Panels(reinterpret_cast<const uint16_t*>(w_bf16.data_ptr()), out, in,
                                     reinterpret_cast<uint32_t*>(panels.data_ptr()));
  return panels;
}

}  // namespace

int main(int argc, char** argv) {
  // Before anything: the CPU's own OpenBLAS kernels (may re-execute; see blas_kernels.h).
  std::printf("%s\n", attnserve::kernels::UseTheCpusBlasKernels(argv).c_str());
  using attnserve::kernels::Int8Isa;
  int threads = 2, repeats = 7;
  Int8Isa isa = attnserve::kernels::Int8IsaInUse();
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0) {
      std::printf(
          "usage: attnserve_linear_bench [--threads=2] [--repeats=7]\n"
          "         [--int8_isa=avx512-vnni|avx-vnni|avx2|scalar]\n"
          "  y = x W^T on mamba-130m's and the default models' matrices for decode-batch row\n"
          "  counts: the skinny float32 kernel, the float32 and bf16 panels, OpenBLAS, and the\n"
          "  int8 products.\n");
      return 0;
    }
    if (std::strncmp(argv[i], "--threads=", 10) == 0) threads = std::atoi(argv[i] + 10);
    if (std::strncmp(argv[i], "--repeats=", 10) == 0) repeats = std::atoi(argv[i] + 10);
    if (std::strncmp(argv[i], "--int8_isa=", 11) == 0) {
      bool known = false;
      for (Int8Isa candidate :
           {Int8Isa::kAvx512Vnni, Int8Isa::kAvxVnni, Int8Isa::kAvx2, Int8Isa::kScalar}) {
        if (std::strcmp(argv[i] + 11, attnserve::kernels::Int8IsaName(candidate)) != 0) continue;
        known = true;
        isa = candidate;
      }
      if (!known || !attnserve::kernels::Int8IsaSupported(isa)) {
        std::fprintf(stderr, "--int8_isa: %s is not an instruction set this CPU runs\n",
                     argv[i] + 11);
        return 2;
      }
    }
  }
  at::set_num_threads(threads);
  std::printf("int8 products: %s\n", attnserve::kernels::Int8IsaName(isa));
  std::printf("%-8s %5s | %9s %7s %7s | %9s %7s %7s | %9s %7s %7s | %9s %7s %7s | %9s %7s %7s\n",
              "matrix", "rows", "f32 ms", "GB/s", "GFLOP/s", "f32p ms", "GB/s", "GFLOP/s",
              "bf16p ms", "GB/s", "GFLOP/s", "blas ms", "GB/s", "GFLOP/s", "int8 ms", "GB/s",
              "GOP/s");
  for (auto [name, out, in] : {std::tuple<const char*, int64_t, int64_t>{"lm_head", 50280, 768},
                               {"in_proj", 3072, 768},
                               {"256x256", 256, 256},
                               {"1024x256", 1024, 256}}) {
    const at::Tensor w = at::randn({out, in}).to(at::kBFloat16).to(at::kFloat).contiguous();
    const at::Tensor w_bf16 = w.to(at::kBFloat16).contiguous();
    const at::Tensor w_int8 = at::empty({attnserve::kernels::Int8PanelBytes(out, in)}, at::kByte);
    const at::Tensor w_scales = at::empty({attnserve::kernels::Int8PanelScaleCount(out, in)});
    attnserve::kernels::QuantizeWeightInt8(w.data_ptr<float>(), out, in, /*per_row=*/false,
                                           w_int8.data_ptr<uint8_t>(), w_scales.data_ptr<float>());
    const at::Tensor w_panels = PackPanels(w_bf16);
    const at::Tensor w_f32_panels = at::empty({attnserve::kernels::F32PanelFloats(out, in)});
    attnserve::kernels::PackF32Panels(w.data_ptr<float>(), out, in, w_f32_panels.data_ptr<float>());
    for (int64_t rows : {1, 4, 8, 16, 24, 32, 48, 64, 256}) {
      const at::Tensor x = at::randn({rows, in});
      at::Tensor y = at::empty({rows, out});
      const double f32 = BestMs(
          [&] {
            attnserve::kernels::SkinnyGemmF32(w.data_ptr<float>(), out, in, x.data_ptr<float>(), in,
                                              rows, y.data_ptr<float>());
          },
          repeats);
      const double f32p = BestMs(
          [&] {
            attnserve::kernels::PanelGemmF32(w_f32_panels.data_ptr<float>(), out, in,
                                             x.data_ptr<float>(), in, rows, y.data_ptr<float>());
          },
          repeats);
      const double bf16 = BestMs(
          [&] {
            attnserve::kernels::PanelGemmBf16(
                reinterpret_cast<const uint32_t*>(w_panels.data_ptr()), out, in,
                x.data_ptr<float>(), in, rows, y.data_ptr<float>());
          },
          repeats);
      const double blas = BestMs(
          [&] {
            if (rows == 1) {
              y = at::mv(w, x[0]);
            } else {
              y = at::linear(x, w);
            }
          },
          repeats);
      const double int8 = BestMs(
          [&] {
            attnserve::kernels::Int8Gemm(w_int8.data_ptr<uint8_t>(), w_scales.data_ptr<float>(),
                                         out, in, x.data_ptr<float>(), in, rows,
                                         y.data_ptr<float>(), isa);
          },
          repeats);
      const double flop = 2.0 * out * in * rows, bytes = 4.0 * out * in;
      auto row = [&](double ms, double b) {
        std::printf(" | %9.3f %7.1f %7.1f", ms, b / ms / 1e6, flop / ms / 1e6);
      };
      std::printf("%-8s %5lld", name, static_cast<long long>(rows));
      row(f32, bytes);
      row(f32p, bytes);
      row(bf16, bytes / 2);
      row(blas, bytes);
      row(int8, bytes / 4 * (1 + 4.0 / attnserve::kernels::kInt8Block));
      std::printf("\n");
    }
  }
  // A decode step's layers: 24 distinct in_proj (3072 x 768) and out_proj (768 x 1536)
  // matrices, one after another, each cold (340 MB in all in fp32), in the panels the model
  // uses: the streaming of mid-sized matrices, parallel-region overhead included.
  std::printf("\n%-18s %5s | %9s %7s | %9s %7s\n", "24 layers, panels", "rows", "f32 ms", "GB/s",
              "bf16 ms", "GB/s");
  std::vector<at::Tensor> f32_panels, bf16_panels;
  std::vector<std::pair<int64_t, int64_t>> shapes;
  double bytes = 0;
  for (int l = 0; l < 24; ++l) {
    for (auto [out, in] : {std::pair<int64_t, int64_t>{3072, 768}, {768, 1536}}) {
      const at::Tensor w = at::randn({out, in});
      bf16_panels.push_back(PackPanels(w.to(at::kBFloat16).contiguous()));
      f32_panels.push_back(at::empty({attnserve::kernels::F32PanelFloats(out, in)}));
      attnserve::kernels::PackF32Panels(w.data_ptr<float>(), out, in,
                                        f32_panels.back().data_ptr<float>());
      shapes.push_back({out, in});
      bytes += 4.0 * out * in;
    }
  }
  for (int64_t rows : {1, 16, 64}) {
    const at::Tensor x = at::randn({rows, 1536});
    at::Tensor y = at::empty({rows, 3072});
    auto pass = [&](bool bf16) {
      for (size_t i = 0; i < shapes.size(); ++i) {
        const auto [out, in] = shapes[i];
        if (bf16) {
          attnserve::kernels::PanelGemmBf16(
              reinterpret_cast<const uint32_t*>(bf16_panels[i].data_ptr()), out, in,
              x.data_ptr<float>(), 1536, rows, y.data_ptr<float>());
        } else {
          attnserve::kernels::PanelGemmF32(f32_panels[i].data_ptr<float>(), out, in,
                                           x.data_ptr<float>(), 1536, rows, y.data_ptr<float>());
        }
      }
    };
    const double f32 = BestMs([&] { pass(false); }, repeats);
    const double bf16 = BestMs([&] { pass(true); }, repeats);
    std::printf("%-18s %5lld | %9.3f %7.1f | %9.3f %7.1f\n", "in_proj+out_proj",
                static_cast<long long>(rows), f32, bytes / f32 / 1e6, bf16, bytes / 2 / bf16 / 1e6);
  }
  return 0;
}
