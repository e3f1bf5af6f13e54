// What the Mamba mixers share (mamba_mixer.cc, kernels/mamba2/mamba2_mixer.cc, and LFM2's
// kernels/short_conv/, which has no SSM): a fixed-size state of float32 tensors, {conv_state,
// ssm_state} (or {conv_state} alone where ssm_shape is empty), each with a leading batch
// dimension and one sequence's shape given by the subclass; Prefill, Step and StepBatch with their
// checks; and a batched CPU step that hands the kernels each row's state pointers (RowStates),
// so that no state is gathered or scattered. On a GPU StepBatch is Mixer's default (the states
// gathered into one batch).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/common/mixer.h"

namespace attnserve::kernels {

class ConvSsmMixer : public Mixer {
 public:
  bool can_stream() const override { return true; }
  absl::StatusOr<MixerState> InitialState(int64_t batch) const override;
  absl::StatusOr<at::Tensor> Prefill(const at::Tensor& x, MixerState* state) const override;
  absl::StatusOr<at::Tensor> Step(const at::Tensor& x_t, MixerState* state) const override;
  absl::StatusOr<at::Tensor> StepBatch(const at::Tensor& x_t,
                                       const std::vector<MixerState*>& states) const override;
  bool StepReadsPosition() const override { return false; }
  // The two tensors' floats, whatever the position.
  int64_t StateBytesPerSequence(int64_t position) const override;

 protected:
  // `name` ("mamba", "mamba2", "short_conv") starts the error messages; conv_shape and ssm_shape
  // are one sequence's state shapes (ssm_shape empty: no ssm_state).
  ConvSsmMixer(std::string name, std::vector<int64_t> conv_shape, std::vector<int64_t> ssm_shape);

  // One state per batch row (CPU kernels only): row b's conv and ssm states, each contiguous
  // (ssm null without one).
  struct RowStates {
    float* const* conv;
    float* const* ssm;
  };

  // x (B, L, d_model) -> (B, L, d_model), continuing `state` in place, or, when it is null,
  // the row states `rows`. Only `state`'s position is advanced here. Inputs and states are
  // checked before; torch errors may be thrown (the callers' GuardTorch turns them into a
  // Status).
  virtual at::Tensor Forward(const at::Tensor& x, MixerState* state,
                             const RowStates* rows) const = 0;
  // Where the weights are; inputs and states must be there too.
  virtual at::Device device() const = 0;

 private:
  absl::Status CheckState(const MixerState* state, int64_t batch) const;

  const std::string name_;
  const std::vector<int64_t> conv_shape_, ssm_shape_;
};

}  // namespace attnserve::kernels
