#pragma once
// Where a decode step's time goes on the GPU, kernel by kernel, as it really runs (CUDA
// graph replay, kernels overlapping under PDL): CUPTI's activity records of every kernel
// between start() and stop() (start and end of its first and last block, grid, block).
// ncu times kernels one at a time, eagerly, at a locked clock; this is the step itself.
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace gemlite {

struct KernelSpan {
  std::string name;        // demangled, template arguments kept
  uint64_t start_ns = 0;   // first block starts (GPU clock, ns)
  uint64_t end_ns = 0;     // last block ends
  uint32_t grid = 0;       // blocks (x * y * z)
  uint32_t block = 0;      // threads a block
  // What the kernel adds to the step: end_ns - max(start_ns, the latest end of the kernels
  // that started before it), at least 0. Under PDL a kernel starts while its predecessor
  // runs and waits; this counts only the time after its predecessor ended, so the
  // contributions of a chain sum to the chain's length.
  uint64_t added_ns = 0;
};

// One trace at a time in a process (CUPTI's callbacks are global). Throws Error when
// CUPTI is missing or refuses (e.g. another profiler holds it).
class KernelTrace {
 public:
  KernelTrace();
  ~KernelTrace();
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;

  void start();
  // Waits for the device, returns the kernels since start() by start time, added_ns set.
  std::vector<KernelSpan> stop();

 private:
  std::vector<KernelSpan> spans_;  // filled by CUPTI's buffer callbacks between start and stop
};

// From the first kernel's start to the last one's end (0 for none); spans sorted as stop()
// returns them.
uint64_t trace_length_ns(const std::vector<KernelSpan>& spans);

// Prints `spans` (one decode step) to `out`: its first `first` kernels one a line (the
// step's start and first layers, in order), then one line per kernel name and launch shape
// (count, time added, mean duration), then the step's total. Every line starts with
// "trace <label>" (greppable).
void print_decode_trace(FILE* out, const std::string& label, const std::vector<KernelSpan>& spans, int first = 12);

}  // namespace gemlite
