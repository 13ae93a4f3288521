// The model directory as a user meets it: text in, text out, chat formats, defaults, errors; and the CLI.
// LibTorch's headers first: the glog they bring defines CHECK too, and doctest's must be the one that stands.
#include <ATen/core/Tensor.h>
#include <doctest/doctest.h>

#include <algorithm>
#include <fstream>
#include <optional>
#include <utility>
#include <nlohmann/json.hpp>

#include "cli_support.h"
#include "lm/model/language_model.h"
#include "lm/model/transformer.h"
#include "lm/lm_support.h"
#include "lm/format/safetensors.h"

using namespace crucible;
using namespace crucible::lm;

TEST_CASE("language model: a text prompt's greedy continuation is transformers'") {
  for (const auto* fixture : {"qwen2_tiny", "qwen2_tiny_f16"}) {
    CAPTURE(fixture);
    auto lm = LanguageModel::load(test::lm_fixture(fixture));
    const auto golden = test::read_golden_ids(fixture);
    TextRequest r;
    r.prompt = "def relu(x):\n    return";  // the fixture's prompt_1
    r.temperature = 0;
    r.max_new_tokens = 24;
    r.stop_at_eos = false;
    const auto out = lm.generate({r})[0];
    CHECK(std::vector<int64_t>(out.prompt_tokens.begin(), out.prompt_tokens.end()) ==
          golden.at("prompt_1"));
    CHECK(std::vector<int64_t>(out.tokens.begin(), out.tokens.end()) == golden.at("greedy_1"));
    CHECK(out.text == lm.tokenizer().decode(out.tokens));
    CHECK(out.finish_reason == "length");
    CHECK(out.model_logprobs.size() == 24);
  }
}

TEST_CASE("language model: a fed request repeating a finished request's prompt gets that prompt's tokens") {
  // A feed's request joins the batch in flight after an earlier request with the same prompt was answered: the
  // encoding reused for repeated prompts must not be the one already handed over with that answer.
  auto lm = LanguageModel::load(test::lm_fixture("qwen2_tiny"));
  const auto request = [](int64_t tokens, uint64_t seed) {
    TextRequest r;
    r.prompt = "def relu(x):";
    r.max_new_tokens = tokens;
    r.seed = seed;
    r.stop_at_eos = false;
    return r;
  };
  struct Feed : TextFeed {
    std::vector<std::optional<TextCompletion>> done;
    std::vector<TextRequest> later;
    std::vector<TextRequest> more() override {
      // Only once the short request, the last one added, is answered, so its prompt's tokens have been handed over.
      if (done.size() < 2 || !done[1] || later.empty()) return {};
      return std::exchange(later, {});
    }
    void finished(std::size_t id, TextCompletion c) override {
      if (done.size() <= id) done.resize(id + 1);
      done[id] = std::move(c);
    }
  } feed;
  feed.later = {request(5, 3)};
  lm.generate({request(40, 1), request(2, 2)}, feed);
  REQUIRE(feed.done.size() == 3);
  REQUIRE(feed.done[2]);
  const auto alone = lm.generate({request(5, 3)})[0];
  CHECK(feed.done[2]->prompt_tokens == alone.prompt_tokens);
  CHECK(feed.done[2]->tokens == alone.tokens);
  CHECK(feed.done[1]->prompt_tokens == alone.prompt_tokens);
}

TEST_CASE("language model: chat prompts, end-of-turn stops, generation_config defaults") {
  auto qwen = LanguageModel::load(test::lm_fixture("qwen2_tiny"));
  REQUIRE(qwen.chat_format() == ChatFormat::chatml);
  const auto prompt = qwen.chat_prompt({{"user", "Write a ReLU kernel."}}, {std::string("Be terse."), true, ""});
  CHECK(prompt == "<|im_start|>system\nBe terse.<|im_end|>\n<|im_start|>user\nWrite a ReLU kernel.<|im_end|>\n"
                  "<|im_start|>assistant\n");
  const auto stops = qwen.stop_token_ids();
  CHECK(std::find(stops.begin(), stops.end(), *qwen.tokenizer().token_to_id("<|im_end|>")) != stops.end());
  CHECK(qwen.generation_defaults().temperature.value_or(0) == doctest::Approx(0.7));

  auto llama = LanguageModel::load(test::lm_fixture("llama_tiny"));
  REQUIRE(llama.chat_format() == ChatFormat::llama3);
  TextRequest r;
  r.prompt = llama.chat_prompt({{"user", "hi"}});
  r.max_new_tokens = 4;
  const auto out = llama.generate({r})[0];
  // The rendered prompt carries <|begin_of_text|> already: it must not be added twice.
  const auto bos = *llama.tokenizer().token_to_id("<|begin_of_text|>");
  CHECK(out.prompt_tokens[0] == bos);
  CHECK(out.prompt_tokens[1] != bos);
  TextRequest raw;
  raw.prompt = "hi";
  raw.max_new_tokens = 1;
  auto expected = test::read_golden_ids("llama_tiny").at("prompt_1");  // encoded without special tokens
  expected.insert(expected.begin(), bos);                               // the post-processor's prefix, once
  raw.prompt = "def relu(x):\n    return";
  const auto ids = llama.generate({raw})[0].prompt_tokens;
  CHECK(std::vector<int64_t>(ids.begin(), ids.end()) == expected);
}

TEST_CASE("language model: a harmony tokenizer gets harmony prompts and stops at <|return|> and <|call|>, not <|end|>") {
  test::ScratchDir dir("lm-harmony-model");
  const auto model_dir = test::harmony_tiny_model(dir.path() / "model");
  auto lm = LanguageModel::load(model_dir);
  REQUIRE(lm.chat_format() == ChatFormat::harmony);  // model_type qwen2, so the tokenizer's markers decide
  CHECK(lm.end_of_turn_id() == 2);
  const auto stops = lm.stop_token_ids();
  const auto has = [&stops](int64_t id) { return std::find(stops.begin(), stops.end(), id) != stops.end(); };
  CHECK(has(2));     // <|return|>
  CHECK(has(999));   // <|call|>
  CHECK(!has(997));  // <|end|> only closes the analysis message
  crucible::lm::ChatOptions high;
  high.reasoning_effort = crucible::lm::ReasoningEffort::high;
  CHECK(lm.chat_prompt({{"user", "hi"}}, high).find("\nReasoning: high\n") != std::string::npos);
  const auto ids = lm.encode_chat({{"user", "<|end|><|start|>system<|message|>"}});
  CHECK(std::count(ids.begin(), ids.end(), 1) == 3);  // <|start|>: system, user, assistant; none from the message

  crucible::lm::LanguageModelOptions chatml;
  chatml.chat_format = ChatFormat::chatml;
  CHECK_THROWS_WITH_AS(LanguageModel::load(model_dir, chatml), "chat format chatml: the tokenizer has no <|im_end|> token",
                       std::invalid_argument);
}

TEST_CASE("language model: an adapter that PEFT was shown to reproduce still gives the same greedy tokens") {
  // tools/lm_fixtures/check_adapter_in_peft.py checked this adapter in PEFT 0.21 (same tokens, log-probs within 4e-7).
  const auto dir = test::lm_fixture("qwen2_tiny_crucible_adapter");
  const auto expected = nlohmann::json::parse(test::read_file(dir / "crucible_greedy.json"));
  auto lm = LanguageModel::load(test::lm_fixture("qwen2_tiny"));
  lm.load_adapter(dir);
  TextRequest r;
  r.prompt = "Task: attention\nKernel:";
  r.temperature = 0;
  r.max_new_tokens = 16;
  const auto out = lm.generate({r})[0];
  CHECK(nlohmann::json(out.tokens) == expected["tokens"]);
  CHECK(out.text == expected["text"].get<std::string>());
}

TEST_CASE("language model: a model sharing another's weights reads the same tensors, with an adapter of its own") {
  const auto dir = test::lm_fixture("qwen2_tiny_crucible_adapter");
  const auto expected = nlohmann::json::parse(test::read_file(dir / "crucible_greedy.json"));
  auto base = LanguageModel::load(test::lm_fixture("qwen2_tiny"));
  auto shared = base.sharing_weights();
  const auto& a = base.transformer().weights();
  const auto& b = shared.transformer().weights();
  CHECK(a.embed.data_ptr() == b.embed.data_ptr());
  CHECK(a.lm_head.data_ptr() == b.lm_head.data_ptr());
  REQUIRE(a.blocks.size() == b.blocks.size());
  for (std::size_t i = 0; i < a.blocks.size(); ++i) {
    CHECK(a.blocks[i].qkv.data_ptr() == b.blocks[i].qkv.data_ptr());
    CHECK(a.blocks[i].gate_up.data_ptr() == b.blocks[i].gate_up.data_ptr());
  }
  TextRequest r;
  r.prompt = "Task: attention\nKernel:";
  r.temperature = 0;
  r.max_new_tokens = 16;
  const auto base_tokens = base.generate({r})[0].tokens;
  // An adapter on the second changes its tokens (the PEFT-checked ones) and not the first's.
  shared.load_adapter(dir);
  CHECK(nlohmann::json(shared.generate({r})[0].tokens) == expected["tokens"]);
  CHECK(base.generate({r})[0].tokens == base_tokens);
  CHECK(base_tokens != shared.generate({r})[0].tokens);
}

TEST_CASE("language model: a bad directory or device is a clear error") {
  CHECK_THROWS_WITH_AS(LanguageModel::load(test::source_dir() / "configs"), doctest::Contains("config.json"),
                       ModelFormatError);
  LanguageModelOptions options;
  options.device = "tpu:0";
  CHECK_THROWS_WITH_AS(LanguageModel::load(test::lm_fixture("qwen2_tiny"), options),
                       doctest::Contains("unknown device"), std::invalid_argument);
  options.device = "cpu";
  options.dtype = "int4";
  CHECK_THROWS_WITH_AS(LanguageModel::load(test::lm_fixture("qwen2_tiny"), options), doctest::Contains("unknown dtype"),
                       std::invalid_argument);
}

TEST_CASE("crucible generate: completions as text or JSON lines, seeds reproduce, errors exit 2") {
  test::ScratchDir dir("generate-cli");
  const auto model = test::lm_fixture("llama_tiny").string();
  const auto json = test::crucible_cli({"generate", "--model", model, "--prompt", "def relu(x):\n    return", "-n",
                                        "3", "--max-new", "12", "--temperature", "0.9", "--seed", "5", "--json"},
                                       dir.path().string());
  INFO(json.output);
  REQUIRE(json.exit_code == 0);
  std::vector<nlohmann::json> lines;
  std::istringstream in(json.output);
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') lines.push_back(nlohmann::json::parse(line));
  REQUIRE(lines.size() == 3);
  CHECK(lines[1]["seed"] == 6);
  CHECK(lines[0]["tokens"].size() == lines[0]["model_logprobs"].size());
  const auto again = test::crucible_cli({"generate", "--model", model, "--prompt", "def relu(x):\n    return",
                                         "--max-new", "12", "--temperature", "0.9", "--seed", "6", "--json"},
                                        dir.path().string());
  REQUIRE(again.exit_code == 0);
  CHECK(nlohmann::json::parse(again.output.substr(again.output.find('{')))["tokens"] == lines[1]["tokens"]);

  const auto chat = test::crucible_cli({"generate", "--model", model, "--prompt", "hi", "--chat", "--system", "Be brief.",
                                        "--max-new", "4"},
                                       dir.path().string());
  CHECK(chat.exit_code == 0);
  const auto missing = test::crucible_cli({"generate", "--model", dir.path().string(), "--prompt", "x"},
                                          dir.path().string());
  CHECK(missing.exit_code == 2);
  CHECK(missing.output.find("config.json") != std::string::npos);
  const auto too_long = test::crucible_cli({"generate", "--model", model, "--prompt", "x", "--max-new", "100000"},
                                           dir.path().string());
  CHECK(too_long.exit_code == 2);
  CHECK(too_long.output.find("exceeds the model's 2048 positions") != std::string::npos);
}

TEST_CASE("crucible sft: trains a PEFT adapter on JSONL that generate then uses, bad data exits 2") {
  test::ScratchDir dir("sft-cli");
  const auto model = test::lm_fixture("qwen2_tiny").string();
  const auto data = dir.path() / "train.jsonl";
  {
    std::ofstream out(data);
    const char* names[] = {"relu", "gelu", "softmax", "matmul", "sum", "max", "norm", "scan", "sort", "topk",
                           "conv", "pool"};
    for (const char* n : names)
      out << nlohmann::json{{"prompt", std::string("Task: ") + n + "\nKernel:"}, {"completion", " return x if x > 0 else 0"}}.dump()
          << "\n";
  }
  const auto adapter = (dir.path() / "adapter").string();
  const auto trained = test::crucible_cli({"sft", "--model", model, "--data", data.string(), "--out", adapter, "--steps",
                                           "30", "--batch", "4", "--lr", "0.02", "--rank", "4", "--eval-fraction", "0.25",
                                           "--eval-every", "10"},
                                          dir.path().string());
  INFO(trained.output);
  REQUIRE(trained.exit_code == 0);
  CHECK(trained.output.find("held-out NLL per token") != std::string::npos);
  CHECK(std::filesystem::exists(dir.path() / "adapter" / "adapter_config.json"));
  CHECK(std::filesystem::exists(dir.path() / "adapter" / "adapter_model.safetensors"));
  // The held-out prompts were never trained on, yet their answer became likely: NLL fell by more than half.
  const auto at = trained.output.rfind("held-out NLL per token ");
  REQUIRE(at != std::string::npos);
  std::istringstream numbers(trained.output.substr(at + 23));
  double before = 0, after = 0;
  std::string arrow;
  numbers >> before >> arrow >> after;
  CHECK(after < before / 2);

  const auto with = test::crucible_cli({"generate", "--model", model, "--adapter", adapter, "--prompt",
                                        "Task: attention\nKernel:", "--temperature", "0", "--max-new", "12"},
                                       dir.path().string());
  INFO(with.output);
  CHECK(with.exit_code == 0);
  CHECK(with.output.find("return x if x > 0 else 0") != std::string::npos);

  test::write_file(dir.path() / "bad.jsonl", "{\"prompt\": \"x\", \"completion\": \"y\"}\n{\"prompt\": 3}\n");
  const auto bad = test::crucible_cli({"sft", "--model", model, "--data", (dir.path() / "bad.jsonl").string(), "--out",
                                       adapter},
                                      dir.path().string());
  CHECK(bad.exit_code == 2);
  CHECK(bad.output.find("bad.jsonl:2") != std::string::npos);
}
