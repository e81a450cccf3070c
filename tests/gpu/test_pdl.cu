// Programmatic Dependent Launch (kernels/pdl.cuh): the GEMV kernels launched with the
// attribute start while their predecessor runs, so each must still see everything the
// predecessor wrote. A slow producer (it lets its successor start at once, then sleeps
// 200 us before writing x) feeds a chain gemv_qn -> gemm_fpx -> gemv_dense of 4096 x 4096
// weights; every output must equal, bitwise, the same chain run one kernel at a time after
// a synchronize. Run eagerly and as a captured graph, whose edges must be programmatic
// (stream capture keeps them) unless GEMLITE_NO_PDL=1.
#include <gtest/gtest.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <iostream>
#include <random>
#include <vector>

#include "kernels/cuda_check.h"
#include "kernels/fpx/gemm_fpx.h"
#include "kernels/packed_weight.h"
#include "kernels/pdl.cuh"
#include "kernels/qn/gemv_qn.h"
#include "kernels/weight_format.h"
#include "runtime/cuda/ops.h"
#include "runtime/dtype.h"
#include "tests/gpu/gpu_test_helpers.h"

namespace gemlite {
namespace {

constexpr int64_t kDim = 4096;

// x [n] = source [n] after sleeping `nanoseconds`; the successor may start at once.
__global__ void slow_copy_kernel(const uint16_t* source, uint16_t* x, int64_t n, uint64_t nanoseconds) {
  pdl_launch_dependents();
  uint64_t start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    __nanosleep(1000);
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < nanoseconds);
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) x[i] = source[i];
}

std::vector<float> random_floats(size_t n, float sigma, std::mt19937_64& rng) {
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> v(n);
  for (float& f : v) f = normal(rng);
  return v;
}

std::vector<uint16_t> to_half_bits(const std::vector<float>& v) {
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) bits[i] = float_to_half(v[i]);
  return bits;
}

struct Chain {
  QnDeviceWeight qn;
  FpxDeviceWeight fpx;
  DeviceBuffer dense{size_t(kDim * kDim) * 2};  // [kDim, kDim] fp16
  DeviceBuffer source{size_t(kDim) * 2}, x{size_t(kDim) * 2};
  DeviceBuffer a{size_t(kDim) * 2}, b{size_t(kDim) * 2}, c{size_t(kDim) * 2};  // [kDim] each

  explicit Chain(std::mt19937_64& rng) {
    // Weights of standard deviation 1/64 keep every activation near unit size.
    const std::vector<float> wq = random_floats(size_t(kDim * kDim), 1.0f / 64, rng);
    qn = upload_qn_weight(quantize_weight(wq.data(), kDim, kDim, WeightFormat::parse("q4g64")), DType::F16);
    const std::vector<float> wf = random_floats(size_t(kDim * kDim), 1.0f / 64, rng);
    fpx = upload_fpx_weight(quantize_weight(wf.data(), kDim, kDim, WeightFormat::parse("fp6")), DType::F16);
    const std::vector<uint16_t> wd = to_half_bits(random_floats(size_t(kDim * kDim), 1.0f / 64, rng));
    CUDA_CHECK(cudaMemcpy(dense.ptr, wd.data(), wd.size() * 2, cudaMemcpyHostToDevice));
    const std::vector<uint16_t> xs = to_half_bits(random_floats(size_t(kDim), 1.0f, rng));
    CUDA_CHECK(cudaMemcpy(source.ptr, xs.data(), xs.size() * 2, cudaMemcpyHostToDevice));
  }
  ~Chain() {
    free_qn_weight(&qn);
    free_fpx_weight(&fpx);
  }

  void clear() {
    for (void* p : {x.ptr, a.ptr, b.ptr, c.ptr}) CUDA_CHECK(cudaMemset(p, 0, size_t(kDim) * 2));
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  // x = source (slowly), a = qn(x), b = fpx(a), c = dense(b); `step` runs between launches.
  template <class Step>
  void run(cudaStream_t stream, Step step) {
    slow_copy_kernel<<<1, 256, 0, stream>>>(static_cast<const uint16_t*>(source.ptr),
                                            static_cast<uint16_t*>(x.ptr), kDim, 200000);
    CHECK_LAST_LAUNCH("slow_copy_kernel");
    step();
    gemv_qn(qn, x.ptr, a.ptr, 1, DType::F16, stream);
    step();
    gemm_fpx(fpx, a.ptr, b.ptr, 1, DType::F16, stream);
    step();
    launch_gemv_dense(dense.ptr, b.ptr, nullptr, c.ptr, 1, kDim, kDim, DType::F16, stream);
  }
  std::vector<uint16_t> outputs() const {
    std::vector<uint16_t> out(size_t(3 * kDim));
    const void* parts[3] = {a.ptr, b.ptr, c.ptr};
    for (int i = 0; i < 3; ++i)
      CUDA_CHECK(cudaMemcpy(out.data() + i * kDim, parts[i], size_t(kDim) * 2, cudaMemcpyDeviceToHost));
    return out;
  }
};

TEST(Pdl, ChainAfterASlowProducerEqualsSerialRun) {
  std::mt19937_64 rng(test_seed() * 31 + 7);
  Chain chain(rng);
  StreamGuard s;
  std::cout << "PDL " << (pdl_enabled() ? "on" : "off (GEMLITE_NO_PDL=1 or compute capability < 9)") << "\n";

  chain.clear();
  chain.run(s.stream, [&] { CUDA_CHECK(cudaStreamSynchronize(s.stream)); });
  CUDA_CHECK(cudaStreamSynchronize(s.stream));
  const std::vector<uint16_t> serial = chain.outputs();
  size_t nonzero = 0;
  for (uint16_t v : serial) nonzero += (v & 0x7FFF) != 0;
  ASSERT_GT(nonzero, serial.size() * 9 / 10);  // a kernel reading zeros would show

  chain.clear();
  chain.run(s.stream, [] {});
  CUDA_CHECK(cudaStreamSynchronize(s.stream));
  EXPECT_EQ(chain.outputs(), serial) << "eager";

  cudaGraph_t graph = nullptr;
  CUDA_CHECK(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal));
  chain.run(s.stream, [] {});
  CUDA_CHECK(cudaStreamEndCapture(s.stream, &graph));
  size_t edges = 0;
  CUDA_CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &edges));
  std::vector<cudaGraphNode_t> from(edges), to(edges);
  std::vector<cudaGraphEdgeData> data(edges);
  CUDA_CHECK(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &edges));
  int programmatic = 0;
  for (const cudaGraphEdgeData& e : data) programmatic += e.type == cudaGraphDependencyTypeProgrammatic;
  std::cout << "captured graph: " << edges << " edges, " << programmatic << " programmatic\n";
  EXPECT_EQ(edges, 3u);
  EXPECT_EQ(programmatic, pdl_enabled() ? 3 : 0);
  cudaGraphExec_t exec = nullptr;
  const cudaError_t code = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);
  CUDA_CHECK(code);
  chain.clear();
  CUDA_CHECK(cudaGraphLaunch(exec, s.stream));
  CUDA_CHECK(cudaStreamSynchronize(s.stream));
  cudaGraphExecDestroy(exec);
  EXPECT_EQ(chain.outputs(), serial) << "graph";
}

}  // namespace
}  // namespace gemlite
