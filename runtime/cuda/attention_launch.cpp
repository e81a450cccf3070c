#include "runtime/cuda/attention_launch.h"

#include <algorithm>

namespace gemlite {

// The split had taken spans of 256 positions, up to 32 of them, whatever the GPU: at depth
// 4096 on Llama-2-7B's 32 heads 17 splits, 544 blocks where 264 reside (104 registers a
// thread: two blocks an SM), so three waves, the last of 16 blocks. One wave of 8 splits
// (spans of 576): llama2-7b q4g64 tg128 at depth 4096 337.4 / 339.3 -> 371.4 / 371.2 tok/s
// (one H200, same binary, GEMLITE_ATTENTION_SPLITS=17 for the old count, two rounds). The
// count swept on another H200 (same run): 6 splits 357.4 (192 blocks: SMs left idle), 8
// 372.8, 12 338.6 (384 blocks: a wave and a half).
AttentionSplits attention_splits_for(int capacity, int n_heads, int sms) {
  const int count = std::min(std::clamp(kAttentionBlocksPerSm * sms / std::max(n_heads, 1), 1, kMaxAttentionSplits),
                             std::max(1, capacity / kMinAttentionSpan));
  return attention_splits_of(capacity, count);
}

AttentionSplits attention_grouped_splits_for(int capacity, int n_kv_heads, int sms) {
  const int count = std::min(std::clamp(kGroupedBlocksPerSm * sms / std::max(n_kv_heads, 1), 1, kMaxAttentionSplits),
                             std::max(1, capacity / kOneSplitPositions));
  AttentionSplits splits = attention_splits_of(capacity, count);
  // Short contexts in spans of one round where the count has room for them. The count
  // itself stays that of spans of two rounds at a full cache: splits that hold no position
  // cost (llama3-8b q4g64 tg128 @ d1024 with 12 splits of which 8-9 live 505.0 / 503.9
  // tok/s against 514.3 / 513.7 with 9, one H200, interleaved, while they still waited for
  // the PDL predecessor before leaving; they now leave at once), and a larger count for
  // short caches would add such splits to the start of every context.
  splits.one_round_spans_up_to = kGroupedOneRoundSpansUpTo;
  return splits;
}

AttentionSplits attention_splits_of(int capacity, int count) {
  if (capacity < 1) return AttentionSplits{};
  count = std::clamp(count, 1, kMaxAttentionSplits);
  AttentionSplits splits;
  splits.span = ((capacity + count - 1) / count + kAttentionRound - 1) / kAttentionRound * kAttentionRound;
  splits.count = (capacity + splits.span - 1) / splits.span;
  return splits;
}

}  // namespace gemlite
