#pragma once
// Batched generation with a static KV cache: left-padded prompts share one prefill, then one token per row per
// step until every row has met a stop token, a stop string or its token budget. With more requests than rows
// (GeneratorOptions::max_batch), a row that finishes is given to the next waiting request at once (continuous
// batching): its prompt is written into that row's cache so that it ends at the slot the batch decodes next. Returns tokens, text and the
// log-probabilities of each sampled token. Also teacher-forced log-probabilities of given sequences.
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "lm/generation/sampler.h"
#include "lm/model/transformer.h"

namespace crucible::lm {

struct GenerationRequest {
  std::vector<int64_t> prompt;
  SamplingParams sampling;
  int64_t max_new_tokens = 256;
  std::vector<int64_t> stop_token_ids;
  std::vector<std::string> stop_strings;
};

enum class FinishReason { stop_token, stop_string, length, cancelled };
const char* finish_reason_name(FinishReason r);

struct Completion {
  std::vector<int64_t> tokens;  // every sampled token, including a final stop token
  std::string text;             // the decoded completion without a stop token and cut before a stop string
  std::vector<float> sampling_logprobs;  // per token, under the distribution it was sampled from
  std::vector<float> model_logprobs;     // per token, under the model's raw distribution
  FinishReason finish = FinishReason::length;
};

// A token's bytes as the tokenizer decodes it (byte-level BPE tokens decode independently).
using TokenBytes = std::function<std::string(int64_t)>;

// Timing of the last generate() call: the first sampled tokens reach the host after the prefill.
struct GenerationStats {
  double time_to_first_token_s = 0;
  double total_s = 0;
  int64_t steps = 0;  // sampling steps (the first follows the prefill; each later one a decode step)
  int64_t batch = 0;
  int64_t padded_prompt = 0;
  int64_t joined = 0;  // requests that took a finished row's place mid-batch
  int64_t ahead = 0;   // decode steps launched before the host had read the step before's tokens
  int64_t waves = 0;   // batches run (more than one when waiting requests did not fit the cache)
};

struct GeneratorOptions {
  bool cuda_graphs = true;  // replay decode steps from a CUDA graph when the model is on a GPU
  // The prefill runs over groups of rows holding at most this many prompt positions: its activations are the
  // largest tensors of a generate call, and a batch of 64 long prompts in one forward would need tens of GiB.
  int64_t prefill_tokens = 16384;
  // Rows decoded together. Requests beyond them wait and take the row of one that finishes. 0: one row per request.
  int64_t max_batch = 0;
  // Decode with the model's adapter folded into a copy of the weights it adapts (Transformer::fold_adapter): the
  // base model's kernels, none of the adapter's per step, for the memory of that copy. Samples and log-probs are the
  // folded weights' (each rounded once to the model dtype), not bit for bit the unfolded sum's.
  bool fold_adapter = true;
};

// Requests for a batch that is already decoding, and completions as soon as each row finishes: continuous batching
// across callers (a server's clients), where generate()'s requests are all known at its start.
class RequestFeed {
 public:
  virtual ~RequestFeed() = default;
  // Requests waiting now, possibly none; asked whenever a row is free. Each must pass check_request.
  virtual std::vector<GenerationRequest> more() = 0;
  // Request `id` is complete: ids number the first requests from 0, then more()'s in the order it gave them.
  virtual void finished(std::size_t id, Completion completion) = 0;
  // Whether more() may ever return a request. While none can join, a batch launches each decode step before the host
  // has read the step before's tokens (the GPU does not wait for the host between steps).
  virtual bool may_add() const { return true; }
  // Whether request `id`'s caller no longer wants it (a client that went away). Asked once a step per row: such a
  // request's row stops at once and is free for a waiting request, and a waiting one never takes a row. Its
  // completion (finish reason cancelled, the tokens so far) still goes to finished().
  virtual bool cancelled(std::size_t /*id*/) const { return false; }
};

// Throws std::invalid_argument naming what is wrong with a request (`index` is named in the message): an empty prompt,
// a token outside the vocabulary, more tokens than the model's positions, a top_p outside (0, 1].
void check_request(const GenerationRequest& r, const ModelConfig& config, std::size_t index);

class DecodeGraph;
class LoraAdapter;
struct DecodeBuffers;

class Generator {
 public:
  Generator(const Transformer& model, TokenBytes token_bytes, GeneratorOptions options = {});
  ~Generator();

  // Throws std::invalid_argument for an empty prompt, a token outside the vocabulary, or a request longer than
  // the model's positions.
  std::vector<Completion> generate(const std::vector<GenerationRequest>& requests);
  // Decodes `requests` and what `feed` adds while rows are busy or requests wait; each completion goes to `feed` as
  // its row finishes. Returns once the feed has nothing more.
  void generate(std::vector<GenerationRequest> requests, RequestFeed& feed);

  // log p(seq[t] | seq[0..t)) for t = 1..len-1 of each sequence, in micro-batches of at most `max_batch_tokens`
  // padded tokens.
  std::vector<std::vector<float>> score(const std::vector<std::vector<int64_t>>& sequences,
                                        int64_t max_batch_tokens = 16384) const;
  const GenerationStats& last_stats() const { return stats_; }

 private:
  // One batch: `rows` requests start at once, the rest of `queue` join as rows finish. Fills `out` (indexed like
  // `requests`) and returns the requests that never got a row (they did not fit the cache's slots).
  // Requests that arrive from `feed` while it runs are appended to `requests` and `out`; each completion goes to `feed`.
  std::vector<std::size_t> run_batch(std::vector<GenerationRequest>& requests, std::vector<std::size_t> queue,
                                     int64_t rows, std::vector<Completion>& out, RequestFeed& feed);
  // Takes what `feed` has now into `requests` and `out`; ids with tokens to make go to `waiting`, the rest finish.
  void take_more(RequestFeed& feed, std::vector<GenerationRequest>& requests, std::vector<Completion>& out,
                 std::vector<std::size_t>& waiting);
  // Finishes the requests of `waiting` whose caller has gone (RequestFeed::cancelled) and takes them out.
  static void drop_cancelled(RequestFeed& feed, std::vector<std::size_t>& waiting, std::vector<Completion>& out);
  void join_row(int64_t row, const std::vector<int64_t>& prompt, int64_t slot, DecodeBuffers& buffers);
  DecodeBuffers& buffers_for(int64_t batch, int64_t capacity);
  at::Tensor graph_step(int64_t visible);

  const Transformer& model_;
  TokenBytes token_bytes_;
  GeneratorOptions options_;
  // Buffers (and a captured graph) for the last (batch, capacity), reused by the next call of that shape.
  std::unique_ptr<DecodeBuffers> buffers_;
  // One graph per attention span (cache slots read, in steps of kGraphSpan): early steps read less of the cache.
  std::map<int64_t, std::unique_ptr<DecodeGraph>> graphs_;
  int64_t graph_rotary_size_ = 0;
  const LoraAdapter* graph_adapter_ = nullptr;  // the adapter the graph computes with (nullptr: none)
  bool graph_folded_ = false;                    // ... folded into the weights, or added as deltas
  GenerationStats stats_;
};

}  // namespace crucible::lm
