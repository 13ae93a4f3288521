#include "lm/training/sft.h"

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>

#include "lm/model/lora.h"
#include "lm/tokenizer/chat_reply.h"
#include "lm/training/lora_trainer.h"

namespace crucible::lm {
namespace {

SequenceBatch tokenize(LanguageModel& model, const std::vector<SftExample>& examples, const SftOptions& o) {
  const auto& tok = model.tokenizer();
  const auto stops = model.stop_token_ids();
  SequenceBatch batch;
  for (const auto& e : examples) {
    const auto ids = model.encode_prompt(o.chat ? model.user_prompt(e.prompt, o.system_prompt) : e.prompt);
    std::vector<int64_t> seq(ids.begin(), ids.end());
    const auto prompt_length = static_cast<int64_t>(seq.size());
    // In a chat, the reply as the format writes it: gpt-oss answers in harmony's final channel.
    if (o.chat && model.chat_format()) {
      const auto header = tok.encode(reply_header(*model.chat_format()), false, /*parse_special=*/true);
      seq.insert(seq.end(), header.begin(), header.end());
    }
    const auto completion = tok.encode(e.completion, false, /*parse_special=*/false);
    seq.insert(seq.end(), completion.begin(), completion.end());
    // The model learns to stop: the chat format's end-of-turn token, else the EOS.
    if (!stops.empty()) {
      const auto turn_end = model.end_of_turn_id();
      seq.push_back(o.chat && turn_end ? *turn_end : stops.front());
    }
    if (prompt_length < 1 || static_cast<int64_t>(seq.size()) <= prompt_length) continue;
    batch.sequences.push_back(std::move(seq));
    batch.prompt_lengths.push_back(prompt_length);
    batch.advantages.push_back(0.0f);
  }
  return batch;
}

SequenceBatch rows(const SequenceBatch& all, const std::vector<std::size_t>& which) {
  SequenceBatch b;
  for (auto i : which) {
    b.sequences.push_back(all.sequences[i]);
    b.prompt_lengths.push_back(all.prompt_lengths[i]);
    b.advantages.push_back(0.0f);
  }
  return b;
}

}  // namespace

std::vector<SftExample> read_sft_jsonl(const std::filesystem::path& path) {
  std::ifstream in(path);
  if (!in) throw std::invalid_argument("cannot read " + path.string());
  std::vector<SftExample> out;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      const auto j = nlohmann::json::parse(line);
      out.push_back({j.at("prompt").get<std::string>(), j.at("completion").get<std::string>()});
    } catch (const std::exception& e) {
      throw std::invalid_argument(path.string() + ":" + std::to_string(number) +
                                  ": expected {\"prompt\": string, \"completion\": string} (" + e.what() + ")");
    }
  }
  return out;
}

SftReport run_sft(LanguageModel& model, const std::vector<SftExample>& examples, const SftOptions& o,
                  const std::function<void(const SftProgress&)>& on_step) {
  const auto all = tokenize(model, examples, o);
  if (all.sequences.empty()) throw std::invalid_argument("no training examples");
  std::vector<std::size_t> order(all.sequences.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(o.seed);
  std::shuffle(order.begin(), order.end(), rng);
  const std::size_t held = order.size() >= 2
                               ? std::min(order.size() - 1, std::max<std::size_t>(1, static_cast<std::size_t>(
                                                                            o.eval_fraction * order.size())))
                               : 0;
  const std::vector<std::size_t> eval_rows(order.begin(), order.begin() + held), train_rows(order.begin() + held, order.end());
  const auto eval = rows(all, eval_rows);

  auto& adapter = model.new_adapter(o.lora, o.seed);
  TrainerOptions t;
  t.learning_rate = o.learning_rate;
  t.micro_batch = o.micro_batch;
  LoraTrainer trainer(model.transformer(), adapter, t);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  SftReport report;
  report.train_examples = static_cast<int64_t>(train_rows.size());
  report.eval_examples = static_cast<int64_t>(eval_rows.size());
  report.eval_nll_before = held ? trainer.evaluate_nll(eval) : nan;
  std::size_t cursor = 0;
  for (int64_t step = 1; step <= o.steps; ++step) {
    std::vector<std::size_t> pick;
    for (int64_t i = 0; i < o.batch_size; ++i) pick.push_back(train_rows[cursor++ % train_rows.size()]);
    SftProgress p;
    p.step = step;
    p.train_loss = trainer.sft_step(rows(all, pick)).loss;
    p.eval_nll = held && (step % std::max<int64_t>(1, o.eval_every) == 0 || step == o.steps) ? trainer.evaluate_nll(eval) : nan;
    report.steps.push_back(p);
    if (on_step) on_step(p);
  }
  report.eval_nll_after = held ? trainer.evaluate_nll(eval) : nan;
  return report;
}

}  // namespace crucible::lm
