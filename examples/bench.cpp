// gemlite-bench: prompt processing (pp) and text generation (tg) speed, printed as
// llama-bench's table plus the bandwidth the weights moved at.
//   gemlite-bench -m DIR [-m DIR2 ...]
//   gemlite-bench --synthetic stories110m -f q4g64,q8,f16 -p 512 -n 128 -r 5 -o md
//   gemlite-bench --synthetic llama2-7b -p 0 -n 128 -d 0,4096  # tg128, then tg128 @ d4096
//   gemlite-bench --synthetic stories15m -p 128,512 --pg 512,128  # llama-bench's lists and -pg
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <random>

#include "examples/common/generation.h"
#include "examples/common/program.h"
#include "models/synthetic_model.h"
#include "runtime/error.h"
#ifdef GEMLITE_WITH_CUDA
#include "kernels/bench/copy_bandwidth.h"
#include "kernels/bench/fpx_bench.h"
#include "kernels/bench/gemv_bench.h"
#include "kernels/bench/kernel_trace.h"
#include "runtime/cuda/attention_bench.h"
#include "runtime/cuda/cuda_backend.h"
#endif

using namespace gemlite;

namespace {

struct Result {
  std::string model, backend, test;
  size_t weight_bytes = 0;
  int64_t params = 0;
  int threads = 0, n_prompt = 0, n_gen = 0, n_depth = 0;
  double mean_tps = 0, std_tps = 0;
  double gbps = 0;  // weight bytes per second moved by tg (every token reads them once)
};

// Host memcpy bandwidth (bytes read + written per second) over 256 MiB, best of 3: the
// ceiling that "% of copy bandwidth" refers to on the CPU backend.
double measure_copy_bandwidth() {
  const size_t bytes = size_t(256) << 20;
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 1e30;
  for (int i = 0; i < 3; ++i) {
    const double start = now_seconds();
    std::memcpy(b.data(), a.data(), bytes);
    best = std::min(best, now_seconds() - start);
  }
  return 2.0 * bytes / best;
}

int64_t count_params(const ModelConfig& c) {
  const int64_t per_layer = int64_t(c.q_dim()) * c.dim * 2 + int64_t(c.kv_dim()) * c.dim * 2 +
                            3 * int64_t(c.dim) * c.hidden_dim + 2 * c.dim;
  return per_layer * c.n_layers + int64_t(c.vocab_size) * c.dim * (c.tied_embeddings ? 1 : 2) + c.dim;
}

std::vector<int> random_tokens(int n, int vocab, std::mt19937& rng) {
  // Skip unk/bos/eos where there are other tokens (a vocabulary of 3 crashed the distribution).
  std::uniform_int_distribution<int> pick(vocab > 3 ? 3 : 0, vocab - 1);
  std::vector<int> ids(n);
  for (int& id : ids) id = pick(rng);
  return ids;
}

// Tokens per second of `run` over `repetitions` runs after warm-up runs, each after an
// untimed `setup`: mean and std.
//
// The warm-up lasts at least kMinWarmUpSeconds (and one run). With one warm-up run, a short
// test's first runs in a process could be slow: llama3-8b fp6 pp32 (~5 ms a run, the
// first test after the weights are built) measured 4208 +- 719 tok/s in one process and
// 6422 +- 28 in the next on the same H100 (5080 +- 496 against ~6000 the session before).
// With 0.25 s, four processes on one H100 measured 6533 +- 13, 6519 +- 12 (this build) and
// 5945 +- 46, 6079 +- 4 (the one before). nvidia-smi (100 ms samples) kept the SM clock at
// 1980 MHz throughout, so the cause is not the reported clock; it is not identified.
constexpr double kMinWarmUpSeconds = 0.25;

template <typename Setup, typename Run>
std::pair<double, double> tokens_per_second(int tokens, int repetitions, Setup setup, Run run) {
  const double warm_up_start = now_seconds();
  do {
    setup();
    run();
  } while (now_seconds() - warm_up_start < kMinWarmUpSeconds);
  std::vector<double> tps;
  for (int r = 0; r < repetitions; ++r) {
    setup();
    const double start = now_seconds();
    run();
    tps.push_back(tokens / (now_seconds() - start));
  }
  double mean = 0, var = 0;
  for (double t : tps) mean += t / tps.size();
  for (double t : tps) var += (t - mean) * (t - mean) / std::max<size_t>(1, tps.size() - 1);
  return {mean, std::sqrt(var)};
}

// What to run, llama-bench's way: at every depth, each pp, each tg and each pp+tg pair.
struct BenchPlan {
  std::vector<int> prompts, gens, depths;       // -p, -n, -d (a 0 in prompts or gens: none)
  std::vector<std::pair<int, int>> prompt_gens;  // -pg: a prompt, then that many tokens decoded
  int batch = 512, repetitions = 5;
  int64_t ctx_size = 0;  // -c: the KV cache's positions; 0: needed()
  bool trace = false;  // --trace: one decode step kernel by kernel after the tests (CUDA)
  // --trace decodes this many tokens (the graph captured and warm, the steps mid-way
  // through a tg128), then traces this many single steps.
  static constexpr int kTraceWarmTokens = 64, kTraceSteps = 5;

  // Positions the longest test needs (64-bit: --pg 2000000000,2000000000 overflowed int
  // and was then met by an 8 GB prompt).
  int64_t needed() const {
    int64_t longest = 0;
    for (int p : prompts) longest = std::max<int64_t>(longest, p);
    for (int n : gens) longest = std::max<int64_t>(longest, n);
    for (const auto& [p, n] : prompt_gens) longest = std::max(longest, int64_t(p) + n);
    if (trace) longest = std::max<int64_t>(longest, kTraceWarmTokens + kTraceSteps);
    return *std::max_element(depths.begin(), depths.end()) + longest;
  }
  // The model's KV cache capacity: -c, or what the tests need (llama-bench's n_ctx). Where
  // the cache left the buffers allocated after it moved llama3-8b q4g64 tg128 by ~5 % on an
  // H200 before the GEMVs read x through L1 (runtime/cuda/MEASURED.md), so -c 4096
  // measures what gemlite-chat's default context runs.
  int64_t context() const { return ctx_size > 0 ? ctx_size : needed(); }
};

// What the model took of the device's memory against its weights and KV cache in theory
// (issue 5: within 5 %): one `memory` line on stderr. `loaded` counts everything the model
// allocated when built (weights, KV cache, activations, per-layer buffers); `after` adds
// what the runs left allocated (the prefill's dense-copy scratch, cuBLAS's own). Both come
// from the device's free memory, so other processes' allocations in between count too.
void print_device_memory(const std::string& label, const PackedCheckpoint& ckpt, int64_t context, DType act,
                         int64_t loaded, int64_t after) {
  const double mib = 1048576.0;
  // weight_bytes() counts the embedding row a token reads; the device holds the whole table.
  const int64_t weights = int64_t(ckpt.weight_bytes() + ckpt.embedding.nbytes()) -
                          int64_t(ckpt.config.dim) * int64_t(dtype_size(ckpt.embedding.dtype));
  const int64_t kv = 2 * int64_t(ckpt.config.n_layers) * context * ckpt.config.kv_dim() * int64_t(dtype_size(act));
  const double theory = double(weights + kv);
  const auto over = [&](int64_t bytes) { return 100.0 * (double(bytes) / theory - 1.0); };
  std::fprintf(stderr,
               "memory %s: weights %.1f MiB + KV cache %.1f MiB (%lld positions, %s) = %.1f MiB; on the device "
               "after loading %.1f MiB (%+.1f %%), after the runs %.1f MiB (%+.1f %%)\n",
               label.c_str(), double(weights) / mib, double(kv) / mib, (long long)context,
               dtype_name(act), theory / mib, double(loaded) / mib, over(loaded), double(after) / mib, over(after));
}

// pp: the prompt fed at once (the model runs it in chunks of `batch`), until the backend is
// done. tg: one token at a time, each forward waited for, like llama-bench's
// (llama_decode + llama_synchronize per token) and like gemlite-chat's decode (which also
// takes the argmax on the device: a few us more per token). pp+tg: both, tokens/s over
// their sum (as llama-bench's -pg). Each starts after `depth` tokens already in the
// context (llama-bench's -d; filled untimed before every run).
void bench_model(const std::string& label, const PackedCheckpoint& ckpt, const std::string& device,
                 const BackendOptions& options, const BenchPlan& plan,
                 const std::function<void(const Result&)>& report) {
  // Allowed, as llama-bench allows it, but said: past its training context a model's speed
  // is still measured, its outputs mean nothing, and a depth of 100000 on the CPU takes long.
  if (plan.context() > ckpt.config.max_seq_len)
    std::fprintf(stderr, "warning: %s: a KV cache of %lld positions, beyond the model's training context of %d\n",
                 label.c_str(), (long long)plan.context(), ckpt.config.max_seq_len);
  auto backend = make_backend(backend_name_for(device), options);
  backend->synchronize();  // memory freed asynchronously returns at a synchronization
  const int64_t memory_before = backend->device_memory_used();
  const double load_start = now_seconds();
  LlamaModel model(ckpt, *backend, int(plan.context()), plan.batch);  // context() checked at parse
  backend->synchronize();
  std::fprintf(stderr, "loaded %s onto %s in %.1f s\n", label.c_str(), backend->name().c_str(),
               now_seconds() - load_start);
  const int64_t memory_loaded = backend->device_memory_used();
  Generation generation(model);
  std::mt19937 rng(42);
  const int vocab = ckpt.config.vocab_size;
  Result base;
  base.model = label;
  base.backend = backend->name();
  if (backend->name() == "cuda" && backend->activation_type() != DType::F16)
    base.backend += std::string(" ") + dtype_name(backend->activation_type());
  base.weight_bytes = ckpt.weight_bytes();
  base.params = count_params(ckpt.config);
  base.threads = omp_get_max_threads();
  const auto decode = [&](const std::vector<int>& tokens) {
    for (int id : tokens) {
      generation.feed({id});
      generation.wait();
    }
  };
  for (const int depth : plan.depths) {
    const std::string at_depth = depth > 0 ? " @ d" + std::to_string(depth) : "";
    const std::vector<int> depth_tokens = random_tokens(depth, vocab, rng);
    const auto fill_context = [&] {
      generation.reset();
      if (!depth_tokens.empty()) {
        generation.feed(depth_tokens);
        generation.wait();
      }
    };
    const auto run_test = [&](int n_prompt, int n_gen) {
      const std::vector<int> prompt = random_tokens(n_prompt, vocab, rng);
      const std::vector<int> tokens = random_tokens(n_gen, vocab, rng);
      Result r = base;
      r.n_prompt = n_prompt;
      r.n_gen = n_gen;
      r.n_depth = depth;
      r.test = (n_prompt > 0 ? "pp" + std::to_string(n_prompt) : "") + (n_prompt > 0 && n_gen > 0 ? "+" : "") +
               (n_gen > 0 ? "tg" + std::to_string(n_gen) : "") + at_depth;
      std::tie(r.mean_tps, r.std_tps) = tokens_per_second(n_prompt + n_gen, plan.repetitions, fill_context, [&] {
        if (n_prompt > 0) {
          generation.feed(prompt);
          generation.wait();
        }
        decode(tokens);
      });
      if (n_prompt == 0) r.gbps = r.mean_tps * double(r.weight_bytes) / 1e9;  // tg: every token reads W once
      report(r);
    };
    for (int n_prompt : plan.prompts)
      if (n_prompt > 0) run_test(n_prompt, 0);
    for (int n_gen : plan.gens)
      if (n_gen > 0) run_test(0, n_gen);
    for (const auto& [n_prompt, n_gen] : plan.prompt_gens) run_test(n_prompt, n_gen);
  }
  backend->synchronize();
  if (memory_before >= 0)
    print_device_memory(label, ckpt, plan.context(), backend->activation_type(), memory_loaded - memory_before,
                        backend->device_memory_used() - memory_before);
#ifdef GEMLITE_WITH_CUDA
  if (plan.trace) {
    // The step of median length is printed (after the depths' tests), after the deepest -d's
    // tokens: the decode attention's share grows with the context.
    generation.reset();
    const int trace_depth = *std::max_element(plan.depths.begin(), plan.depths.end());
    if (trace_depth > 0) {
      generation.feed(random_tokens(trace_depth, vocab, rng));
      generation.wait();
    }
    decode(random_tokens(BenchPlan::kTraceWarmTokens, vocab, rng));
    KernelTrace trace;
    std::vector<std::vector<KernelSpan>> steps;
    for (int i = 0; i < BenchPlan::kTraceSteps; ++i) {
      trace.start();
      decode(random_tokens(1, vocab, rng));
      steps.push_back(trace.stop());
    }
    std::sort(steps.begin(), steps.end(),
              [](const auto& a, const auto& b) { return trace_length_ns(a) < trace_length_ns(b); });
    print_decode_trace(stderr, label, steps[steps.size() / 2]);
  }
#endif
}

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof text, "%.*f", decimals, value);
  return text;
}

void print_markdown_header() {
  std::printf("| model | size | params | backend | threads | test | t/s | GB/s | %% of copy BW |\n");
  std::printf("| --- | ---: | ---: | --- | ---: | --- | ---: | ---: | ---: |\n");
}

void print_markdown_row(const Result& r, double copy_gbps) {
  const bool tg = r.n_gen > 0 && r.n_prompt == 0;  // bandwidth is what limits tg; pp is compute-bound
  std::printf("| %s | %.2f MiB | %.2f M | %s | %d | %s | %.2f ± %.2f | %s | %s |\n", r.model.c_str(),
              r.weight_bytes / 1048576.0, r.params / 1e6, r.backend.c_str(), r.threads, r.test.c_str(),
              r.mean_tps, r.std_tps, tg ? fixed(r.gbps, 2).c_str() : "-",
              tg ? (fixed(100.0 * r.gbps / copy_gbps, 1) + " %").c_str() : "-");
}

// llama-bench's key names where it has the field (model_size, model_n_params, n_threads).
nlohmann::json result_json(const Result& r, double copy_gbps) {
  return {{"model", r.model},       {"model_size", r.weight_bytes}, {"model_n_params", r.params},
          {"backend", r.backend},   {"n_threads", r.threads},       {"test", r.test},
          {"n_prompt", r.n_prompt}, {"n_gen", r.n_gen},             {"n_depth", r.n_depth},
          {"avg_ts", r.mean_tps},   {"stddev_ts", r.std_tps},       {"gbps", r.gbps},
          {"copy_gbps", copy_gbps}};
}

void print_csv_header() {
  std::printf("model,model_size,model_n_params,backend,n_threads,test,n_prompt,n_gen,n_depth,avg_ts,stddev_ts,gbps,copy_gbps\n");
}

void print_csv_row(const Result& r, double copy_gbps) {
  // RFC 4180: a quote inside a quoted field is doubled.
  std::string model = r.model;
  for (size_t at = 0; (at = model.find('"', at)) != std::string::npos; at += 2) model.insert(at, 1, '"');
  std::printf("\"%s\",%zu,%lld,%s,%d,%s,%d,%d,%d,%.3f,%.3f,%.3f,%.3f\n", model.c_str(), r.weight_bytes,
              (long long)r.params, r.backend.c_str(), r.threads, r.test.c_str(), r.n_prompt, r.n_gen, r.n_depth,
              r.mean_tps, r.std_tps, r.gbps, copy_gbps);
}

}  // namespace

int main(int argc, char** argv) {
  return run_program("gemlite-bench", [&] {
    cxxopts::Options options("gemlite-bench",
        "Prompt (pp) and generation (tg) speed of packed models or of synthetic models of real "
        "shapes with random weights.");
    options.add_options()
        ("m,model", "Packed checkpoint directory (repeatable)", cxxopts::value<std::vector<std::string>>())
        ("synthetic", "Model shape with random weights: " + [] {
            std::string names;
            for (const auto& n : synthetic_model_names()) names += (names.empty() ? "" : ", ") + n;
            return names; }(), cxxopts::value<std::vector<std::string>>())
        ("f,format", "Weight formats for --synthetic, comma-separated",
         cxxopts::value<std::vector<std::string>>()->default_value("q4g64"))
        ("p,n-prompt", "Prompt tokens for pp, comma-separated (0 = none)",
         cxxopts::value<std::vector<int>>()->default_value("512"))
        ("n,n-gen", "Generated tokens for tg, comma-separated (0 = none)",
         cxxopts::value<std::vector<int>>()->default_value("128"))
        ("pg", "A prompt then generated tokens, timed together: pp,tg (repeatable)",
         cxxopts::value<std::vector<int>>())
        ("d,n-depth", "Tokens already in the context before each test (untimed), comma-separated",
         cxxopts::value<std::vector<int>>()->default_value("0"))
        ("b,batch-size", "Prompt tokens per forward pass", cxxopts::value<int>()->default_value("512"))
        ("c,ctx-size", "KV cache positions (0: the deepest -d plus the longest test, as llama-bench; "
                       "e.g. 4096, gemlite-chat's default)", cxxopts::value<int64_t>()->default_value("0"))
        ("r,repetitions", "Timed runs per test", cxxopts::value<int>()->default_value("5"))
        ("o,output", "md, json or csv", cxxopts::value<std::string>()->default_value("md"))
        ("kernels", "GPU kernel benchmarks instead: each QuantLinear kernel vs cuBLAS and the copy "
                    "bandwidth, cold L2 (CUDA builds only)")
        ("kernel-set", "With --kernels: gemv (qN GEMV), fpx (fp6 matmul, M = 1..512), attention (decode "
                       "attention over 512..16384 positions) or all",
         cxxopts::value<std::string>()->default_value("all"))
        ("trace", "After the tests, one decode step of each model kernel by kernel as the CUDA graph "
                  "runs it (CUPTI), after the deepest -d's tokens: start, duration and time added per kernel, "
                  "on stderr ('trace' lines)");
    add_backend_options(options);
    const auto args = parse_args(options, argc, argv, {{"-pg", "--pg"}});
    if (args.count("kernels")) {
#ifdef GEMLITE_WITH_CUDA
      const std::string set = args["kernel-set"].as<std::string>();
      if (set != "all" && set != "gemv" && set != "fpx" && set != "attention")
        throw Error("--kernel-set " + set + ": expected gemv, fpx, attention or all");
      if (const std::string why = cuda_unavailable_reason(); !why.empty()) throw Error("--kernels: " + why);
      if (set == "all" || set == "gemv") run_gemv_benchmarks(stdout);
      if (set == "all" || set == "fpx") run_fpx_benchmarks(stdout);
      if (set == "all" || set == "attention") run_attention_benchmarks(stdout);
      return 0;
#else
      throw Error("--kernels needs a build with CUDA (this one has none)");
#endif
    }
    if (args.count("kernel-set")) throw Error("--kernel-set goes with --kernels");
    apply_thread_option(args);
    BenchPlan plan;
    plan.prompts = args["n-prompt"].as<std::vector<int>>();
    plan.gens = args["n-gen"].as<std::vector<int>>();
    plan.depths = args["n-depth"].as<std::vector<int>>();
    plan.batch = args["batch-size"].as<int>();
    plan.repetitions = args["repetitions"].as<int>();
    plan.ctx_size = args["ctx-size"].as<int64_t>();
    plan.trace = args.count("trace") > 0;
    const std::vector<int> pg = args.count("pg") ? args["pg"].as<std::vector<int>>() : std::vector<int>{};
    if (pg.size() % 2 != 0) throw Error("--pg takes pairs: pp,tg (e.g. --pg 512,128)");
    for (size_t i = 0; i < pg.size(); i += 2) {
      if (pg[i] < 1 || pg[i + 1] < 1) throw Error("--pg " + std::to_string(pg[i]) + "," + std::to_string(pg[i + 1]) +
                                                  ": both must be >= 1");
      plan.prompt_gens.emplace_back(pg[i], pg[i + 1]);
    }
    for (const auto& [flag, list] :
         {std::pair{"-p", &plan.prompts}, std::pair{"-n", &plan.gens}, std::pair{"-d", &plan.depths}})
      for (int v : *list)
        if (v < 0) throw Error(std::string(flag) + " " + std::to_string(v) + ": must be >= 0");
    if (plan.depths.empty()) plan.depths = {0};
    const auto positive = [](const std::vector<int>& v) { return std::any_of(v.begin(), v.end(), [](int x) { return x > 0; }); };
    if (!positive(plan.prompts) && !positive(plan.gens) && plan.prompt_gens.empty())
      throw Error("-p 0 and -n 0 and no --pg: nothing to measure");
    if (plan.batch < 1) throw Error("-b/--batch-size must be >= 1");
    if (plan.repetitions < 1) throw Error("-r/--repetitions must be >= 1");
    // The KV cache the tests need (may exceed a model's max_seq_len, as llama-bench's -d may);
    // in 64 bits: --pg 2000000000,2000000000 overflowed int and drew an 8 GB prompt.
    if (plan.needed() > (int64_t(1) << 24))
      throw Error("the tests need " + std::to_string(plan.needed()) +
                  " positions (-d plus the longest -p/-n/--pg); at most 16777216 are supported");
    if (plan.ctx_size < 0 || plan.ctx_size > (int64_t(1) << 24))
      throw Error("-c/--ctx-size " + std::to_string(plan.ctx_size) + ": expected 0 (what the tests need) .. 16777216");
    if (plan.ctx_size > 0 && plan.ctx_size < plan.needed())
      throw Error("-c/--ctx-size " + std::to_string(plan.ctx_size) + ": the tests need " +
                  std::to_string(plan.needed()) + " positions (-d plus the longest -p/-n/--pg" +
                  (plan.trace ? ", or --trace's " + std::to_string(BenchPlan::kTraceWarmTokens + BenchPlan::kTraceSteps)
                              : std::string()) + ")");
    const std::string output = args["output"].as<std::string>();
    if (output != "md" && output != "json" && output != "csv")
      throw Error("-o '" + output + "': expected md, json or csv");
    if (!args.count("model") && !args.count("synthetic"))
      throw Error("nothing to benchmark: give -m DIR or --synthetic NAME (see --help)");
    if (args.count("format") && !args.count("synthetic"))  // a checkpoint's weights keep their formats
      throw Error("-f/--format picks the formats of --synthetic models; a checkpoint given with -m is benchmarked "
                  "in the formats it was quantized to (gemlite-quantize makes others)");
    const std::string device = args["device"].as<std::string>();
    const std::string backend_name = backend_name_for(device);
    check_backend(backend_name);  // before the copy bandwidth and the table's header
    if (plan.trace && backend_name != "cuda")
      throw Error("--trace times kernels on the GPU: it needs the cuda device");
    const BackendOptions backend_settings = backend_options(args);

    // Every model is opened (and every name checked) before the slow work starts.
    std::vector<std::pair<std::string, PackedCheckpoint>> checkpoints;
    if (args.count("model"))
      for (const auto& dir : args["model"].as<std::vector<std::string>>()) {
        PackedCheckpoint ckpt = load_packed_checkpoint(dir);
        const std::string label = dir + " " + ckpt.format_summary();
        checkpoints.emplace_back(label, std::move(ckpt));
      }
    struct Synthetic { std::string name; ModelConfig config; WeightFormat format; };
    std::vector<Synthetic> synthetic;
    if (args.count("synthetic")) {
      const auto format_names = args["format"].as<std::vector<std::string>>();  // none empty (parse_args)
      for (const auto& name : args["synthetic"].as<std::vector<std::string>>())
        for (const auto& format_name : format_names)
          synthetic.push_back({name, synthetic_config(name), WeightFormat::parse(format_name)});
    }

    // The ceiling for "% of copy BW" is the memory the weights stream from: the GPU's
    // device-to-device copy on cuda, a host memcpy on cpu.
    double copy_gbps = 0;
#ifdef GEMLITE_WITH_CUDA
    if (backend_name == "cuda") copy_gbps = device_copy_bandwidth_gbs(stderr);
#endif
    if (copy_gbps == 0) {
      copy_gbps = measure_copy_bandwidth() / 1e9;
      std::fprintf(stderr, "copy bandwidth: %.1f GB/s (host memcpy, measured now)\n", copy_gbps);
    }
    // Rows appear as each test finishes, like llama-bench's: a long run shows progress, and
    // what finished survives an interrupted one (json: the objects of an array closed at
    // the end).
    if (output == "md") print_markdown_header();
    if (output == "csv") print_csv_header();
    if (output == "json") std::printf("[\n");
    std::fflush(stdout);
    int reported = 0;
    const auto report = [&](const Result& r) {
      if (output == "md") print_markdown_row(r, copy_gbps);
      if (output == "csv") print_csv_row(r, copy_gbps);
      if (output == "json") std::printf("%s  %s", reported > 0 ? ",\n" : "", result_json(r, copy_gbps).dump().c_str());
      ++reported;
      std::fflush(stdout);
    };
    for (const auto& [label, ckpt] : checkpoints)
      bench_model(label, ckpt, device, backend_settings, plan, report);
    for (const auto& [name, config, format] : synthetic) {
      const std::string label = name + " " + format.name();
      std::fprintf(stderr, "building %s with random weights ...\n", label.c_str());
      const double build_start = now_seconds();
      const PackedCheckpoint ckpt = make_synthetic_checkpoint(config, format);
      std::fprintf(stderr, "built %s in %.1f s\n", label.c_str(), now_seconds() - build_start);
      bench_model(label, ckpt, device, backend_settings, plan, report);
    }
    if (output == "json") std::printf("\n]\n");
    return 0;
  });
}
