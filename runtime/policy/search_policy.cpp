#include "policy/search_policy.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "policy/kernel_templates.h"

namespace crucible::policy {
namespace {

std::vector<double> softmax(const std::vector<double>& logits) {
  const double top = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  double sum = 0.0;
  for (std::size_t i = 0; i < logits.size(); ++i) sum += p[i] = std::exp(logits[i] - top);
  for (double& x : p) x /= sum;
  return p;
}

const KernelTemplate& require_template(const eval::TaskSpec& task, eval::CandidateLanguage language) {
  const KernelTemplate* t = template_for(task, language);
  if (!t)
    throw std::invalid_argument("the search policy has no " + std::string(language.name()) +
                                " kernel template for task '" + task.name + "'");
  return *t;
}

// The names of the languages with templates, for messages: "cpu, cuda or triton".
std::string template_language_names() {
  const auto languages = template_languages();
  std::string names;
  for (std::size_t i = 0; i < languages.size(); ++i)
    names += (i == 0 ? "" : i + 1 == languages.size() ? " or " : ", ") + std::string(languages[i].name());
  return names;
}

// A snapshot's language, by name; throws std::invalid_argument for one without templates.
eval::CandidateLanguage template_language_named(const std::string& name) {
  for (const auto& language : template_languages())
    if (language.name() == name) return language;
  throw std::invalid_argument("malformed search-policy snapshot: unknown backend '" + name + "' (" +
                              template_language_names() + ")");
}

}  // namespace

SearchPolicy::SearchPolicy(uint64_t seed, SearchPolicyOptions options) : rng_(seed), options_(options) {
  if (!(options_.temperature > 0.0)) throw std::invalid_argument("search policy: temperature must be > 0");
  if (covered_tasks(options_.language).empty())
    throw std::invalid_argument("search policy: it has kernel templates in " + template_language_names() + ", not " +
                                std::string(options_.language.name()));
}

std::vector<std::vector<double>>& SearchPolicy::logits_for(const eval::TaskSpec& task) {
  const KernelTemplate& t = require_template(task, options_.language);
  auto& logits = logits_[task.name];
  if (logits.empty())
    for (const auto& knob : t.knobs) logits.emplace_back(knob.choices.size(), 0.0);
  bool fits = logits.size() == t.knobs.size();
  for (std::size_t k = 0; fits && k < logits.size(); ++k) fits = logits[k].size() == t.knobs[k].choices.size();
  if (!fits)  // e.g. restored from a snapshot of other templates
    throw std::invalid_argument("search policy: the logits of task '" + task.name + "' do not match its " +
                                std::string(options_.language.name()) + " template's knobs");
  return logits;
}

std::vector<double> SearchPolicy::choice_probabilities(const std::vector<double>& logits) const {
  std::vector<double> scaled = logits;
  for (double& x : scaled) x /= options_.temperature;
  return softmax(scaled);
}

// A sample of the given knob choices: tokens, their log-probabilities under the current logits, output and source.
Sample SearchPolicy::rendered(const eval::TaskSpec& task, const KernelTemplate& t,
                              const std::vector<std::vector<double>>& logits, const std::vector<int32_t>& choice) const {
  Sample s;
  s.task = task.name;
  s.policy_version = version_;
  std::vector<int> values;
  for (std::size_t k = 0; k < t.knobs.size(); ++k) {
    const auto c = static_cast<std::size_t>(choice[k]);
    s.tokens.push_back(choice[k]);
    s.logprobs.push_back(static_cast<float>(std::log(choice_probabilities(logits[k])[c])));
    values.push_back(t.knobs[k].choices[c]);
    s.output += (k ? " " : "") + t.knobs[k].name + "=" + std::to_string(values.back());
  }
  s.source = t.render(task, values);
  return s;
}

std::vector<Sample> SearchPolicy::sample(const eval::TaskSpec& task, int n) {
  const KernelTemplate& t = require_template(task, options_.language);
  auto& logits = logits_for(task);
  std::vector<Sample> out;
  for (int s = 0; s < n; ++s) {
    std::vector<int32_t> choice;
    for (std::size_t k = 0; k < t.knobs.size(); ++k) {
      auto p = choice_probabilities(logits[k]);
      choice.push_back(std::discrete_distribution<int>(p.begin(), p.end())(rng_));
    }
    out.push_back(rendered(task, t, logits, choice));
  }
  return out;
}

std::vector<Sample> SearchPolicy::refine(const eval::TaskSpec& task, const std::vector<Attempt>& attempts) {
  const KernelTemplate& t = require_template(task, options_.language);
  auto& logits = logits_for(task);
  std::vector<Sample> out;
  for (const auto& attempt : attempts) {
    std::vector<int32_t> choice = attempt.previous.tokens;
    bool fits = choice.size() == t.knobs.size();
    for (std::size_t k = 0; fits && k < choice.size(); ++k)
      fits = choice[k] >= 0 && static_cast<std::size_t>(choice[k]) < t.knobs[k].choices.size();
    if (!fits) {  // not this template's sample: start afresh
      out.push_back(sample(task, 1).front());
      continue;
    }
    std::vector<std::size_t> movable;
    for (std::size_t k = 0; k < t.knobs.size(); ++k)
      if (t.knobs[k].choices.size() > 1) movable.push_back(k);
    std::shuffle(movable.begin(), movable.end(), rng_);
    const std::size_t moves = attempt.feedback.status == eval::Status::correct ? 1 : 2;
    for (std::size_t m = 0; m < std::min(moves, movable.size()); ++m) {
      const std::size_t k = movable[m];
      auto p = choice_probabilities(logits[k]);
      p[static_cast<std::size_t>(choice[k])] = 0.0;  // a move changes the knob
      choice[k] = std::discrete_distribution<int>(p.begin(), p.end())(rng_);
    }
    out.push_back(rendered(task, t, logits, choice));
  }
  return out;
}

void SearchPolicy::update(const std::vector<Sample>& samples, const std::vector<double>& advantages) {
  if (samples.size() != advantages.size()) throw std::invalid_argument("update: one advantage per sample");
  if (samples.empty()) return;
  std::map<std::string, std::vector<std::vector<double>>> gradients;
  for (std::size_t s = 0; s < samples.size(); ++s) {
    auto it = logits_.find(samples[s].task);
    if (it == logits_.end()) throw std::invalid_argument("update: a sample of a task this policy never sampled");
    if (samples[s].tokens.size() != it->second.size())
      throw std::invalid_argument("update: a sample's tokens do not match the task's knobs");
    auto& grad = gradients[samples[s].task];
    if (grad.empty())
      for (const auto& knob : it->second) grad.emplace_back(knob.size(), 0.0);
    for (std::size_t k = 0; k < it->second.size(); ++k) {
      auto p = softmax(it->second[k]);
      for (std::size_t c = 0; c < p.size(); ++c)
        grad[k][c] += advantages[s] * ((static_cast<int>(c) == samples[s].tokens[k] ? 1.0 : 0.0) - p[c]);
    }
  }
  const double scale = options_.learning_rate / static_cast<double>(samples.size());
  for (auto& [task, grad] : gradients)
    for (std::size_t k = 0; k < grad.size(); ++k)
      for (std::size_t c = 0; c < grad[k].size(); ++c) logits_[task][k][c] += scale * grad[k][c];
  ++version_;
}

std::vector<double> SearchPolicy::probabilities(const std::string& task, std::size_t knob) const {
  auto it = logits_.find(task);
  if (it == logits_.end() || knob >= it->second.size()) return {};
  return softmax(it->second[knob]);
}

std::string SearchPolicy::snapshot() const {
  nlohmann::json j;
  j["version"] = version_;
  j["learning_rate"] = options_.learning_rate;
  j["temperature"] = options_.temperature;
  j["backend"] = options_.language.name();
  j["logits"] = logits_;
  return j.dump();
}

void SearchPolicy::restore(const std::string& text) {
  try {
    auto j = nlohmann::json::parse(text);
    auto logits = j.at("logits").get<std::map<std::string, std::vector<std::vector<double>>>>();
    const eval::CandidateLanguage language =
        template_language_named(j.value("backend", std::string(options_.language.name())));
    version_ = j.at("version").get<uint64_t>();
    options_.learning_rate = j.at("learning_rate").get<double>();
    options_.temperature = j.value("temperature", options_.temperature);
    options_.language = language;
    logits_ = std::move(logits);
  } catch (const nlohmann::json::exception& e) {
    throw std::invalid_argument(std::string("malformed search-policy snapshot: ") + e.what());
  }
}

}  // namespace crucible::policy
