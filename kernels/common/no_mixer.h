// The "none" mixer: a layer that mixes nothing (y = 0 for every token), for models whose blocks
// hold an MLP alone (Nemotron-H's "-" and "E" blocks). It has no weights and an empty state
// (no tensors; only its position advances), streams, and reads no keys. A Model skips such a
// layer's norm and mixer altogether (model.h); the mixer exists so that a layer always has one
// and its state slot, sizes and contracts stay uniform.
#pragma once

#include <memory>

#include "kernels/common/mixer.h"

namespace attnserve::kernels {

std::unique_ptr<Mixer> CreateNoMixer(const MixerConfig& config);

}  // namespace attnserve::kernels
