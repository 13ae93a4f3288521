#include "lm/model/lora.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "lm/format/safetensors.h"
#include "lm/model/lora_pattern.h"
#include "lm/model/torch_tensors.h"

namespace crucible::lm {
namespace {

constexpr std::size_t kTargets = kLoraTargetCount;

int64_t experts_of(const ModelConfig& c, LoraTarget t) {
  return t == LoraTarget::experts_gate_up || t == LoraTarget::experts_down ? c.moe->num_experts : 1;
}

// (in, out) features of a target's linear layer.
std::pair<int64_t, int64_t> dims(const ModelConfig& c, LoraTarget t) {
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim;
  switch (t) {
    case LoraTarget::q: return {c.hidden_size, q};
    case LoraTarget::k:
    case LoraTarget::v: return {c.hidden_size, kv};
    case LoraTarget::o: return {q, c.hidden_size};
    case LoraTarget::gate:
    case LoraTarget::up: return {c.hidden_size, c.intermediate_size};
    case LoraTarget::down: return {c.intermediate_size, c.hidden_size};
    case LoraTarget::router: return {c.hidden_size, c.moe->num_experts};
    case LoraTarget::experts_gate_up: return {c.hidden_size, 2 * c.intermediate_size};
    case LoraTarget::experts_down: return {c.intermediate_size, c.hidden_size};
  }
  return {0, 0};
}

// A mixture-of-experts model has no dense MLP: gate, up and down name nothing there (PEFT's "all-linear" adapts only
// the attention of gpt-oss), so those targets adapt nothing rather than make matrices no forward pass reads.
// The router and experts exist only there; a target a model lacks is refused where it is named explicitly.
bool present(const ModelConfig& c, LoraTarget t) {
  if (is_parameter_target(t)) return c.moe.has_value();
  return !(c.moe && (t == LoraTarget::gate || t == LoraTarget::up || t == LoraTarget::down));
}

// PEFT's key of a target's A or B. Parameters adapted on one module nest their wrappers in the order
// target_parameters lists them: the first listed sits innermost, one "base_layer." deeper per later one.
std::string peft_key(int64_t layer, LoraTarget t, const char* ab, const std::vector<LoraTarget>& targets) {
  const auto prefix = "base_model.model.model.layers." + std::to_string(layer);
  const auto tail = std::string(".lora_") + ab + ".weight";
  if (t == LoraTarget::router) return prefix + ".mlp.router" + tail;
  if (t == LoraTarget::experts_gate_up || t == LoraTarget::experts_down) {
    std::string nesting;
    const auto at = std::find(targets.begin(), targets.end(), t);
    for (auto later = at + 1; later < targets.end(); ++later)
      if (*later == LoraTarget::experts_gate_up || *later == LoraTarget::experts_down) nesting += "base_layer.";
    return prefix + ".mlp.experts." + nesting + tail.substr(1);
  }
  const bool attention = t == LoraTarget::q || t == LoraTarget::k || t == LoraTarget::v || t == LoraTarget::o;
  return prefix + (attention ? ".self_attn." : ".mlp.") + lora_module_name(t) + tail;
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

// One layer's pair at its own rank: A Kaiming-uniform as PEFT initialises it, B zero.
LoraPair fresh_pair(const ModelConfig& model, LoraTarget t, const LoraModuleSettings& settings, c10::Device device,
                    c10::ScalarType dtype, at::Generator& generator) {
  const auto [in, out] = dims(model, t);
  const int64_t width = settings.rank * experts_of(model, t);  // PEFT: one rank-r pair per expert, side by side
  const double bound = 1.0 / std::sqrt(static_cast<double>(in));
  auto a = at::empty({width, in}, at::kFloat).uniform_(-bound, bound, generator);
  return LoraPair{a.to(device, dtype).set_requires_grad(true),
                  at::zeros({out, width}, at::TensorOptions().dtype(dtype).device(device)).set_requires_grad(true),
                  settings.rank, settings.scale};
}

// PEFT's rank_pattern: an object of keys to positive integers, in the file's order (the first match wins, so the
// order is kept). Absent or null is empty, as PEFT treats it.
std::vector<LoraRankOverride> parse_rank_pattern(const nlohmann::ordered_json& cfg, const std::string& where) {
  std::vector<LoraRankOverride> out;
  if (!cfg.contains("rank_pattern") || cfg["rank_pattern"].is_null()) return out;
  const auto& pattern = cfg["rank_pattern"];
  if (!pattern.is_object()) throw ModelFormatError(where + ": rank_pattern must be an object of module patterns to ranks");
  for (const auto& [key, value] : pattern.items()) {
    if (!value.is_number_integer())
      throw ModelFormatError(where + ": rank_pattern key '" + key + "': the rank must be an integer, not " + value.dump());
    if (value.get<int64_t>() <= 0)
      throw ModelFormatError(where + ": rank_pattern key '" + key + "': the rank must be positive, not " + value.dump());
    out.push_back({key, value.get<int64_t>()});
  }
  return out;
}

std::vector<LoraAlphaOverride> parse_alpha_pattern(const nlohmann::ordered_json& cfg, const std::string& where) {
  std::vector<LoraAlphaOverride> out;
  if (!cfg.contains("alpha_pattern") || cfg["alpha_pattern"].is_null()) return out;
  const auto& pattern = cfg["alpha_pattern"];
  if (!pattern.is_object())
    throw ModelFormatError(where + ": alpha_pattern must be an object of module patterns to alphas");
  for (const auto& [key, value] : pattern.items()) {
    if (!value.is_number())
      throw ModelFormatError(where + ": alpha_pattern key '" + key + "': the alpha must be a number, not " + value.dump());
    out.push_back({key, value.get<double>()});
  }
  return out;
}

// The patterns compiled, with a bad key reported as the file's error.
LoraPatterns patterns_of_file(const LoraConfig& config, const std::string& where) {
  try {
    return LoraPatterns(config);
  } catch (const std::invalid_argument& e) {
    throw ModelFormatError(where + ": " + e.what());
  }
}

}  // namespace

std::string lora_module_path(int64_t layer, LoraTarget t) {
  const auto prefix = "model.layers." + std::to_string(layer) + ".";
  if (is_parameter_target(t)) return prefix + lora_module_name(t);  // "mlp.router.weight", "mlp.experts.down_proj"
  const bool attention = t == LoraTarget::q || t == LoraTarget::k || t == LoraTarget::v || t == LoraTarget::o;
  return prefix + (attention ? "self_attn." : "mlp.") + lora_module_name(t);
}

bool is_parameter_target(LoraTarget t) {
  return t == LoraTarget::router || t == LoraTarget::experts_gate_up || t == LoraTarget::experts_down;
}

std::optional<LoraTarget> lora_target_named(const std::string& name) {
  for (auto t : kLoraTargets)
    if (name == lora_module_name(t)) return t;
  for (auto t : kLoraParameterTargets) {
    const std::string full = lora_module_name(t);  // a dotted suffix of it ("experts.down_proj") names it too
    if (name.find('.') != std::string::npos && full.size() >= name.size() && full.compare(full.size() - name.size(), name.size(), name) == 0 &&
        (full.size() == name.size() || full[full.size() - name.size() - 1] == '.'))
      return t;
  }
  return std::nullopt;
}

std::vector<LoraTarget> lora_targets_named(const std::vector<std::string>& names) {
  std::vector<LoraTarget> out;
  for (const auto& name : names) {
    auto t = lora_target_named(name);
    if (!t)
      throw std::invalid_argument("unknown LoRA target '" + name +
                                  "' (q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj, mlp.router.weight, "
                                  "mlp.experts.gate_up_proj, mlp.experts.down_proj)");
    out.push_back(*t);
  }
  return out;
}

const char* lora_module_name(LoraTarget t) {
  switch (t) {
    case LoraTarget::q: return "q_proj";
    case LoraTarget::k: return "k_proj";
    case LoraTarget::v: return "v_proj";
    case LoraTarget::o: return "o_proj";
    case LoraTarget::gate: return "gate_proj";
    case LoraTarget::up: return "up_proj";
    case LoraTarget::down: return "down_proj";
    case LoraTarget::router: return "mlp.router.weight";
    case LoraTarget::experts_gate_up: return "mlp.experts.gate_up_proj";
    case LoraTarget::experts_down: return "mlp.experts.down_proj";
  }
  return "?";
}

double LoraConfig::scale() const { return scale_of(rank, alpha); }

double LoraConfig::scale_of(int64_t module_rank, double module_alpha) const {
  const auto r = static_cast<double>(module_rank);
  return use_rslora ? module_alpha / std::sqrt(r) : module_alpha / r;
}

LoraAdapter LoraAdapter::create(const ModelConfig& model, const LoraConfig& config, c10::Device device,
                                c10::ScalarType dtype, uint64_t seed) {
  if (config.rank <= 0) throw std::invalid_argument("LoRA rank must be positive");
  LoraAdapter adapter;
  adapter.config_ = config;
  adapter.layers_ = model.num_layers;
  adapter.pairs_.assign(model.num_layers * kTargets, std::nullopt);
  for (auto t : config.targets) {
    if (is_parameter_target(t) && !model.moe)
      throw std::invalid_argument(std::string("LoRA target ") + lora_module_name(t) + ": this model has no experts");
    // As PEFT: dropout cannot be applied inside a product with a parameter (x is not factored out).
    if (is_parameter_target(t) && config.dropout > 0)
      throw std::invalid_argument(std::string("LoRA target ") + lora_module_name(t) + " does not take dropout");
  }
  const LoraPatterns patterns(config);
  auto generator = at::detail::createCPUGenerator(seed);
  for (int64_t layer = 0; layer < model.num_layers; ++layer)
    for (auto t : config.targets)
      if (present(model, t))
        adapter.pairs_[layer * kTargets + static_cast<std::size_t>(t)] =
            fresh_pair(model, t, patterns.settings_of(lora_module_path(layer, t)), device, dtype, generator);
  return adapter;
}

const LoraPair* LoraAdapter::find(int64_t layer, LoraTarget target) const {
  const auto& p = pairs_[layer * kTargets + static_cast<std::size_t>(target)];
  return p ? &*p : nullptr;
}

at::Tensor LoraAdapter::delta(int64_t layer, LoraTarget target, const at::Tensor& x) const {
  const auto* p = find(layer, target);
  if (!p) return {};
  const auto input = training_ && config_.dropout > 0 ? at::dropout(x, config_.dropout, /*train=*/true) : x;
  // An adapter trains in float32 on a bfloat16 model, but is applied in the model's dtype: casting its two small
  // matrices (differentiably) costs far less than casting every activation to float32 and multiplying there (on a
  // GPU without TF32, float32 products run on the slow path: they took about a quarter of a GRPO step).
  const auto dtype = x.scalar_type();
  return at::linear(at::linear(input, p->a.to(dtype)), (p->b * p->scale).to(dtype));
}

at::Tensor LoraAdapter::plus_expert_delta(int64_t layer, LoraTarget target, int64_t expert, int64_t experts,
                                          const at::Tensor& x, const at::Tensor& out) const {
  const auto* p = find(layer, target);
  if (!p) return out;
  // PEFT's layout: A's rows are expert-major ([E, r] flattened), B's columns rank-major ([r, E] flattened).
  const int64_t r = p->rank, rows = p->b.size(0);
  const auto dtype = x.scalar_type();
  const auto a = p->a.narrow(0, expert * r, r).to(dtype);
  const auto b = (p->b.view({rows, r, experts}).select(2, expert) * p->scale).to(dtype);
  return out + at::linear(at::linear(x, a), b);
}

at::Tensor LoraAdapter::expert_deltas(int64_t layer, LoraTarget target, const at::Tensor& experts, int64_t num_experts,
                                      const at::Tensor& x) const {
  if (target != LoraTarget::experts_gate_up && target != LoraTarget::experts_down)
    throw std::invalid_argument(std::string("expert_deltas: ") + lora_module_name(target) + " is not an expert target");
  const auto* p = find(layer, target);
  if (!p) return {};
  const int64_t r = p->rank, rows = p->b.size(0), in = p->a.size(1);
  const auto dtype = x.scalar_type();
  const auto a = p->a.to(dtype).view({num_experts, r, in}).index_select(0, experts);  // [A, r, in]
  const auto b = p->b.to(dtype).view({rows, r, num_experts}).permute({2, 0, 1}).index_select(0, experts);  // [A, out, r]
  return at::bmm(b, at::bmm(a, x.unsqueeze(-1))).squeeze(-1).mul_(p->scale);  // [A, out]
}

bool LoraAdapter::adapts_parameters() const {
  for (int64_t layer = 0; layer < layers_; ++layer)
    for (auto t : kLoraParameterTargets)
      if (find(layer, t)) return true;
  return false;
}

at::Tensor LoraAdapter::plus_deltas(int64_t layer, const at::Tensor& x, const at::Tensor& out,
                                    std::initializer_list<std::pair<LoraTarget, int64_t>> targets) const {
  const auto dtype = x.scalar_type();
  if (training_ && config_.dropout > 0) {
    // Each target draws its own dropout mask, as PEFT's modules do: one delta per target.
    std::vector<at::Tensor> parts;
    bool any = false;
    for (const auto& [target, width] : targets) {
      auto d = delta(layer, target, x);
      any |= d.defined();
      auto shape = x.sizes().vec();
      shape.back() = width;
      parts.push_back(d.defined() ? d : at::zeros(shape, x.options()));
    }
    return any ? out + at::cat(parts, -1) : out;
  }
  std::vector<at::Tensor> a, b;
  bool any = false;
  const int64_t in = x.size(-1);
  for (const auto& [target, width] : targets) {
    const auto* p = find(layer, target);
    any |= p != nullptr;
    // Each target at its own rank and scale (PEFT's rank_pattern / alpha_pattern): A's rows stack whatever their
    // number, and B's blocks sit on the diagonal. A target left out adds nothing: a zero row of A, a zero block of B.
    a.push_back(p ? p->a.to(dtype) : at::zeros({1, in}, x.options()));
    b.push_back(p ? (p->b * p->scale).to(dtype) : at::zeros({width, 1}, x.options()));
  }
  if (!any) return out;
  const auto x2 = x.reshape({-1, in});
  const auto xa = a.size() == 1 ? at::mm(x2, a[0].t()) : at::mm(x2, at::cat(a, 0).t());
  const auto bb = b.size() == 1 ? b[0] : at::block_diag(b);
  return at::addmm(out.reshape({-1, out.size(-1)}), xa, bb.t()).view(out.sizes());
}

std::vector<at::Tensor> LoraAdapter::parameters() const {
  std::vector<at::Tensor> out;
  for (const auto& p : pairs_)
    if (p) {
      out.push_back(p->a);
      out.push_back(p->b);
    }
  return out;
}

void LoraAdapter::copy_from(const LoraAdapter& other) {
  at::NoGradGuard no_grad;
  const auto mine = parameters(), theirs = other.parameters();
  if (mine.size() != theirs.size()) throw ModelFormatError("adapter does not match: different targets or layers");
  for (std::size_t i = 0; i < mine.size(); ++i) {
    if (mine[i].sizes() != theirs[i].sizes()) throw ModelFormatError("adapter does not match: a different rank");
    mine[i].copy_(theirs[i]);
  }
}

LoraAdapter LoraAdapter::clone() const {
  LoraAdapter copy = *this;
  for (auto& p : copy.pairs_)
    if (p)
      p = LoraPair{p->a.detach().clone().set_requires_grad(true), p->b.detach().clone().set_requires_grad(true), p->rank,
                   p->scale};
  return copy;
}

void LoraAdapter::save_peft(const std::filesystem::path& dir, const std::string& base_model) const {
  std::filesystem::create_directories(dir);
  std::vector<std::string> modules, parameters;
  for (auto t : config_.targets) (is_parameter_target(t) ? parameters : modules).push_back(lora_module_name(t));
  // Ordered: rank_pattern's keys are tried in the order written, so they are written in the config's order.
  nlohmann::ordered_json cfg = {{"peft_type", "LORA"},       {"task_type", "CAUSAL_LM"},
                        {"r", config_.rank},          {"lora_alpha", config_.alpha},
                        {"lora_dropout", config_.dropout}, {"use_rslora", config_.use_rslora},
                        {"target_modules", modules},  {"bias", "none"},
                        {"fan_in_fan_out", false},    {"inference_mode", true},
                        {"base_model_name_or_path", base_model}};
  if (!parameters.empty()) cfg["target_parameters"] = parameters;
  cfg["rank_pattern"] = nlohmann::ordered_json::object();
  for (const auto& entry : config_.rank_pattern) cfg["rank_pattern"][entry.key] = entry.rank;
  cfg["alpha_pattern"] = nlohmann::ordered_json::object();
  for (const auto& entry : config_.alpha_pattern) cfg["alpha_pattern"][entry.key] = entry.alpha;
  std::ofstream(dir / "adapter_config.json") << cfg.dump(2) << "\n";
  std::vector<TensorBytes> tensors;
  for (int64_t layer = 0; layer < layers_; ++layer)
    for (auto t : config_.targets)
      if (const auto* p = find(layer, t)) {
        tensors.push_back(tensor_to_bytes(peft_key(layer, t, "A", config_.targets), p->a.detach().to(at::kFloat)));
        tensors.push_back(tensor_to_bytes(peft_key(layer, t, "B", config_.targets), p->b.detach().to(at::kFloat)));
      }
  write_safetensors(dir / "adapter_model.safetensors", tensors, {{"format", "pt"}});
}

LoraAdapter LoraAdapter::load_peft(const std::filesystem::path& dir, const ModelConfig& model, c10::Device device,
                                   c10::ScalarType dtype) {
  const auto config_path = dir / "adapter_config.json";
  const auto where = config_path.string();
  nlohmann::ordered_json cfg;  // in the file's order: rank_pattern's first matching key wins
  try {
    cfg = nlohmann::ordered_json::parse(std::ifstream(config_path));
  } catch (const std::exception& e) {
    throw ModelFormatError(where + ": cannot read the adapter config (" + e.what() + ")");
  }
  LoraConfig config;
  try {
    if (cfg.value("peft_type", "LORA") != "LORA") throw ModelFormatError(where + ": peft_type is not LORA");
    config.rank = cfg.at("r").get<int64_t>();
    config.alpha = cfg.at("lora_alpha").get<double>();
    if (config.rank <= 0) throw ModelFormatError(where + ": r must be a positive integer, not " + cfg["r"].dump());
    if (!std::isfinite(config.alpha)) throw ModelFormatError(where + ": lora_alpha must be a finite number");
    config.dropout = cfg.value("lora_dropout", 0.0);
    config.use_rslora = cfg.value("use_rslora", false);
    if (cfg.value("bias", std::string("none")) != "none") throw ModelFormatError(where + ": LoRA biases are not supported");
    if (cfg.value("fan_in_fan_out", false)) throw ModelFormatError(where + ": fan_in_fan_out is not supported");
    // Variants that change the computation are refused rather than silently ignored.
    for (const char* key : {"layers_to_transform", "modules_to_save", "layer_replication"})
      if (cfg.contains(key) && !cfg[key].is_null()) throw ModelFormatError(where + ": " + key + " is not supported");
    for (const char* key : {"use_dora", "lora_bias"})
      if (cfg.value(key, false)) throw ModelFormatError(where + ": " + key + " is not supported");
    config.rank_pattern = parse_rank_pattern(cfg, where);
    config.alpha_pattern = parse_alpha_pattern(cfg, where);
    // An adapter of parameters only may name no modules (null), as PEFT writes it then.
    const bool parameters_only = cfg.contains("target_parameters") && cfg["target_parameters"].is_array() &&
                                 cfg.contains("target_modules") && cfg["target_modules"].is_null();
    // PEFT's "all-linear" names every linear layer but the output head: here the attention projections, and the
    // dense MLP's where the model has one (present() skips those a mixture of experts lacks).
    const bool all_linear = !parameters_only && cfg.at("target_modules") == "all-linear";
    if (!parameters_only && !all_linear && !cfg.at("target_modules").is_array())
      throw ModelFormatError(where + ": target_modules must be a list or \"all-linear\" (regular expressions are not "
                                     "supported)");
    config.targets.clear();
    if (all_linear) config.targets.assign(kLoraTargets.begin(), kLoraTargets.end());
    for (const auto& m : parameters_only || all_linear ? nlohmann::ordered_json::array() : cfg["target_modules"]) {
      const auto t = lora_target_named(m.get<std::string>());
      if (!t || is_parameter_target(*t))
        throw ModelFormatError(where + ": target module '" + m.get<std::string>() + "' is not supported");
      config.targets.push_back(*t);
    }
    // gpt-oss's router and experts, in the order given (it decides PEFT's key nesting).
    if (cfg.contains("target_parameters") && !cfg["target_parameters"].is_null()) {
      if (!cfg["target_parameters"].is_array()) throw ModelFormatError(where + ": target_parameters must be a list");
      for (const auto& m : cfg["target_parameters"]) {
        const auto t = lora_target_named(m.get<std::string>());
        if (!t || !is_parameter_target(*t) || !model.moe)
          throw ModelFormatError(where + ": target parameter '" + m.get<std::string>() + "' is not supported here");
        config.targets.push_back(*t);
      }
    }
  } catch (const nlohmann::json::exception& e) {
    throw ModelFormatError(where + ": malformed adapter config (" + e.what() + ")");
  }
  const auto patterns = patterns_of_file(config, where);
  const auto file = SafetensorsFile::open(dir / "adapter_model.safetensors");
  LoraAdapter adapter;
  adapter.config_ = config;
  adapter.layers_ = model.num_layers;
  adapter.pairs_.assign(model.num_layers * kTargets, std::nullopt);
  for (int64_t layer = 0; layer < model.num_layers; ++layer) {
    for (auto t : config.targets) {
      if (!present(model, t)) continue;
      const auto [in, out] = dims(model, t);
      const auto settings = patterns.settings_of(lora_module_path(layer, t));
      const int64_t width = settings.rank * experts_of(model, t);
      auto read = [&](const char* ab, std::vector<int64_t> shape) {
        const auto key = peft_key(layer, t, ab, config.targets);
        const auto* view = file->find(key);
        if (!view) throw ModelFormatError(file->path().string() + ": missing tensor " + key);
        if (view->shape != shape)
          throw ModelFormatError(file->path().string() + ": tensor " + key + " is " + shape_text(view->shape) +
                                 ", but this model and the module's rank " + std::to_string(settings.rank) + " need " +
                                 shape_text(shape));
        return view_to_tensor(*view).to(device, dtype, false, true).set_requires_grad(true);
      };
      adapter.pairs_[layer * kTargets + static_cast<std::size_t>(t)] =
          LoraPair{read("A", {width, in}), read("B", {out, width}), settings.rank, settings.scale};
    }
  }
  return adapter;
}

}  // namespace crucible::lm
