// KernelTrace (kernels/bench/kernel_trace.h), what `gemlite-bench --trace` prints: three
// kernels that each spin for a known time on the GPU clock, launched one after the other
// on one stream (no PDL, so none overlaps the next), must come back as three spans in
// launch order, named, each lasting at least its spin, and each adding its whole duration
// to the step.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "kernels/bench/kernel_trace.h"
#include "kernels/cuda_check.h"

namespace gemlite {
namespace {

__global__ void spin_kernel(uint64_t ns) {
  uint64_t start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  for (uint64_t now = start; now - start < ns;) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
}

TEST(KernelTrace, RecordsSequentialKernelsInOrder) {
  const uint64_t spins_ns[] = {20000, 40000, 10000};
  KernelTrace trace;
  trace.start();
  for (uint64_t ns : spins_ns) spin_kernel<<<3, 64>>>(ns);
  CUDA_CHECK(cudaGetLastError());
  const std::vector<KernelSpan> spans = trace.stop();
  ASSERT_EQ(spans.size(), 3u);
  for (size_t i = 0; i < spans.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_NE(spans[i].name.find("spin_kernel"), std::string::npos) << spans[i].name;
    EXPECT_EQ(spans[i].grid, 3u);
    EXPECT_EQ(spans[i].block, 64u);
    const uint64_t duration = spans[i].end_ns - spans[i].start_ns;
    EXPECT_GE(duration, spins_ns[i]);
    EXPECT_LT(duration, spins_ns[i] + 1000000) << "a 1 ms margin for the clock and the launch";
    EXPECT_EQ(spans[i].added_ns, duration);  // sequential: nothing ran before it in its time
    if (i > 0) EXPECT_GE(spans[i].start_ns, spans[i - 1].end_ns);
  }
  EXPECT_EQ(trace_length_ns(spans), spans[2].end_ns - spans[0].start_ns);
  EXPECT_EQ(trace_length_ns({}), 0u);
  // A second trace holds only its own kernels.
  trace.start();
  spin_kernel<<<1, 32>>>(5000);
  EXPECT_EQ(trace.stop().size(), 1u);
}

}  // namespace
}  // namespace gemlite
