#include "kernels/mamba/conv_ssm_mixer.h"

#include <ATen/ATen.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/common/status_macros.h"
#include "kernels/common/tensor_checks.h"

namespace attnserve::kernels {
namespace {

std::vector<int64_t> WithBatch(int64_t batch, const std::vector<int64_t>& shape) {
  std::vector<int64_t> full = {batch};
  full.insert(full.end(), shape.begin(), shape.end());
  return full;
}

}  // namespace

ConvSsmMixer::ConvSsmMixer(std::string name, std::vector<int64_t> conv_shape,
                           std::vector<int64_t> ssm_shape)
    : name_(std::move(name)),
      conv_shape_(std::move(conv_shape)),
      ssm_shape_(std::move(ssm_shape)) {}

absl::StatusOr<MixerState> ConvSsmMixer::InitialState(int64_t batch) const {
  if (batch <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("batch must be > 0, got ", batch));
  }
  return GuardTorch("InitialState", [&]() -> absl::StatusOr<MixerState> {
    MixerState state;
    const at::TensorOptions options = at::TensorOptions(at::kFloat).device(device());
    state.tensors = {at::zeros(WithBatch(batch, conv_shape_), options)};
    if (!ssm_shape_.empty())
      state.tensors.push_back(at::zeros(WithBatch(batch, ssm_shape_), options));
    return state;
  });
}

absl::StatusOr<at::Tensor> ConvSsmMixer::Prefill(const at::Tensor& x, MixerState* state) const {
  const std::string what = name_ + " input x";
  RETURN_IF_ERROR(CheckFloatTensor(x, what.c_str(), {-1, -1, config().d_model}, device()));
  if (x.size(1) == 0) return absl::InvalidArgumentError(what + ": sequence is empty");
  RETURN_IF_ERROR(CheckState(state, x.size(0)));
  return GuardTorch("Prefill", [&]() -> absl::StatusOr<at::Tensor> {
    if (state != nullptr) return Forward(x, state, nullptr);
    ASSIGN_OR_RETURN(MixerState fresh, InitialState(x.size(0)));
    return Forward(x, &fresh, nullptr);
  });
}

absl::StatusOr<at::Tensor> ConvSsmMixer::Step(const at::Tensor& x_t, MixerState* state) const {
  const std::string what = name_ + " step input x_t";
  RETURN_IF_ERROR(CheckFloatTensor(x_t, what.c_str(), {-1, config().d_model}, device()));
  if (state == nullptr) return absl::InvalidArgumentError(name_ + " Step needs a state");
  RETURN_IF_ERROR(CheckState(state, x_t.size(0)));
  return GuardTorch("Step", [&]() -> absl::StatusOr<at::Tensor> {
    return Forward(x_t.unsqueeze(1), state, nullptr).squeeze(1);
  });
}

absl::StatusOr<at::Tensor> ConvSsmMixer::StepBatch(const at::Tensor& x_t,
                                                   const std::vector<MixerState*>& states) const {
  if (!x_t.is_cpu()) return Mixer::StepBatch(x_t, states);
  RETURN_IF_ERROR(CheckStepBatch(x_t, states, config().d_model, device()));
  for (const MixerState* state : states) RETURN_IF_ERROR(CheckState(state, 1));
  return GuardTorch("StepBatch", [&]() -> absl::StatusOr<at::Tensor> {
    std::vector<float*> conv_rows, ssm_rows;
    for (MixerState* state : states) {
      conv_rows.push_back(state->tensors[0].data_ptr<float>());
      if (!ssm_shape_.empty()) ssm_rows.push_back(state->tensors[1].data_ptr<float>());
    }
    const RowStates rows{conv_rows.data(), ssm_shape_.empty() ? nullptr : ssm_rows.data()};
    at::Tensor y = Forward(x_t.unsqueeze(1), nullptr, &rows).squeeze(1);
    for (MixerState* state : states) state->position += 1;
    return y;
  });
}

int64_t ConvSsmMixer::StateBytesPerSequence(int64_t) const {
  int64_t conv = 1, ssm = ssm_shape_.empty() ? 0 : 1;
  for (int64_t n : conv_shape_) conv *= n;
  for (int64_t n : ssm_shape_) ssm *= n;
  return (conv + ssm) * static_cast<int64_t>(sizeof(float));
}

absl::Status ConvSsmMixer::CheckState(const MixerState* state, int64_t batch) const {
  if (state == nullptr) return absl::OkStatus();
  const size_t count = ssm_shape_.empty() ? 1 : 2;
  if (state->tensors.size() != count) {
    return absl::InvalidArgumentError(
        absl::StrCat(name_, " state: expected ", count,
                     count == 1 ? " tensor (conv_state)" : " tensors (conv_state, ssm_state)",
                     ", got ", state->tensors.size()));
  }
  const std::string conv = name_ + " conv_state", ssm = name_ + " ssm_state";
  RETURN_IF_ERROR(
      CheckFloatTensor(state->tensors[0], conv.c_str(), WithBatch(batch, conv_shape_), device()));
  if (count == 2) {
    RETURN_IF_ERROR(
        CheckFloatTensor(state->tensors[1], ssm.c_str(), WithBatch(batch, ssm_shape_), device()));
  }
  for (const at::Tensor& t : state->tensors) {
    if (!t.is_contiguous()) {
      return absl::InvalidArgumentError(name_ + " state tensors must be contiguous");
    }
  }
  return absl::OkStatus();
}

}  // namespace attnserve::kernels
