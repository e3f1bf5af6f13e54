// The harness of the GPU check (tests/gpu/gpu_check.cc, ssd_check.cc): the rows of the result
// table, timing against the measured floors, the comparison and the case runner. LibTorch and
// CUDA only. Single-threaded: the cases run one after the other on the current stream.
#pragma once

#include <ATen/ATen.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace attnserve::gpu_check {

using at::Tensor;

#define CHECK_CUDA(expr)                                                                       \
  do {                                                                                         \
    const cudaError_t _e = (expr);                                                             \
    if (_e != cudaSuccess) {                                                                   \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " + \
                               #expr + ": " + cudaGetErrorString(_e));                         \
    }                                                                                          \
  } while (0)

constexpr double kFloat32Budget = 1e-4;
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();

struct Options {
  bool quick = false;
  std::string only;
};

// The floors everything is compared with, measured once.
struct Floors {
  double copy_bytes_per_s = 0;  // device-to-device copy: (read + written bytes) / time
  double fp32_flops_per_s = 0;  // at::mm float32, TF32 off
  double bf16_flops_per_s = 0;  // at::mm bfloat16
};

struct Row {
  std::string kernel, shape, dtype;
  double err = kNan, budget = kNan, ms = kNan, gbps = kNan, tflops = kNan, floor_frac = kNan;
  bool ok = false;
  std::string note;
};

extern std::vector<Row> g_rows;
extern Floors g_floors;
extern Options g_options;

at::TensorOptions Cuda(at::ScalarType dtype = at::kFloat);
// A tensor of NaN: a kernel's output buffer, so that an element it does not write fails.
Tensor Nan(at::IntArrayRef shape, at::ScalarType dtype);
// Median milliseconds of fn on the current stream (warm-up, then 3 to 25 repeats).
double TimeMs(const std::function<void()>& fn);
// max |got - ref| / max |ref|; infinity when `got` has a NaN or an infinity.
double RelErr(const Tensor& got, const Tensor& ref);
bool Selected(const std::string& name);
// Times `fn`, fills the rate columns and records the row.
void Finish(Row row, const std::function<void()>& fn, double bytes, double flops, bool bf16);
// Runs one case, turning an exception into a failed row.
void RunCase(const std::string& kernel, const std::string& shape, const std::string& dtype,
             const std::function<void(Row&)>& body);
std::string Shape(std::initializer_list<std::pair<const char*, int64_t>> dims);
// bfloat16 inputs: the kernel sees x rounded to bfloat16, and so does the reference.
Tensor AsType(const Tensor& x, at::ScalarType dtype);
void MeasureFloors();

// The Mamba-2 SSD scan (ssd_check.cc): the chunked prefill and the decode step against a
// float64 recurrence on the CPU.
void CheckSsdScan(int64_t batch, int64_t len, int64_t heads, int64_t head_dim, int64_t groups,
                  int64_t dstate);
void CheckSsdStep(int64_t sessions, int64_t heads, int64_t head_dim, int64_t groups,
                  int64_t dstate);

}  // namespace attnserve::gpu_check
