#include "kernels/common/no_mixer.h"

#include <ATen/ATen.h>

namespace attnserve::kernels {
namespace {

class NoMixer final : public Mixer {
 public:
  explicit NoMixer(const MixerConfig& config) : config_(config) {}

  const MixerConfig& config() const override { return config_; }
  bool can_stream() const override { return true; }

  absl::StatusOr<MixerState> InitialState(int64_t /*batch*/) const override { return MixerState{}; }

  absl::StatusOr<at::Tensor> Prefill(const at::Tensor& x, MixerState* state) const override {
    if (state != nullptr) state->position += x.size(1);
    return at::zeros_like(x);
  }

  absl::StatusOr<at::Tensor> Step(const at::Tensor& x_t, MixerState* state) const override {
    if (state != nullptr) state->position += 1;
    return at::zeros_like(x_t);
  }

  absl::StatusOr<at::Tensor> StepBatch(const at::Tensor& x_t,
                                       const std::vector<MixerState*>& states) const override {
    if (absl::Status s = CheckStepBatch(x_t, states, config_.d_model, x_t.device()); !s.ok()) {
      return s;
    }
    for (MixerState* state : states) state->position += 1;
    return at::zeros_like(x_t);
  }

  bool StepReadsPosition() const override { return false; }
  int64_t StateBytesPerSequence(int64_t /*position*/) const override { return 0; }

 private:
  const MixerConfig config_;
};

}  // namespace

std::unique_ptr<Mixer> CreateNoMixer(const MixerConfig& config) {
  return std::make_unique<NoMixer>(config);
}

}  // namespace attnserve::kernels
