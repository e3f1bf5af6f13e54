#include "server/rpc/oip/infer_response.h"

#include <ATen/ATen.h>

#include <cstring>

#include "kernels/common/tensor_checks.h"
#include "server/rpc/oip/infer_request.h"

namespace attnserve::server::oip {

absl::Status AddLogits(const at::Tensor& logits, bool raw, inference::ModelInferResponse* out) {
  return kernels::GuardTorch("logits output", [&]() -> absl::Status {
    at::Tensor t = logits.to(at::kFloat).contiguous();
    auto* o = out->add_outputs();
    o->set_name(kLogits);
    o->set_datatype("FP32");
    for (int64_t d : t.sizes()) o->add_shape(d);
    const float* data = t.data_ptr<float>();
    const int64_t n = t.numel();
    if (raw) {
      out->add_raw_output_contents()->assign(reinterpret_cast<const char*>(data), n * 4);
    } else {
      o->mutable_contents()->mutable_fp32_contents()->Add(data, data + n);
    }
    return absl::OkStatus();
  });
}

void AddOutputIds(const std::vector<int64_t>& ids, bool raw, inference::ModelInferResponse* out) {
  auto* o = out->add_outputs();
  o->set_name(kOutputIds);
  o->set_datatype("INT64");
  o->add_shape(1);
  o->add_shape(static_cast<int64_t>(ids.size()));
  if (raw) {
    out->add_raw_output_contents()->assign(reinterpret_cast<const char*>(ids.data()),
                                           ids.size() * sizeof(int64_t));
  } else {
    o->mutable_contents()->mutable_int64_contents()->Add(ids.begin(), ids.end());
  }
}

void AddTextOutput(const std::vector<std::string>& texts, bool raw,
                   inference::ModelInferResponse* out) {
  auto* o = out->add_outputs();
  o->set_name(kTextOutput);
  o->set_datatype("BYTES");
  o->add_shape(static_cast<int64_t>(texts.size()));
  if (raw) {
    *out->add_raw_output_contents() = EncodeRawBytes(texts);
  } else {
    for (const std::string& t : texts) o->mutable_contents()->add_bytes_contents(t);
  }
}

void SetBoolParameter(const std::string& name, bool value, inference::ModelInferResponse* out) {
  (*out->mutable_parameters())[name].set_bool_param(value);
}

void SetStringParameter(const std::string& name, const std::string& value,
                        inference::ModelInferResponse* out) {
  (*out->mutable_parameters())[name].set_string_param(value);
}

void SetIntParameter(const std::string& name, int64_t value, inference::ModelInferResponse* out) {
  (*out->mutable_parameters())[name].set_int64_param(value);
}

}  // namespace attnserve::server::oip
