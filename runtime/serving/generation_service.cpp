#include "serving/generation_service.h"

#include <chrono>
#include <stdexcept>

#include "lm/lora.h"
#include "lm/transformer.h"

namespace crucible::serving {

GenerationService::GenerationService(lm::LanguageModel model, ServiceOptions options)
    : model_(std::move(model)), options_(std::move(options)) {
  if (options_.max_batch == 0) throw std::invalid_argument("max_batch must be at least 1");
  const auto& o = model_.transformer().options();
  for (const auto& [name, dir] : options_.adapters) {
    if (name == options_.model_name) throw std::invalid_argument("adapter '" + name + "' has the base model's name");
    adapters_[name] = std::make_unique<lm::LoraAdapter>(lm::LoraAdapter::load_peft(dir, model_.config(), o.device, at::kFloat));
  }
  thread_ = std::thread([this] { decode_loop(); });
}

GenerationService::~GenerationService() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::vector<std::string> GenerationService::model_names() const {
  std::vector<std::string> out{options_.model_name};
  for (const auto& [name, adapter] : adapters_) out.push_back(name);
  return out;
}

bool GenerationService::serves(const std::string& name) const { return name == options_.model_name || adapters_.count(name); }

ServiceStats GenerationService::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

std::vector<lm::TextCompletion> GenerationService::generate(const std::string& name, std::vector<lm::TextRequest> requests) {
  if (!serves(name)) throw std::invalid_argument("the model '" + name + "' is not served here");
  if (requests.empty()) return {};
  auto job = std::make_unique<Job>();
  job->name = name;
  job->requests = std::move(requests);
  auto done = job->done.get_future();
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw std::runtime_error("the server is stopping");
    queue_.push_back(std::move(job));
  }
  wake_.notify_all();
  return done.get();
}

// One batch decoded together. When it fails, each job is decoded alone, so one client's bad request (a prompt past
// the model's context) fails only that client.
void GenerationService::decode(const std::string& name, std::vector<std::unique_ptr<Job>>& batch) {
  auto adapter = adapters_.find(name);
  std::vector<std::vector<lm::TextCompletion>> results;
  try {
    std::vector<lm::TextRequest> all;
    for (const auto& job : batch) all.insert(all.end(), job->requests.begin(), job->requests.end());
    model_.transformer().use_adapter(adapter == adapters_.end() ? nullptr : adapter->second.get());
    auto completions = model_.generate(all);
    std::size_t at = 0;
    for (const auto& job : batch) {
      const auto begin = completions.begin() + static_cast<std::ptrdiff_t>(at);
      results.emplace_back(std::make_move_iterator(begin),
                           std::make_move_iterator(begin + static_cast<std::ptrdiff_t>(job->requests.size())));
      at += job->requests.size();
    }
  } catch (...) {
    if (batch.size() > 1) {
      for (auto& job : batch) {
        std::vector<std::unique_ptr<Job>> alone;
        alone.push_back(std::move(job));
        decode(name, alone);
      }
      return;
    }
    batch.front()->done.set_exception(std::current_exception());
    return;
  }
  for (std::size_t i = 0; i < batch.size(); ++i) batch[i]->done.set_value(std::move(results[i]));
}

void GenerationService::decode_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    // The first request waits a moment for others, so concurrent clients share one decode.
    wake_.wait_for(lock, std::chrono::duration<double>(options_.batch_window_s), [this] {
      std::size_t queued = 0;
      for (const auto& job : queue_) queued += job->requests.size();
      return stopping_ || queued >= options_.max_batch;
    });
    // One batch: the oldest job's model, and every queued job for it while the batch has room (a job larger than
    // the limit goes alone).
    const std::string name = queue_.front()->name;
    std::vector<std::unique_ptr<Job>> batch;
    std::size_t sequences = 0;
    for (auto it = queue_.begin(); it != queue_.end();) {
      if ((*it)->name == name && (batch.empty() || sequences + (*it)->requests.size() <= options_.max_batch)) {
        sequences += (*it)->requests.size();
        batch.push_back(std::move(*it));
        it = queue_.erase(it);
      } else {
        ++it;
      }
    }
    ++stats_.batches;
    stats_.requests += batch.size();
    stats_.sequences += sequences;
    stats_.largest_batch = std::max(stats_.largest_batch, sequences);
    lock.unlock();
    decode(name, batch);
    lock.lock();
  }
}

}  // namespace crucible::serving
