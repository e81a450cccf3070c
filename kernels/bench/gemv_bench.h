#pragma once
// Kernel benchmarks for batch-1 GEMV: device-to-device copy bandwidth, cuBLAS fp16/bf16
// GEMV and gemv_qn, all in one run (docs/PERF.md's rules: cold L2 by rotating weight
// copies totalling > 200 MB, CUDA-graph replays timed with events, median, random data).
// Prints one greppable line per measurement:
//   copy: 2950.0 GB/s (1024 MiB device-to-device, bytes read + written)
//   cublas fp16 K=8192 N=8192 M=1: 76.9 us, 1745 GB/s, 59.2 % of copy
//   gemv q4g64 fp16 K=8192 N=8192 M=1: 16.9 us, 2270 GB/s, 77.0 % of copy, 4.55x cuBLAS
//   dequant q4g64 fp16 K=4096 N=22016: 86.9 us, 2661 GB/s, 88.8 % of copy
// Above 16 rows (GEMLITE_BENCH_M=64,128) the prompt paths instead of gemv_qn: gemm_qn (on
// an H100), gemv_qn over slices of 16 rows (up to 64 rows), the dense copy + cuBLAS:
//   gemm q4g64 fp16 K=4096 N=11008 M=128: 30.0 us, 870 GB/s, 29.1 % of copy, 1.23x cuBLAS
//   gemm q4g64 fp16 K=4096 N=11008 M=64 via gemv slices: ...
//   gemm q4g64 fp16 K=4096 N=11008 M=128 via dequant+cublas: ...
// GB/s counts packed weights + scales/zeros + x + y (dequant: packed weights + scales/zeros
// + the dense copy written; once per format and shape, at the first M).
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/bench/kernel_shape.h"
#include "runtime/dtype.h"

namespace gemlite {


struct GemvBenchOptions {
  std::vector<std::string> formats = {"q8", "q6g64", "q5g64", "q4g64", "q4g128", "q3g64", "q2g64", "s7"};
  std::vector<KernelShape> shapes = {{4096, 4096},  {4096, 11008},  {11008, 4096},
                                        {4096, 14336}, {14336, 4096},  {8192, 8192},
                                        {8192, 10240}, {8192, 57344},  {28672, 8192}};
  std::vector<DType> activations = {DType::F16, DType::BF16};
  std::vector<int> Ms = {1};  // activation rows; each M is a full pass over the shapes
  // gemv_qn warps per block to sweep; 0 = the kernel's automatic choice. With more than
  // one value each line names its setting ("warps=4").
  std::vector<int> warps_per_block = {0};
  // gemv_qn's stage_x (GemvQnConfig) to sweep at M = 1: -1 automatic, 0 x from global
  // memory, 1 staged in shared memory where it fits; lines name it when more than one.
  std::vector<int> stage_x = {-1};
  // The epilogue each M <= 16 launch runs, as decode does: "plain" (gemv_qn), "norm" (a
  // pending RMSNorm of ceil(K / 16) parts: q/k/v, the classifier), "swiglu" (the weight as
  // a [gate; up] pair, with the pending norm: gate/up; N % 16 == 0), "residual" (residual +=,
  // scaled and the sums of squares written: o, down). Lines name it when it is not plain.
  std::vector<std::string> epilogues = {"plain"};
  // Above 16 rows, gemm_qn's launch overrides to sweep (GemmQnConfig): warps (8, 16), x
  // rows a block (32, 64, 128) and cluster sizes (1, 2, 4, 8); 0 = automatic. Lines name
  // the settings they force; combinations a width does not have are skipped.
  std::vector<int> gemm_warps = {0}, gemm_rows = {0}, gemm_splits = {0};
  size_t rotation_bytes = size_t(256) << 20;  // weight copies per measurement total at least this
  int replays = 20;                           // timed graph replays; the median is reported
};

// Runs everything on the current device; throws Error on any CUDA/cuBLAS failure. The
// environment narrows or widens `options` (see with_environment in gemv_bench.cu):
// GEMLITE_BENCH_FORMATS=q4g64,q2g64 GEMLITE_BENCH_SHAPES=8192x8192 GEMLITE_BENCH_ACT=fp16
// GEMLITE_BENCH_M=1,2,4,8 GEMLITE_BENCH_WARPS=4,8 GEMLITE_BENCH_STAGE_X=0,1 GEMLITE_BENCH_GEMM_WARPS=8,16
// GEMLITE_BENCH_GEMM_ROWS=64,128 GEMLITE_BENCH_GEMM_SPLITS=1,2,4,8
// GEMLITE_BENCH_EPILOGUE=plain,norm,swiglu,residual; GEMLITE_BENCH_WARM_L2=1
// reads one weight copy in every launch (warm L2) instead of rotating copies (cold).
void run_gemv_benchmarks(FILE* out, const GemvBenchOptions& options = {});

}  // namespace gemlite
