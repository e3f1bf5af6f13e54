// How one generation draws its tokens from the model's last-position logits: the one
// definition of sampling that every protocol door uses (each fills a scheduler::Sampling from
// its own request).
//
// The order of application, for each generated token (vLLM's order):
//   1. the vocabulary limit: only ids below Sampling::vocab_limit take part;
//   2. logit_bias: bias[id] is added to logit[id];
//   3. repetition_penalty r (HF / vLLM's): for every id in the prompt or generated so far, a
//      positive logit is divided by r, a negative one multiplied by it;
//   4. frequency_penalty f and presence_penalty p (OpenAI's): for every id generated so far
//      c times, logit -= c * f + p;
//   5. temperature 0: greedy, the first maximum of those logits. Otherwise the logits are
//      divided by the temperature, and of their softmax only
//   6. the top_k most likely (0: all),
//   7. of those, the fewest most likely whose probability sums to at least top_p,
//   8. of those, the ones at least min_p times the most likely's probability
//   stay; the token is drawn from them, renormalized.
// Probabilities are computed in float64 from the float32 logits, so that a seed gives the same
// draw on every machine, and the random stream is the job's own (Sampling::seed): the same seed
// gives the same tokens alone or in any batch.
//
// Log-probabilities (SampledToken::logprob and top): those of the distribution the token was
// actually drawn from, i.e. after steps 1-8 (renormalized over what stayed; -inf is never
// reported: `top` lists at most the tokens that stayed). At temperature 0 a draw has a single
// possible outcome, so greedy reports the distribution after steps 1-4 at temperature 1
// instead (without bias and penalties: the model's own log_softmax).
//
// Threads: one sampler per job, used by one thread at a time.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "server/scheduler/job.h"

namespace attnserve::server::scheduler {

// INVALID_ARGUMENT naming the field for a value outside its range: temperature >= 0, top_k >=
// 0, top_p in (0, 1], min_p in [0, 1], repetition_penalty > 0, presence and frequency penalties
// in [-2, 2], top_logprobs in [0, kMaxTopLogprobs], logit_bias ids in [0, vocab) and biases in
// [-100, 100] (OpenAI's ranges). The field names are OpenAI's (every door shares them).
absl::Status ValidateSampling(const Sampling& sampling, int64_t vocab);

class TokenSampler {
 public:
  // `prompt`: the ids the repetition penalty counts besides the generated ones (may be
  // empty). Copies what it needs.
  TokenSampler(const Sampling& sampling, const std::vector<int64_t>& prompt);

  // The next token from (1, vocab) or (vocab) float `logits` (any dtype; read on the CPU).
  SampledToken Next(const at::Tensor& logits);
  // Records a generated token for the frequency, presence and repetition penalties (Next does
  // not: the scheduler accepts what it feeds back).
  void Accept(int64_t token);

 private:
  bool penalized() const;
  // Steps 2-4 on `x` (the first n logits).
  void ApplyBiasAndPenalties(float* x, int64_t n) const;

  Sampling sampling_;
  std::mt19937_64 rng_;
  absl::flat_hash_map<int64_t, int> generated_counts_;
  std::vector<int64_t> repeated_;  // distinct prompt and generated ids (repetition_penalty)
  absl::flat_hash_map<int64_t, bool> in_repeated_;
  std::vector<float> work_;      // the processed logits
  std::vector<double> weights_;  // unnormalized probabilities of the candidates
  std::vector<int64_t> order_;   // candidate ids, most likely first (as far as sorted)
};

}  // namespace attnserve::server::scheduler
