// The CUDA backend's per-row and attention ops at real model widths, against the CPU
// backend (the reference), through the Backend interface both implement. The model tests
// (test_cuda_backend.cu) run rows of 64; these cover the kernels' other paths: RMSNorm
// rows up to 20000 wide (the 2-, 8- and 32-per-thread instances), RoPE + KV store +
// attention at Llama-2-7B's 32 heads x 128 and Llama-3's 8 kv heads (GQA), SwiGLU over
// 11008 columns, and copy_columns.
//
// Inputs are rounded to fp16 before they reach either backend, so the differences are the
// GPU's own: fp16 outputs (unit roundoff 2^-11 ~ 4.9e-4 relative), the fp16 rounding of
// x + y before RMSNorm, of rotated q/k before attention and of the stored keys and values.
// Tolerance 4e-3 of the larger of |cpu| and the row's rms: a few roundoffs, while a wrong
// element, head, position or pair moves results by O(1) of that. Chunks that take the
// tensor-core PrefillAttention get 8e-3: it rounds the probabilities P to fp16 before P·v
// (as FlashAttention does), a relative error of up to 2^-11 per term; summed over ~100
// positions and taken at the worst of ~10^5 outputs (~5 sigma) that alone reached 1.4e-3
// against the attention kernel, and 3.9e-3 against the CPU for one seed of the test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/cpu/cpu_backend.h"
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cuda_context.h"
#include "runtime/cuda/ops.h"
#include "runtime/cuda/prefill_attention.h"
#include "tests/gpu/gpu_test_helpers.h"

namespace gemlite {
namespace {

constexpr float kTolerance = 4e-3f;
constexpr float kPrefillTolerance = 8e-3f;

std::vector<float> random_half_values(size_t n, std::mt19937_64& rng, float scale = 1.0f) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = round_to_half(normal(rng));
  return v;
}

// n values ~ N(0, 1) of the activation type (F16 or BF16) in a device tensor [1, n] of ctx.
Tensor random_device_acts(const std::shared_ptr<CudaContext>& ctx, size_t n, std::mt19937_64& rng,
                          DType act = DType::F16) {
  std::vector<uint16_t> bits(n);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (uint16_t& b : bits) b = act == DType::BF16 ? float_to_bf16(normal(rng)) : float_to_half(normal(rng));
  Tensor t = device_tensor(ctx, act, 1, int64_t(n));
  CUDA_CHECK(cudaMemcpy(t.data, bits.data(), n * 2, cudaMemcpyHostToDevice));
  return t;
}

// A fp16 or bf16 device tensor of ctx as floats, after the work queued on ctx's stream.
std::vector<float> device_acts_to_host(const std::shared_ptr<CudaContext>& ctx, const Tensor& t) {
  std::vector<uint16_t> bits(static_cast<size_t>(t.numel()));
  CUDA_CHECK(cudaMemcpyAsync(bits.data(), t.data, bits.size() * 2, cudaMemcpyDeviceToHost, ctx->stream));
  CUDA_CHECK(cudaStreamSynchronize(ctx->stream));
  std::vector<float> floats(bits.size());
  for (size_t i = 0; i < bits.size(); ++i)
    floats[i] = t.dtype == DType::BF16 ? bf16_to_float(bits[i]) : half_to_float(bits[i]);
  return floats;
}

// Output [rows, cols] of a launch into a fresh tensor of the activation type, poisoned
// with NaN first.
template <typename Launch>
std::vector<float> poisoned_output_of(const std::shared_ptr<CudaContext>& ctx, int64_t rows, int64_t cols,
                                      Launch&& launch, DType act = DType::F16) {
  Tensor out = device_tensor(ctx, act, rows, cols);
  CUDA_CHECK(cudaMemsetAsync(out.data, 0xff, size_t(out.numel()) * 2, ctx->stream));
  launch(out.data);
  return device_acts_to_host(ctx, out);
}

// The same values as a tensor on each backend: F32 on the CPU, F16 on the GPU.
struct Both {
  Tensor cpu, gpu;
};

struct CudaOps : public ::testing::Test {
  std::unique_ptr<Backend> cpu = make_cpu_backend();
  std::unique_ptr<Backend> gpu = make_cuda_backend({});  // fp16 activations
  std::mt19937_64 rng{test_seed()};

  Both upload(const std::vector<float>& values, int64_t rows, int64_t cols) {
    std::vector<uint16_t> halves(values.size());
    for (size_t i = 0; i < values.size(); ++i) halves[i] = float_to_half(values[i]);
    return {cpu->upload(HostTensor::copy_of(DType::F32, {rows, cols}, values.data())),
            gpu->upload(HostTensor::copy_of(DType::F16, {rows, cols}, halves.data()))};
  }
  Both weight(const std::vector<float>& values) {  // 1-D F32 on both, like the norm weights
    const HostTensor host = HostTensor::copy_of(DType::F32, {int64_t(values.size())}, values.data());
    return {cpu->upload(host), gpu->upload(host)};
  }
  Both alloc(int64_t rows, int64_t cols) { return {cpu->alloc(rows, cols), gpu->alloc(rows, cols)}; }

  std::vector<float> host(Backend& backend, const Tensor& t) {
    std::vector<float> out(size_t(t.numel()));
    backend.copy_to_host(t, out.data());
    return out;
  }
  // Row by row: max |gpu - cpu| <= tol * max(|cpu| element, rms of the cpu row).
  void expect_close(const std::string& what, const Both& t, float tolerance = kTolerance) {
    const std::vector<float> want = host(*cpu, t.cpu), got = host(*gpu, t.gpu);
    float worst = 0;
    for (int64_t r = 0; r < t.cpu.rows; ++r) {
      const float* a = &want[size_t(r * t.cpu.cols)];
      const float* b = &got[size_t(r * t.cpu.cols)];
      double squares = 0;
      for (int64_t i = 0; i < t.cpu.cols; ++i) squares += double(a[i]) * a[i];
      const float rms = float(std::sqrt(squares / double(t.cpu.cols)));
      for (int64_t i = 0; i < t.cpu.cols; ++i) {
        const float err = std::isfinite(b[i]) ? std::fabs(a[i] - b[i]) / std::max(std::fabs(a[i]), rms) : INFINITY;
        worst = std::max(worst, err);
        ASSERT_LE(err, tolerance) << what << " [" << r << ", " << i << "]: cpu " << a[i] << " gpu " << b[i];
      }
    }
    std::cout << "[cuda_ops] " << what << ": worst " << worst << " (tol " << tolerance << ")\n";
  }
};

// Widths with whole 16-byte chunks (64, 4096, 20000: more chunks than a block has threads)
// and without (2049, 8195); a few rows (decode) and many (a prefill chunk's launch shape).
TEST_F(CudaOps, AddRmsNormAndRmsNormAtEveryRowWidth) {
  for (const int64_t d : {64, 2049, 4096, 8195, 20000}) {
    for (const int64_t T : {1, 3, 70}) {
      const std::string where = "d " + std::to_string(d) + " T " + std::to_string(T);
      Both x = upload(random_half_values(size_t(T * d), rng), T, d);       // [T, d] residual
      const Both y = upload(random_half_values(size_t(T * d), rng), T, d); // [T, d]
      std::uniform_real_distribution<float> uniform(0.5f, 1.5f);
      std::vector<float> w(static_cast<size_t>(d));
      for (float& v : w) v = uniform(rng);
      const Both norm = weight(w);  // [1, d]
      Both out = alloc(T, d);
      cpu->add_rmsnorm(x.cpu, y.cpu, norm.cpu, 1e-5f, out.cpu);
      gpu->add_rmsnorm(x.gpu, y.gpu, norm.gpu, 1e-5f, out.gpu);
      expect_close("add_rmsnorm residual, " + where, x);
      expect_close("add_rmsnorm out, " + where, out);
      cpu->rmsnorm(y.cpu, norm.cpu, 1e-5f, out.cpu);
      gpu->rmsnorm(y.gpu, norm.gpu, 1e-5f, out.gpu);
      expect_close("rmsnorm, " + where, out);
    }
  }
}

// h = 11008: 16-byte chunks; h = 1001: one element at a time.
TEST_F(CudaOps, SiluMulReadsGateAndUpHalves) {
  for (const int64_t h : {11008, 1001})
    for (const int64_t T : {3, 70}) {
      const Both gate_up = upload(random_half_values(size_t(T * 2 * h), rng, 2.0f), T, 2 * h);  // [T, 2h]
      Both out = alloc(T, h);
      cpu->silu_mul(gate_up.cpu, out.cpu);
      gpu->silu_mul(gate_up.gpu, out.gpu);
      expect_close("silu_mul h " + std::to_string(h) + " T " + std::to_string(T), out);
    }
}

TEST_F(CudaOps, CopyColumnsPlacesABlockExactly) {
  const Both src = upload(random_half_values(3 * 5, rng), 3, 5);  // [3, 5]
  Both dst = upload(std::vector<float>(3 * 12, 7.0f), 3, 12);      // [3, 12]
  cpu->copy_columns(src.cpu, dst.cpu, 4);
  gpu->copy_columns(src.gpu, dst.gpu, 4);
  const std::vector<float> want = host(*cpu, dst.cpu), got = host(*gpu, dst.gpu);
  EXPECT_EQ(want, got);
  EXPECT_EQ(want[4], host(*cpu, src.cpu)[0]);
  EXPECT_EQ(want[3], 7.0f);
  EXPECT_EQ(want[9], 7.0f);
}

// A 6-token prompt, 2 decoded tokens, a 100-token and a 40-token chunk (after earlier
// positions), one more token, a 300-token chunk, two tokens decoded over 2 of the cache's 4
// splits of 256 positions and a 12-token chunk; RoPE + KV store + attention, the attention
// outputs of every step compared. Chunks of PrefillAttention::min_tokens or more take
// PrefillAttention (heads of 64 and 128: the fused kernel from 2 tokens, split over the
// keys for 12 at 451, and for 300 at 149 with 14 heads, on 132 SMs; 96: the GEMMs from 32,
// the attention kernel a block a head and token below).
TEST_F(CudaOps, AttentionPrefillThenDecodeAtLlamaShapes) {
  const AttentionShape shapes[] = {{32, 32, 128},  // Llama-2-7B
                                   {32, 8, 128},   // Llama-3-8B: GQA, 4 query heads per kv head
                                   {14, 2, 64},    // Qwen2-0.5B-like: 7 per kv head
                                   {12, 4, 96}};   // Phi-3-like heads of 96: not fused
  for (const AttentionShape& shape : shapes) {
    const std::string where = std::to_string(shape.n_heads) + "/" + std::to_string(shape.n_kv_heads) + " heads x " +
                              std::to_string(shape.head_dim);
    const int64_t q_dim = int64_t(shape.n_heads) * shape.head_dim;
    const int64_t width = q_dim + 2 * int64_t(shape.n_kv_heads) * shape.head_dim;
    std::vector<float> inv_freq(size_t(shape.head_dim / 2));
    for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * float(i) / shape.head_dim);
    const Both freq = weight(inv_freq);
    std::unique_ptr<KVCache> cpu_cache = cpu->make_kv_cache(1, 1024, shape);
    std::unique_ptr<KVCache> gpu_cache = gpu->make_kv_cache(1, 1024, shape);
    struct Step {
      int T, pos0;
    };
    for (const Step step : {Step{6, 0}, Step{1, 6}, Step{1, 7}, Step{100, 8}, Step{40, 108}, Step{1, 148},
                            Step{300, 149}, Step{1, 449}, Step{1, 450}, Step{12, 451}}) {
      const std::vector<int> ids(size_t(step.T), 1);
      cpu->set_step(ids, step.pos0);
      gpu->set_step(ids, step.pos0);
      Both qkv = upload(random_half_values(size_t(step.T * width), rng), step.T, width);  // [T, q + 2 kv]
      Both out = alloc(step.T, q_dim);
      cpu->attention(*cpu_cache, 0, qkv.cpu, freq.cpu, shape, out.cpu);
      gpu->attention(*gpu_cache, 0, qkv.gpu, freq.gpu, shape, out.gpu);
      // Tensor-core kernels round P to fp16: the prefill chunks, and decode of grouped heads.
      const bool grouped_decode =
          step.T == 1 && attention_runs_grouped(shape.n_heads, shape.n_kv_heads, shape.head_dim);
      const bool tensor_cores = step.T >= PrefillAttention::min_tokens(shape.head_dim) || grouped_decode;
      expect_close("attention " + where + ", T " + std::to_string(step.T) + " at " + std::to_string(step.pos0), out,
                   tensor_cores ? kPrefillTolerance : kTolerance);
    }
  }
}

// PrefillAttention (the fused kernel, or the GEMMs in query tiles: a scratch limit that
// fits 16 or fewer query rows, and one that fits 1) against the attention kernel, on the
// same random rotated q and caches holding positions [0, pos0 + T), in fp16 and bf16. The
// kernel is the reference here: the test above holds it to the CPU. Tiles must see exactly
// their own causal window. bf16 keeps 3 fewer mantissa bits than fp16, so its rounding of
// P and of the outputs is 8x coarser: 8x the fp16 tolerance. A wrong head, query tile or
// split moves outputs by O(1) of the row's rms, but one key too many or too few among
// ~1000 by only ~0.02: below the bf16 tolerance, so the fp16 runs (8e-3) are the ones
// that catch an off-by-one in the mask.
TEST(PrefillAttention, QueryTilesMatchTheAttentionKernel) {
  std::mt19937_64 rng{test_seed()};
  auto ctx = std::make_shared<CudaContext>();
  ctx->sm_count = 132;  // the H100's: the split cases below split on any GPU
  struct Case {
    AttentionShape shape;
    int T, pos0;
    bool misaligned = false;  // q read 2 bytes into a buffer: the GEMM path for any head size
  };
  // Heads of 128 and 64 dimensions take the fused kernel (flash_prefill.cuh; the scratch
  // limit does not apply; 100 tokens at 150: 4 key tiles, both K/V buffers refilled; 130
  // at 0: a partial third query tile), 32 the cuBLAS GEMMs in query tiles. On a GPU of
  // 132 SMs (H100, H200) the fused kernel splits over the keys for 40 tokens at 1000 (32
  // blocks: 5 splits of 4 key tiles, the last of 1) and for 300 tokens at 0 with 14 heads
  // (70 blocks: 2 splits, the second holding no key of the first query tiles); 5 tokens at
  // 300: a query tile of 5 rows in 2 splits. From position 1024 (kGroupHeadsFromPosition)
  // the tiles of a chunk under 64 tokens take (token, query head) pairs of a kv head's
  // group: 16 tokens at 1100 are one tile a kv head in 5 splits; 37 tokens at 1030 with 7
  // heads a group, 259 rows, end in a tile of 3 rows (token 36's heads 4..6); 70 tokens at
  // 1024 are one head's tokens a tile again.
  // The GEMM path is tested at 32 dimensions and, through a q that is not 16-byte aligned,
  // at 128.
  for (const DType act : {DType::F16, DType::BF16})
    for (const Case c : {Case{{32, 8, 128}, 77, 19}, Case{{32, 8, 128}, 100, 150}, Case{{32, 32, 128}, 130, 0},
                         Case{{32, 8, 128}, 40, 1000}, Case{{32, 8, 128}, 5, 300}, Case{{14, 2, 64}, 40, 0},
                         Case{{14, 2, 64}, 300, 0}, Case{{32, 8, 128}, 16, 1100}, Case{{14, 2, 64}, 37, 1030},
                         Case{{32, 8, 128}, 70, 1024}, Case{{8, 2, 32}, 50, 7}, Case{{32, 8, 128}, 40, 60, true}}) {
      const float tolerance = act == DType::BF16 ? 8 * kPrefillTolerance : kPrefillTolerance;
      const int kv_dim = c.shape.n_kv_heads * c.shape.head_dim, q_dim = c.shape.n_heads * c.shape.head_dim;
      const int width = q_dim + 2 * kv_dim, n_pos = c.pos0 + c.T;
      const Tensor qkv = random_device_acts(ctx, size_t(c.T) * width, rng, act);        // [T, width]
      Tensor shifted;  // [1, T * width + 1]: qkv from its second element on, when misaligned
      const void* q_data = qkv.data;
      if (c.misaligned) {
        shifted = device_tensor(ctx, act, 1, int64_t(c.T) * width + 1);
        q_data = static_cast<uint8_t*>(shifted.data) + 2;
        CUDA_CHECK(cudaMemcpy(static_cast<uint8_t*>(shifted.data) + 2, qkv.data, size_t(c.T) * width * 2,
                              cudaMemcpyDeviceToDevice));
      }
      const Tensor keys = random_device_acts(ctx, size_t(n_pos) * kv_dim, rng, act);    // [n_pos, kv_dim]
      const Tensor values = random_device_acts(ctx, size_t(n_pos) * kv_dim, rng, act);  // [n_pos, kv_dim]
      Tensor pos0 = device_tensor(ctx, DType::I32, 1, 1);
      CUDA_CHECK(cudaMemcpy(pos0.data, &c.pos0, sizeof(int), cudaMemcpyHostToDevice));
      const std::vector<float> want = poisoned_output_of(
          ctx, c.T, q_dim,
          [&](void* out) {
            launch_attention(keys.data, values.data, pos0.as<int>(), qkv.data, c.T, c.shape.n_heads,
                             c.shape.n_kv_heads, c.shape.head_dim, AttentionSplits{}, out, act, ctx->stream);
          },
          act);
      const size_t row_bytes = size_t(c.shape.n_heads) * n_pos * (4 + 2);
      std::vector<size_t> scratch_limits{PrefillAttention::kDefaultMaxScratchBytes};
      if (!PrefillAttention::fused(c.shape.head_dim) || c.misaligned) {  // the GEMMs' query tiles
        scratch_limits.push_back(17 * row_bytes);
        scratch_limits.push_back(row_bytes);
      }
      for (const size_t scratch : scratch_limits) {
        PrefillAttention attention(ctx, act, scratch);
        const std::vector<float> got = poisoned_output_of(
            ctx, c.T, q_dim,
            [&](void* out) {
              attention.run(keys.data, values.data, c.pos0, q_data, width, c.T, c.shape.n_heads,
                            c.shape.n_kv_heads, c.shape.head_dim, out);
            },
            act);
        float worst = 0;
        for (int t = 0; t < c.T; ++t) {
          const float* a = &want[size_t(t) * q_dim];
          const float* b = &got[size_t(t) * q_dim];
          double squares = 0;
          for (int i = 0; i < q_dim; ++i) squares += double(a[i]) * a[i];
          const float rms = float(std::sqrt(squares / q_dim));
          for (int i = 0; i < q_dim; ++i) {
            const float err = std::isfinite(b[i]) ? std::fabs(a[i] - b[i]) / std::max(std::fabs(a[i]), rms) : INFINITY;
            worst = std::max(worst, err);
            ASSERT_LE(err, tolerance) << dtype_name(act) << " scratch " << scratch << " token " << t << " column "
                                      << i << ": kernel " << a[i] << " prefill " << b[i];
          }
        }
        std::cout << "[cuda_ops] prefill attention " << dtype_name(act) << (c.misaligned ? " misaligned q " : " ")
                  << c.shape.n_heads << "/" << c.shape.n_kv_heads << " x " << c.shape.head_dim << ", T " << c.T
                  << " at " << c.pos0 << ", scratch " << scratch << " B: worst " << worst << " (tol " << tolerance
                  << ")\n";
      }
    }
}

// Decode attention split over the context (a 4096-position cache: 16 splits of 256, a
// step's span shrunk to its context by attention_step_span) at positions whose context
// fits one span of 128 (one live split, which writes out directly), four spans of 64 and
// three of 128 (merged), 1001 positions (8 of 128), 1501 (12 of 128: the merge's batches
// of 8 loads a thread, the second partial) and the full cache (all 16 of 256), then the
// same cache in kMaxAttentionSplits splits of 128 (all of them live at the full cache),
// against one block per head; launched three times in a row, so a counter the merging
// block failed to reset shows up as a wrong or missing output on the next launch.
TEST(AttentionSplits, MatchOneBlockPerHead) {
  for (const int count : {16, kMaxAttentionSplits}) {
    SCOPED_TRACE(std::to_string(count) + " splits");
    std::mt19937_64 rng{test_seed() + 5};
    auto ctx = std::make_shared<CudaContext>();
    const AttentionShape shape{32, 8, 128};
    const int capacity = 4096, kv_dim = shape.n_kv_heads * shape.head_dim, q_dim = shape.n_heads * shape.head_dim;
    const int width = q_dim + 2 * kv_dim;
    // Spans of 256 or 128 whatever this GPU would choose: what is tested is the merge, with
    // every split live at the end of the cache.
    const AttentionSplits layout = attention_splits_of(capacity, count);
    ASSERT_EQ(layout.count, count);
    ASSERT_EQ(layout.span, capacity / count);
    const Tensor keys = random_device_acts(ctx, size_t(capacity) * kv_dim, rng);    // [capacity, kv_dim]
    const Tensor values = random_device_acts(ctx, size_t(capacity) * kv_dim, rng);  // [capacity, kv_dim]
    Tensor partials = device_tensor(ctx, DType::F32, int64_t(shape.n_heads) * layout.count, shape.head_dim + 2);
    Tensor counters = device_tensor(ctx, DType::I32, 1, shape.n_heads);
    CUDA_CHECK(cudaMemset(counters.data, 0, size_t(shape.n_heads) * sizeof(int)));
    AttentionSplits splits = layout;
    splits.partials = partials.as<float>();
    splits.counters = reinterpret_cast<unsigned*>(counters.as<int>());
    Tensor pos0 = device_tensor(ctx, DType::I32, 1, 1);
    for (const int position : {100, 255, 256, 1000, 1500, 4095}) {
      const Tensor qkv = random_device_acts(ctx, size_t(width), rng);  // [1, width]
      CUDA_CHECK(cudaMemcpy(pos0.data, &position, sizeof(int), cudaMemcpyHostToDevice));
      auto output_of = [&](const AttentionSplits& how) {
        return poisoned_output_of(ctx, 1, q_dim, [&](void* out) {
          launch_attention(keys.data, values.data, pos0.as<int>(), qkv.data, 1, shape.n_heads, shape.n_kv_heads,
                           shape.head_dim, how, out, DType::F16, ctx->stream);
        });
      };
      const std::vector<float> want = output_of(AttentionSplits{});
      double squares = 0;
      for (float v : want) squares += double(v) * v;
      const float rms = float(std::sqrt(squares / q_dim));
      for (int launch = 0; launch < 3; ++launch) {
        const std::vector<float> got = output_of(splits);
        float worst = 0;
        for (int i = 0; i < q_dim; ++i) {
          const float err =
              std::isfinite(got[size_t(i)]) ? std::fabs(want[size_t(i)] - got[size_t(i)]) / std::max(std::fabs(want[size_t(i)]), rms) : INFINITY;
          worst = std::max(worst, err);
          ASSERT_LE(err, kTolerance) << "position " << position << " launch " << launch << " column " << i
                                     << ": one block " << want[size_t(i)] << " split " << got[size_t(i)];
        }
        if (launch == 0)
          std::cout << "[cuda_ops] split decode attention in " << count << " splits at position " << position
                    << ": worst " << worst << " (tol " << kTolerance << ")\n";
      }
    }
  }
}

// The split buffers of a decode attention launch with `layout`: partials [n_heads, count,
// hd + 2] F32 and counters [n_heads] (zeroed), attached to the splits when there are several.
struct SplitBuffers {
  Tensor partials, counters;
  AttentionSplits splits;
};
SplitBuffers split_buffers(const std::shared_ptr<CudaContext>& ctx, const AttentionShape& shape,
                           const AttentionSplits& layout) {
  SplitBuffers b;
  b.partials = device_tensor(ctx, DType::F32, int64_t(shape.n_heads) * layout.count, shape.head_dim + 2);
  b.counters = device_tensor(ctx, DType::I32, 1, shape.n_heads);
  CUDA_CHECK(cudaMemset(b.counters.data, 0, size_t(shape.n_heads) * sizeof(int)));
  b.splits = layout;
  if (layout.count > 1) {
    b.splits.partials = b.partials.as<float>();
    b.splits.counters = reinterpret_cast<unsigned*>(b.counters.as<int>());
  }
  return b;
}

// RoPE's inverse frequencies [hd / 2] F32 (theta 10000) on the device.
Tensor device_rope_inv_freq(const std::shared_ptr<CudaContext>& ctx, int head_dim) {
  std::vector<float> inv_freq(size_t(head_dim / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i) inv_freq[i] = std::pow(10000.0f, -2.0f * float(i) / head_dim);
  Tensor freq = device_tensor(ctx, DType::F32, 1, int64_t(inv_freq.size()));
  CUDA_CHECK(cudaMemcpy(freq.data, inv_freq.data(), inv_freq.size() * 4, cudaMemcpyHostToDevice));
  return freq;
}

// The rows at `position` of two caches [capacity, kv_dim] (act) that two kernels stored this
// step's k and v into: the value rows the same bits, the keys the same up to one rounding of
// act (fp32 contraction may differ between the kernels).
void expect_same_stored_rows(const Tensor& keys, const Tensor& keys2, const Tensor& values, const Tensor& values2,
                             int position, int kv_dim, DType act) {
  const size_t row_size = static_cast<size_t>(kv_dim), row = size_t(position) * kv_dim;
  std::vector<uint16_t> k1(row_size), k2(row_size), v1(row_size), v2(row_size);
  CUDA_CHECK(cudaMemcpy(k1.data(), keys.as<uint16_t>() + row, row_size * 2, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(k2.data(), keys2.as<uint16_t>() + row, row_size * 2, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(v1.data(), values.as<uint16_t>() + row, row_size * 2, cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(v2.data(), values2.as<uint16_t>() + row, row_size * 2, cudaMemcpyDeviceToHost));
  EXPECT_EQ(v1, v2) << "the stored value row";
  const auto to_float = [act](uint16_t bits) { return act == DType::BF16 ? bf16_to_float(bits) : half_to_float(bits); };
  const int mantissa = act == DType::BF16 ? 7 : 10;
  for (size_t i = 0; i < row_size; ++i)
    ASSERT_LE(std::fabs(to_float(k1[i]) - to_float(k2[i])), std::ldexp(std::fabs(to_float(k1[i])), -mantissa) + 1e-7f)
        << "stored key " << i << ": " << to_float(k1[i]) << " vs " << to_float(k2[i]);
}

// Decode attention with RoPE and the KV store inside (launch_attention with rope_inv_freq)
// against launch_rope_store followed by the plain kernel, on copies of the same cache and
// qkv: GQA with the cache split (positions in the first split, on a boundary, at the end)
// and plain heads without splits (positions 0 and 5). The stored value row is the same bits,
// the stored key the same up to one rounding (fp32 contraction may differ between the two
// kernels), the output within kTolerance (this token's term joins the softmax last).
TEST(AttentionFusedRope, MatchesRopeStoreThenAttention) {
  std::mt19937_64 rng{test_seed() + 9};
  auto ctx = std::make_shared<CudaContext>();
  struct Case {
    AttentionShape shape;
    int capacity;
    int splits;  // the split count (attention_splits_of), whatever this GPU would choose
    std::vector<int> positions;
  };
  for (const Case& c : {Case{{32, 8, 128}, 4096, 16, {100, 256, 4095}}, Case{{4, 4, 64}, 64, 1, {0, 5}},
                        Case{{6, 2, 48}, 300, 2, {7, 299}}}) {
    const AttentionShape& shape = c.shape;
    const int kv_dim = shape.n_kv_heads * shape.head_dim, q_dim = shape.n_heads * shape.head_dim;
    const int width = q_dim + 2 * kv_dim;
    const SplitBuffers buffers = split_buffers(ctx, shape, attention_splits_of(c.capacity, c.splits));
    const AttentionSplits& splits = buffers.splits;
    const Tensor freq = device_rope_inv_freq(ctx, shape.head_dim);
    Tensor pos0 = device_tensor(ctx, DType::I32, 1, 1);
    const size_t cache_bytes = size_t(c.capacity) * kv_dim * 2;
    for (const int position : c.positions) {
      SCOPED_TRACE(std::to_string(shape.n_heads) + "/" + std::to_string(shape.n_kv_heads) + " x " +
                   std::to_string(shape.head_dim) + " at " + std::to_string(position));
      const Tensor keys = random_device_acts(ctx, size_t(c.capacity) * kv_dim, rng);
      const Tensor values = random_device_acts(ctx, size_t(c.capacity) * kv_dim, rng);
      const Tensor qkv = random_device_acts(ctx, size_t(width), rng);  // [1, width], not rotated
      Tensor keys2 = device_tensor(ctx, DType::F16, c.capacity, kv_dim), values2 = device_tensor(ctx, DType::F16, c.capacity, kv_dim);
      Tensor qkv2 = device_tensor(ctx, DType::F16, 1, width);
      CUDA_CHECK(cudaMemcpy(keys2.data, keys.data, cache_bytes, cudaMemcpyDeviceToDevice));
      CUDA_CHECK(cudaMemcpy(values2.data, values.data, cache_bytes, cudaMemcpyDeviceToDevice));
      CUDA_CHECK(cudaMemcpy(qkv2.data, qkv.data, size_t(width) * 2, cudaMemcpyDeviceToDevice));
      CUDA_CHECK(cudaMemcpy(pos0.data, &position, sizeof(int), cudaMemcpyHostToDevice));
      const std::vector<float> want = poisoned_output_of(ctx, 1, q_dim, [&](void* out) {
        launch_rope_store(keys.data, values.data, pos0.as<int>(), freq.as<float>(), qkv.data, 1, shape.n_heads,
                          shape.n_kv_heads, shape.head_dim, DType::F16, ctx->stream);
        launch_attention(keys.data, values.data, pos0.as<int>(), qkv.data, 1, shape.n_heads, shape.n_kv_heads,
                         shape.head_dim, splits, out, DType::F16, ctx->stream);
      });
      const std::vector<float> got = poisoned_output_of(ctx, 1, q_dim, [&](void* out) {
        launch_attention(keys2.data, values2.data, pos0.as<int>(), qkv2.data, 1, shape.n_heads, shape.n_kv_heads,
                         shape.head_dim, splits, out, DType::F16, ctx->stream, freq.as<float>());
      });
      double squares = 0;
      for (float v : want) squares += double(v) * v;
      const float rms = float(std::sqrt(squares / q_dim));
      for (int i = 0; i < q_dim; ++i) {
        const float a = want[size_t(i)], b = got[size_t(i)];
        const float err = std::isfinite(b) ? std::fabs(a - b) / std::max(std::fabs(a), rms) : INFINITY;
        ASSERT_LE(err, kTolerance) << "column " << i << ": rope_store + attention " << a << ", fused " << b;
      }
      expect_same_stored_rows(keys, keys2, values, values2, position, kv_dim, DType::F16);
    }
  }
}

// The grouped decode kernel (a block a kv head, tensor cores) against attention_kernel (a
// block a query head, held to the CPU above), both with RoPE and the KV store inside, on
// copies of the same random cache and qkv, fp16 and bf16: Llama-3's 4 query heads a kv head
// over 32 splits of 128 (one live split, positions on and past the split boundaries, a full
// cache), 7 heads a kv head at 64 dimensions over 2 splits, 8 a kv head (every mma row a
// head) over 8 splits, 2 a kv head without splits, and one (no GQA) over 16 splits. Each
// case launches the grouped kernel three times (it rewrites the same k and v at pos), so a
// counter its merging block failed to reset shows up. P is rounded to Act before P·V (as in
// PrefillAttention): the prefill tolerances. The stored value row is the same bits, the key
// the same up to one rounding.
TEST(AttentionGrouped, MatchesOneBlockPerHead) {
  std::mt19937_64 rng{test_seed() + 13};
  auto ctx = std::make_shared<CudaContext>();
  struct Case {
    AttentionShape shape;
    int capacity;
    AttentionSplits splits;  // whatever this GPU would choose
    std::vector<int> positions;
  };
  const Case cases[] = {
      {{32, 8, 128}, 4096, attention_grouped_splits_for(4096, 8, 132), {0, 5, 100, 127, 128, 300, 1000, 4095}},
      {{14, 2, 64}, 300, attention_grouped_splits_for(300, 2, 132), {7, 191, 192, 299}},
      {{16, 2, 128}, 1024, attention_splits_of(1024, 8), {0, 63, 64, 700, 1023}},
      {{8, 4, 64}, 64, AttentionSplits{}, {0, 5, 63}},
      {{8, 8, 128}, 2048, attention_grouped_splits_for(2048, 8, 132), {3, 600, 2047}}};  // one head a kv head
  ASSERT_EQ(cases[0].splits.count, 32);
  ASSERT_EQ(cases[1].splits.count, 2);
  for (const DType act : {DType::F16, DType::BF16})
    for (const Case& c : cases) {
      const AttentionShape& shape = c.shape;
      ASSERT_TRUE(attention_grouped_supports(shape.n_heads, shape.n_kv_heads, shape.head_dim));
      const float tolerance = act == DType::BF16 ? 8 * kPrefillTolerance : kPrefillTolerance;
      const int kv_dim = shape.n_kv_heads * shape.head_dim, q_dim = shape.n_heads * shape.head_dim;
      const int width = q_dim + 2 * kv_dim;
      const SplitBuffers buffers = split_buffers(ctx, shape, c.splits);
      const AttentionSplits& splits = buffers.splits;
      const Tensor freq = device_rope_inv_freq(ctx, shape.head_dim);
      Tensor pos0 = device_tensor(ctx, DType::I32, 1, 1);
      const size_t cache_bytes = size_t(c.capacity) * kv_dim * 2;
      for (const int position : c.positions) {
        SCOPED_TRACE(std::string(dtype_name(act)) + " " + std::to_string(shape.n_heads) + "/" +
                     std::to_string(shape.n_kv_heads) + " x " + std::to_string(shape.head_dim) + " at " +
                     std::to_string(position) + ", " + std::to_string(splits.count) + " splits");
        const Tensor keys = random_device_acts(ctx, size_t(c.capacity) * kv_dim, rng, act);    // [capacity, kv_dim]
        const Tensor values = random_device_acts(ctx, size_t(c.capacity) * kv_dim, rng, act);  // [capacity, kv_dim]
        const Tensor qkv = random_device_acts(ctx, size_t(width), rng, act);  // [1, width], not rotated
        Tensor keys2 = device_tensor(ctx, act, c.capacity, kv_dim);    // [capacity, kv_dim]
        Tensor values2 = device_tensor(ctx, act, c.capacity, kv_dim);  // [capacity, kv_dim]
        Tensor qkv2 = device_tensor(ctx, act, 1, width);
        CUDA_CHECK(cudaMemcpy(keys2.data, keys.data, cache_bytes, cudaMemcpyDeviceToDevice));
        CUDA_CHECK(cudaMemcpy(values2.data, values.data, cache_bytes, cudaMemcpyDeviceToDevice));
        CUDA_CHECK(cudaMemcpy(qkv2.data, qkv.data, size_t(width) * 2, cudaMemcpyDeviceToDevice));
        CUDA_CHECK(cudaMemcpy(pos0.data, &position, sizeof(int), cudaMemcpyHostToDevice));
        const std::vector<float> want = poisoned_output_of(
            ctx, 1, q_dim,
            [&](void* out) {
              launch_attention(keys.data, values.data, pos0.as<int>(), qkv.data, 1, shape.n_heads, shape.n_kv_heads,
                               shape.head_dim, AttentionSplits{}, out, act, ctx->stream, freq.as<float>());
            },
            act);
        double squares = 0;
        for (float v : want) squares += double(v) * v;
        const float rms = float(std::sqrt(squares / q_dim));
        for (int launch = 0; launch < 3; ++launch) {
          const std::vector<float> got = poisoned_output_of(
              ctx, 1, q_dim,
              [&](void* out) {
                launch_attention_grouped(keys2.data, values2.data, pos0.as<int>(), qkv2.data, shape.n_heads,
                                         shape.n_kv_heads, shape.head_dim, splits, out, act, ctx->stream,
                                         freq.as<float>());
              },
              act);
          float worst = 0;
          for (int i = 0; i < q_dim; ++i) {
            const float a = want[size_t(i)], b = got[size_t(i)];
            const float err = std::isfinite(b) ? std::fabs(a - b) / std::max(std::fabs(a), rms) : INFINITY;
            worst = std::max(worst, err);
            ASSERT_LE(err, tolerance) << "launch " << launch << " column " << i << ": one block a head " << a
                                      << ", grouped " << b;
          }
          if (launch == 0)
            std::cout << "[cuda_ops] grouped decode attention " << dtype_name(act) << " " << shape.n_heads << "/"
                      << shape.n_kv_heads << " x " << shape.head_dim << " at " << position << ", " << splits.count
                      << " splits: worst " << worst << " (tol " << tolerance << ")\n";
        }
        expect_same_stored_rows(keys, keys2, values, values2, position, kv_dim, act);
      }
    }
}

}  // namespace
}  // namespace gemlite
