// The decode attention's split of the context (runtime/cuda/attention_launch.h): the
// choices the H100/H200 measurements rest on, and over a sweep of capacities, heads and SM
// counts the layout the kernel relies on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/cuda/attention_launch.h"

namespace gemlite {
namespace {

constexpr int kH100Sms = 132;

// The grouped decode kernel (a block a kv head, tensor cores) takes 2..8 query heads a kv
// head of 64 or 128 dimensions, and splits a cache for n_kv_heads blocks a split: one wave
// of two blocks an SM, spans of two rounds or more at a full cache, at most 32 splits.
// Llama-3-8B's 8 kv heads at depth 4096 + 128 take 22 splits of 192 (the H200 sweep of the
// model, tg128 @ d4096: 8 splits 444.3 tok/s, 16 447.1, the rule's 22 449.6), and a
// 16384-position cache 32 of 512 (the kernel at ctx 16384: 8 splits 42.4 us, 16 30.0, 32
// 26.9).
TEST(AttentionGrouped, HeadsItTakesAndItsSplits) {
  EXPECT_TRUE(attention_runs_grouped(32, 8, 128));   // Llama-3-8B
  EXPECT_TRUE(attention_runs_grouped(14, 2, 64));    // Qwen2-0.5B-like, 7 a kv head
  EXPECT_TRUE(attention_runs_grouped(16, 2, 128));   // 8 a kv head: every mma row a head
  EXPECT_FALSE(attention_runs_grouped(32, 32, 128)); // no GQA: attention_kernel
  EXPECT_TRUE(attention_grouped_supports(32, 32, 128));  // though the kernel takes it
  EXPECT_FALSE(attention_runs_grouped(32, 2, 128));  // 16 a kv head: more than the mma's 8 rows
  EXPECT_FALSE(attention_runs_grouped(12, 4, 96));   // heads of 96
  EXPECT_FALSE(attention_runs_grouped(32, 8, 256));
  EXPECT_FALSE(attention_runs_grouped(6, 4, 64));    // not a whole group a kv head
  EXPECT_FALSE(attention_runs_grouped(8, 0, 64));
  const AttentionSplits llama3 = attention_grouped_splits_for(4224, 8, kH100Sms);
  EXPECT_EQ(llama3.count, 22);
  EXPECT_EQ(llama3.span, 192);
  const AttentionSplits long_cache = attention_grouped_splits_for(16384, 8, kH100Sms);
  EXPECT_EQ(long_cache.count, kMaxAttentionSplits);
  EXPECT_EQ(long_cache.span, 512);
  EXPECT_EQ(attention_grouped_splits_for(512, 8, kH100Sms).count, 4);
  // No more splits than spans of two rounds fill: position 639 of a 640-position cache in 5
  // of 128, where a grid of 10 would have run it in 10 of 64 but held 9 empty splits at the
  // start of every context.
  const AttentionSplits cache_640 = attention_grouped_splits_for(640, 8, kH100Sms);  // depth 512 + 128
  EXPECT_EQ(cache_640.count, 5);
  EXPECT_EQ(attention_step_span(cache_640, 640), 128);
  EXPECT_EQ(attention_step_span(cache_640, 320), 64);  // 5 splits of one round
  EXPECT_EQ(attention_grouped_splits_for(128, 8, kH100Sms).count, 1);
  EXPECT_EQ(attention_grouped_splits_for(0, 8, kH100Sms).count, 1);
  EXPECT_EQ(attention_grouped_splits_for(4096, 64, kH100Sms).count, 4);  // 64 kv heads: 4 splits fill a wave
  // A step spans contexts of up to 768 positions in single rounds (attention_kernel's up to
  // 256) where the count has room: with the depth-4096 cache (22 splits) position 511 takes
  // 8 splits of 64 where spans of two rounds took 4 of 128; position 1023 takes 8 of 128.
  EXPECT_EQ(llama3.one_round_spans_up_to, kGroupedOneRoundSpansUpTo);
  EXPECT_EQ(attention_step_span(llama3, 512), 64);
  EXPECT_EQ(attention_step_span(llama3, 1024), 128);
  EXPECT_EQ(attention_step_span(llama3, 4096), 192);
  EXPECT_EQ(attention_step_span(llama3, 128), 128);  // one split: no merge
  AttentionSplits two_rounds = llama3;
  two_rounds.one_round_spans_up_to = kOneRoundSpansUpTo;
  EXPECT_EQ(attention_step_span(two_rounds, 512), 128);
}

// One wave of two blocks an SM at a full cache, spans of >= 256 positions in whole rounds
// of 64, at most 32 splits; the layouts of the environment override for A/B runs
// (GEMLITE_ATTENTION_SPLITS). Llama-2-7B at depth 4096 + 256 takes 8 splits of 576: the
// count measured best on an H200 (attention_launch.cpp: 6 splits 357.4 tok/s, 8 372.8,
// 12 338.6).
TEST(AttentionSplits, OneWaveOfTwoBlocksAnSm) {
  const AttentionSplits h100 = attention_splits_for(4352, 32, kH100Sms);
  EXPECT_EQ(h100.count, 8);
  EXPECT_EQ(h100.span, 576);
  EXPECT_GE(int64_t(h100.count) * h100.span, 4352);
  const AttentionSplits short_cache = attention_splits_for(640, 32, kH100Sms);
  EXPECT_EQ(short_cache.count, 2);
  EXPECT_EQ(short_cache.span, 320);
  const AttentionSplits few_heads = attention_splits_for(1 << 16, 4, kH100Sms);  // capped
  EXPECT_EQ(few_heads.count, kMaxAttentionSplits);
  EXPECT_EQ(few_heads.span, 2048);
  EXPECT_EQ(attention_splits_for(100, 32, kH100Sms).count, 1);
  EXPECT_GE(attention_splits_for(100, 32, kH100Sms).span, 100);
  EXPECT_EQ(attention_splits_for(0, 32, kH100Sms).count, 1);  // no cache: one block a head, no division by 0
  const AttentionSplits forced = attention_splits_of(300, 2);
  EXPECT_EQ(forced.count, 2);
  EXPECT_EQ(forced.span, 192);
  EXPECT_EQ(attention_splits_of(4224, 17).count, 17);
  EXPECT_EQ(attention_splits_of(4224, 17).span, 256);
}

// Over a sweep: the splits cover the cache and none is empty (the kernel's live-split count
// and the merge assume split s holds position s * span), spans are whole rounds (64
// positions at head_dim 128), the count stays within the partials' kMaxAttentionSplits,
// and a split cache is at most one wave of kAttentionBlocksPerSm blocks an SM.
TEST(AttentionSplits, SplitsCoverTheCacheInWholeRounds) {
  for (const int sms : {1, 8, 80, kH100Sms})
    for (const int heads : {1, 4, 14, 32, 64})
      for (const int capacity : {1, 63, 64, 100, 256, 640, 4096, 4352, 32768, 1 << 20}) {
        const AttentionSplits splits = attention_splits_for(capacity, heads, sms);
        const std::string where = "capacity " + std::to_string(capacity) + ", " + std::to_string(heads) +
                                  " heads, " + std::to_string(sms) + " SMs";
        ASSERT_GE(splits.count, 1) << where;
        EXPECT_LE(splits.count, kMaxAttentionSplits) << where;
        EXPECT_GE(int64_t(splits.count) * splits.span, capacity) << where;
        EXPECT_LT(int64_t(splits.count - 1) * splits.span, capacity) << where;
        EXPECT_EQ(splits.span % kAttentionRound, 0) << where;
        if (splits.count > 1) {
          EXPECT_GE(splits.span, kMinAttentionSpan) << where;
          EXPECT_LE(splits.count * heads, kAttentionBlocksPerSm * sms) << where;
        }
      }
}

// A step's span shrinks to the context so far (attention_step_span): Llama-2-7B with a
// cache of 4352 positions (8 splits of 576) at position 499 takes 4 splits of 128 rather
// than one of 576, at position 255 4 splits of 64, a context of up to 128 positions one
// block a head (no merge), and the full cache the full span.
TEST(AttentionSplits, AStepSpreadsItsContextOverTheSplits) {
  const AttentionSplits h100 = attention_splits_for(4352, 32, kH100Sms);
  ASSERT_EQ(h100.count, 8);
  ASSERT_EQ(h100.span, 576);
  EXPECT_EQ(attention_step_span(h100, 1), 128);
  EXPECT_EQ(attention_step_span(h100, 128), 128);
  EXPECT_EQ(attention_step_span(h100, 129), 64);    // 3 splits live
  EXPECT_EQ(attention_step_span(h100, 256), 64);    // 4 splits live
  EXPECT_EQ(attention_step_span(h100, 257), 128);   // 3 splits live
  EXPECT_EQ(attention_step_span(h100, 500), 128);   // 4 splits live
  EXPECT_EQ(attention_step_span(h100, 1025), 192);  // ceil(1025 / 8) = 129 -> 3 rounds of 64
  EXPECT_EQ(attention_step_span(h100, 4096), 512);
  EXPECT_EQ(attention_step_span(h100, 4352), 576);
  const AttentionSplits one = attention_splits_for(100, 32, kH100Sms);  // one split: its span whatever the step
  ASSERT_EQ(one.count, 1);
  EXPECT_EQ(attention_step_span(one, 7), one.span);
  EXPECT_EQ(attention_step_span(AttentionSplits{}, 7), AttentionSplits{}.span);  // GEMLITE_NO_ATTENTION_SPLITS
  const AttentionSplits forced = attention_splits_of(300, 2);  // span 192, one split up to 128
  EXPECT_EQ(attention_step_span(forced, 10), 128);
  EXPECT_EQ(attention_step_span(forced, 300), 192);
}

// Over a sweep of caches, split as attention_splits_for does (spans of >= 256), as
// attention_grouped_splits_for does (spans of one round up to 768 positions) and as
// GEMLITE_ATTENTION_SPLITS forces (spans down to one round), and every position in them: the
// live splits (the kernel's ceil(n_pos / step span)) are within the grid's count and each
// holds a position, spans are whole rounds never above the cache's span, and a context of
// up to two rounds (or the whole span) has one live split.
TEST(AttentionSplits, EveryStepFitsTheGrid) {
  std::vector<std::pair<std::string, AttentionSplits>> layouts;
  for (const int capacity : {1, 64, 100, 129, 256, 300, 640, 768, 1152, 4352, 40000}) {
    for (const int heads : {4, 32})
      layouts.emplace_back(std::to_string(heads) + " heads", attention_splits_for(capacity, heads, kH100Sms));
    for (const int kv_heads : {2, 8})
      layouts.emplace_back(std::to_string(kv_heads) + " kv heads, grouped",
                           attention_grouped_splits_for(capacity, kv_heads, kH100Sms));
    for (const int count : {2, 3, 16, 32})
      layouts.emplace_back(std::to_string(count) + " splits forced", attention_splits_of(capacity, count));
  }
  for (const auto& [how, splits] : layouts)
    for (int n_pos = 1; n_pos <= splits.count * splits.span && n_pos <= 40000; ++n_pos) {
      const int span = attention_step_span(splits, n_pos);
      const std::string where = how + ", " + std::to_string(splits.count) + " x " + std::to_string(splits.span) +
                                ", " + std::to_string(n_pos) + " positions";
      ASSERT_LE(span, splits.span) << where;
      if (splits.count == 1) continue;
      ASSERT_EQ(span % kAttentionRound, 0) << where;
      ASSERT_GE(span, kAttentionRound) << where;
      const int live = (n_pos + span - 1) / span;
      ASSERT_LE(live, splits.count) << where;
      ASSERT_LT((live - 1) * span, n_pos) << where;
      if (n_pos <= std::min(splits.span, kOneSplitPositions)) ASSERT_EQ(live, 1) << where;
    }
}

}  // namespace
}  // namespace gemlite
