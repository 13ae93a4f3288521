// The LibTorch model against transformers' own outputs on the tiny fixtures (float32 on the CPU), and generation.
#include <ATen/ATen.h>
#include <c10/core/InferenceMode.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>

#include "lm/generation/decode_step.h"
#include "lm/generation/generator.h"
#include "lm/generation/sampler.h"
#include "lm/golden_outputs.h"
#include "lm/tokenizer/bpe_tokenizer.h"
#include "lm/model/transformer.h"

using namespace crucible;
using namespace crucible::lm;

namespace {

using test::golden;

at::Tensor as_batch(const std::vector<int64_t>& ids) {
  return at::tensor(ids, at::kLong).view({1, static_cast<int64_t>(ids.size())});
}

float max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<float>(); }

struct Loaded {
  Transformer model;
  Tokenizer tokenizer;
  TokenBytes bytes() const {
    return [this](int64_t id) { return tokenizer.decode_bytes({static_cast<int32_t>(id)}); };
  }
};

Loaded load(const std::string& fixture) {
  return {Transformer::load(test::lm_fixture(fixture)), Tokenizer::from_file(test::lm_fixture(fixture) / "tokenizer.json")};
}

GenerationRequest greedy_request(std::vector<int64_t> prompt, int64_t n) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling.temperature = 0;
  r.max_new_tokens = n;
  return r;
}

GenerationRequest sampled_request(std::vector<int64_t> prompt, uint64_t seed, double temperature = 0.8,
                                  double top_p = 0.9, int64_t top_k = 40) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.sampling = {temperature, top_p, top_k, seed};
  r.max_new_tokens = 16;
  return r;
}

}  // namespace

TEST_CASE("model: logits match transformers within 1e-4 for prompts of several lengths (no cache)") {
  c10::InferenceMode guard;
  for (const auto* fixture : test::kLmFixtures) {
    CAPTURE(fixture);
    const auto model = Transformer::load(test::lm_fixture(fixture));
    const auto g = golden(fixture);
    REQUIRE(g.prompts.size() == 4);
    for (std::size_t i = 0; i < g.prompts.size(); ++i) {
      CAPTURE(g.prompts[i].size());
      const auto logits = model.forward_full(as_batch(g.prompts[i]))[0];
      CHECK(max_diff(logits, g.logits[i]) < 1e-4f);
    }
  }
}

TEST_CASE("whole sequences: a fused causal kernel may stand in for the mask only when every row is a prefix") {
  struct Row {
    std::vector<int> valid;
    bool prefix;
  };
  const std::vector<std::vector<Row>> batches{
      {{{1, 1, 1, 1}, true}, {{1, 1, 0, 0}, true}},  // right padding
      {{{1, 0, 0, 0}, true}, {{0, 0, 0, 0}, true}},
      {{{1, 1, 1, 1}, true}, {{0, 0, 1, 1}, false}},  // left padding
      {{{1, 0, 1, 1}, false}},                        // a hole
      {{{1}, true}},
  };
  for (const auto& batch : batches) {
    auto valid = at::zeros({static_cast<int64_t>(batch.size()), static_cast<int64_t>(batch[0].valid.size())}, at::kBool);
    bool all_prefix = true;
    for (std::size_t b = 0; b < batch.size(); ++b) {
      for (std::size_t t = 0; t < batch[b].valid.size(); ++t) valid[b][t] = batch[b].valid[t] != 0;
      all_prefix &= batch[b].prefix;
    }
    CAPTURE(valid);
    CHECK(whole_sequences(valid).causal_prefix == all_prefix);
  }
}

TEST_CASE("model: logits match transformers through the KV cache (prefill half, then one token at a time)") {
  c10::InferenceMode guard;
  for (const auto* fixture : test::kLmFixtures) {
    CAPTURE(fixture);
    const auto model = Transformer::load(test::lm_fixture(fixture));
    const auto g = golden(fixture);
    const auto& prompt = g.prompts[3];
    const int64_t T = prompt.size(), half = T / 2;
    auto buffers = make_decode_buffers(model, 1, T + 8);
    model.reserve_positions(T + 8);
    AttentionInputs prefill;
    prefill.slots = at::arange(half, at::kLong);
    prefill.positions = prefill.slots.unsqueeze(0);
    prefill.visible = half;
    buffers.key_valid.narrow(1, 0, half).fill_(true);
    prefill.mask = causal_mask(prefill.slots, buffers.key_valid, half);
    const auto first = model.logits(
        model.hidden_states(as_batch(std::vector<int64_t>(prompt.begin(), prompt.begin() + half)), prefill,
                            buffers.cache))[0];
    CHECK(max_diff(first, g.logits[3].narrow(0, 0, half)) < 1e-4f);
    float worst = 0;
    for (int64_t t = half; t < T; ++t) {
      buffers.token.fill_(prompt[t]);
      buffers.position.fill_(t);
      buffers.slot.fill_(t);
      const auto step = decode_step(model, buffers, t + 1)[0];
      worst = std::max(worst, max_diff(step, g.logits[3][t]));
    }
    CHECK(worst < 1e-4f);
  }
}

TEST_CASE("generation: greedy continuations are identical to transformers', alone and batched with padding") {
  for (const auto* fixture : test::kLmFixtures) {
    CAPTURE(fixture);
    const auto lm = load(fixture);
    const auto g = golden(fixture);
    Generator generator(lm.model, lm.bytes());
    std::vector<GenerationRequest> batch;
    for (std::size_t i = 0; i < g.prompts.size(); ++i) {
      const auto alone = generator.generate({greedy_request(g.prompts[i], 24)});
      CHECK(alone[0].tokens == g.greedy[i]);
      CHECK(alone[0].finish == FinishReason::length);
      batch.push_back(greedy_request(g.prompts[i], 24));
    }
    // Four prompt lengths (1 to 74 tokens) left-padded into one batch.
    const auto together = generator.generate(batch);
    for (std::size_t i = 0; i < g.prompts.size(); ++i) CHECK(together[i].tokens == g.greedy[i]);
    // The same batch prefilled one row per pass (the path long prompts take) gives the same continuations.
    GeneratorOptions row_by_row;
    row_by_row.prefill_tokens = 1;
    Generator per_row(lm.model, lm.bytes(), row_by_row);
    const auto rows = per_row.generate(batch);
    for (std::size_t i = 0; i < g.prompts.size(); ++i) CHECK(rows[i].tokens == g.greedy[i]);
  }
}

TEST_CASE("generation: log-probabilities under the model and under the sampling distribution") {
  const auto lm = load("qwen2_tiny");
  const auto g = golden("qwen2_tiny");
  Generator generator(lm.model, lm.bytes());
  const auto out = generator.generate({greedy_request(g.prompts[1], 1)})[0];
  const auto expected = at::log_softmax(g.logits[1][-1], -1)[g.greedy[1][0]].item<float>();
  CHECK(out.model_logprobs[0] == doctest::Approx(expected).epsilon(1e-4));
  CHECK(out.sampling_logprobs[0] == 0.0f);  // greedy: probability one

  // Temperature 1 and no filtering: the sampling distribution is the model's.
  const auto plain = generator.generate({sampled_request(g.prompts[2], 5, 1.0, 1.0, 0)})[0];
  for (std::size_t t = 0; t < plain.tokens.size(); ++t)
    CHECK(plain.sampling_logprobs[t] == doctest::Approx(plain.model_logprobs[t]).epsilon(1e-4));
  // top_k = 1 samples the argmax with probability one.
  const auto top1 = generator.generate({sampled_request(g.prompts[1], 9, 0.7, 1.0, 1)})[0];
  CHECK(std::vector<int64_t>(g.greedy[1].begin(), g.greedy[1].begin() + 16) == top1.tokens);
  for (auto lp : top1.sampling_logprobs) CHECK(lp == doctest::Approx(0.0f));
  // Filtering keeps fewer tokens, so a sampled token is at least as likely under the filtered distribution.
  const auto filtered = generator.generate({sampled_request(g.prompts[2], 3, 1.0, 0.5, 0)})[0];
  for (std::size_t t = 0; t < filtered.tokens.size(); ++t)
    CHECK(filtered.sampling_logprobs[t] >= filtered.model_logprobs[t] - 1e-5f);
}

// Rows of the same logits with distinct seeds: the tokens' frequencies must follow the distribution sampled from.
TEST_CASE("sampling: frequencies follow temperature, top-k and top-p, and no zero-probability token is drawn") {
  const std::vector<double> p = {0.5, 0.25, 0.15, 0.1, 0.0};
  const int64_t V = static_cast<int64_t>(p.size()), B = 4000;
  std::vector<float> row;
  for (double x : p) row.push_back(x > 0 ? static_cast<float>(std::log(x)) : -std::numeric_limits<float>::infinity());
  const auto logits = at::tensor(row).view({1, V}).expand({B, V}).contiguous();
  struct Case {
    double temperature, top_p;
    int64_t top_k;
    std::vector<double> expected;
  };
  const double z2 = 0.25 + 0.0625 + 0.0225 + 0.01;  // temperature 0.5 squares the probabilities
  const std::vector<Case> cases = {
      {1.0, 1.0, 0, {0.5, 0.25, 0.15, 0.1, 0.0}},
      {0.5, 1.0, 0, {0.25 / z2, 0.0625 / z2, 0.0225 / z2, 0.01 / z2, 0.0}},
      {1.0, 1.0, 2, {2.0 / 3, 1.0 / 3, 0.0, 0.0, 0.0}},
      {1.0, 0.7, 0, {0.5 / 0.75, 0.25 / 0.75, 0.0, 0.0, 0.0}},  // the smallest prefix reaching 0.7: two tokens
  };
  for (const auto& c : cases) {
    CAPTURE(c.temperature);
    CAPTURE(c.top_k);
    CAPTURE(c.top_p);
    std::vector<SamplingParams> rows;
    for (int64_t b = 0; b < B; ++b) rows.push_back({c.temperature, c.top_p, c.top_k, static_cast<uint64_t>(1000 + b)});
    BatchSampler sampler(rows, V, at::kCPU);
    const auto out = sampler.sample(logits, 3);
    const auto counts = at::bincount(out.tokens, {}, V);
    for (int64_t v = 0; v < V; ++v) {
      CAPTURE(v);
      CHECK(std::abs(counts[v].item<double>() / B - c.expected[v]) < 0.03);
      if (c.expected[v] == 0.0) CHECK(counts[v].item<int64_t>() == 0);
    }
    // Each token's sampling log-probability is the log of its probability under the distribution sampled from.
    const auto lp = out.sampling_logprobs;
    for (int64_t b = 0; b < 50; ++b) {
      const auto t = out.tokens[b].item<int64_t>();
      CHECK(lp[b].item<double>() == doctest::Approx(std::log(c.expected[t])).epsilon(1e-4));
    }
  }
  // Another step draws anew: the same rows do not repeat their tokens.
  std::vector<SamplingParams> rows;
  for (int64_t b = 0; b < B; ++b) rows.push_back({1.0, 1.0, 0, static_cast<uint64_t>(1000 + b)});
  BatchSampler sampler(rows, V, at::kCPU);
  CHECK(!at::equal(sampler.sample(logits, 3).tokens, sampler.sample(logits, 4).tokens));
  CHECK(at::equal(sampler.sample(logits, 3).tokens, sampler.sample(logits, 3).tokens));
}

TEST_CASE("sampling: the highest draw, which rounds to the whole mass, still takes no zero-probability token") {
  // A seed whose draw at step 0 is the highest the sampler makes (about one in 16.8 million): its 24 random bits all
  // set, which float arithmetic rounds up to exactly 1.
  std::optional<uint64_t> seed;
  for (uint64_t s = 0; s < (uint64_t{1} << 28) && !seed; ++s)
    if (row_uniform(s, 0) == 1.0f) seed = s;
  REQUIRE(seed);
  // Two tokens share the mass; the last has none. The draw lands on the total, past every cumulative sum.
  const auto logits = at::tensor(std::vector<float>{0.0f, 0.0f, -std::numeric_limits<float>::infinity()}).view({1, 3});
  const auto out = BatchSampler({SamplingParams{1.0, 1.0, 0, *seed}}, 3, at::kCPU).sample(logits, 0);
  CHECK(out.tokens[0].item<int64_t>() == 1);
  CHECK(std::isfinite(out.sampling_logprobs[0].item<float>()));
}

TEST_CASE("sampling: over a large vocabulary the draw keeps the distribution, reaches the last token, draws no zero") {
  for (const int64_t V : {int64_t{20000}, int64_t{10007}}) {
    CAPTURE(V);
    const int64_t B = 4000;
    const std::vector<std::pair<int64_t, double>> mass = {{3, 0.4}, {5000, 0.3}, {V - 1, 0.2}, {7777, 0.1}};
    auto row = at::full({V}, -std::numeric_limits<float>::infinity());
    for (const auto& [t, q] : mass) row[t] = std::log(q);
    const auto logits = row.view({1, V}).expand({B, V}).contiguous();
    for (const double top_p : {1.0, 0.95}) {  // unfiltered, and through the sorted (filtered) path
      CAPTURE(top_p);
      std::vector<SamplingParams> rows;
      for (int64_t b = 0; b < B; ++b) rows.push_back({1.0, top_p, 0, static_cast<uint64_t>(77 + b)});
      const auto out = BatchSampler(rows, V, at::kCPU).sample(logits, 5);
      const auto counts = at::bincount(out.tokens, {}, V);
      double drawn = 0;
      for (const auto& [t, q] : mass) {
        CAPTURE(t);
        CHECK(std::abs(counts[t].item<double>() / B - q) < 0.03);
        drawn += counts[t].item<double>();
      }
      CHECK(drawn == B);  // nothing outside the four tokens
    }
    // All the mass on the last token.
    auto last = at::full({1, V}, -std::numeric_limits<float>::infinity());
    last[0][V - 1] = 0.0f;
    std::vector<SamplingParams> rows(64, SamplingParams{1.0, 1.0, 0, 5});
    for (std::size_t b = 0; b < rows.size(); ++b) rows[b].seed = b;
    const auto out = BatchSampler(rows, V, at::kCPU).sample(last.expand({64, V}).contiguous(), 0);
    CHECK(at::all(out.tokens == V - 1).item<bool>());
    // Uniform over the vocabulary: halves are drawn about equally, and the far end is reached.
    std::vector<SamplingParams> flat_rows;
    for (int64_t b = 0; b < B; ++b) flat_rows.push_back({1.0, 1.0, 0, static_cast<uint64_t>(9000 + b)});
    const auto flat = BatchSampler(flat_rows, V, at::kCPU).sample(at::zeros({B, V}), 1);
    CHECK(std::abs((flat.tokens < V / 2).sum().item<double>() / B - 0.5) < 0.03);
    CHECK(flat.tokens.max().item<int64_t>() < V);
    CHECK(flat.tokens.max().item<int64_t>() > V - V / 20);
  }
}

TEST_CASE("generation: a request's seed alone decides its samples, whatever batch it shares") {
  const auto lm = load("llama_tiny");
  const auto g = golden("llama_tiny");
  Generator generator(lm.model, lm.bytes());
  const auto alone = generator.generate({sampled_request(g.prompts[1], 42)})[0];
  const auto again = generator.generate({sampled_request(g.prompts[1], 42)})[0];
  CHECK(alone.tokens == again.tokens);
  CHECK(alone.sampling_logprobs == again.sampling_logprobs);
  const auto batch = generator.generate({sampled_request(g.prompts[3], 7), sampled_request(g.prompts[1], 42),
                                         sampled_request(g.prompts[1], 43)});
  CHECK(batch[1].tokens == alone.tokens);
  CHECK(batch[2].tokens != alone.tokens);
  // Seeds spread: 8 seeds give several distinct continuations at temperature 1.
  std::set<std::vector<int64_t>> distinct;
  for (uint64_t seed = 0; seed < 8; ++seed)
    distinct.insert(generator.generate({sampled_request(g.prompts[0], seed, 1.0, 1.0, 0)})[0].tokens);
  CHECK(distinct.size() >= 6);
}

TEST_CASE("generation: requests fed while a batch decodes take freed rows, and each completion comes as its row ends") {
  const auto lm = load("qwen2_tiny");
  const auto g = golden("qwen2_tiny");
  Generator alone(lm.model, lm.bytes());
  GeneratorOptions options;
  options.max_batch = 2;
  Generator rows(lm.model, lm.bytes(), options);
  // Two requests start, on the two longest prompts; three more arrive once a row is free: one on the shortest prompt
  // (it fits below the batch's slot and joins), one that makes no tokens, and one longer than any prompt so far
  // (it cannot fit below the slot yet and waits for the next wave). Nothing after that.
  struct Feed : RequestFeed {
    std::vector<GenerationRequest> later;
    int asked = 0;
    std::vector<std::pair<std::size_t, Completion>> finished_in_order;
    std::vector<GenerationRequest> more() override { return asked++ == 0 ? later : std::vector<GenerationRequest>{}; }
    void finished(std::size_t id, Completion c) override { finished_in_order.emplace_back(id, std::move(c)); }
  } feed;
  std::vector<std::vector<int64_t>> by_length(g.prompts.begin(), g.prompts.end());
  std::sort(by_length.begin(), by_length.end(), [](const auto& a, const auto& b) { return a.size() > b.size(); });
  std::vector<GenerationRequest> first{greedy_request(by_length[0], 3), sampled_request(by_length[1], 7)};
  first[1].max_new_tokens = 12;
  auto longer = by_length[0];
  longer.insert(longer.end(), by_length[0].begin(), by_length[0].end());
  feed.later = {sampled_request(by_length.back(), 11), greedy_request(by_length[1], 0), greedy_request(longer, 5)};
  feed.later[0].max_new_tokens = 4;
  std::vector<GenerationRequest> all = first;
  all.insert(all.end(), feed.later.begin(), feed.later.end());

  rows.generate(first, feed);
  CHECK(feed.asked >= 2);             // asked again after taking the three: nothing more
  CHECK(rows.last_stats().joined == 1);  // the short one took a freed row mid-batch
  CHECK(rows.last_stats().waves == 2);   // the long one waited for a wave of its own
  REQUIRE(feed.finished_in_order.size() == all.size());
  std::set<std::size_t> ids;
  for (const auto& [id, c] : feed.finished_in_order) {
    INFO("request ", id);
    REQUIRE(id < all.size());
    CHECK(ids.insert(id).second);  // each once
    if (all[id].max_new_tokens == 0) {
      CHECK(c.tokens.empty());
      continue;
    }
    const auto own = alone.generate({all[id]})[0];
    CHECK(c.tokens == own.tokens);
    CHECK(c.text == own.text);
  }
  // The short first request is answered before the long second one ends.
  const auto position = [&](std::size_t id) {
    for (std::size_t i = 0; i < feed.finished_in_order.size(); ++i)
      if (feed.finished_in_order[i].first == id) return i;
    return feed.finished_in_order.size();
  };
  CHECK(position(0) < position(1));
}

TEST_CASE("generation: decoding a step ahead of the host, where no request can join, changes no token or log-prob") {
  const auto lm = load("qwen2_tiny");
  const auto g = golden("qwen2_tiny");
  // Rows that end at different steps: by length, by a stop token met early, and one that runs to the end.
  std::vector<GenerationRequest> requests;
  for (std::size_t i = 0; i < g.prompts.size(); ++i) {
    requests.push_back(i % 2 ? sampled_request(g.prompts[i], 40 + i) : greedy_request(g.prompts[i], 3 + 4 * i));
    requests.back().max_new_tokens = 3 + 4 * static_cast<int64_t>(i);
  }
  Generator probe(lm.model, lm.bytes());
  requests[0].stop_token_ids = {probe.generate({requests[0]})[0].tokens.at(1)};  // stops by its second token
  // generate()'s own feed adds nothing: each step is launched before the host reads the step before's tokens.
  Generator ahead(lm.model, lm.bytes());
  const auto early = ahead.generate(requests);
  // A feed that could add requests (and adds none): each step waits for the host to read the one before.
  struct Feed : RequestFeed {
    std::vector<Completion> out;
    std::vector<GenerationRequest> more() override { return {}; }
    void finished(std::size_t id, Completion c) override { out.at(id) = std::move(c); }
  } feed;
  feed.out.resize(requests.size());
  Generator stepwise(lm.model, lm.bytes());
  stepwise.generate(requests, feed);
  CHECK(ahead.last_stats().steps == stepwise.last_stats().steps);
  CHECK(ahead.last_stats().ahead > 0);
  CHECK(stepwise.last_stats().ahead == 0);
  CHECK(early[0].finish == FinishReason::stop_token);
  CHECK(early[0].tokens.size() <= 2);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    CAPTURE(i);
    CHECK(early[i].tokens == feed.out[i].tokens);
    CHECK(early[i].model_logprobs == feed.out[i].model_logprobs);
    CHECK(early[i].sampling_logprobs == feed.out[i].sampling_logprobs);
    CHECK(early[i].text == feed.out[i].text);
    CHECK(early[i].finish == feed.out[i].finish);
  }
}

TEST_CASE("generation: a fed request that breaks the request contract fails by name, not deep in the cache") {
  const auto lm = load("qwen2_tiny");
  const auto g = golden("qwen2_tiny");
  GeneratorOptions options;
  options.max_batch = 2;
  Generator rows(lm.model, lm.bytes(), options);
  struct Feed : RequestFeed {
    GenerationRequest bad;
    bool given = false;
    std::vector<GenerationRequest> more() override {
      if (given) return {};
      given = true;
      return {bad};
    }
    void finished(std::size_t, Completion) override {}
  };
  std::vector<GenerationRequest> first{greedy_request(g.prompts[0], 2), greedy_request(g.prompts[1], 20)};
  for (const auto& [what, bad] : std::vector<std::pair<std::string, GenerationRequest>>{
           {"empty prompt", greedy_request({}, 3)},
           {"outside the vocabulary", greedy_request({lm.model.config().vocab_size}, 3)},
           {"exceeds the model", greedy_request(g.prompts[0], lm.model.config().max_position_embeddings)}}) {
    CAPTURE(what);
    Feed feed;
    feed.bad = bad;
    try {
      rows.generate(first, feed);
      FAIL("a bad fed request was taken");
    } catch (const std::invalid_argument& e) {
      CHECK(std::string(e.what()).find(what) != std::string::npos);
      CHECK(std::string(e.what()).find("request 2") != std::string::npos);  // ids count on from the first requests
    }
  }
}

TEST_CASE("generation: with more requests than rows, a finished row goes to the next request at once") {
  const auto lm = load("qwen2_tiny");
  const auto g = golden("qwen2_tiny");
  Generator alone(lm.model, lm.bytes());
  GeneratorOptions options;
  options.max_batch = 3;
  Generator rows(lm.model, lm.bytes(), options);
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 9; ++i) {
    auto r = i % 3 == 2 ? greedy_request(g.prompts[i % 4], 4 + 2 * i) : sampled_request(g.prompts[i % 4], 100 + i);
    r.max_new_tokens = 3 + (7 * i) % 11;  // uneven: rows finish at different steps
    requests.push_back(r);
  }
  requests[4].max_new_tokens = 0;  // nothing to make: never takes a row
  const auto batched = rows.generate(requests);
  const auto stats = rows.last_stats();
  CHECK(stats.batch == 3);
  CHECK(stats.joined >= 4);  // most waiting requests took a freed row mid-batch
  REQUIRE(batched.size() == requests.size());
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const auto own = alone.generate({requests[i]})[0];
    INFO("request ", i);
    CHECK(batched[i].tokens == own.tokens);
    CHECK(batched[i].text == own.text);
    CHECK(batched[i].finish == own.finish);
    CHECK(batched[i].tokens.size() == static_cast<std::size_t>(requests[i].max_new_tokens));
    for (std::size_t t = 0; t < own.model_logprobs.size(); ++t)
      CHECK(batched[i].model_logprobs[t] == doctest::Approx(own.model_logprobs[t]).epsilon(1e-4));
  }
}

TEST_CASE("generation: stop tokens and stop strings end a row, text excludes them") {
  const auto lm = load("qwen2_tiny");
  const auto g = golden("qwen2_tiny");
  Generator generator(lm.model, lm.bytes());
  const auto& greedy = g.greedy[2];
  auto by_token = greedy_request(g.prompts[2], 24);
  by_token.stop_token_ids = {greedy[3]};
  const auto stopped = generator.generate({by_token, greedy_request(g.prompts[2], 24)});
  const auto first = std::find(greedy.begin(), greedy.end(), greedy[3]) - greedy.begin();
  CHECK(stopped[0].finish == FinishReason::stop_token);
  CHECK(stopped[0].tokens.size() == static_cast<std::size_t>(first + 1));
  CHECK(stopped[1].tokens == greedy);  // the other row ran on

  const auto full_text = stopped[1].text;
  REQUIRE(full_text.size() > 6);
  const auto stop = full_text.substr(full_text.size() / 2, 3);
  auto by_string = greedy_request(g.prompts[2], 24);
  by_string.stop_strings = {stop};
  const auto cut = generator.generate({by_string})[0];
  CHECK(cut.finish == FinishReason::stop_string);
  CHECK(cut.text == full_text.substr(0, full_text.find(stop)));
  CHECK(cut.tokens.size() < greedy.size());
}

TEST_CASE("scoring: teacher-forced log-probabilities match transformers' logits, batched with padding") {
  const auto model = Transformer::load(test::lm_fixture("llama_tiny"));
  const auto g = golden("llama_tiny");
  Generator generator(model, [](int64_t) { return std::string(); });
  const auto scored = generator.score(g.prompts, /*max_batch_tokens=*/160);  // forces several micro-batches
  for (std::size_t i = 0; i < g.prompts.size(); ++i) {
    const auto& p = g.prompts[i];
    REQUIRE(scored[i].size() == p.size() - 1);
    const auto lp = at::log_softmax(g.logits[i], -1);
    float worst = 0;
    for (std::size_t t = 1; t < p.size(); ++t)
      worst = std::max(worst, std::abs(scored[i][t - 1] - lp[t - 1][p[t]].item<float>()));
    CHECK(worst < 1e-4f);
  }
}

TEST_CASE("loading: missing tensors and wrong shapes are clear errors") {
  test::ScratchDir dir("lm-bad");
  namespace fs = std::filesystem;
  fs::copy(test::lm_fixture("qwen2_tiny"), dir.path() / "m");
  auto config = test::read_file(dir.path() / "m" / "config.json");
  config.replace(config.find("\"intermediate_size\": 160"), 24, "\"intermediate_size\": 128");
  test::write_file(dir.path() / "m" / "config.json", config);
  CHECK_THROWS_WITH_AS(Transformer::load(dir.path() / "m"),
                       doctest::Contains("model.layers.0.mlp.gate_proj.weight has shape [160, 64], the config implies [128, 64]"),
                       ModelFormatError);

  fs::copy(test::lm_fixture("qwen2_tiny"), dir.path() / "t");
  config = test::read_file(dir.path() / "t" / "config.json");
  config.replace(config.find("\"tie_word_embeddings\": true"), 27, "\"tie_word_embeddings\": false");
  test::write_file(dir.path() / "t" / "config.json", config);
  CHECK_THROWS_WITH_AS(Transformer::load(dir.path() / "t"), doctest::Contains("missing tensor lm_head.weight"),
                       ModelFormatError);
}

TEST_CASE("generation: bad requests are refused before any work") {
  const auto model = Transformer::load(test::lm_fixture("qwen2_tiny"));
  Generator generator(model, [](int64_t) { return std::string(); });
  CHECK_THROWS_AS(generator.generate({greedy_request({}, 4)}), std::invalid_argument);
  CHECK_THROWS_WITH_AS(generator.generate({greedy_request({5000}, 4)}), doctest::Contains("outside the vocabulary"),
                       std::invalid_argument);
  CHECK_THROWS_WITH_AS(generator.generate({greedy_request({1, 2}, 2100)}), doctest::Contains("exceeds the model's 2048"),
                       std::invalid_argument);
}
