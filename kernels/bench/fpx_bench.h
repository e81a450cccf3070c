#pragma once
// Kernel benchmark of gemm_fpx (fp6/fp5) against cuBLAS of the same activation type, in
// one run, for every batch size M (docs/PERF.md's rules: cold L2 by rotating weight copies
// totalling > 200 MB, CUDA-graph replays timed with events, median, random data).
// One greppable line per measurement:
//   cublas fp16 K=8192 N=8192 M=16: 80.1 us, 1680 GB/s, 56.9 % of copy
//   fpx fp6 fp16 K=8192 N=8192 M=16: 21.0 us, 2410 GB/s, 81.7 % of copy, 3.81x cuBLAS, check ok (0.02)
// GB/s counts packed weights + row factors + x + y. "check" compares 256 sampled outputs
// of the timed kernel with a float64 dot product of the decoded codes on the GPU (an
// independent decoder of the packed layout): ok when every |error| <= u |ref| + 2^-14 S
// (tests/gpu/test_gemm_fpx.cu), followed by the worst error / tolerance.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/bench/kernel_shape.h"
#include "runtime/dtype.h"

namespace gemlite {


struct FpxBenchOptions {
  std::vector<std::string> formats = {"fp6"};
  std::vector<KernelShape> shapes = {{8192, 8192},  {8192, 10240}, {8192, 57344}, {28672, 8192},
                                       {4096, 4096},  {4096, 11008}, {11008, 4096}, {4096, 14336},
                                       {14336, 4096}, {4096, 1024}};
  std::vector<int> batch_sizes = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512};
  std::vector<DType> activations = {DType::F16, DType::BF16};
  // Also time the variants the automatic choice decides between, in the same run: with
  // fp16 at M <= 8 one tile loaded ahead (" ahead=1"); with either activation type above M =
  // 8 the register kernel with MT = 2 (" mt=2") and the tiled kernel in each shape at each
  // cluster size (" narrow splits=S", " wide splits=S", " tall splits=S").
  bool sweep_variants = false;
  // Launch settings to time instead of the automatic choice (GemmFpxConfig's warps_k,
  // tiles_ahead, splits), every combination of them: empty = automatic.
  std::vector<int> warps_k, tiles_ahead, splits;
  size_t rotation_bytes = size_t(256) << 20;
  int replays = 20;
};

// GEMLITE_BENCH_SHAPES, _ACT and _M narrow a run as for the GEMV (gemv_bench.h), and
// GEMLITE_BENCH_FPX_FORMATS ("fp6,fp5"), GEMLITE_BENCH_FPX_WARPS_K ("2,4,8,16"),
// GEMLITE_BENCH_FPX_AHEAD ("1,2"), GEMLITE_BENCH_FPX_SPLITS ("1,8") set formats and launch settings; GEMLITE_BENCH_FPX_SWEEP=1
// sets sweep_variants.
void run_fpx_benchmarks(FILE* out, const FpxBenchOptions& options = {});

}  // namespace gemlite
