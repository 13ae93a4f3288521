#pragma once
// One model shared by many clients: requests from any thread are batched (those that arrive within a short window,
// for the same model or adapter, up to a batch limit) and decoded together by one thread that owns the model.
// Requests that arrive while a batch decodes join it as its rows finish (continuous batching), and each client's
// answer is sent as soon as its own rows are done. PEFT adapters are loaded once and chosen per request by name,
// as vLLM serves LoRA.
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <filesystem>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "lm/model/language_model.h"

namespace crucible::serving {

struct ServiceOptions {
  std::string model_name;                                   // the base model's name in requests
  std::map<std::string, std::filesystem::path> adapters;    // name -> PEFT adapter directory
  std::size_t max_batch = 64;                               // sequences decoded together
  double batch_window_s = 0.005;                            // how long the first request waits for company
};

struct ServiceStats {
  std::size_t requests = 0, sequences = 0, batches = 0, largest_batch = 0;
  std::size_t joined = 0;     // requests that joined a batch already decoding
  std::size_t waiting = 0;    // requests queued now
  std::size_t decoding = 0;   // sequences in the batch decoding now, not yet finished
  std::size_t abandoned = 0;  // requests whose caller gave up waiting (a client that went away)
  std::size_t cancelled_sequences = 0;  // sequences stopped before their end because their caller gave up
};

// generate() gave up: its caller went away, or the service is stopping.
struct GenerationCancelled : std::runtime_error {
  using std::runtime_error::runtime_error;
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
  // decoding, as its rows free. Thread-safe. While it waits it asks `abandoned` (when given) every few tens of
  // milliseconds; once that says yes, or the service stops, the requests' rows stop at the next decode step (their
  // cache slots free for others) and it throws GenerationCancelled.
  // Throws std::invalid_argument for a name it does not serve; rethrows a decoding failure.
  std::vector<lm::TextCompletion> generate(const std::string& name, std::vector<lm::TextRequest> requests,
                                           const std::function<bool()>& abandoned = {});
  // Stops taking requests and cancels all work (queued requests fail, decoding rows stop at the next step); the
  // destructor does it too.
  void stop();

  // Read only from the decoding thread's results; for rendering tokens and chat prompts.
  const lm::LanguageModel& model() const { return model_; }
  ServiceStats stats() const;

 private:
  struct Job {
    std::string name;
    std::vector<lm::TextRequest> requests;
    std::promise<std::vector<lm::TextCompletion>> done;
    std::shared_ptr<std::atomic<bool>> cancelled = std::make_shared<std::atomic<bool>>(false);
  };
  class Feed;
  void decode_loop();
  // Under mutex_: answers every queued job that the service is stopping.
  void fail_queued();
  // Takes the lock: `sequences` more (or fewer) decoding, `cancelled` of them stopped early.
  void count_decoding(std::ptrdiff_t sequences, std::size_t cancelled);
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
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

}  // namespace crucible::serving
