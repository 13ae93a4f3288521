#include "lm/generation/generator.h"

#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "lm/format/completion_text.h"
#include "lm/kernels/decode_graph.h"
#include "lm/generation/decode_step.h"
#include "lm/model/lora.h"

namespace crucible::lm {
namespace {

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// Cache slots a decode graph reads, in steps of this: a step reads at most this many slots more than it needs.
constexpr int64_t kGraphSpan = 256;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Rows [r0, r0 + n) of a cache, as views: writes through them land in the cache.
KvCache rows_of(const KvCache& cache, int64_t r0, int64_t n) {
  KvCache view;
  view.batch = n;
  view.capacity = cache.capacity;
  for (std::size_t l = 0; l < cache.keys.size(); ++l) {
    view.keys.push_back(cache.keys[l].narrow(0, r0, n));
    view.values.push_back(cache.values[l].narrow(0, r0, n));
  }
  return view;
}

}  // namespace

void check_request(const GenerationRequest& r, const ModelConfig& c, std::size_t index) {
  const auto where = "request " + std::to_string(index) + ": ";
  if (r.prompt.empty()) throw std::invalid_argument(where + "empty prompt");
  for (auto t : r.prompt)
    if (t < 0 || t >= c.vocab_size) throw std::invalid_argument(where + "token " + std::to_string(t) + " outside the vocabulary");
  if (r.max_new_tokens < 0) throw std::invalid_argument(where + "negative max_new_tokens");
  const auto total = static_cast<int64_t>(r.prompt.size()) + r.max_new_tokens;
  if (total > c.max_position_embeddings)
    throw std::invalid_argument(where + "prompt + max_new_tokens = " + std::to_string(total) +
                                " exceeds the model's " + std::to_string(c.max_position_embeddings) + " positions");
  if (r.sampling.top_p <= 0.0 || r.sampling.top_p > 1.0) throw std::invalid_argument(where + "top_p must be in (0, 1]");
}

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::stop_token: return "stop_token";
    case FinishReason::stop_string: return "stop_string";
    case FinishReason::length: return "length";
    case FinishReason::cancelled: return "cancelled";
  }
  return "?";
}

Generator::Generator(const Transformer& model, TokenBytes token_bytes, GeneratorOptions options)
    : model_(model), token_bytes_(std::move(token_bytes)), options_(options) {}

Generator::~Generator() = default;

DecodeBuffers& Generator::buffers_for(int64_t batch, int64_t capacity) {
  model_.reserve_positions(capacity);
  // A graph holds the addresses of the buffers and of the rotary tables, and bakes in whether (and which) adapter
  // adds its deltas: a new shape, grown tables or another adapter state end it. In-place updates of the
  // adapter's or the model's tensors (optimizer steps, merging) are seen by the graph.
  const LoraAdapter* adapter = model_.adapter() && model_.adapter()->enabled() ? model_.adapter() : nullptr;
  if (!graphs_.empty() && (graph_rotary_size_ != model_.rotary().size() || graph_adapter_ != adapter ||
                           graph_folded_ != model_.adapter_folded()))
    graphs_.clear();
  if (!buffers_ || buffers_->cache.batch != batch || buffers_->cache.capacity != capacity) {
    graphs_.clear();
    buffers_.reset();
    buffers_ = std::make_unique<DecodeBuffers>(make_decode_buffers(model_, batch, capacity));
  }
  return *buffers_;
}

// Captured at the first decode step that reads this span of a shape, from buffers that already hold that step's
// inputs: capture warms up by running the step, which only rewrites what the step itself writes.
at::Tensor Generator::graph_step(int64_t visible) {
  const int64_t span = std::min(round_up(visible, kGraphSpan), buffers_->cache.capacity);
  auto& graph = graphs_[span];
  if (!graph) {
    const DecodeGraph* pool = nullptr;  // another span's graph, if any: they never replay at once
    for (const auto& [other, g] : graphs_)
      if (g) pool = g.get();
    graph = std::make_unique<DecodeGraph>(model_, *buffers_, span, pool);
    graph_rotary_size_ = model_.rotary().size();
    graph_adapter_ = model_.adapter() && model_.adapter()->enabled() ? model_.adapter() : nullptr;
    graph_folded_ = model_.adapter_folded();
  }
  return graph->replay();
}

namespace {
// generate()'s own feed: nothing arrives later, and completions are kept by id.
class Collect : public RequestFeed {
 public:
  explicit Collect(std::size_t n) : out(n) {}
  std::vector<GenerationRequest> more() override { return {}; }
  void finished(std::size_t id, Completion completion) override { out[id] = std::move(completion); }
  bool may_add() const override { return false; }
  std::vector<Completion> out;
};

// The model's adapter, folded for one generate call with the values it has now; unfolded after, even on a throw, so
// that later forward passes (training among them) add the adapter's deltas again.
class FoldedAdapter {
 public:
  FoldedAdapter(const Transformer& model, bool on) : model_(model) {
    if (on && model.adapter() && model.adapter()->enabled()) model.fold_adapter(model.adapter());
  }
  ~FoldedAdapter() { model_.fold_adapter(nullptr); }
  FoldedAdapter(const FoldedAdapter&) = delete;
  FoldedAdapter& operator=(const FoldedAdapter&) = delete;

 private:
  const Transformer& model_;
};
}  // namespace

std::vector<Completion> Generator::generate(const std::vector<GenerationRequest>& requests) {
  if (requests.empty()) return {};
  Collect collect(requests.size());
  generate(requests, collect);
  return std::move(collect.out);
}

void Generator::take_more(RequestFeed& feed, std::vector<GenerationRequest>& requests, std::vector<Completion>& out,
                          std::vector<std::size_t>& waiting) {
  for (auto& r : feed.more()) {
    const std::size_t id = requests.size();
    // A feed's requests join rows of a batch in flight: one that breaks the contract must fail here, by name, not as
    // a shape error deep in the cache.
    check_request(r, model_.config(), id);
    requests.push_back(std::move(r));
    out.emplace_back();
    if (requests.back().max_new_tokens > 0) waiting.push_back(id);
    else feed.finished(id, {});
  }
}

void Generator::drop_cancelled(RequestFeed& feed, std::vector<std::size_t>& waiting, std::vector<Completion>& out) {
  const auto gone = std::stable_partition(waiting.begin(), waiting.end(), [&](std::size_t id) { return !feed.cancelled(id); });
  for (auto it = gone; it != waiting.end(); ++it) {
    out[*it].finish = FinishReason::cancelled;
    feed.finished(*it, std::move(out[*it]));
  }
  waiting.erase(gone, waiting.end());
}

void Generator::generate(std::vector<GenerationRequest> requests, RequestFeed& feed) {
  c10::InferenceMode inference;
  for (std::size_t i = 0; i < requests.size(); ++i) check_request(requests[i], model_.config(), i);
  const FoldedAdapter folded(model_, options_.fold_adapter);
  const auto started = std::chrono::steady_clock::now();
  std::vector<Completion> out(requests.size());
  std::vector<std::size_t> queue;  // requests with tokens to make, in order
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].max_new_tokens > 0) queue.push_back(i);
    else feed.finished(i, {});  // nothing to make: never takes a row
  }
  GenerationStats total;
  for (;;) {
    drop_cancelled(feed, queue, out);
    if (queue.empty()) take_more(feed, requests, out, queue);
    drop_cancelled(feed, queue, out);
    if (queue.empty()) break;
    const auto rows = options_.max_batch > 0 ? std::min<int64_t>(options_.max_batch, queue.size())
                                             : static_cast<int64_t>(queue.size());
    auto left = run_batch(requests, std::move(queue), rows, out, feed);
    if (total.waves == 0) total = stats_;
    else total.joined += stats_.joined, total.steps += stats_.steps, total.ahead += stats_.ahead;
    ++total.waves;
    queue = std::move(left);
  }
  stats_ = total;
  stats_.total_s = seconds_since(started);
}

std::vector<std::size_t> Generator::run_batch(std::vector<GenerationRequest>& requests,
                                              std::vector<std::size_t> queue, int64_t B,
                                              std::vector<Completion>& out, RequestFeed& feed) {
  const auto& config = model_.config();
  const auto started = std::chrono::steady_clock::now();
  // Rows start with the first B requests. Prompts are padded to the longest of all, so a waiting prompt fits before
  // any slot; the cache also holds the waiting requests' tokens: each joins at a later slot, so slots run to the
  // longest completion once per wave of rows.
  int64_t P = 0, N = 0, longest_new = 0;
  for (std::size_t q = 0; q < queue.size(); ++q) {
    const auto& r = requests[queue[q]];
    if (q < static_cast<std::size_t>(B)) N = std::max(N, r.max_new_tokens);
    P = std::max<int64_t>(P, r.prompt.size());
    longest_new = std::max(longest_new, r.max_new_tokens);
  }
  const int64_t waves = (static_cast<int64_t>(queue.size()) + B - 1) / B;
  std::vector<std::size_t> waiting(queue.begin() + B, queue.end());
  queue.resize(B);
  stats_ = GenerationStats{};
  stats_.batch = B;
  stats_.padded_prompt = P;

  const auto device = model_.options().device;
  // A mixture of experts whose experts run on LibTorch's operators picks them on the host (moe.h), which a CUDA graph
  // cannot capture.
  const bool use_graph = options_.cuda_graphs && device.is_cuda() && DecodeGraph::available() &&
                         model_.experts_stay_on_device(B);
  const int64_t capacity = round_up(P + (waves > 1 ? longest_new * waves : N), 256);
  auto& buffers = buffers_for(B, capacity);

  // Left-pad the prompts so every row's last prompt token sits in slot P - 1.
  auto tokens = at::zeros({B, P}, at::kLong);
  auto positions = at::zeros({B, P}, at::kLong);
  auto key_valid = at::zeros({B, capacity}, at::kBool);
  std::vector<int64_t> base(B);  // a row's rotary position at step 0 (its prompt's length, less its start step)
  auto tok = tokens.accessor<int64_t, 2>();
  auto pos = positions.accessor<int64_t, 2>();
  auto valid = key_valid.accessor<bool, 2>();
  for (int64_t b = 0; b < B; ++b) {
    const auto& prompt = requests[queue[b]].prompt;
    const int64_t pad = P - static_cast<int64_t>(prompt.size());
    for (int64_t s = pad; s < P; ++s) {
      tok[b][s] = prompt[s - pad];
      pos[b][s] = s - pad;
      valid[b][s] = true;
    }
    base[b] = static_cast<int64_t>(prompt.size());
  }
  buffers.key_valid.copy_(key_valid);
  auto base_positions = at::tensor(base).view({B, 1}).to(device);

  AttentionInputs prefill;
  prefill.positions = positions.to(device);
  prefill.slots = at::arange(P, at::TensorOptions().dtype(at::kLong).device(device));
  prefill.visible = P;
  prefill.mask = causal_mask(prefill.slots, buffers.key_valid, P);
  const auto tokens_dev = tokens.to(device);
  // Rows per pass: up to prefill_tokens tokens (attention that materialises its scores bounds them itself).
  const int64_t rows_per_pass = std::max<int64_t>(1, options_.prefill_tokens / std::max<int64_t>(1, P));
  std::vector<at::Tensor> last_logits;
  for (int64_t r0 = 0; r0 < B; r0 += rows_per_pass) {
    const int64_t n = std::min(rows_per_pass, B - r0);
    AttentionInputs part = prefill;
    part.positions = prefill.positions.narrow(0, r0, n);
    part.mask = prefill.mask.narrow(0, r0, n);
    KvCache view = rows_of(buffers.cache, r0, n);  // these rows of the static cache: writes go through the views
    const auto hidden = model_.hidden_states(tokens_dev.narrow(0, r0, n), part, view);
    last_logits.push_back(model_.logits_in_model_dtype(hidden.select(1, P - 1)));
  }
  at::Tensor logits = last_logits.size() == 1 ? last_logits.front() : at::cat(last_logits, 0);

  std::vector<SamplingParams> params;
  std::vector<CompletionText> texts;
  for (int64_t b = 0; b < B; ++b) {
    params.push_back(requests[queue[b]].sampling);
    texts.emplace_back(requests[queue[b]].stop_strings);
  }
  auto sampler = std::make_unique<BatchSampler>(params, config.vocab_size, device);
  std::vector<int64_t> first_step(B, 0);  // the batch step at which a row's request started sampling
  std::vector<bool> done(B, false);
  int64_t remaining = B;
  const bool feed_adds = feed.may_add();
  StepCopy copy;
  // The decode step after batch step `step`: its tokens fed at `slot` (a joining row's last prompt token instead).
  const auto decode_after = [&](const at::Tensor& tokens, int64_t step, int64_t slot, const std::vector<int64_t>& joined) {
    buffers.token.copy_(tokens.view({B, 1}));
    for (int64_t b : joined)  // a joining row feeds its prompt's last token at this slot
      buffers.token.narrow(0, b, 1).fill_(requests[queue[b]].prompt.back());
    buffers.position.copy_(base_positions + step);
    buffers.slot.fill_(slot);
    return use_graph ? graph_step(slot + 1) : decode_step(model_, buffers, slot + 1);
  };

  for (int64_t step = 0; remaining > 0; ++step) {
    // Until a request joins, every row is at the batch's step: no per-row steps to copy to the device.
    std::vector<int64_t> row_steps;
    if (stats_.joined > 0)
      for (int64_t b = 0; b < B; ++b) row_steps.push_back(step - first_step[b]);
    const auto sampled = row_steps.empty() ? sampler->sample(logits, step) : sampler->sample(logits, row_steps);
    // One device-to-host copy (one synchronisation) per step: token ids are exact in float64.
    copy.start(sampled.record.defined()
                   ? sampled.record
                   : at::stack({sampled.tokens.to(at::kDouble), sampled.sampling_logprobs.to(at::kDouble),
                                sampled.model_logprobs.to(at::kDouble)}));
    // The slot this step's decode writes: a joining request's prompt ends there.
    const int64_t slot = P + step;
    // Where no request can join (none waits, and the feed adds none), what the host reads in this step's tokens cannot
    // change the next step's inputs: that step is launched before they are read, and a GPU does not wait for the host
    // between steps (a CPU gains nothing, but decodes the same way). A row that finishes meanwhile decodes once more,
    // for nothing; not where every row ends by length at this step. Not the first step: its launch captures the
    // graph, which would delay the first tokens.
    bool every_row_ends = true;
    for (int64_t b = 0; b < B && every_row_ends; ++b)
      every_row_ends = done[b] || static_cast<int64_t>(out[queue[b]].tokens.size()) + 1 >= requests[queue[b]].max_new_tokens;
    const bool ahead = step > 0 && waiting.empty() && !feed_adds && slot < capacity && !every_row_ends;
    at::Tensor next_logits;
    if (ahead) {
      next_logits = decode_after(sampled.tokens, step, slot, {});
      ++stats_.ahead;
    }
    const auto& host = copy.wait();
    const double* ids = host.data_ptr<double>();
    const double* sampling_lp = ids + B;
    const double* model_lp = ids + 2 * B;
    if (step == 0) stats_.time_to_first_token_s = seconds_since(started);
    stats_.steps = step + 1;
    for (int64_t b = 0; b < B; ++b) {
      if (done[b]) continue;
      const auto& request = requests[queue[b]];
      auto& c = out[queue[b]];
      if (feed.cancelled(queue[b])) {  // this step's token is dropped: nobody reads it
        c.finish = FinishReason::cancelled;
        c.text = texts[b].text();
        feed.finished(queue[b], std::move(c));
        done[b] = true;
        --remaining;
        continue;
      }
      const auto id = static_cast<int64_t>(ids[b]);
      c.tokens.push_back(id);
      c.sampling_logprobs.push_back(static_cast<float>(sampling_lp[b]));
      c.model_logprobs.push_back(static_cast<float>(model_lp[b]));
      const auto& stops = request.stop_token_ids;
      if (std::find(stops.begin(), stops.end(), id) != stops.end()) {
        c.finish = FinishReason::stop_token;
      } else if (texts[b].append(token_bytes_(id))) {
        c.finish = FinishReason::stop_string;
      } else if (static_cast<int64_t>(c.tokens.size()) < request.max_new_tokens) {
        continue;
      }
      c.text = texts[b].text();
      feed.finished(queue[b], std::move(c));
      done[b] = true;
      --remaining;
    }
    drop_cancelled(feed, waiting, out);
    std::vector<int64_t> joined;
    bool asked = false;  // the feed, at most once a step
    for (int64_t b = 0; b < B && !ahead; ++b) {
      // An idle row (its request done) takes a waiting request: one that was waiting, or that the feed has now.
      if (!done[b]) continue;
      // The first waiting request whose tokens still fit the cache's slots; the others wait for a later row or wave.
      const auto fitting = [&] {
        return std::find_if(waiting.begin(), waiting.end(), [&](std::size_t i) {
          return static_cast<int64_t>(requests[i].prompt.size()) - 1 <= slot &&
                 slot + requests[i].max_new_tokens <= capacity;
        });
      };
      auto fits = fitting();
      if (fits == waiting.end() && !asked) {
        asked = true;
        take_more(feed, requests, out, waiting);
        drop_cancelled(feed, waiting, out);
        fits = fitting();
      }
      if (fits == waiting.end()) break;
      const auto& r = requests[*fits];
      const int64_t L = static_cast<int64_t>(r.prompt.size());
      join_row(b, r.prompt, slot, buffers);
      queue[b] = *fits;
      waiting.erase(fits);
      params[b] = r.sampling;
      texts[b] = CompletionText(r.stop_strings);
      base[b] = L - 1 - step;
      first_step[b] = step + 1;
      done[b] = false;
      ++remaining;
      joined.push_back(b);
    }
    if (remaining == 0 || slot >= capacity) break;
    if (!joined.empty()) {
      stats_.joined += static_cast<int64_t>(joined.size());
      sampler = std::make_unique<BatchSampler>(params, config.vocab_size, device);
      base_positions = at::tensor(base).view({B, 1}).to(device);
    }
    logits = ahead ? next_logits : decode_after(sampled.tokens, step, slot, joined);
  }
  for (int64_t b = 0; b < B; ++b) {
    if (done[b]) continue;
    out[queue[b]].text = texts[b].text();
    feed.finished(queue[b], std::move(out[queue[b]]));
  }
  stats_.total_s = seconds_since(started);
  return waiting;
}

// Writes all but the last token of `prompt` into row b's cache so that it ends just before `slot`, and makes only
// those slots visible to the row: its earlier request's keys stay in the cache, masked.
void Generator::join_row(int64_t b, const std::vector<int64_t>& prompt, int64_t slot, DecodeBuffers& buffers) {
  const auto device = model_.options().device;
  const int64_t n = static_cast<int64_t>(prompt.size()) - 1;
  auto row_valid = buffers.key_valid.narrow(0, b, 1);
  row_valid.fill_(false);
  if (n == 0) return;
  const auto index = at::TensorOptions().dtype(at::kLong).device(device);
  row_valid.narrow(1, slot - n, n).fill_(true);
  AttentionInputs part;
  part.positions = at::arange(n, index).view({1, n});
  part.slots = at::arange(slot - n, slot, index);
  part.visible = slot;
  part.mask = causal_mask(part.slots, row_valid, slot);
  KvCache view = rows_of(buffers.cache, b, 1);
  const std::vector<int64_t> head(prompt.begin(), prompt.end() - 1);
  model_.hidden_states(at::tensor(head, at::kLong).view({1, n}).to(device), part, view);
}

std::vector<std::vector<float>> Generator::score(const std::vector<std::vector<int64_t>>& sequences,
                                                 int64_t max_batch_tokens) const {
  c10::InferenceMode inference;
  const auto device = model_.options().device;
  std::vector<std::vector<float>> out(sequences.size());
  // Longest first, so each micro-batch pads little.
  std::vector<std::size_t> order(sequences.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](auto a, auto b) { return sequences[a].size() > sequences[b].size(); });
  std::size_t next = 0;
  while (next < order.size()) {
    const int64_t T = std::max<int64_t>(1, sequences[order[next]].size());
    if (T > model_.config().max_position_embeddings)
      throw std::invalid_argument("score: a sequence is longer than the model's positions");
    const int64_t B = std::max<int64_t>(1, std::min<int64_t>(order.size() - next, max_batch_tokens / T));
    auto tokens = at::zeros({B, T}, at::kLong);
    auto valid = at::zeros({B, T}, at::kBool);
    auto tok = tokens.accessor<int64_t, 2>();
    auto ok = valid.accessor<bool, 2>();
    for (int64_t b = 0; b < B; ++b) {
      const auto& seq = sequences[order[next + b]];
      for (std::size_t t = 0; t < seq.size(); ++t) {
        tok[b][t] = seq[t];
        ok[b][t] = true;
      }
    }
    model_.reserve_positions(T);
    auto cache = model_.make_cache(B, T);
    const auto tokens_dev = tokens.to(device);
    const auto hidden = model_.hidden_states(tokens_dev, whole_sequences(valid.to(device)), cache);
    // Logits in chunks of positions, each near 1 GiB in float32 ([B, T, V] at once would not fit long sequences).
    std::vector<at::Tensor> chunks;
    const int64_t vocabulary = std::max<int64_t>(1, model_.config().vocab_size);
    const int64_t chunk = std::max<int64_t>(1, (int64_t{1} << 28) / (vocabulary * B));
    for (int64_t t0 = 0; t0 + 1 < T; t0 += chunk) {
      const int64_t len = std::min(chunk, T - 1 - t0);
      const auto logits = model_.logits(hidden.narrow(1, t0, len));
      const auto chosen = logits.gather(2, tokens_dev.narrow(1, t0 + 1, len).unsqueeze(2)).squeeze(2);
      chunks.push_back((chosen - at::logsumexp(logits, -1)).to(at::kCPU));
    }
    const auto all = chunks.empty() ? at::zeros({B, 0}) : at::cat(chunks, 1).contiguous();
    for (int64_t b = 0; b < B; ++b) {
      const auto n = static_cast<int64_t>(sequences[order[next + b]].size());
      const float* row = all.data_ptr<float>() + b * all.size(1);
      out[order[next + b]].assign(row, row + std::max<int64_t>(0, n - 1));
    }
    next += B;
  }
  return out;
}

}  // namespace crucible::lm
