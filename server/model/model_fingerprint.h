// A model's fingerprint (Model::fingerprint): what identifies its config and weights, so that a
// serialized state is refused by another model. Internal to server/model/.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "attnserve/v1/model_config.pb.h"
#include "kernels/common/mixer.h"

namespace attnserve::model {

// FNV-1a, 64 bit: h folded with n bytes at data.
uint64_t Fnv(uint64_t h, const void* data, size_t n);

// The fields of a config that change what the model computes (defaults spelt out or not,
// fields of mixers the model does not use, serving-only fields cleared).
v1::ModelConfig ArchitectureOf(const v1::ModelConfig& config);

// ArchitectureOf(config) and a strided sample of every weight in `specs`, FNV-1a hashed.
uint64_t Fingerprint(const v1::ModelConfig& config, const std::vector<kernels::WeightSpec>& specs,
                     const std::map<std::string, at::Tensor>& weights);

}  // namespace attnserve::model
