// Generation throughput of the LibTorch language model on one model directory: for each batch size, random
// prompts of a fixed length, a fixed number of new tokens sampled at a temperature, and a table of prefill
// tokens/s, decode tokens/s, new tokens/s overall and peak device memory. One warm-up call of the same shape
// first, so CUDA graph capture is not timed.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <chrono>
#include <random>
#include <tuple>
#include <sstream>
#include <thread>
#include <optional>

#include "lm/kernels/device_memory.h"
#include "lm/generation/generator.h"
#include "lm/model/transformer.h"
#include "guarded_main.h"

using namespace crucible::lm;

namespace {

std::vector<int64_t> parse_list(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream s(text);
  for (std::string item; std::getline(s, item, ',');) out.push_back(std::stoll(item));
  return out;
}

// `uneven`: each request's budget drawn from [new_tokens / 8, new_tokens], as replies of a best-of-N sweep end.
std::vector<GenerationRequest> requests(int64_t batch, int64_t prompt, int64_t new_tokens, double temperature,
                                        int64_t vocab, bool uneven = false) {
  std::mt19937_64 rng(1234);
  std::uniform_int_distribution<int64_t> token(0, vocab - 1);
  std::uniform_int_distribution<int64_t> budget(std::max<int64_t>(1, new_tokens / 8), new_tokens);
  std::vector<GenerationRequest> out(batch);
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < prompt; ++t) out[b].prompt.push_back(token(rng));
    out[b].sampling.temperature = temperature;
    out[b].sampling.seed = static_cast<uint64_t>(b);
    out[b].max_new_tokens = uneven ? budget(rng) : new_tokens;
  }
  return out;
}

// K requests of uneven lengths on `rows` rows: in batches of `rows` one after another (static: each batch runs to
// its longest reply), then in one call where a finished row takes the next request (continuous).
void uneven_sweep(const Transformer& model, const GeneratorOptions& base, int64_t rows, int64_t k, int64_t prompt,
                  int64_t new_tokens, double temperature, c10::Device device) {
  const auto work = requests(k, prompt, new_tokens, temperature, model.config().vocab_size, true);
  int64_t tokens = 0;
  for (const auto& r : work) tokens += r.max_new_tokens;
  std::printf("\n%lld requests of %lld-%lld new tokens (%lld in all) on %lld rows\n\n", (long long)k,
              (long long)std::max<int64_t>(1, new_tokens / 8), (long long)new_tokens, (long long)tokens, (long long)rows);
  std::printf("| batching | total s | new tok/s | decode steps | requests that joined a running batch | peak GiB |\n");
  std::printf("| --- | ---: | ---: | ---: | ---: | ---: |\n");
  for (const bool continuous : {false, true}) {
    GeneratorOptions o = base;
    o.max_batch = continuous ? rows : 0;
    Generator generator(model, [](int64_t) { return std::string(); }, o);
    auto run = [&] {
      int64_t steps = 0, joined = 0;
      const auto start = std::chrono::steady_clock::now();
      for (int64_t i = 0; i < k; i += continuous ? k : rows) {
        const std::vector<GenerationRequest> part(work.begin() + i, work.begin() + std::min(k, i + (continuous ? k : rows)));
        generator.generate(part);
        steps += generator.last_stats().steps;
        joined += generator.last_stats().joined;
      }
      return std::make_tuple(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), steps, joined);
    };
    run();  // warm-up: allocator, cuBLAS, graph capture for these shapes
    reset_peak_memory(device);
    const auto [seconds, steps, joined] = run();
    std::printf("| %s | %.2f | %.0f | %lld | %lld | %.2f |\n", continuous ? "continuous" : "static", seconds,
                tokens / seconds, (long long)steps, (long long)joined, peak_memory_bytes(device) / double(1 << 30));
    std::fflush(stdout);
  }
}

}  // namespace

static int run_tool(int argc, char** argv) {
  CLI::App app("bench_lm: generation throughput of a model directory");
  std::string model_dir, device_name = "cuda:0", dtype_name = "bf16", batches_text = "1,8,64";
  int64_t prompt = 512, new_tokens = 512;
  double temperature = 0.7;
  bool no_graphs = false;
  int64_t uneven_requests = 0;
  app.add_option("--model", model_dir, "Hugging Face model directory")->required();
  app.add_option("--device", device_name, "cpu or cuda:N");
  app.add_option("--dtype", dtype_name, "bf16, f16 or f32");
  app.add_option("--batches", batches_text, "comma-separated batch sizes");
  app.add_option("--prompt", prompt, "prompt tokens per request");
  app.add_option("--new", new_tokens, "new tokens per request");
  app.add_option("--temperature", temperature, "sampling temperature");
  app.add_flag("--no-graphs", no_graphs, "decode eagerly, without CUDA graphs");
  std::optional<uint64_t> random_weights;
  app.add_option("--random-weights", random_weights,
                 "SEED: weights drawn on the device at the config's shapes; the directory needs only config.json");
  app.add_option("--uneven", uneven_requests,
                 "K: also K requests of uneven lengths on the last batch size's rows, static against continuous batching");
  CLI11_PARSE(app, argc, argv);

  LoadOptions options;
  options.device = c10::Device(device_name);
  options.dtype = dtype_name == "f32" ? at::kFloat : dtype_name == "f16" ? at::kHalf : at::kBFloat16;
  options.random_seed = random_weights;
  if (!options.device.is_cuda()) at::set_num_threads(static_cast<int>(std::thread::hardware_concurrency()));
  const auto model = Transformer::load(model_dir, options);
  const auto& c = model.config();
  std::printf("model %s: %lld layers, hidden %lld, heads %lld/%lld, vocab %lld; %s %s, cuda graphs %s\n",
              model_dir.c_str(), (long long)c.num_layers, (long long)c.hidden_size, (long long)c.num_heads,
              (long long)c.num_kv_heads, (long long)c.vocab_size, device_name.c_str(), dtype_name.c_str(),
              no_graphs ? "off" : "on");
  std::printf("prompt %lld tokens, %lld new tokens, temperature %.2f\n\n", (long long)prompt, (long long)new_tokens,
              temperature);
  std::printf("| batch | prefill tok/s | decode tok/s | new tok/s overall | time to first token | total s | peak GiB |\n");
  std::printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  GeneratorOptions generator_options;
  generator_options.cuda_graphs = !no_graphs;
  for (const auto batch : parse_list(batches_text)) {
    Generator generator(model, [](int64_t) { return std::string(); }, generator_options);
    const auto work = requests(batch, prompt, new_tokens, temperature, c.vocab_size);
    generator.generate(work);  // warm-up: allocator, cuBLAS, graph capture for this shape
    reset_peak_memory(options.device);
    const auto out = generator.generate(work);
    const auto& s = generator.last_stats();
    const double decode_s = s.total_s - s.time_to_first_token_s;
    std::printf("| %lld | %.0f | %.0f | %.0f | %.3f s | %.2f | %.2f |\n", (long long)batch,
                batch * prompt / s.time_to_first_token_s, batch * (s.steps - 1) / decode_s,
                batch * s.steps / s.total_s, s.time_to_first_token_s, s.total_s,
                peak_memory_bytes(options.device) / double(1 << 30));
    std::fflush(stdout);
    if (static_cast<int64_t>(out[0].tokens.size()) != new_tokens) std::printf("(row 0 stopped early)\n");
  }
  if (uneven_requests > 0)
    uneven_sweep(model, generator_options, parse_list(batches_text).back(), uneven_requests, prompt, new_tokens,
                 temperature, options.device);
  return 0;
}

int main(int argc, char** argv) {
  return crucible::tools::guarded_main("bench_lm", [&] { return run_tool(argc, argv); });
}
