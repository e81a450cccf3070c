#include "kernels/bench/bench_util.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/bench/copy_bandwidth.h"
#include "kernels/cuda_check.h"
#include "runtime/error.h"

namespace gemlite {

namespace {

__global__ void fill_random_words(uint32_t* words, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    words[i] = bench_hash32(uint64_t(i), seed);
}

// values [n] of a 16-bit float type with bits `base | (random & mask)`: random sign,
// mantissa and low exponent bits around a chosen magnitude.
__global__ void fill_random_halves(uint16_t* values, int64_t n, uint32_t seed, uint16_t base, uint16_t mask) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    values[i] = uint16_t(base | (bench_hash32(uint64_t(i), seed) & mask));
}

}  // namespace

BenchSession::BenchSession(FILE* log) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  std::fprintf(log, "device: %s, %d SMs, %d MB L2\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20);
  sms = prop.multiProcessorCount;
  copy_gbs = device_copy_bandwidth_gbs(log);
  const size_t workspace_bytes = size_t(32) << 20;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  CUBLAS_CHECK(cublasCreate(&cublas));
  CUBLAS_CHECK(cublasSetStream(cublas, stream));
  CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes));
  CUBLAS_CHECK(cublasSetWorkspace(cublas, workspace_, workspace_bytes));
}

BenchSession::~BenchSession() {  // no throwing from a destructor: errors here are ignored
  if (cublas) cublasDestroy(cublas);
  cudaFree(workspace_);
  if (stream) cudaStreamDestroy(stream);
}

void fill_words(uint32_t* p, int64_t n, uint32_t seed, cudaStream_t stream) {
  fill_random_words<<<1024, 256, 0, stream>>>(p, n, seed);
  CHECK_LAST_LAUNCH("fill_random_words");
}

void fill_values(uint16_t* p, int64_t n, DType t, uint32_t seed, cudaStream_t stream) {
  // The exponent field base | (2 random bits) is 10 or 11 (fp16, bias 15), 122 or 123 (bf16,
  // bias 127): magnitudes 2^-5..2^-3, finite, with a random sign and mantissa.
  const uint16_t base = t == DType::BF16 ? uint16_t(122 << 7) : uint16_t(10 << 10);
  const uint16_t mask = t == DType::BF16 ? uint16_t(0x8000 | 0x3 << 7 | 0x7F) : uint16_t(0x8000 | 0x3 << 10 | 0x3FF);
  fill_random_halves<<<1024, 256, 0, stream>>>(p, n, seed, base, mask);
  CHECK_LAST_LAUNCH("fill_random_halves");
}

const char* act_name(DType t) { return t == DType::BF16 ? "bf16" : "fp16"; }

double time_graph_us(cudaStream_t stream, int launches, int replays,
                     const std::function<void(int)>& launch) {
  constexpr float kWarmUpMs = 100.0f;
  for (int i = 0; i < std::min(launches, 3); ++i) launch(i);  // outside capture: lazy init
  cudaGraph_t graph;
  CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < launches; ++i) launch(i);
  CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  cudaEvent_t start, stop;
  CUDA_CHECK(cudaEventCreate(&start));
  CUDA_CHECK(cudaEventCreate(&stop));
  // Warm-up: at least kWarmUpMs of replays. With two warm-up replays the first kernel
  // timed after a cuBLAS run measured a median 12 % (up to 33 %) slower than the same
  // launch timed again later in the run (gemm_fpx at M = 128..512, 120 pairs, one H200);
  // 25 ms still left 2-16 %, 100 ms 0-1 % at M = 128 (e.g. 8192 x 8192 42.1 -> 38.6 us,
  // the same as the repeat) and the run-to-run noise of power-bound M = 512 launches: the
  // clocks take that long to settle after another kernel's load.
  CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0;; ++i) {
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (i >= 1 && ms >= kWarmUpMs) break;
  }
  std::vector<float> times;
  for (int r = 0; r < replays; ++r) {
    CUDA_CHECK(cudaEventRecord(start, stream));
    CUDA_CHECK(cudaGraphLaunch(exec, stream));
    CUDA_CHECK(cudaEventRecord(stop, stream));
    CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms * 1000.0f / float(launches));
  }
  CUDA_CHECK(cudaEventDestroy(start));
  CUDA_CHECK(cudaEventDestroy(stop));
  CUDA_CHECK(cudaGraphExecDestroy(exec));
  CUDA_CHECK(cudaGraphDestroy(graph));
  std::nth_element(times.begin(), times.begin() + times.size() / 2, times.end());
  return times[times.size() / 2];
}

int copies_for(size_t bytes, size_t rotation_bytes) {
  if (rotation_bytes == 0) return 1;
  return int(std::clamp<size_t>((rotation_bytes + bytes - 1) / bytes, 2, 64));
}

int launches_for(int copies) { return std::max(copies, 20) / copies * copies; }

namespace {

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream stream(text);
  for (std::string item; std::getline(stream, item, ',');)
    if (!item.empty()) items.push_back(item);
  return items;
}

int64_t parse_int(const std::string& text, const char* what) {
  char* end = nullptr;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0') throw Error(std::string(what) + ": '" + text + "' is not an integer");
  return int64_t(v);
}

}  // namespace

void env_strings(const char* name, std::vector<std::string>* out) {
  if (const char* v = std::getenv(name)) *out = split_list(v);
}

void env_ints(const char* name, std::vector<int>* out) {
  const char* v = std::getenv(name);
  if (!v) return;
  out->clear();
  for (const std::string& item : split_list(v)) {
    const int64_t value = parse_int(item, name);
    if (value < INT32_MIN || value > INT32_MAX) throw Error(std::string(name) + ": '" + item + "' is out of range");
    out->push_back(int(value));
  }
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  if (!v || std::string(v) == "0") return false;
  if (std::string(v) == "1") return true;
  throw Error(std::string(name) + ": '" + v + "' (expected 0 or 1)");
}

void env_shapes(const char* name, std::vector<KernelShape>* out) {
  const char* v = std::getenv(name);
  if (!v) return;
  out->clear();
  for (const std::string& shape : split_list(v)) {
    const size_t x = shape.find('x');
    if (x == std::string::npos) throw Error(std::string(name) + ": '" + shape + "' is not KxN");
    out->push_back({parse_int(shape.substr(0, x), name), parse_int(shape.substr(x + 1), name)});
  }
}

void env_activations(const char* name, std::vector<DType>* out) {
  const char* v = std::getenv(name);
  if (!v) return;
  out->clear();
  for (const std::string& a : split_list(v)) {
    if (a != "fp16" && a != "bf16") throw Error(std::string(name) + ": '" + a + "' (expected fp16 or bf16)");
    out->push_back(a == "bf16" ? DType::BF16 : DType::F16);
  }
}

}  // namespace gemlite
