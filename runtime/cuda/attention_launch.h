#pragma once
// How the decode attention (attention.cu, attention_grouped.cu) spreads a step over blocks:
// the split of each head's context, a pure function of the cache's capacity, the heads and
// the device's SM count, apart from the kernel, so that the rule -- with the measurements
// it rests on -- is unit-tested on the CPU (tests/cpu/test_attention_launch.cpp), like the
// prefill attention's (flash_prefill_launch.h).

namespace gemlite {

constexpr int kAttentionThreads = 256;  // a block of attention_kernel
// Positions one thread group takes per round, their key and value loads all in flight.
// 8 (a round of 128 at head_dim 128: tg128's whole context loaded before the PDL wait;
// 146 registers, so one block an SM and splits sized for one) measured llama2-7b q4g64
// tg128 475.4 / 475.1 -> 478.1 / 479.5 tok/s but at depth 4096 335.8 / 335.4 -> 327.4 /
// 326.1; 6 (117 registers) 469.6 / 473.8 and 335.9 / 336.2 (one H100, interleaved, two
// rounds, 2026-11-27). Not kept.
constexpr int kPositionsPerGroup = 4;
// Blocks of attention_kernel an SM holds (its launch bounds cap the registers to fit them);
// attention_splits_for sizes the splits to one wave of them.
constexpr int kAttentionBlocksPerSm = 2;

// Positions a round of attention_kernel takes at head_dim 128 (groups of 128 / 8 threads):
// the unit of every span.
constexpr int kAttentionRound = kPositionsPerGroup * (kAttentionThreads / (128 / 8));
// The longest context a step keeps in one split (attention_step_span): two rounds, so that
// a context of up to 128 positions stays in one block a head (a kv head, grouped) and skips the merge.
constexpr int kOneSplitPositions = 2 * kAttentionRound;
// The longest context attention_kernel's steps spread in spans of one round
// (attention_step_span). One H200,
// 32/32 heads x 128, a 4096-position cache (GEMLITE_BENCH_CACHE=4096), us with spans of one
// round against spans of at least two: ctx 192 6.0 vs 6.5, 256 5.2 vs 7.0, 384 6.8 vs 7.7,
// 512 7.8 vs 7.3; llama2-7b q4g64 tg128 @ d128 (positions 129-256) 503.5 / 503.1 vs
// 495.4 / 491.4 tok/s, @ d384 (385-512) 486.7 / 487.2 vs 494.0 / 493.0.
constexpr int kOneRoundSpansUpTo = 4 * kAttentionRound;
// The same for the grouped kernel, whose n_kv_heads blocks a split leave most SMs idle in
// spans of two rounds at short contexts. One H200, 32/8 heads x 128, fp16, cold L2, spans
// of one round against two: ctx 512 6.8 vs 9.5 us (ctx 640 8.7, attention_kernel 10.6);
// llama3-8b q4g64 tg128 @ d512 (positions 512-640: 8-10 splits of 64 against 4-5 of
// 128, grids with room for 10) 511.9 / 511.4 vs 505.2 / 505.1 tok/s (+1.3 %; +4 % in
// another device session), @ d640 498.8 / 497.2 vs 497.1 / 496.6 (interleaved, two rounds
// each); @ d1024 16-18 splits of 64 had lost to 8-9 of 128 (504.3 / 506.6 vs 515.5 / 519.0).
constexpr int kGroupedOneRoundSpansUpTo = 12 * kAttentionRound;

// How a decode step's attention splits the context ("flash decoding"): `count` blocks per
// head, block s taking positions [s * span, (s + 1) * span). One head has only its own
// block otherwise: 32 blocks on 132 SMs for Llama-2-7B, each reading the head's whole
// context. count and span follow the cache's capacity, not the position, so the grid of a
// captured decode step stays valid as the context grows: the kernel reads the position,
// shrinks the span to the context so far (attention_step_span), and only the splits that
// hold positions take part (blocks past the context leave at once, before the PDL wait:
// llama3-8b tg128 +0.4..1.1 %, runtime/cuda/MEASURED.md's thirty-seventh session; the live
// block that takes a head's last ticket merges, or the only one writes out directly). The
// grouped kernel splits each kv head's context the same way, a block a (kv head, split).
struct AttentionSplits {
  int count = 1;                 // at most kMaxAttentionSplits (the merge's shared memory)
  int span = 1 << 30;            // positions per split at a full cache
  float* partials = nullptr;     // [n_heads, count, hd + 2] F32 (count > 1)
  unsigned* counters = nullptr;  // [n_heads], zero between launches (count > 1); grouped: [n_kv_heads] of them
  // The longest context a step spreads in spans of one round (attention_step_span):
  // kOneRoundSpansUpTo, or kGroupedOneRoundSpansUpTo (attention_grouped_splits_for).
  int one_round_spans_up_to = kOneRoundSpansUpTo;
};
// The span of one step's splits with n_pos positions in the context: a context of up to
// kOneSplitPositions (or the full span, if shorter) in split 0 alone (no merge); a longer
// one spread over the `count` splits in whole rounds, as few as it takes, in spans of one
// round up to s.one_round_spans_up_to positions and of at least two rounds beyond. Each split
// runs its rounds one after another, each waiting on memory, so a block's rounds, not the
// bytes, bound a short context: with a 4096-position cache (8 splits of 512) position 500
// had taken 8 rounds in one block a head (H100, llama2-7b q4g64, a 5120-position cache:
// tg128 @ d512 420.8 -> 457.4 tok/s with the spans shrunk; runtime/cuda/MEASURED.md).
// Never above `span` (n_pos <= the capacity), and count x the step's span >= n_pos. The
// same for every block of a step (T = 1 whenever count > 1).
#ifdef __CUDACC__
__host__ __device__
#endif
inline int attention_step_span(const AttentionSplits& s, int n_pos) {
  if (s.count <= 1) return s.span;
  const int one_split = s.span < kOneSplitPositions ? s.span : kOneSplitPositions;
  if (n_pos <= one_split) return one_split;
  const int per_split = (n_pos + s.count - 1) / s.count;
  const int in_rounds = (per_split + kAttentionRound - 1) / kAttentionRound * kAttentionRound;  // positions
  const int least = n_pos <= s.one_round_spans_up_to ? kAttentionRound : one_split;
  const int at_least = in_rounds > least ? in_rounds : least;
  return at_least < s.span ? at_least : s.span;
}
// The splits for a cache of `capacity` positions and `n_heads` query heads on a GPU of `sms`
// SMs: at a full cache one wave of blocks, two an SM (what the kernel's registers let
// reside), in spans of at least kMinAttentionSpan positions, at most kMaxAttentionSplits
// of them.
constexpr int kMaxAttentionSplits = 32;
constexpr int kMinAttentionSpan = 256;
AttentionSplits attention_splits_for(int capacity, int n_heads, int sms);
// `count` (clamped to 1..kMaxAttentionSplits) spans of equal whole rounds covering
// `capacity` positions (fewer when rounding leaves the last ones empty).
AttentionSplits attention_splits_of(int capacity, int count);

// The grouped decode kernel (attention_grouped.cu: a block takes the query heads of one kv
// head, which share each key and value it loads): kGroupedAttentionWarps warps of
// kGroupedPositions positions a step, so a block's round is kAttentionRound positions and
// attention_step_span spans it as it spans attention_kernel's.
constexpr int kGroupedAttentionWarps = 4;
constexpr int kGroupedPositions = 16;  // the n of two QKᵀ mmas, the k of one P·V mma
static_assert(kGroupedAttentionWarps * kGroupedPositions == kAttentionRound, "one round a block step");
constexpr int kGroupedMaxGroup = 8;     // query heads a kv head: the rows gid of the mmas
// Its launch bounds' blocks an SM: 189 registers, no spill; at 3 blocks an SM the bounds cap
// it at 168 registers and it spilled 80 bytes.
constexpr int kGroupedBlocksPerSm = 2;
// The heads the grouped kernel takes: 1..kGroupedMaxGroup query heads a kv head, heads of
// 64 or 128 dimensions (a lane holds each rotate-half pair).
inline bool attention_grouped_supports(int n_heads, int n_kv_heads, int head_dim) {
  if (n_kv_heads < 1 || n_heads % n_kv_heads != 0) return false;
  const int group = n_heads / n_kv_heads;
  return group >= 1 && group <= kGroupedMaxGroup && (head_dim == 64 || head_dim == 128);
}
// Whether decode attention of these heads runs grouped: grouped-query heads (2 or more a
// kv head) it supports.
inline bool attention_runs_grouped(int n_heads, int n_kv_heads, int head_dim) {
  return attention_grouped_supports(n_heads, n_kv_heads, head_dim) && n_heads >= 2 * n_kv_heads;
}
// The grouped kernel's splits for a cache of `capacity` positions: n_kv_heads blocks a
// split, one wave of kGroupedBlocksPerSm an SM at a full cache, spans of two rounds or more
// there, at most kMaxAttentionSplits; a step spans contexts of up to
// kGroupedOneRoundSpansUpTo positions in single rounds as far as the count allows. The
// partials and counters stay those of attention_kernel's layout ([n_heads, count, hd + 2],
// [n_heads]).
AttentionSplits attention_grouped_splits_for(int capacity, int n_kv_heads, int sms);

}  // namespace gemlite
