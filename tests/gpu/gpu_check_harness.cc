#include "tests/gpu/gpu_check_harness.h"

#include <ATen/cuda/CUDAContext.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace attnserve::gpu_check {

std::vector<Row> g_rows;
Floors g_floors;
Options g_options;

at::TensorOptions Cuda(at::ScalarType dtype) {
  return at::TensorOptions().device(at::kCUDA).dtype(dtype);
}

Tensor Nan(at::IntArrayRef shape, at::ScalarType dtype) {
  return at::full(shape, std::numeric_limits<float>::quiet_NaN(), Cuda(dtype));
}

// Median milliseconds of fn on the current stream: one warm-up, one run to size the repeats
// (about 0.3 s of measurement, 3 to 25 repeats), then one event pair per repeat.
double TimeMs(const std::function<void()>& fn) {
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream().stream();
  cudaEvent_t start, stop;
  CHECK_CUDA(cudaEventCreate(&start));
  CHECK_CUDA(cudaEventCreate(&stop));
  auto once = [&]() {
    CHECK_CUDA(cudaEventRecord(start, stream));
    fn();
    CHECK_CUDA(cudaEventRecord(stop, stream));
    CHECK_CUDA(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
    return static_cast<double>(ms);
  };
  once();  // warm-up
  const double estimate = once();
  const int reps = std::clamp(static_cast<int>(300.0 / std::max(estimate, 1e-3)), 3, 25);
  std::vector<double> times;
  for (int i = 0; i < reps; ++i) times.push_back(once());
  CHECK_CUDA(cudaEventDestroy(start));
  CHECK_CUDA(cudaEventDestroy(stop));
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// max |got - ref| / max |ref|; infinity when `got` has a NaN or an infinity (e.g. an element
// left at its NaN poison).
double RelErr(const Tensor& got, const Tensor& ref) {
  const Tensor g = got.to(ref.device(), at::kDouble);
  if (!at::isfinite(g).all().item<bool>()) return std::numeric_limits<double>::infinity();
  const double den = ref.abs().max().item<double>();
  return (g - ref.to(at::kDouble)).abs().max().item<double>() / std::max(den, 1e-300);
}

bool Selected(const std::string& name) {
  return g_options.only.empty() || name.find(g_options.only) != std::string::npos;
}

// Times `fn`, fills the rate columns and records the row.
void Finish(Row row, const std::function<void()>& fn, double bytes, double flops, bool bf16) {
  row.ok = std::isfinite(row.err) && row.err <= row.budget;
  try {
    row.ms = TimeMs(fn);
    const double s = row.ms * 1e-3;
    row.gbps = bytes / s * 1e-9;
    if (flops > 0) row.tflops = flops / s * 1e-12;
    const double rate = bf16 ? g_floors.bf16_flops_per_s : g_floors.fp32_flops_per_s;
    const double floor_s = std::max(bytes / g_floors.copy_bytes_per_s, flops / rate);
    row.floor_frac = floor_s / s;
  } catch (const std::exception& e) {
    row.ok = false;
    row.note = std::string("timing failed: ") + e.what();
  }
  std::printf(
      "%-22s %-34s %-5s err %.2e (budget %.2e) %s  %9.3f ms  %8.1f GB/s  %7.2f TFLOP/s"
      "  floor %5.1f%%%s%s\n",
      row.kernel.c_str(), row.shape.c_str(), row.dtype.c_str(), row.err, row.budget,
      row.ok ? "ok  " : "FAIL", row.ms, row.gbps, row.tflops, 100 * row.floor_frac,
      row.note.empty() ? "" : "  ", row.note.c_str());
  std::fflush(stdout);
  g_rows.push_back(row);
}

// Runs one case, turning an exception into a failed row.
void RunCase(const std::string& kernel, const std::string& shape, const std::string& dtype,
             const std::function<void(Row&)>& body) {
  if (!Selected(kernel + " " + shape + " " + dtype)) return;
  Row row;
  row.kernel = kernel;
  row.shape = shape;
  row.dtype = dtype;
  try {
    body(row);
  } catch (const std::exception& e) {
    std::string what = e.what();
    if (const size_t nl = what.find('\n'); nl != std::string::npos) what.resize(nl);
    row.ok = false;
    row.note = "exception: " + what;
    std::printf("%-22s %-34s %-5s FAIL  %s\n", kernel.c_str(), shape.c_str(), dtype.c_str(),
                row.note.c_str());
    std::fflush(stdout);
    g_rows.push_back(row);
  }
}

std::string Shape(std::initializer_list<std::pair<const char*, int64_t>> dims) {
  std::string s;
  for (const auto& [name, value] : dims) {
    s += (s.empty() ? "" : " ") + std::string(name) + "=" + std::to_string(value);
  }
  return s;
}

// bfloat16 inputs: the kernel sees x rounded to bfloat16, and so does the reference.
Tensor AsType(const Tensor& x, at::ScalarType dtype) { return x.to(dtype); }

// ---------------------------------------------------------------- floors

void MeasureFloors() {
  const int64_t n = int64_t{1} << 28;  // 1 GiB of float32
  Tensor src = at::randn({n}, Cuda()), dst = at::empty({n}, Cuda());
  const double copy_ms = TimeMs([&] { dst.copy_(src); });
  g_floors.copy_bytes_per_s = 2.0 * n * 4 / (copy_ms * 1e-3);
  const int64_t m = 8192;
  Tensor a = at::randn({m, m}, Cuda()), b = at::randn({m, m}, Cuda());
  const double mm_ms = TimeMs([&] { at::mm(a, b); });
  g_floors.fp32_flops_per_s = 2.0 * m * m * m / (mm_ms * 1e-3);
  Tensor ab = a.to(at::kBFloat16), bb = b.to(at::kBFloat16);
  const double bf_ms = TimeMs([&] { at::mm(ab, bb); });
  g_floors.bf16_flops_per_s = 2.0 * m * m * m / (bf_ms * 1e-3);
  std::printf(
      "floors: device-to-device copy %.0f GB/s, float32 matmul (no TF32) %.1f TFLOP/s, "
      "bfloat16 matmul %.1f TFLOP/s\n\n",
      g_floors.copy_bytes_per_s * 1e-9, g_floors.fp32_flops_per_s * 1e-12,
      g_floors.bf16_flops_per_s * 1e-12);
}

}  // namespace attnserve::gpu_check
