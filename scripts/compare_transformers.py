#!/usr/bin/env python3
"""gemlite against an independent implementation: Hugging Face transformers.

For each architecture gemlite supports, transformers builds a randomly initialised model
(grouped-query attention, Llama-3 rope scaling, Qwen2's q/k/v biases, norms and biases
randomised so a mix-up of them cannot hide), saves it as a bf16 safetensors checkpoint,
and computes float64 logits (on the CPU) over a random 64-token prompt. gemlite-quantize converts the
checkpoint, gemlite-logits computes the logits of the same ids on each backend, and the
two are compared.

Runs where torch and transformers are installed (the GPU machine; scripts/gpu-check.sh
calls it there):

    python3 scripts/compare_transformers.py --bin BUILD_DIR [--devices cpu,cuda] [--out DIR]

Tolerance, per (model, backend, format): max |gemlite - transformers| over all 64 x vocab
logits, divided by max |transformers logit|:
  - cpu backend: <= 2e-5. Same weights (bf16 values, exact in f32 and f16) and fp32
    arithmetic; only the order of additions differs. Measured on the H100 machine:
    5e-7 .. 2.4e-6 (transformers' own fp32-on-GPU vs float64: 6e-7 .. 2.6e-6).
  - cuda backend (fp16 activations and KV cache, fp32 accumulation): <= 1e-2: every
    activation is rounded to fp16 (2^-11 relative) between ops, through every layer.
    Measured: 1.2e-3 .. 3.3e-3.
  - cuda-bf16 (gemlite --dtype bf16): <= 8e-2, 8x the fp16 bound for bf16's 8x larger
    unit roundoff (2^-8).
  The checkpoint formats f32, f16 and bf16 all hold the source's bf16 values exactly
  (bf16 -> f16 is exact at these magnitudes), so they share their backend's bound.
and, as a second check that does not depend on scale, the argmax agrees at >= 95 % of
the positions. Prints one line per comparison and exits 1 if any fails.
"""
import argparse
import copy
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors.numpy import load_file

VOCAB = 512
PROMPT_TOKENS = 64

# name -> (transformers config class name, config keyword arguments)
MODELS = {
    # Llama 3: grouped-query attention (8 heads, 2 KV heads) and llama3 rope scaling.
    "llama3-gqa": ("LlamaConfig", dict(
        hidden_size=256, intermediate_size=688, num_hidden_layers=3, num_attention_heads=8,
        num_key_value_heads=2, max_position_embeddings=1024, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 128},
        tie_word_embeddings=False)),
    # Mistral: GQA 4:1; the sliding window is larger than any context used here.
    "mistral": ("MistralConfig", dict(
        hidden_size=256, intermediate_size=704, num_hidden_layers=3, num_attention_heads=8,
        num_key_value_heads=2, max_position_embeddings=1024, sliding_window=1024, rope_theta=1e6,
        rms_norm_eps=1e-5, tie_word_embeddings=False)),
    # Qwen2: q/k/v projections with biases, tied embeddings.
    "qwen2": ("Qwen2Config", dict(
        hidden_size=256, intermediate_size=640, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=1024, rope_theta=1e6, rms_norm_eps=1e-6,
        use_sliding_window=False, tie_word_embeddings=True)),
    # Phi-3: Llama's computation with q/k/v and gate/up stored fused (qkv_proj,
    # gate_up_proj), which gemlite-quantize splits; GQA 2:1 here.
    "phi3": ("Phi3Config", dict(
        hidden_size=256, intermediate_size=640, num_hidden_layers=3, num_attention_heads=8,
        num_key_value_heads=4, max_position_embeddings=1024, original_max_position_embeddings=1024,
        rope_theta=10000.0, rope_scaling=None, sliding_window=None, rms_norm_eps=1e-5,
        bos_token_id=1, eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)),
    # TinyLlama's layer shapes (2048 wide, 32 heads of 64, 4 KV heads, 5632 hidden), two layers.
    "tinyllama-shaped": ("LlamaConfig", dict(
        hidden_size=2048, intermediate_size=5632, num_hidden_layers=2, num_attention_heads=32,
        num_key_value_heads=4, max_position_embeddings=2048, rms_norm_eps=1e-5, rope_theta=10000.0,
        tie_word_embeddings=False)),
}

TOLERANCE = {"cpu": 2e-5, "cuda": 1e-2, "cuda-bf16": 8e-2}
# what each --devices entry runs: gemlite-logits arguments
DEVICE_ARGS = {"cpu": ["--device", "cpu"], "cuda": ["--device", "cuda"],
               "cuda-bf16": ["--device", "cuda", "--dtype", "bf16"]}
MIN_ARGMAX_AGREEMENT = 0.95


def build_model(name, directory, seed):
    import transformers
    class_name, kwargs = MODELS[name]
    config = getattr(transformers, class_name)(vocab_size=VOCAB, initializer_range=0.05, **kwargs)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for param_name, param in model.named_parameters():
            # transformers starts norms at 1 and biases at 0: randomise both, so a norm
            # applied to the wrong tensor or a dropped bias changes the logits.
            if "norm" in param_name:
                param.copy_(1 + 0.2 * torch.randn_like(param))
            elif param_name.endswith(".bias"):
                param.copy_(0.1 * torch.randn_like(param))
            # The references run on exactly the saved (bf16-rounded) weights...
            param.copy_(param.to(torch.bfloat16).to(torch.float32))
    # ...but a bf16 copy is what gets saved: model.to(torch.bfloat16) would also round the
    # rotary inv_freq buffer, an error of up to 2^-9 in every angle that no bf16 checkpoint
    # loaded by transformers has (measured: 1e-2 relative logit differences by position 63).
    copy.deepcopy(model).to(torch.bfloat16).save_pretrained(directory, safe_serialization=True)
    return model


def reference_logits(model, ids, device, dtype):
    model = model.to(device=device, dtype=dtype).eval()
    with torch.no_grad():
        out = model(torch.tensor([ids], device=device))
    return out.logits[0].double().cpu().numpy()  # [T, vocab]


def run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        sys.stderr.write(result.stdout + result.stderr)
        raise SystemExit(f"failed: {' '.join(command)}")
    return result.stdout


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bin", required=True, help="folder holding gemlite-quantize and gemlite-logits")
    parser.add_argument("--devices", default="cpu,cuda,cuda-bf16")
    parser.add_argument("--formats", default="f32,f16,bf16")
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--out", default=None, help="keep the checkpoints here (default: a temporary folder)")
    parser.add_argument("--seed", type=int, default=1234)
    args = parser.parse_args()

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch_device = "cuda" if torch.cuda.is_available() else "cpu"
    work = args.out or tempfile.mkdtemp(prefix="gemlite-compare-")
    quantize = os.path.join(args.bin, "gemlite-quantize")
    logits_tool = os.path.join(args.bin, "gemlite-logits")

    failures = 0
    print(f"transformers reference: float64 on the CPU, {PROMPT_TOKENS}-token random prompt, vocab {VOCAB}")
    for index, name in enumerate(args.models.split(",")):
        hf_dir = os.path.join(work, name, "hf")
        model = build_model(name, hf_dir, args.seed + index)
        rng = np.random.default_rng(args.seed + index)
        ids = [1] + rng.integers(3, VOCAB, PROMPT_TOKENS - 1).tolist()
        ref = reference_logits(model, ids, "cpu", torch.float64)
        torch_fp32 = reference_logits(model, ids, torch_device, torch.float32)
        print(f"compare {name} transformers-fp32-{torch_device} vs float64: "
              f"{np.abs(torch_fp32 - ref).max() / np.abs(ref).max():.2e}")
        ref_scale = float(np.abs(ref).max())
        ref_argmax = ref.argmax(axis=1)
        for fmt in args.formats.split(","):
            packed = os.path.join(work, name, fmt)
            run([quantize, hf_dir, packed, fmt])
            for device in args.devices.split(","):
                out_file = os.path.join(work, name, f"logits-{fmt}-{device}.safetensors")
                run([logits_tool, "-m", packed, *DEVICE_ARGS[device], "--ids", ",".join(map(str, ids)),
                     "-o", out_file])
                got = load_file(out_file)
                assert list(got["ids"]) == ids, "gemlite-logits saved other ids"
                logits = got["logits"]  # [T, vocab]
                error = float(np.abs(logits - ref).max()) / ref_scale
                by_position = np.abs(logits - ref).max(axis=1) / ref_scale  # [T]
                agreement = float((logits.argmax(axis=1) == ref_argmax).mean())
                ok = error <= TOLERANCE[device] and agreement >= MIN_ARGMAX_AGREEMENT
                failures += not ok
                print(f"compare {name} {fmt} {device}: max|diff|/max|logit| {error:.2e} "
                      f"(tolerance {TOLERANCE[device]:.0e}), argmax agrees {agreement * 100:.1f} %, "
                      f"{'PASS' if ok else 'FAIL'}")
                if not ok:
                    print(f"  error by position: " + " ".join(f"{e:.1e}" for e in by_position[:8]) + " ... " +
                          " ".join(f"{e:.1e}" for e in by_position[-4:]))
    print(f"compare: {'all passed' if failures == 0 else f'{failures} FAILED'} (checkpoints in {work})")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
