#include "lm/model/transformer.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/version.h>

#include <cmath>
#include <sstream>

#include "lm/training/block_checkpoint.h"
#include "lm/kernels/decode_kernels.h"
#include "lm/format/model_files.h"
#include "lm/model/flash_sink_attention.h"
#include "lm/model/lora.h"
#include "lm/model/mxfp4.h"
#include "lm/model/plain_attention.h"
#include "lm/model/torch_tensors.h"

namespace crucible::lm {
namespace {

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << ']';
  return s.str();
}

}  // namespace

// Where a model's tensors come from: its files, or (benchmarks of shapes whose weights are not at hand) a seeded draw.
class WeightReader {
 public:
  virtual ~WeightReader() = default;
  // A floating-point tensor of this shape in the load's dtype, on its device.
  virtual at::Tensor operator()(const std::string& name, std::vector<int64_t> shape) const = 0;
  // Stored bytes as they are (MXFP4 blocks and scales, uint8), moved to the device.
  virtual at::Tensor raw(const std::string& name, std::vector<int64_t> shape, at::ScalarType dtype) const = 0;
  virtual const std::vector<int64_t>* shape_of(const std::string& name) const = 0;
  virtual bool has(const std::string& name) const = 0;
};

namespace {

class FileWeights final : public WeightReader {
 public:
  FileWeights(const ModelFiles& files, const LoadOptions& options) : files_(files), options_(options) {}

  at::Tensor operator()(const std::string& name, std::vector<int64_t> shape) const override {
    const auto& view = files_.require(name);
    if (view.shape != shape)
      throw ModelFormatError(files_.dir().string() + ": tensor " + name + " has shape " + shape_text(view.shape) +
                             ", the config implies " + shape_text(shape));
    const auto host = view_to_tensor(view);
    if (!at::isFloatingType(host.scalar_type()))
      throw ModelFormatError(files_.dir().string() + ": tensor " + name + " has dtype " + dtype_name(view.dtype));
    return host.to(options_.device, options_.dtype, /*non_blocking=*/false, /*copy=*/true);
  }
  at::Tensor raw(const std::string& name, std::vector<int64_t> shape, at::ScalarType dtype) const override {
    const auto& view = files_.require(name);
    const auto host = view_to_tensor(view);
    if (view.shape != shape || host.scalar_type() != dtype)
      throw ModelFormatError(files_.dir().string() + ": tensor " + name + " is " + dtype_name(view.dtype) + " " +
                             shape_text(view.shape) + ", the config implies " + shape_text(shape) + " (uint8 for MXFP4)");
    return host.to(options_.device, dtype, /*non_blocking=*/false, /*copy=*/true);
  }
  const std::vector<int64_t>* shape_of(const std::string& name) const override {
    const auto* view = files_.find(name);
    return view ? &view->shape : nullptr;
  }
  bool has(const std::string& name) const override { return files_.find(name) != nullptr; }

 private:
  const ModelFiles& files_;
  const LoadOptions& options_;
};

// Drawn on the device, seeded: norms 1, sinks 0, other floating-point weights N(0, 0.02^2); a mixture of experts'
// experts packed in MXFP4 as gpt-oss ships them (random codes, scales 2^-9 to 2^-5). Nothing is read or expanded on
// the host, so a shape larger than the machine's disk (gpt-oss-120b on a one-GPU node) still loads.
class RandomWeights final : public WeightReader {
 public:
  RandomWeights(const LoadOptions& options, uint64_t seed) : options_(options) { at::manual_seed(seed); }

  at::Tensor operator()(const std::string& name, std::vector<int64_t> shape) const override {
    const auto opts = at::TensorOptions().device(options_.device).dtype(options_.dtype);
    if (name.find("norm") != std::string::npos) return at::ones(shape, opts);
    if (name_ends_with(name, "sinks")) return at::zeros(shape, opts);
    return at::randn(shape, opts.dtype(at::kFloat)).mul_(0.02).to(options_.dtype);
  }
  at::Tensor raw(const std::string& name, std::vector<int64_t> shape, at::ScalarType dtype) const override {
    const auto opts = at::TensorOptions().device(options_.device).dtype(dtype);
    return name_ends_with(name, "_scales") ? at::randint(118, 123, shape, opts) : at::randint(0, 256, shape, opts);
  }
  const std::vector<int64_t>* shape_of(const std::string&) const override { return nullptr; }
  bool has(const std::string& name) const override { return name_ends_with(name, "_blocks"); }

 private:
  const LoadOptions& options_;
};

}  // namespace

at::Tensor causal_mask(const at::Tensor& query_slots, const at::Tensor& key_valid, int64_t visible) {
  const auto key_slots = at::arange(visible, query_slots.options()).view({1, visible});
  const auto queries = query_slots.view({-1, 1});
  const auto causal = key_slots <= queries;
  const auto own = key_slots == queries;
  const auto valid = key_valid.narrow(1, 0, visible).view({key_valid.size(0), 1, 1, visible});
  return (causal & valid) | own;
}

AttentionInputs whole_sequences(const at::Tensor& valid) {
  const int64_t B = valid.size(0), T = valid.size(1);
  AttentionInputs attention;
  attention.slots = at::arange(T, valid.options().dtype(at::kLong));
  attention.positions = attention.slots.unsqueeze(0).expand({B, T});
  attention.visible = T;
  attention.mask = causal_mask(attention.slots, valid, T);
  // No row has a valid token after an invalid one.
  attention.causal_prefix =
      T < 2 || !(valid.narrow(1, 1, T - 1) & at::logical_not(valid.narrow(1, 0, T - 1))).any().item<bool>();
  return attention;
}

Transformer Transformer::load(const std::filesystem::path& model_dir, const LoadOptions& options) {
  const auto config = load_model_config(model_dir);
  if (options.random_seed) return from_weights(config, RandomWeights(options, *options.random_seed), options);
  const auto files = ModelFiles::open(model_dir);
  return from_files(config, files, options);
}

namespace {

void read_attention(const WeightReader& read, const ModelConfig& c, const std::string& p, BlockWeights& b) {
  const int64_t hidden = c.hidden_size, q_dim = c.num_heads * c.head_dim, kv_dim = c.num_kv_heads * c.head_dim;
  const auto q = read(p + "self_attn.q_proj.weight", {q_dim, hidden});
  const auto k = read(p + "self_attn.k_proj.weight", {kv_dim, hidden});
  const auto v = read(p + "self_attn.v_proj.weight", {kv_dim, hidden});
  b.qkv = at::cat({q, k, v});
  if (c.attention_bias) {
    const auto q_bias = read(p + "self_attn.q_proj.bias", {q_dim});
    const auto k_bias = read(p + "self_attn.k_proj.bias", {kv_dim});
    const auto v_bias = read(p + "self_attn.v_proj.bias", {kv_dim});
    b.qkv_bias = at::cat({q_bias, k_bias, v_bias});
  }
  b.o = read(p + "self_attn.o_proj.weight", {hidden, q_dim});
  if (c.o_bias) b.o_bias = read(p + "self_attn.o_proj.bias", {hidden});
  if (c.qk_norm) {
    b.q_norm = read(p + "self_attn.q_norm.weight", {c.head_dim});
    b.k_norm = read(p + "self_attn.k_norm.weight", {c.head_dim});
  }
  // In float32 once (the softmax takes them so, and a 16-bit value converts exactly): not a cast a layer a step.
  if (c.attention_sinks) b.sinks = read(p + "self_attn.sinks", {c.num_heads}).to(at::kFloat);
}

void read_dense_mlp(const WeightReader& read, const ModelConfig& c, const std::string& p, BlockWeights& b) {
  const int64_t hidden = c.hidden_size;
  const auto gate = read(p + "mlp.gate_proj.weight", {c.intermediate_size, hidden});
  const auto up = read(p + "mlp.up_proj.weight", {c.intermediate_size, hidden});
  b.gate_up = at::cat({gate, up});
  b.down = read(p + "mlp.down_proj.weight", {hidden, c.intermediate_size});
  if (c.mlp_bias) {
    const auto gate_bias = read(p + "mlp.gate_proj.bias", {c.intermediate_size});
    const auto up_bias = read(p + "mlp.up_proj.bias", {c.intermediate_size});
    b.gate_up_bias = at::cat({gate_bias, up_bias});
    b.down_bias = read(p + "mlp.down_proj.bias", {hidden});
  }
}

// One projection of every expert, [E, out, in]: MXFP4 `NAME_blocks` / `NAME_scales` kept packed, or a dense `NAME`
// stored as transformers' experts multiply it ([E, in, out], x @ W; transposed once here), or already [E, out, in]
// where the shapes tell the two apart.
ExpertMatrix read_experts(const WeightReader& read, const std::string& name, int64_t experts, int64_t out, int64_t in) {
  ExpertMatrix m;
  if (read.has(name + "_blocks")) {
    if (in % kMxfp4BlockSize != 0)
      throw ModelFormatError(name + ": MXFP4 needs an input width that is a multiple of 32, not " + std::to_string(in));
    const int64_t n = in / kMxfp4BlockSize;
    m.blocks = mxfp4_paired(read.raw(name + "_blocks", {experts, out, n, kMxfp4BlockSize / 2}, at::kByte));
    m.scales = read.raw(name + "_scales", {experts, out, n}, at::kByte);
    // The MX format reserves scale 0xFF for NaN: a block under it has no values.
    if (m.scales.eq(255).any().item<bool>())
      throw ModelFormatError(name + "_scales: a scale of 255 (NaN in the MX format): the checkpoint is damaged");
    return m;
  }
  const auto* shape = read.shape_of(name);
  if (shape && experts_stored_out_in(*shape, experts, out, in)) {
    m.dense = read(name, {experts, out, in});
  } else {
    m.dense = read(name, {experts, in, out}).transpose(1, 2).contiguous();
  }
  return m;
}

void read_moe(const WeightReader& read, const ModelConfig& c, const std::string& p, BlockWeights& b) {
  const int64_t E = c.moe->num_experts, hidden = c.hidden_size, I = c.intermediate_size;
  auto& m = b.moe;
  m.router = read(p + "mlp.router.weight", {E, hidden});
  m.router_bias = read(p + "mlp.router.bias", {E});
  m.gate_up = read_experts(read, p + "mlp.experts.gate_up_proj", E, 2 * I, hidden);
  m.gate_up_bias = read(p + "mlp.experts.gate_up_proj_bias", {E, 2 * I});
  m.down = read_experts(read, p + "mlp.experts.down_proj", E, hidden, I);
  m.down_bias = read(p + "mlp.experts.down_proj_bias", {E, hidden});
}

}  // namespace

Transformer Transformer::from_files(const ModelConfig& c, const ModelFiles& files, const LoadOptions& options) {
  return from_weights(c, FileWeights(files, options), options);
}

Transformer Transformer::from_weights(const ModelConfig& c, const WeightReader& read, const LoadOptions& options) {
  Transformer t;
  t.config_ = c;
  t.options_ = options;
  const int64_t hidden = c.hidden_size;
  auto& w = t.weights_;
  w.embed = read("model.embed_tokens.weight", {c.vocab_size, hidden});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const auto p = "model.layers." + std::to_string(i) + ".";
    BlockWeights b;
    b.input_norm = read(p + "input_layernorm.weight", {hidden});
    b.post_attention_norm = read(p + "post_attention_layernorm.weight", {hidden});
    read_attention(read, c, p, b);
    if (c.moe) {
      read_moe(read, c, p, b);
    } else {
      read_dense_mlp(read, c, p, b);
    }
    w.blocks.push_back(std::move(b));
  }
  w.final_norm = read("model.norm.weight", {hidden});
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed;
  } else {
    w.lm_head = read("lm_head.weight", {c.vocab_size, hidden});
  }
  t.rotary_ = RotaryTable(c, options.device, options.dtype);
  return t;
}

KvCache Transformer::make_cache(int64_t batch, int64_t capacity) const {
  KvCache cache;
  cache.batch = batch;
  cache.capacity = capacity;
  const auto opts = at::TensorOptions().dtype(options_.dtype).device(options_.device);
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    cache.keys.push_back(at::zeros({batch, config_.num_kv_heads, capacity, config_.head_dim}, opts));
    cache.values.push_back(at::zeros({batch, config_.num_kv_heads, capacity, config_.head_dim}, opts));
  }
  return cache;
}

at::Tensor Transformer::rms_norm(const at::Tensor& x, const at::Tensor& weight) const {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  // One fused kernel where LibTorch has it (float32 accumulation; the weight multiplies before the final
  // rounding, so bfloat16 results can differ from transformers' in the last bit).
  if (x.is_cuda()) return at::rms_norm(x, {x.size(-1)}, weight, config_.rms_norm_eps);
#endif
  auto xf = x.to(at::kFloat);
  xf = xf * at::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + config_.rms_norm_eps);
  // gpt-oss multiplies by the weight in float32 and rounds once; the others round, then multiply.
  if (config_.architecture == Architecture::gpt_oss) return (weight.to(at::kFloat) * xf).to(x.scalar_type());
  return weight * xf.to(x.scalar_type());
}

const LoraAdapter* Transformer::active_adapter() const {
  return adapter_ && adapter_->enabled() && !adapter_folded() ? adapter_ : nullptr;
}

bool Transformer::adapter_folded() const { return folded_ && folded_ == adapter_ && adapter_->enabled(); }

bool Transformer::experts_stay_on_device(int64_t tokens) const {
  if (!config_.moe) return true;
  const auto probe = at::empty({1, config_.hidden_size}, at::TensorOptions().device(options_.device).dtype(options_.dtype));
  for (int64_t layer = 0; layer < config_.num_layers; ++layer)
    if (!experts_run_on_device(block_weights(layer).moe, probe, tokens * config_.moe->experts_per_token)) return false;
  return true;
}

const BlockWeights& Transformer::block_weights(int64_t layer) const {
  return adapter_folded() ? folded_blocks_[layer] : weights_.blocks[layer];
}

namespace {

// x W^T (+ bias). A batch-1 decode step's row goes through the one-row kernel (cuBLAS runs these GEMVs well below
// the GPU's memory bandwidth).
at::Tensor project(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (small_linear_serves(x, weight, bias)) return small_linear(x, weight, bias, {});
  return at::linear(x, weight, bias);
}

// residual + x W^T (+ bias). Without a bias the GEMM adds the residual in its epilogue: one kernel instead of two,
// twice a layer, in a decode step that is mostly small kernels.
at::Tensor linear_onto(const at::Tensor& residual, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  if (small_linear_serves(x, weight, bias, residual)) return small_linear(x, weight, bias, residual);
  if (bias.defined()) return residual + at::linear(x, weight, bias);
  return at::addmm(residual.reshape({-1, weight.size(0)}), x.reshape({-1, x.size(-1)}), weight.t())
      .view(residual.sizes());
}

}  // namespace

at::Tensor Transformer::normed_projection(const at::Tensor& x, const at::Tensor& norm, const at::Tensor& weight,
                                          const at::Tensor& bias, at::Tensor& normed) const {
  const auto folds = LinearFolds::rms_normed(norm, config_.rms_norm_eps);
  if (!active_adapter() && small_linear_serves(x, weight, bias, {}, folds)) return small_linear(x, weight, bias, {}, folds);
  normed = rms_norm(x, norm);
  return project(normed, weight, bias);
}

at::Tensor Transformer::attention_block(int64_t layer, const at::Tensor& residual, const at::Tensor& norm,
                                        const AttentionInputs& attention, const at::Tensor& cos,
                                        const at::Tensor& signed_sin, at::Tensor& k_cache, at::Tensor& v_cache) const {
  const auto& w = block_weights(layer);
  const auto* lora = active_adapter();
  const int64_t B = residual.size(0), T = residual.size(1), H = config_.num_heads, Hkv = config_.num_kv_heads,
                D = config_.head_dim, G = H / Hkv, vis = attention.visible;
  at::Tensor x;  // the normalised input, where it was made
  auto qkv = normed_projection(residual, norm, w.qkv, w.qkv_bias, x);
  if (lora) qkv = lora->plus_deltas(layer, x, qkv, {{LoraTarget::q, H * D}, {LoraTarget::k, Hkv * D}, {LoraTarget::v, Hkv * D}});
  at::Tensor queries;  // [B, T, H, D], rotated
  at::Tensor out;      // where the attention kernel rotates them itself
  if (!cos.defined()) {  // a decode step with the fused kernels (hidden_states looked up no rotary rows)
    out = rotated_in_attention(layer, qkv, attention, k_cache, v_cache);
    if (!out.defined())
      queries = rotate_into_cache(qkv, attention.positions, attention.slots, rotary_.cos(), rotary_.signed_sin(),
                                  k_cache, v_cache, H, Hkv, w.q_norm, w.k_norm, config_.rms_norm_eps);
  } else {
    // Queries and keys rotate together: one set of kernels for both. Split rather than narrowed: a narrow's backward
    // fills a whole-width zero gradient for each part, a split's joins the parts' gradients once.
    const auto parts = qkv.split_with_sizes({(H + Hkv) * D, Hkv * D}, -1);
    auto unrotated = parts[0].view({B, T, H + Hkv, D});
    if (w.q_norm.defined()) {  // Qwen3: each head's query and key normalised before the rotation
      const auto heads = unrotated.split_with_sizes({H, Hkv}, 2);
      unrotated = at::cat({rms_norm(heads[0], w.q_norm), rms_norm(heads[1], w.k_norm)}, 2);
    }
    const auto qk = apply_rotary(unrotated, cos, signed_sin).split_with_sizes({H, Hkv}, 2);
    const auto v = parts[1].view({B, T, Hkv, D});
    k_cache.index_copy_(2, attention.slots, qk[1].transpose(1, 2));
    v_cache.index_copy_(2, attention.slots, v.transpose(1, 2));
    queries = qk[0];
  }

  const double scale = attention_scale();
  if (!out.defined() && plain_attention(layer))
    out = sink_or_window_attention(layer, queries, attention, k_cache, v_cache);
  if (!out.defined() && attention.fused_decode(T))
    out = decode_attention(queries, k_cache, v_cache, attention.key_valid, attention.slots, vis, scale);
#if CRUCIBLE_SDPA_GQA
  if (!out.defined() && attention.causal_prefix)
    out = at::scaled_dot_product_attention(queries.transpose(1, 2), k_cache.narrow(2, 0, vis),
                                           v_cache.narrow(2, 0, vis), {}, 0.0, /*is_causal=*/true, scale,
                                           /*enable_gqa=*/true)
              .transpose(1, 2)
              .reshape({B, T, H * D});
#endif
  if (!out.defined()) {
    // Grouped-query attention without copying keys: the G query heads that share a key head become G x T
    // query rows of that head (the mask's rows were repeated G times to match, once per forward pass).
    const auto grouped = queries.transpose(1, 2).reshape({B, Hkv, G * T, D});
    out = scaled_attention(grouped, k_cache.narrow(2, 0, vis), v_cache.narrow(2, 0, vis), attention.mask, scale)
              .reshape({B, H, T, D})
              .transpose(1, 2)
              .reshape({B, T, H * D});
  }
  auto projected = linear_onto(residual, out, w.o, w.o_bias);
  return lora ? lora->plus_deltas(layer, out, projected, {{LoraTarget::o, projected.size(-1)}}) : projected;
}

at::Tensor Transformer::rotated_in_attention(int64_t layer, const at::Tensor& qkv, const AttentionInputs& attention,
                                             at::Tensor& k_cache, at::Tensor& v_cache) const {
  const int64_t H = config_.num_heads;
  // The decode kernels the step would attend with otherwise (sink_or_window_attention's, or decode_attention).
  const bool decode_kernels = plain_attention(layer) ? decode_attention_serves_sinks(k_cache, H) : true;
  if (!attention.fused_decode(1) || !decode_kernels || !rotation_folds_into_attention(k_cache, H, config_.qk_norm))
    return {};
  return rotate_and_attend(qkv, attention.positions, rotary_.cos(), rotary_.signed_sin(), k_cache, v_cache,
                           attention.key_valid, attention.slots, attention.visible, attention_scale(), H,
                           block_weights(layer).sinks, window_of(layer));
}

double Transformer::attention_scale() const { return 1.0 / std::sqrt(static_cast<double>(config_.head_dim)); }

int64_t Transformer::window_of(int64_t layer) const {
  return config_.layer_types[layer] == AttentionKind::sliding ? config_.sliding_window : 0;
}

bool Transformer::plain_attention(int64_t layer) const {
  return config_.attention_sinks || config_.layer_types[layer] == AttentionKind::sliding;
}

at::Tensor Transformer::sink_or_window_attention(int64_t layer, const at::Tensor& queries,
                                                 const AttentionInputs& attention, const at::Tensor& k_cache,
                                                 const at::Tensor& v_cache) const {
  const double scale = attention_scale();
  const int64_t window = window_of(layer);
  // A fused decode step (one query, the valid slots, no mask): the split decode kernels take sinks and windows.
  if (attention.fused_decode(queries.size(1)) && decode_attention_serves_sinks(k_cache, config_.num_heads))
    return decode_attention(queries, k_cache, v_cache, attention.key_valid, attention.slots, attention.visible, scale,
                            block_weights(layer).sinks, window);
  // Whole sequences from position 0 (training, log-prob passes, prefills of a fresh cache): the flash kernel, which
  // skips what causality and the window hide and takes the sinks through each row's log-sum-exp.
  const int64_t T = queries.size(1), visible = attention.visible;
  if (attention.causal_prefix && T > kFewQueryRows && visible == T) {
    const auto keys = k_cache.narrow(2, 0, visible).transpose(1, 2);
    if (flash_sink_attention_serves(queries, keys)) {
      auto out = flash_sink_attention(queries, keys, v_cache.narrow(2, 0, visible).transpose(1, 2),
                                      block_weights(layer).sinks, scale, window);
      if (out.defined()) return out;
    }
  }
  // hidden_states leaves these layers' mask as given: [B, 1, T, visible] bool, or none in a fused decode step.
  auto mask = attention.mask.defined() ? attention.mask : causal_mask(attention.slots, attention.key_valid, attention.visible);
  if (window > 0) mask = sliding_window_mask(mask, attention.slots, window);
  return lm::plain_attention(queries, k_cache, v_cache, mask, block_weights(layer).sinks, scale, attention.visible);
}

// A one-row step without an adapter normalises inside the router's one-row kernel, which also writes the normalised
// row for the experts, and adds the residual in the experts' weighted sum: LibTorch's norm, cuBLAS's router GEMM with
// its reduction and the residual's add are not launched (a batch-1 decode step is a chain of small kernels).
at::Tensor Transformer::moe_block(int64_t layer, const at::Tensor& residual, const at::Tensor& norm) const {
  const auto& moe = block_weights(layer).moe;
  const auto* lora = active_adapter();
  auto folds = LinearFolds::rms_normed(norm, config_.rms_norm_eps);
  if (!lora && small_linear_serves(residual, moe.router, moe.router_bias, {}, folds)) {
    folds.normed_out = at::empty_like(residual);
    const auto logits = small_linear(residual, moe.router, moe.router_bias, {}, folds);
    return moe_forward(moe, *config_.moe, folds.normed_out, nullptr, layer, residual, logits);
  }
  return moe_forward(moe, *config_.moe, rms_norm(residual, norm), lora, layer, residual);
}

at::Tensor Transformer::mlp_block(int64_t layer, const at::Tensor& residual, const at::Tensor& norm) const {
  const auto& w = block_weights(layer);
  const auto* lora = active_adapter();
  if (w.moe.defined()) return moe_block(layer, residual, norm);
  const int64_t I = config_.intermediate_size;
  // One row without an adapter: the norm, the projection and the activation in one kernel.
  const auto folds = LinearFolds::rms_normed(norm, config_.rms_norm_eps, /*gated=*/true);
  at::Tensor hidden;
  if (!lora && small_linear_serves(residual, w.gate_up, w.gate_up_bias, {}, folds)) {
    hidden = small_linear(residual, w.gate_up, w.gate_up_bias, {}, folds);
  } else {
    at::Tensor x;  // the normalised input, where it was made
    auto gate_up = normed_projection(residual, norm, w.gate_up, w.gate_up_bias, x);
    if (lora) gate_up = lora->plus_deltas(layer, x, gate_up, {{LoraTarget::gate, I}, {LoraTarget::up, I}});
    if (decode_kernels_serve(gate_up)) {
      hidden = silu_times_up(gate_up);
    } else {
      const auto halves = gate_up.split(I, -1);
      hidden = at::silu(halves[0]) * halves[1];
    }
  }
  auto out = linear_onto(residual, hidden, w.down, w.down_bias);
  return lora ? lora->plus_deltas(layer, hidden, out, {{LoraTarget::down, out.size(-1)}}) : out;
}

namespace {

// Where each adapted target's rows sit in a block's fused matrices (q, k and v share one; gate and up another).
struct TargetRows {
  LoraTarget target;
  at::Tensor BlockWeights::*matrix;
  int64_t start, rows;
};

std::vector<TargetRows> target_rows(const ModelConfig& c) {
  const int64_t q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim, I = c.intermediate_size;
  return {{LoraTarget::q, &BlockWeights::qkv, 0, q},         {LoraTarget::k, &BlockWeights::qkv, q, kv},
          {LoraTarget::v, &BlockWeights::qkv, q + kv, kv},   {LoraTarget::o, &BlockWeights::o, 0, c.hidden_size},
          {LoraTarget::gate, &BlockWeights::gate_up, 0, I},  {LoraTarget::up, &BlockWeights::gate_up, I, I},
          {LoraTarget::down, &BlockWeights::down, 0, c.hidden_size}};
}

// W + sign * scale * B A for one target's rows (at the pair's own scale), summed in float32 and rounded once to W's
// dtype.
at::Tensor plus_delta(const at::Tensor& w, const LoraPair& p, int sign = 1) {
  return at::addmm(w.to(at::kFloat), p.b.to(at::kFloat), p.a.to(at::kFloat), 1.0, sign * p.scale).to(w.scalar_type());
}

}  // namespace

void Transformer::merge_adapter(const LoraAdapter& adapter, int sign) {
  if (adapter.adapts_parameters())
    throw std::invalid_argument("merge_adapter: router and expert adapters cannot be merged (experts stay packed)");
  at::NoGradGuard no_grad;
  const auto targets = target_rows(config_);
  for (int64_t layer = 0; layer < config_.num_layers; ++layer)
    for (const auto& t : targets)
      if (const auto* p = adapter.find(layer, t.target)) {
        auto rows = (weights_.blocks[layer].*t.matrix).narrow(0, t.start, t.rows);
        rows.copy_(plus_delta(rows, *p, sign));
      }
}

bool Transformer::fold_adapter(const LoraAdapter* adapter) const {
  folded_ = nullptr;
  // Router and expert deltas are added in each pass: the experts stay packed, so there is nothing to fold them into.
  if (!adapter || !adapter->enabled() || adapter->adapts_parameters()) return false;
  c10::InferenceMode inference;
  const auto targets = target_rows(config_);
  folded_blocks_.resize(weights_.blocks.size());
  try {
    for (int64_t layer = 0; layer < config_.num_layers; ++layer) {
      const auto& base = weights_.blocks[layer];
      // The norms and biases, and matrices with nothing adapted, are the base's own tensors. A matrix with an adapted
      // slice gets a buffer of its own, kept from one fold to the next (CUDA graphs hold its address).
      const BlockWeights previous = std::move(folded_blocks_[layer]);
      auto& out = folded_blocks_[layer] = base;
      for (const auto matrix : {&BlockWeights::qkv, &BlockWeights::o, &BlockWeights::gate_up, &BlockWeights::down}) {
        const auto& w = base.*matrix;
        bool adapted = false;
        for (const auto& t : targets) adapted |= t.matrix == matrix && adapter->find(layer, t.target);
        if (!adapted) continue;
        const auto& kept = previous.*matrix;
        auto& folded = out.*matrix;
        folded = kept.defined() && !kept.is_same(w) ? kept : at::empty_like(w);
        folded.copy_(w);
        for (const auto& t : targets)
          if (const auto* p = t.matrix == matrix ? adapter->find(layer, t.target) : nullptr)
            folded.narrow(0, t.start, t.rows).copy_(plus_delta(w.narrow(0, t.start, t.rows), *p));
      }
    }
  } catch (const c10::OutOfMemoryError&) {
    folded_blocks_.clear();
    return false;
  }
  folded_ = adapter;
  return true;
}

at::Tensor Transformer::block(int64_t layer, const at::Tensor& x, const AttentionInputs& attention, const at::Tensor& cos,
                              const at::Tensor& signed_sin, at::Tensor& k_cache, at::Tensor& v_cache) const {
  const auto& w = block_weights(layer);
  const auto h = attention_block(layer, x, w.input_norm, attention, cos, signed_sin, k_cache, v_cache);
  return mlp_block(layer, h, w.post_attention_norm);
}

at::Tensor Transformer::hidden_states(const at::Tensor& tokens, const AttentionInputs& attention, KvCache& cache) const {
  auto x = at::embedding(weights_.embed, tokens);
  // A decode step with the fused kernels reads its rotary rows itself: no tables are looked up (cos stays undefined).
  at::Tensor cos, signed_sin;
  // Qwen3's per-head norms come between the projection and the rotation: the fused rotation does them too.
  if (tokens.size(1) != 1 || !rotate_into_cache_serves(x, config_.head_dim, config_.qk_norm))
    std::tie(cos, signed_sin) = rotary_.lookup(attention.positions);
  const int64_t G = config_.num_heads / config_.num_kv_heads;
  AttentionInputs grouped = attention;
  if (G > 1 && attention.mask.defined() && !(CRUCIBLE_SDPA_GQA && attention.causal_prefix)) grouped.mask = attention.mask.repeat({1, 1, G, 1});
  if (CRUCIBLE_SDPA && grouped.mask.defined() && !attention.causal_prefix && decode_kernels_serve(x))
    grouped.mask = additive_mask(grouped.mask, x.scalar_type());
  const bool recompute = checkpoint_blocks_ && at::GradMode::is_enabled();
  // A recomputed block gets gradients only through its input: the first block's must ask for them.
  if (recompute && !x.requires_grad()) x = x.detach().requires_grad_(true);
  for (std::size_t i = 0; i < weights_.blocks.size(); ++i) {
    const auto layer = static_cast<int64_t>(i);
    const auto& inputs = plain_attention(layer) ? attention : grouped;  // the plain path groups its own mask
    if (!recompute) {
      x = block(layer, x, inputs, cos, signed_sin, cache.keys[i], cache.values[i]);
      continue;
    }
    // The recomputation holds its own handles: the backward pass runs after this call (and `cache`) are gone.
    x = checkpointed(x, [this, layer, inputs, c = cos, s = signed_sin, k = cache.keys[i],
                         v = cache.values[i]](const at::Tensor& in) mutable { return block(layer, in, inputs, c, s, k, v); });
  }
  return rms_norm(x, weights_.final_norm);
}

Transformer Transformer::sharing_weights() const {
  Transformer copy = *this;  // tensors are handles: the copy reads the same storage
  copy.adapter_ = nullptr;
  copy.folded_ = nullptr;
  copy.folded_blocks_.clear();
  copy.checkpoint_blocks_ = false;
  return copy;
}

at::Tensor Transformer::logits(const at::Tensor& hidden) const { return logits_in_model_dtype(hidden).to(at::kFloat); }

at::Tensor Transformer::logits_in_model_dtype(const at::Tensor& hidden) const {
  return project(hidden, weights_.lm_head, {});
}

at::Tensor Transformer::forward_full(const at::Tensor& tokens) const {
  const int64_t B = tokens.size(0), T = tokens.size(1);
  rotary_.reserve(T);
  auto cache = make_cache(B, T);
  const auto valid = at::ones({B, T}, at::TensorOptions().dtype(at::kBool).device(options_.device));
  return logits(hidden_states(tokens.to(options_.device), whole_sequences(valid), cache));
}

}  // namespace crucible::lm
