#pragma once
// Models of real shapes with random weights, so speed can be measured without a
// download (gemlite-bench --synthetic llama2-7b). The weights are ~N(0, 0.02²) like a
// freshly initialised model: the same bytes move as with trained weights, never zeros.
#include <string>
#include <vector>

#include "models/packed_checkpoint.h"

namespace gemlite {

// Throws Error listing the known names for an unknown one.
ModelConfig synthetic_config(const std::string& name);
std::vector<std::string> synthetic_model_names();

// Generates and quantizes one matrix at a time, so host memory holds the packed model
// plus one float matrix.
PackedCheckpoint make_synthetic_checkpoint(const ModelConfig& config, const WeightFormat& format,
                                           uint64_t seed = 1);

}  // namespace gemlite
