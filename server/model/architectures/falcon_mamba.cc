// FalconMambaForCausalLM (model_type "falcon_mamba"): transformers v4.47.1,
// src/transformers/models/falcon_mamba/{configuration,modeling}_falcon_mamba.py, commit
// 241c04d36867259cdf11dbb4e9d9a60f9cb65ebc. Mamba-1 (mamba.h) whose mixer divides dt, B and C by
// their root mean squares right after x_proj (rms_forward, no weights) with mixer_rms_eps
// (default 1e-6), the same tensor names. llama.cpp c9ced49 normalises them with
// layer_norm_epsilon instead (3.5e-5 off on the golden folder); this follows transformers.
#include "kernels/common/status_macros.h"
#include "server/model/architectures/mamba.h"

namespace attnserve::model::architectures {
namespace {

absl::StatusOr<v1::ModelConfig> ReadFalconMambaConfig(const ConfigJson& json) {
  ASSIGN_OR_RETURN(v1::ModelConfig c, ReadMambaConfig(json));
  c.set_model_type("falcon_mamba");
  ASSIGN_OR_RETURN(const double eps, NumberKey(json, "mixer_rms_eps", 1e-6));
  if (!(eps > 0)) return Unsupported("mixer_rms_eps", std::to_string(eps), "it must be > 0");
  c.set_mamba_bcdt_rms_eps(eps);
  return c;
}

}  // namespace

extern const Architecture kFalconMamba = {"falcon_mamba", "FalconMambaForCausalLM",
                                          &ReadFalconMambaConfig, &MambaModelName, nullptr};

}  // namespace attnserve::model::architectures
