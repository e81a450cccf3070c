#pragma once
// Loads a GGUF file (llama.cpp's format, versions 2 and 3) whose tensors are F32, F16 or
// BF16 — what convert_hf_to_gguf.py writes with --outtype f32/f16/bf16 — or one of the
// block types of models/ggml_blocks.h (Q4_0 .. Q8_0, Q2_K .. Q6_K; kept as blocks in the
// mapped file and decoded one matrix at a time), for the "llama" (Llama, Mistral,
// TinyLlama), "qwen2" and "phi3" architectures. Other types (IQ*, ...) are refused with a
// line naming the tensor and its type: re-convert the source with --outtype f16.
#include <string>

#include "models/source_model.h"

namespace gemlite {

// Tensors come back as views of the mapped file under Hugging Face names; the llama
// architecture's q/k rows are converted from GGUF's interleaved-pair RoPE order to
// rotate-half order (qwen2's are stored rotate-half already). A llama-style (sentencepiece)
// vocabulary in tokenizer.ggml.* comes back as model.vocabulary; other kinds (gpt2 BPE)
// are not read (model.vocabulary_problem says so). Throws
// Error("<path>: <problem>") for a bad magic or version, a truncated file, a missing key or
// tensor, an unknown architecture, Llama-3 rope scaling (GGUF keeps only precomputed
// factors), or a tensor type it does not read.
SourceModel load_gguf(const std::string& path);

// Whether `path` is a regular file that starts with GGUF's magic ("GGUF").
bool is_gguf_file(const std::string& path);

}  // namespace gemlite
