#include "kernels/bench/kernel_trace.h"

#include <cuda_runtime.h>
#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda_check.h"
#include "runtime/error.h"

// CUPTI is opened at run time (dlopen), not linked: gemlite-bench runs where libcupti is
// absent, and only --trace needs it. Its header comes with the CUDA toolkit.
#if __has_include(<cupti.h>)
#include <cupti.h>
#include <dlfcn.h>
#define GEMLITE_WITH_CUPTI 1
#endif

namespace gemlite {

namespace {

// CUPTI hands records over in buffers, possibly from its own threads; they land in the
// running trace's spans.
std::mutex g_mutex;
std::vector<KernelSpan>* g_spans = nullptr;

#ifdef GEMLITE_WITH_CUPTI
// The CUPTI entry points this file uses, from libcupti opened once.
struct Cupti {
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc);
  CUptiResult (*enable)(CUpti_ActivityKind);
  CUptiResult (*disable)(CUpti_ActivityKind);
  CUptiResult (*flush_all)(uint32_t);
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**);
  CUptiResult (*result_string)(CUptiResult, const char**);
};

const Cupti& cupti() {
  static const Cupti api = [] {
    void* lib = nullptr;
    for (const char* name : {"libcupti.so", "libcupti.so.13", "libcupti.so.12"})
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
    if (!lib)
      throw Error("kernel trace: libcupti not found (it ships with the CUDA toolkit, e.g. in "
                  "/usr/local/cuda/lib64 or extras/CUPTI/lib64: add that folder to LD_LIBRARY_PATH)");
    const auto symbol = [&](const char* name) {
      void* f = dlsym(lib, name);
      if (!f) throw Error(std::string("kernel trace: libcupti has no ") + name);
      return f;
    };
    Cupti a;
    a.register_callbacks = reinterpret_cast<decltype(a.register_callbacks)>(symbol("cuptiActivityRegisterCallbacks"));
    a.enable = reinterpret_cast<decltype(a.enable)>(symbol("cuptiActivityEnable"));
    a.disable = reinterpret_cast<decltype(a.disable)>(symbol("cuptiActivityDisable"));
    a.flush_all = reinterpret_cast<decltype(a.flush_all)>(symbol("cuptiActivityFlushAll"));
    a.next_record = reinterpret_cast<decltype(a.next_record)>(symbol("cuptiActivityGetNextRecord"));
    a.result_string = reinterpret_cast<decltype(a.result_string)>(symbol("cuptiGetResultString"));
    return a;
  }();
  return api;
}

std::string demangle(const char* name) {
  int status = 0;
  char* text = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string result = status == 0 && text ? text : name;
  std::free(text);
  return result;
}

void check_cupti(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS) return;
  const char* text = nullptr;
  cupti().result_string(result, &text);
  throw Error(std::string("kernel trace: ") + what + ": " + (text ? text : "CUPTI error"));
}

constexpr size_t kBufferBytes = 8 << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_size) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  while (cupti().next_record(buffer, valid_size, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || !g_spans) continue;
    const auto* kernel = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    KernelSpan span;
    span.name = demangle(kernel->name);
    span.start_ns = kernel->start;
    span.end_ns = kernel->end;
    span.grid = uint32_t(kernel->gridX) * uint32_t(kernel->gridY) * uint32_t(kernel->gridZ);
    span.block = uint32_t(kernel->blockX) * uint32_t(kernel->blockY) * uint32_t(kernel->blockZ);
    g_spans->push_back(std::move(span));
  }
  std::free(buffer);
}
#endif

// The name without its namespaces, return type and parameter list, template arguments
// kept: "void gemlite::(anonymous namespace)::gemv_qn_kernel<4, false, false, 8, true>(...)" ->
// "gemv_qn_kernel<4, false, false, 8, true>".
std::string short_name(std::string s) {
  const std::string anonymous = "(anonymous namespace)::";
  for (size_t at; (at = s.find(anonymous)) != std::string::npos;) s.erase(at, anonymous.size());
  s = s.substr(0, s.find('('));
  const size_t template_start = std::min(s.find('<'), s.size());
  const size_t space = s.rfind(' ', template_start);  // after the return type
  if (space != std::string::npos) s = s.substr(space + 1);
  const size_t scope = s.rfind("::", std::min(s.find('<'), s.size()));
  if (scope != std::string::npos) s = s.substr(scope + 2);
  return s;
}

}  // namespace

KernelTrace::KernelTrace() {
#ifdef GEMLITE_WITH_CUPTI
  check_cupti(cupti().register_callbacks(buffer_requested, buffer_completed), "registering the buffers");
#else
  throw Error("kernel trace: this build has no CUPTI (cupti.h was not found at compile time)");
#endif
}

KernelTrace::~KernelTrace() {
#ifdef GEMLITE_WITH_CUPTI
  cupti().disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  cupti().flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_spans = nullptr;
#endif
}

void KernelTrace::start() {
#ifdef GEMLITE_WITH_CUPTI
  CUDA_CHECK(cudaDeviceSynchronize());
  {
    // From here every record delivered (a full buffer may come from CUPTI's own thread
    // before stop) lands in spans_.
    std::lock_guard<std::mutex> lock(g_mutex);
    spans_.clear();
    g_spans = &spans_;
  }
  check_cupti(cupti().enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enabling kernel records");
#endif
}

std::vector<KernelSpan> KernelTrace::stop() {
#ifdef GEMLITE_WITH_CUPTI
  CUDA_CHECK(cudaDeviceSynchronize());
  check_cupti(cupti().flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "flushing the records");
  check_cupti(cupti().disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "disabling kernel records");
#endif
  std::vector<KernelSpan> spans;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    spans.swap(spans_);
    g_spans = nullptr;
  }
  std::sort(spans.begin(), spans.end(), [](const KernelSpan& a, const KernelSpan& b) { return a.start_ns < b.start_ns; });
  uint64_t latest_end = 0;
  for (KernelSpan& span : spans) {
    const uint64_t from = std::max(span.start_ns, latest_end);
    span.added_ns = span.end_ns > from ? span.end_ns - from : 0;
    latest_end = std::max(latest_end, span.end_ns);
  }
  return spans;
}

uint64_t trace_length_ns(const std::vector<KernelSpan>& spans) {
  uint64_t end = 0;
  for (const KernelSpan& span : spans) end = std::max(end, span.end_ns);
  return spans.empty() ? 0 : end - spans.front().start_ns;
}

void print_decode_trace(FILE* out, const std::string& label, const std::vector<KernelSpan>& spans, int first) {
  if (spans.empty()) {
    std::fprintf(out, "trace %s: no kernels recorded\n", label.c_str());
    return;
  }
  const uint64_t t0 = spans.front().start_ns, length = trace_length_ns(spans);
  uint64_t added = 0;
  for (const KernelSpan& span : spans) added += span.added_ns;
  std::fprintf(out, "trace %s: %-6s %9s %9s %9s  %s\n", label.c_str(), "#", "start_us", "dur_us", "added_us",
               "kernel grid x block");
  for (size_t i = 0; i < spans.size() && int(i) < first; ++i) {
    const KernelSpan& s = spans[i];
    std::fprintf(out, "trace %s: %-6zu %9.2f %9.2f %9.2f  %s %u x %u\n", label.c_str(), i, (s.start_ns - t0) / 1e3,
                 (s.end_ns - s.start_ns) / 1e3, s.added_ns / 1e3, short_name(s.name).c_str(), s.grid, s.block);
  }
  struct Group {
    int count = 0;
    uint64_t added = 0, duration = 0;
    size_t first = 0;  // order of first appearance
  };
  std::map<std::tuple<std::string, uint32_t, uint32_t>, Group> groups;
  for (size_t i = 0; i < spans.size(); ++i) {
    const KernelSpan& s = spans[i];
    Group& g = groups[{short_name(s.name), s.grid, s.block}];
    if (g.count == 0) g.first = i;
    ++g.count;
    g.added += s.added_ns;
    g.duration += s.end_ns - s.start_ns;
  }
  std::vector<std::pair<std::tuple<std::string, uint32_t, uint32_t>, Group>> sorted(groups.begin(), groups.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second.first < b.second.first; });
  std::fprintf(out, "trace %s: %-6s %9s %9s %9s  %s\n", label.c_str(), "count", "added_us", "added/1", "dur/1",
               "kernel grid x block (one line per name and launch shape)");
  for (const auto& [key, g] : sorted)
    std::fprintf(out, "trace %s: %-6d %9.1f %9.2f %9.2f  %s %u x %u\n", label.c_str(), g.count, g.added / 1e3,
                 g.added / 1e3 / g.count, g.duration / 1e3 / g.count, std::get<0>(key).c_str(), std::get<1>(key),
                 std::get<2>(key));
  std::fprintf(out, "trace %s: %zu kernels, %.1f us from the first start to the last end, %.1f us added by kernels, "
               "%.1f us with none running\n",
               label.c_str(), spans.size(), length / 1e3, added / 1e3, (length - added) / 1e3);
}

}  // namespace gemlite
