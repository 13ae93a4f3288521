// PEFT's rank_pattern and alpha_pattern: which modules a key names, which rank and alpha each module takes, and an
// adapter with per-module ranks and alphas (written here as PEFT lays it out) loaded, computed, trained and saved.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/grad_mode.h>
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "lm/format/safetensors.h"
#include "lm/golden_batch.h"
#include "lm/golden_outputs.h"
#include "lm/model/lora.h"
#include "lm/model/lora_pattern.h"
#include "lm/model/torch_tensors.h"
#include "lm/model/transformer.h"
#include "lm/training/lora_trainer.h"
#include "support.h"

using namespace crucible;
using namespace crucible::lm;

namespace {

Transformer tiny() { return Transformer::load(test::lm_fixture("qwen2_tiny")); }

const std::vector<LoraTarget> kAllLinear = {kLoraTargets.begin(), kLoraTargets.end()};

// (in, out) of a target's linear layer, from the model's config.
std::pair<int64_t, int64_t> in_out(const ModelConfig& c, LoraTarget t) {
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim, h = c.hidden_size,
                i = c.intermediate_size;
  switch (t) {
    case LoraTarget::q: return {h, q};
    case LoraTarget::k:
    case LoraTarget::v: return {h, kv};
    case LoraTarget::o: return {q, h};
    case LoraTarget::gate:
    case LoraTarget::up: return {h, i};
    case LoraTarget::down: return {i, h};
    default: return {0, 0};
  }
}

// PEFT's tensor key, spelt out here rather than taken from the adapter.
std::string peft_tensor_key(int64_t layer, LoraTarget t, const char* ab) {
  return "base_model.model." + lora_module_path(layer, t) + ".lora_" + ab + ".weight";
}

using Module = std::pair<int64_t, LoraTarget>;

// The test's own A and B of every module, at ranks it chooses.
struct HandMadeAdapter {
  std::map<Module, std::pair<at::Tensor, at::Tensor>> ab;

  static HandMadeAdapter random(const ModelConfig& c, const std::map<Module, int64_t>& ranks) {
    HandMadeAdapter out;
    auto g = at::detail::createCPUGenerator(5);
    for (const auto& [module, rank] : ranks) {
      const auto [in, o] = in_out(c, module.second);
      out.ab[module] = {at::randn({rank, in}, g) * 0.3, at::randn({o, rank}, g) * 0.3};
    }
    return out;
  }

  void write(const std::filesystem::path& dir, const std::string& config_json) const {
    std::filesystem::create_directories(dir);
    test::write_file(dir / "adapter_config.json", config_json);
    std::vector<TensorBytes> tensors;
    for (const auto& [module, pair] : ab) {
      tensors.push_back(tensor_to_bytes(peft_tensor_key(module.first, module.second, "A"), pair.first));
      tensors.push_back(tensor_to_bytes(peft_tensor_key(module.first, module.second, "B"), pair.second));
    }
    write_safetensors(dir / "adapter_model.safetensors", tensors, {{"format", "pt"}});
  }
};

LoraAdapter load(const std::filesystem::path& dir, const Transformer& model) {
  return LoraAdapter::load_peft(dir, model.config(), c10::Device(c10::kCPU), at::kFloat);
}

at::Tensor logits_of(const Transformer& model, const std::vector<int64_t>& ids) {
  at::NoGradGuard no_grad;
  return model.forward_full(at::tensor(ids, at::kLong).view({1, -1}))[0];
}

float max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<float>(); }

// The config below (r 4, alpha 8, all seven targets) with these patterns, keys in this order:
//   rank_pattern  {"q_proj": 6, "layers.0.self_attn.q_proj": 2, "^model.layers.1.mlp.down_proj": 3}
//   alpha_pattern {"v_proj": 2, "layers.1.self_attn.v_proj": 32, "mlp\.(gate|up)_proj": 12}
// "q_proj" comes first, so layer 0's q takes 6, not 2 (a sorted reading of the object would give 2).
const char* kPatternConfig = R"({
  "peft_type": "LORA", "r": 4, "lora_alpha": 8, "lora_dropout": 0.0, "use_rslora": false, "bias": "none",
  "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
  "rank_pattern": {"q_proj": 6, "layers.0.self_attn.q_proj": 2, "^model.layers.1.mlp.down_proj": 3},
  "alpha_pattern": {"v_proj": 2, "layers.1.self_attn.v_proj": 32, "mlp\\.(gate|up)_proj": 12}
})";

struct Expected {
  Module module;
  int64_t rank;
  double alpha;
};
// Worked out by hand from the patterns above.
const std::vector<Expected> kExpected = {
    {{0, LoraTarget::q}, 6, 8},    {{1, LoraTarget::q}, 6, 8},    {{0, LoraTarget::k}, 4, 8},
    {{0, LoraTarget::v}, 4, 2},    {{1, LoraTarget::v}, 4, 2},    {{1, LoraTarget::o}, 4, 8},
    {{0, LoraTarget::gate}, 4, 12}, {{1, LoraTarget::gate}, 4, 12}, {{0, LoraTarget::up}, 4, 12},
    {{1, LoraTarget::up}, 4, 12},  {{0, LoraTarget::down}, 4, 8},  {{1, LoraTarget::down}, 3, 8},
};

std::map<Module, int64_t> expected_ranks() {
  std::map<Module, int64_t> ranks;
  for (int64_t layer = 0; layer < 2; ++layer)
    for (auto t : kAllLinear) ranks[{layer, t}] = 4;
  for (const auto& e : kExpected) ranks[e.module] = e.rank;
  return ranks;
}

double expected_scale(const Module& m) {
  for (const auto& e : kExpected)
    if (e.module == m) return e.alpha / e.rank;
  return 8.0 / 4.0;
}

}  // namespace

TEST_CASE("lora patterns: a key matches the whole name or a suffix after a dot, as a regular expression") {
  struct Row {
    const char* key;
    const char* path;
    bool matches;
  };
  const Row rows[] = {
      {"q_proj", "model.layers.0.self_attn.q_proj", true},
      {"self_attn.q_proj", "model.layers.0.self_attn.q_proj", true},
      {"model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.q_proj", true},  // the whole name
      {"layers.1.self_attn.q_proj", "model.layers.0.self_attn.q_proj", false},
      {"1.self_attn.q_proj", "model.layers.11.self_attn.q_proj", false},  // the suffix starts after a dot
      {"_proj", "model.layers.0.self_attn.q_proj", false},
      {"q", "model.layers.0.self_attn.q_proj", false},          // the key runs to the end of the name
      {"self_attn", "model.layers.0.self_attn.q_proj", false},  // a parent is not the module
      {".*_proj", "model.layers.0.self_attn.q_proj", true},
      {"^model.layers.0.self_attn.q_proj", "model.layers.0.self_attn.q_proj", true},
      {"^layers.0.self_attn.q_proj", "model.layers.0.self_attn.q_proj", false},  // ^: from the name's start only
      {"q_proj$", "model.layers.0.self_attn.q_proj", true},
      {"q_proj|k_proj", "model.layers.0.self_attn.k_proj", true},
      {"layers\\.[01]\\.mlp\\.down_proj", "model.layers.1.mlp.down_proj", true},
      {"layers\\.[01]\\.mlp\\.down_proj", "model.layers.2.mlp.down_proj", false},
      {"layers\\.\\d+\\.mlp\\.up_proj", "model.layers.12.mlp.up_proj", true},
      {"experts.gate_up_proj", "model.layers.1.mlp.experts.gate_up_proj", true},
      {"router.weight", "model.layers.0.mlp.router.weight", true},
      {"experts", "model.layers.0.mlp.experts.down_proj", false},
      {"lm_head", "model.layers.0.mlp.down_proj", false},
  };
  for (const auto& row : rows) {
    CAPTURE(row.key);
    CAPTURE(row.path);
    CHECK(lora_pattern_matches(row.key, row.path) == row.matches);
  }
}

TEST_CASE("lora patterns: the modules of the tiny model each key names") {
  CHECK(lora_module_path(1, LoraTarget::k) == "model.layers.1.self_attn.k_proj");
  CHECK(lora_module_path(0, LoraTarget::up) == "model.layers.0.mlp.up_proj");
  CHECK(lora_module_path(3, LoraTarget::router) == "model.layers.3.mlp.router.weight");
  CHECK(lora_module_path(3, LoraTarget::experts_down) == "model.layers.3.mlp.experts.down_proj");
  struct Row {
    const char* key;
    std::vector<Module> modules;
  };
  const Row rows[] = {
      {"q_proj", {{0, LoraTarget::q}, {1, LoraTarget::q}}},
      {"layers.1.mlp.down_proj", {{1, LoraTarget::down}}},
      {"^model.layers.0.self_attn.(q|k)_proj", {{0, LoraTarget::q}, {0, LoraTarget::k}}},
      {"mlp\\.(gate|up)_proj",
       {{0, LoraTarget::gate}, {0, LoraTarget::up}, {1, LoraTarget::gate}, {1, LoraTarget::up}}},
      {"self_attn\\.[a-z]_proj",
       {{0, LoraTarget::q}, {0, LoraTarget::k}, {0, LoraTarget::v}, {0, LoraTarget::o}, {1, LoraTarget::q},
        {1, LoraTarget::k}, {1, LoraTarget::v}, {1, LoraTarget::o}}},
      {"lm_head", {}},
      {"embed_tokens", {}},
  };
  for (const auto& row : rows) {
    CAPTURE(row.key);
    std::vector<std::string> named, expected;  // as paths, which a failure prints
    for (int64_t layer = 0; layer < 2; ++layer)
      for (auto t : kAllLinear)
        if (lora_pattern_matches(row.key, lora_module_path(layer, t))) named.push_back(lora_module_path(layer, t));
    for (const auto& [layer, t] : row.modules) expected.push_back(lora_module_path(layer, t));
    CHECK(named == expected);
  }
}

TEST_CASE("lora patterns: each module's rank and alpha, the first matching key winning, and its scale") {
  LoraConfig config;
  config.rank = 4;
  config.alpha = 8;
  config.rank_pattern = {{"q_proj", 6}, {"layers.0.self_attn.q_proj", 2}, {"^model.layers.1.mlp.down_proj", 3}};
  config.alpha_pattern = {{"v_proj", 2}, {"layers.1.self_attn.v_proj", 32}, {"mlp\\.(gate|up)_proj", 12}};
  const LoraPatterns patterns(config);
  for (const auto& e : kExpected) {
    const auto path = lora_module_path(e.module.first, e.module.second);
    CAPTURE(path);
    const auto s = patterns.settings_of(path);
    CHECK(s.rank == e.rank);
    CHECK(s.alpha == e.alpha);
    CHECK(s.scale == doctest::Approx(e.alpha / e.rank));
  }
  // A name no key matches keeps r and lora_alpha.
  const auto plain = patterns.settings_of("model.layers.0.self_attn.o_proj");
  CHECK(plain.rank == 4);
  CHECK(plain.alpha == 8);
  // rsLoRA divides each module's alpha by the square root of its own rank.
  config.use_rslora = true;
  const auto q = LoraPatterns(config).settings_of("model.layers.0.self_attn.q_proj");
  CHECK(q.scale == doctest::Approx(8.0 / std::sqrt(6.0)));
  const auto down = LoraPatterns(config).settings_of("model.layers.1.mlp.down_proj");
  CHECK(down.scale == doctest::Approx(8.0 / std::sqrt(3.0)));
}

TEST_CASE("lora patterns: a PEFT adapter with per-module ranks and alphas computes scale_m B_m A_m x per module") {
  const test::ScratchDir dir("peft-patterns");
  auto model = tiny();
  const auto& c = model.config();
  const auto hand = HandMadeAdapter::random(c, expected_ranks());
  hand.write(dir.path() / "patterns", kPatternConfig);
  auto adapter = load(dir.path() / "patterns", model);

  // Every module's rank and scale, and its delta against the test's own product.
  const auto x = at::randn({2, 3, c.hidden_size});
  for (const auto& [module, pair] : hand.ab) {
    const auto path = lora_module_path(module.first, module.second);
    CAPTURE(path);
    const auto* p = adapter.find(module.first, module.second);
    REQUIRE(p);
    CHECK(p->rank == pair.first.size(0));
    CHECK(p->scale == doctest::Approx(expected_scale(module)));
    if (in_out(c, module.second).first != c.hidden_size) continue;  // o and down read other widths
    const auto want = at::matmul(at::matmul(x, pair.first.t()), pair.second.t()) * expected_scale(module);
    CHECK(max_diff(adapter.delta(module.first, module.second, x), want) < 1e-5f);
  }

  // q (rank 2, the module's own), k (defaults) and v (alpha 2) in one fused product: out + each delta side by side.
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  const auto out = at::randn({2, 3, q + 2 * kv});
  std::vector<at::Tensor> deltas;
  for (auto t : {LoraTarget::q, LoraTarget::k, LoraTarget::v}) {
    const auto& [a, b] = hand.ab.at({0, t});
    deltas.push_back(at::matmul(at::matmul(x, a.t()), b.t()) * expected_scale({0, t}));
  }
  const auto fused = adapter.plus_deltas(0, x, out, {{LoraTarget::q, q}, {LoraTarget::k, kv}, {LoraTarget::v, kv}});
  CHECK(max_diff(fused, out + at::cat(deltas, -1)) < 1e-5f);

  // The whole model against the same adapter written at one rank (6, alpha 6: scale 1): each module's A padded with
  // zero rows, its B with zero columns and multiplied by its own scale. That file takes the patternless path.
  HandMadeAdapter uniform;
  for (const auto& [module, pair] : hand.ab) {
    const auto [a, b] = pair;
    const int64_t pad = 6 - a.size(0);
    uniform.ab[module] = {at::cat({a, at::zeros({pad, a.size(1)})}, 0),
                          at::cat({b * expected_scale(module), at::zeros({b.size(0), pad})}, 1)};
  }
  uniform.write(dir.path() / "uniform", R"({"peft_type": "LORA", "r": 6, "lora_alpha": 6, "target_modules": "all-linear"})");
  auto same = load(dir.path() / "uniform", model);
  const auto ids = test::golden("qwen2_tiny").prompts[1];
  model.use_adapter(&same);
  const auto expected = logits_of(model, ids);
  model.use_adapter(&adapter);
  const auto adapted = logits_of(model, ids);
  CHECK(max_diff(adapted, expected) < 1e-4f);
  CHECK(max_diff(adapted, test::golden("qwen2_tiny").logits[1]) > 1e-2f);  // the adapter does change the model

  // Saved and loaded back: the same patterns in the same order, the same tensors, ranks, scales and logits.
  adapter.save_peft(dir.path() / "saved", "qwen2_tiny");
  const auto saved = nlohmann::ordered_json::parse(test::read_file(dir.path() / "saved" / "adapter_config.json"));
  CHECK(saved["rank_pattern"].dump() ==
        R"({"q_proj":6,"layers.0.self_attn.q_proj":2,"^model.layers.1.mlp.down_proj":3})");
  CHECK(saved["alpha_pattern"].size() == 3);
  CHECK(saved["alpha_pattern"].begin().key() == "v_proj");
  auto reloaded = load(dir.path() / "saved", model);
  const auto before = adapter.parameters(), after = reloaded.parameters();
  REQUIRE(before.size() == after.size());
  for (std::size_t i = 0; i < before.size(); ++i) CHECK(at::equal(before[i], after[i]));
  for (const auto& [module, pair] : hand.ab) {
    CHECK(reloaded.find(module.first, module.second)->rank == adapter.find(module.first, module.second)->rank);
    CHECK(reloaded.find(module.first, module.second)->scale == adapter.find(module.first, module.second)->scale);
  }
  model.use_adapter(&reloaded);
  CHECK(at::equal(logits_of(model, ids), adapted));

  // Merged into the weights, each module at its own scale.
  model.merge_adapter(adapter);
  reloaded.set_enabled(false);
  CHECK(max_diff(logits_of(model, ids), expected) < 1e-4f);
}

TEST_CASE("lora patterns: an adapter of mixed ranks trains, and its checkpoint continues exactly") {
  const test::ScratchDir dir("peft-patterns-train");
  auto model = tiny();
  HandMadeAdapter::random(model.config(), expected_ranks()).write(dir.path() / "start", kPatternConfig);
  const auto g = test::golden("qwen2_tiny");
  const SequenceBatch batch = test::golden_batch(g);
  TrainerOptions options;
  options.learning_rate = 1e-2;
  auto a = load(dir.path() / "start", model);
  const auto initial = a.clone().parameters();
  LoraTrainer first(model, a, options);
  first.policy_step(batch);
  first.save_checkpoint(dir.path() / "step-1");
  first.policy_step(batch);
  const auto trained = a.parameters();
  bool moved = false;
  for (std::size_t i = 0; i < trained.size(); ++i) {
    CHECK(trained[i].sizes() == initial[i].sizes());
    moved |= !at::equal(trained[i], initial[i]);
  }
  CHECK(moved);
  CHECK(a.find(1, LoraTarget::down)->a.size(0) == 3);

  auto b = load(dir.path() / "start", model);  // the start again: the step must come from the checkpoint
  LoraTrainer second(model, b, options);
  second.load_checkpoint(dir.path() / "step-1");
  second.policy_step(batch);
  const auto pb = b.parameters();
  float worst = 0;
  for (std::size_t i = 0; i < trained.size(); ++i) worst = std::max(worst, max_diff(trained[i], pb[i]));
  CHECK(worst < 1e-6f);
}

TEST_CASE("lora patterns: malformed patterns and tensors of the wrong rank are refused, naming the key") {
  const test::ScratchDir dir("peft-patterns-bad");
  auto model = tiny();
  // Tensors of layer 0's q at rank 2 and every other module at 4.
  auto ranks = expected_ranks();
  for (auto& [module, rank] : ranks) rank = 4;
  ranks[{0, LoraTarget::q}] = 2;
  const auto hand = HandMadeAdapter::random(model.config(), ranks);
  const auto config_with = [](const std::string& patterns) {
    return R"({"peft_type": "LORA", "r": 4, "lora_alpha": 8, "target_modules": "all-linear", )" + patterns + "}";
  };
  struct Row {
    std::string patterns;
    const char* message;  // empty: loads
  };
  const Row rows[] = {
      {R"("rank_pattern": {"layers.0.self_attn.q_proj": 2}, "alpha_pattern": {})", ""},
      {R"("rank_pattern": {"layers.0.self_attn.q_proj": 2}, "alpha_pattern": null)", ""},
      // A key that matches no adapted module changes nothing, as in PEFT (which checks nothing there).
      {R"("rank_pattern": {"layers.0.self_attn.q_proj": 2, "lm_head": 16}, "alpha_pattern": {"nothing": 1})", ""},
      {R"("rank_pattern": ["q_proj", 2])", "rank_pattern must be an object"},
      {R"("rank_pattern": {"layers.0.self_attn.q_proj": 2.5})", "rank_pattern key 'layers.0.self_attn.q_proj': the rank must be an integer"},
      {R"("rank_pattern": {"layers.0.self_attn.q_proj": "2"})", "rank_pattern key 'layers.0.self_attn.q_proj': the rank must be an integer"},
      {R"("rank_pattern": {"layers.0.self_attn.q_proj": 0})", "rank_pattern key 'layers.0.self_attn.q_proj': the rank must be positive"},
      {R"("rank_pattern": {"v_proj": -1})", "rank_pattern key 'v_proj': the rank must be positive"},
      {R"("rank_pattern": {"q_proj(": 2})", "rank_pattern key 'q_proj(' is not a valid regular expression"},
      {"\"rank_pattern\": {\"" + std::string(300, 'a') + "\": 2}", "is longer than 256 bytes"},
      {R"("rank_pattern": {"layers.0.self_attn.q_proj": 2}, "alpha_pattern": {"[v": 2})",
       "alpha_pattern key '[v' is not a valid regular expression"},
      {R"("rank_pattern": {"layers.0.self_attn.q_proj": 2}, "alpha_pattern": {"v_proj": "x"})",
       "alpha_pattern key 'v_proj': the alpha must be a number"},
      {R"("rank_pattern": {"layers.0.self_attn.q_proj": 2}, "alpha_pattern": 3)", "alpha_pattern must be an object"},
      // The file's tensors at rank 2, the config's at 3: the tensor's key and both shapes.
      {R"("rank_pattern": {"layers.0.self_attn.q_proj": 3})",
       "tensor base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight is [2, 64], but this model and the "
       "module's rank 3 need [3, 64]"},
      {R"("rank_pattern": {})", "self_attn.q_proj.lora_A.weight is [2, 64], but this model and the module's rank 4 need [4, 64]"},
  };
  for (const auto& row : rows) {
    CAPTURE(row.patterns);
    hand.write(dir.path(), config_with(row.patterns));
    if (std::string(row.message).empty()) {
      const auto adapter = load(dir.path(), model);
      CHECK(adapter.find(0, LoraTarget::q)->rank == 2);
      CHECK(adapter.find(1, LoraTarget::q)->rank == 4);
      CHECK(adapter.find(0, LoraTarget::v)->scale == 2.0);
    } else {
      CHECK_THROWS_WITH_AS(load(dir.path(), model), doctest::Contains(row.message), ModelFormatError);
    }
  }
  // The default rank itself.
  for (const char* r : {"0", "-2"}) {
    hand.write(dir.path(), std::string(R"({"peft_type": "LORA", "r": )") + r +
                               R"(, "lora_alpha": 8, "target_modules": "all-linear"})");
    CHECK_THROWS_WITH_AS(load(dir.path(), model), doctest::Contains("r must be a positive integer"), ModelFormatError);
  }
  // A fresh adapter takes its patterns too, and refuses a bad one as an argument.
  LoraConfig config;
  config.rank_pattern = {{"down_proj", 2}};
  const auto fresh = LoraAdapter::create(model.config(), config, c10::Device(c10::kCPU), at::kFloat, 1);
  CHECK(fresh.find(1, LoraTarget::down)->a.size(0) == 2);
  CHECK(fresh.find(1, LoraTarget::down)->scale == 16.0 / 2);
  CHECK(fresh.find(1, LoraTarget::up)->a.size(0) == 8);
  config.rank_pattern = {{"down_proj", 0}};
  CHECK_THROWS_AS(LoraAdapter::create(model.config(), config, c10::Device(c10::kCPU), at::kFloat, 1),
                  std::invalid_argument);
}
