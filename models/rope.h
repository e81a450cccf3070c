#pragma once
#include <vector>

#include "models/model_config.h"

namespace gemlite {

// RoPE inverse frequencies [head_dim / 2]: theta^(-2i/head_dim), with Llama-3's
// frequency-dependent scaling folded in when config.rope_scaling.type == "llama3"
// (long wavelengths divided by `factor`, short ones kept, a smooth blend between).
std::vector<float> rope_inv_freq(const ModelConfig& config);

}  // namespace gemlite
