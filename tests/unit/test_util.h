// Helpers the kernel tests share.
#pragma once

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
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

// RandomTensor rounded to values bfloat16 holds exactly, as --weight_precision=bf16 makes them.
inline at::Tensor Bf16Exact(std::vector<int64_t> shape, uint64_t seed) {
  return RandomTensor(std::move(shape), seed).to(at::kBFloat16).to(at::kFloat);
}

// Streams x (B, L, D) through `mixer` from a fresh state: chunks of random sizes 1 ..
// max_chunk up to L - tail, then `tail` single steps. Returns the outputs joined (B, L, D)
// (undefined on the first error); `position` gets the state's.
template <typename MixerT, typename Rng>
at::Tensor StreamInChunksThenSteps(const MixerT& mixer, const at::Tensor& x, Rng& rng,
                                   int64_t max_chunk, int64_t tail, int64_t* position) {
  const int64_t len = x.size(1);
  auto state = mixer.InitialState(x.size(0));
  if (!state.ok()) return {};
  std::vector<at::Tensor> parts;
  int64_t pos = 0;
  while (pos < len - tail) {
    const int64_t n = std::min<int64_t>(1 + rng() % max_chunk, len - tail - pos);
    auto y = mixer.Prefill(x.narrow(1, pos, n), &*state);
    if (!y.ok()) return {};
    parts.push_back(*y);
    pos += n;
  }
  for (; pos < len; ++pos) {
    auto y = mixer.Step(x.select(1, pos), &*state);
    if (!y.ok()) return {};
    parts.push_back(y->unsqueeze(1));
  }
  *position = state->position;
  return at::cat(parts, 1);
}

}  // namespace attnserve::testing
