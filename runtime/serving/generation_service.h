#pragma once
// One model shared by many clients: requests from any thread are batched (those that arrive within a short window,
// for the same model or adapter, up to a batch limit) and decoded together by one thread that owns the model.
// Requests that arrive while a batch decodes join it as its rows finish (continuous batching), and each client's
// answer is sent as soon as its own rows are done. PEFT adapters are loaded once and chosen per request by name,
// as vLLM serves LoRA.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <filesystem>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lm/language_model.h"

namespace crucible::serving {

struct ServiceOptions {
  std::string model_name;                                   // the base model's name in requests
  std::map<std::string, std::filesystem::path> adapters;    // name -> PEFT adapter directory
  std::size_t max_batch = 64;                               // sequences decoded together
  double batch_window_s = 0.005;                            // how long the first request waits for company
};

struct ServiceStats {
  std::size_t requests = 0, sequences = 0, batches = 0, largest_batch = 0;
  std::size_t joined = 0;   // requests that joined a batch already decoding
  std::size_t waiting = 0;  // requests queued now
};

class GenerationService {
 public:
  // Loads every adapter (throws lm::ModelFormatError naming a bad one) and starts the decoding thread.
  GenerationService(lm::LanguageModel model, ServiceOptions options);
  ~GenerationService();
  GenerationService(const GenerationService&) = delete;
  GenerationService& operator=(const GenerationService&) = delete;

  // The base model's name first, then the adapters'.
  std::vector<std::string> model_names() const;
  bool serves(const std::string& name) const;
  // Blocks until the requests are decoded: in a batch with whatever else came in its window, or in a batch already
  // decoding, as its rows free. Thread-safe.
  // Throws std::invalid_argument for a name it does not serve; rethrows a decoding failure.
  std::vector<lm::TextCompletion> generate(const std::string& name, std::vector<lm::TextRequest> requests);

  // Read only from the decoding thread's results; for rendering tokens and chat prompts.
  const lm::LanguageModel& model() const { return model_; }
  ServiceStats stats() const;

 private:
  struct Job {
    std::string name;
    std::vector<lm::TextRequest> requests;
    std::promise<std::vector<lm::TextCompletion>> done;
  };
  class Feed;
  void decode_loop();
  // A new batch: the queued jobs for `name` while their sequences fit max_batch (the first one whatever its size).
  // Under mutex_.
  std::vector<std::unique_ptr<Job>> take_jobs(const std::string& name);

  lm::LanguageModel model_;
  ServiceOptions options_;
  std::map<std::string, std::unique_ptr<lm::LoraAdapter>> adapters_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Job>> queue_;
  ServiceStats stats_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace crucible::serving
