#pragma once
// Loads a llama2.c "v0" checkpoint (the legacy export: a 7-int32 header, then fp32 tensors)
// such as Karpathy's stories15M.bin or stories260K.bin.
#include <string>

#include "models/source_model.h"

namespace gemlite {

// Tensors come back as owned F32 copies under Hugging Face names, with q/k rows converted
// from llama2.c's interleaved-pair RoPE order to rotate-half order. Throws
// Error("<path>: <problem>") for a bad header or a size that does not match it.
SourceModel load_llama2c(const std::string& bin_path);

}  // namespace gemlite
