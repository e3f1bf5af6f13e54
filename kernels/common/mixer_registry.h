// What each mixer folder provides to the registry in kernels/common/mixer.cc, the one place
// the mixers are listed. `weights` given to Create* are already validated against
// Expected*Weights (names, shapes, float32, contiguous) and `config` by ValidateMixerConfig.
#pragma once

#include <memory>
#include <vector>

#include "kernels/common/mixer.h"

namespace at {
class Generator;
}

namespace attnserve::kernels {

std::vector<WeightSpec> ExpectedStandardWeights(const MixerConfig& config);
WeightMap RandomStandardWeights(const MixerConfig& config, at::Generator& gen);
std::unique_ptr<Mixer> CreateStandardMixer(const MixerConfig& config, const WeightMap& weights);

std::vector<WeightSpec> ExpectedLinformerWeights(const MixerConfig& config);
WeightMap RandomLinformerWeights(const MixerConfig& config, at::Generator& gen);
std::unique_ptr<Mixer> CreateLinformerMixer(const MixerConfig& config, const WeightMap& weights);

std::vector<WeightSpec> ExpectedLinearWeights(const MixerConfig& config);
WeightMap RandomLinearWeights(const MixerConfig& config, at::Generator& gen);
std::unique_ptr<Mixer> CreateLinearMixer(const MixerConfig& config, const WeightMap& weights);

std::vector<WeightSpec> ExpectedMambaWeights(const MixerConfig& config);
WeightMap RandomMambaWeights(const MixerConfig& config, at::Generator& gen);
std::unique_ptr<Mixer> CreateMambaMixer(const MixerConfig& config, const WeightMap& weights);

std::vector<WeightSpec> ExpectedMamba2Weights(const MixerConfig& config);
WeightMap RandomMamba2Weights(const MixerConfig& config, at::Generator& gen);
std::unique_ptr<Mixer> CreateMamba2Mixer(const MixerConfig& config, const WeightMap& weights);

// sliding_window, performer and sparse take the standard mixer's weights
// (Expected/RandomStandardWeights).
std::unique_ptr<Mixer> CreateSlidingWindowMixer(const MixerConfig& config,
                                                const WeightMap& weights);

std::unique_ptr<Mixer> CreatePerformerMixer(const MixerConfig& config, const WeightMap& weights);

std::unique_ptr<Mixer> CreateSparseMixer(const MixerConfig& config, const WeightMap& weights);

std::vector<WeightSpec> ExpectedShortConvWeights(const MixerConfig& config);
WeightMap RandomShortConvWeights(const MixerConfig& config, at::Generator& gen);
std::unique_ptr<Mixer> CreateShortConvMixer(const MixerConfig& config, const WeightMap& weights);

std::vector<WeightSpec> ExpectedRwkvWeights(const MixerConfig& config);
WeightMap RandomRwkvWeights(const MixerConfig& config, at::Generator& gen);
std::unique_ptr<Mixer> CreateRwkvMixer(const MixerConfig& config, const WeightMap& weights);

}  // namespace attnserve::kernels
