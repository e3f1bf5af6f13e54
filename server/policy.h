// The sequence-length policy: which model variant serves a request. An ordered list of rules
// "variant up to N tokens" (the last may have no bound), checked in order; a rule applies
// when the request fits under its bound and the variant can serve it (a stream needs a
// causal variant; the variant's own max length must hold the request). Rules marked
// "unbounded" apply only to streams that declare no expected length (which may run forever:
// a variant with a fixed-size state belongs there), and are checked first for them; such a
// stream with no unbounded rule takes the first streaming variant. Defaults follow the seeds'
// guide: standard up to 4095 tokens (exact, KV cache), sliding_window up to 32768 (local window,
// fixed-size state, streams), mamba beyond, rwkv for streams of unknown length. Immutable after
// parsing; safe to share between threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/model/model_repository.h"

namespace attnserve::server {

struct PolicyRule {
  std::string variant;
  int64_t max_tokens = 0;  // inclusive; 0: no bound
  bool unbounded = false;  // only for streams of unknown length (max_tokens is then 0)
};

struct PolicyDecision {
  const model::Model* model = nullptr;
  int rule = 0;        // 1-based index of the rule that chose; 0 when the model was named
  std::string reason;  // e.g. "rule 1: standard up to 4095 tokens (request: 100 tokens)"
};

class Policy {
 public:
  // Comma-separated rules variant[:max_tokens] or variant:unbounded.
  static constexpr const char* kDefaultSpec =
      "standard:4095,sliding_window:32768,mamba,rwkv:unbounded";

  // Parses `spec`, or a JSON file when it starts with '@' ({"rules": [{"variant": "standard",
  // "max_tokens": 4095}, ..., {"variant": "rwkv", "unbounded": true}]}). Every variant must
  // exist in `repository`; an unbounded rule's variant must stream; at least one rule must not
  // be unbounded (Infer requests and streams of a declared length need one).
  static absl::StatusOr<Policy> Parse(const std::string& spec,
                                      const model::ModelRepository& repository);

  // kDefaultSpec without the rules whose variant `repository` does not serve (a repository of
  // one's own need not hold the default models; their variants go to `dropped`), and with a
  // rule for every length some model takes: when no kept rule is open-ended, the lengths past
  // the last bound go to the model with the longest max_sequence_length. So a repository of
  // one model serves every request of `auto` with it. An error only for an empty repository.
  static absl::StatusOr<Policy> ParseDefault(const model::ModelRepository& repository,
                                             std::vector<std::string>* dropped);

  // Picks the variant for `length` tokens (0 with `stream`: a stream of unknown length);
  // `stream` asks for a variant that can stream. When no rule fits: RESOURCE_EXHAUSTED if the
  // request is too long for every variant, FAILED_PRECONDITION if no streaming variant fits.
  absl::StatusOr<PolicyDecision> Choose(int64_t length, bool stream) const;

  // The model `name` ("auto" or empty: Choose). An unknown name is NOT_FOUND.
  absl::StatusOr<PolicyDecision> Resolve(const std::string& name, int64_t length,
                                         bool stream) const;

  const std::vector<PolicyRule>& rules() const { return rules_; }
  std::string Describe() const;

 private:
  const model::ModelRepository* repository_ = nullptr;
  std::vector<PolicyRule> rules_;
};

}  // namespace attnserve::server
