// Helpers the kernel tests share.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstdint>
#include <vector>

namespace attnserve::testing {

// max |got - want| / max |want|, computed in float64: the error relative to the scale of the
// reference, which stays meaningful where single elements of `want` are near zero.
inline double MaxRelativeError(const at::Tensor& got, const at::Tensor& want) {
  at::Tensor g = got.to(at::kDouble), w = want.to(at::kDouble);
  double scale = w.abs().max().item<double>();
  double err = (g - w).abs().max().item<double>();
  return err / (scale > 0 ? scale : 1.0);
}

// Normal(0, 1) float32 tensor from a fixed seed.
inline at::Tensor RandomTensor(std::vector<int64_t> shape, uint64_t seed, double std = 1.0) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  return at::normal(0.0, std, shape, gen);
}

}  // namespace attnserve::testing
