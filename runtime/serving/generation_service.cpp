#include "serving/generation_service.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "lm/model/lora.h"
#include "lm/model/transformer.h"

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
  stop();
  thread_.join();
}

void GenerationService::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
}

std::vector<std::string> GenerationService::model_names() const {
  std::vector<std::string> out{options_.model_name};
  for (const auto& [name, adapter] : adapters_) out.push_back(name);
  return out;
}

bool GenerationService::serves(const std::string& name) const { return name == options_.model_name || adapters_.count(name); }

ServiceStats GenerationService::stats() const {
  std::lock_guard lock(mutex_);
  ServiceStats now = stats_;
  now.waiting = queue_.size();
  return now;
}

std::vector<lm::TextCompletion> GenerationService::generate(const std::string& name, std::vector<lm::TextRequest> requests,
                                                            const std::function<bool()>& abandoned) {
  if (!serves(name)) throw std::invalid_argument("the model '" + name + "' is not served here");
  if (requests.empty()) return {};
  auto job = std::make_unique<Job>();
  job->name = name;
  job->requests = std::move(requests);
  const Job* mine = job.get();
  const auto cancelled = job->cancelled;
  auto done = job->done.get_future();
  {
    std::lock_guard lock(mutex_);
    if (stopping_) throw GenerationCancelled("the server is stopping");
    queue_.push_back(std::move(job));
  }
  wake_.notify_all();
  // Waits in short slices: a caller that went away must not keep its rows decoding for minutes.
  while (done.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    const bool stopping = stopping_;
    if (!stopping && !(abandoned && abandoned())) continue;
    {
      // Counted before the rows are told to stop: whoever sees them stopped also sees why.
      std::lock_guard lock(mutex_);
      const auto queued = std::find_if(queue_.begin(), queue_.end(), [&](const auto& job) { return job.get() == mine; });
      if (queued != queue_.end()) queue_.erase(queued);
      if (!stopping) ++stats_.abandoned;
    }
    cancelled->store(true);  // the decoding thread stops its rows at their next step
    throw GenerationCancelled(stopping ? "the server is stopping" : "the client went away");
  }
  auto completions = done.get();
  // Rows the service cancelled (it is stopping) may all have ended before this thread looked.
  for (const auto& c : completions)
    if (c.finish_reason == "cancelled") throw GenerationCancelled("the server is stopping");
  return completions;
}

// The jobs in one decoding batch: those it started with, then those for the same model that arrive while it runs.
// Each job's requests are checked as they come (a bad one fails that client only, never the batch), and a job is
// answered as soon as its last completion is in.
class GenerationService::Feed : public lm::TextFeed {
 public:
  Feed(GenerationService& service, std::string name) : service_(service), name_(std::move(name)) {}

  // The requests of jobs that passed the check, in order; the others are answered with their error.
  std::vector<lm::TextRequest> admit(std::vector<std::unique_ptr<Job>> jobs) {
    std::vector<lm::TextRequest> requests;
    for (auto& job : jobs) {
      try {
        for (const auto& r : job->requests) service_.model_.check(r);
      } catch (...) {
        job->done.set_exception(std::current_exception());
        continue;
      }
      auto& open = open_.emplace_back(Open{std::move(job), {}, 0});
      open.results.resize(open.job->requests.size());
      open.left = open.results.size();
      service_.count_decoding(static_cast<std::ptrdiff_t>(open.left), 0);
      for (std::size_t i = 0; i < open.job->requests.size(); ++i) {
        owner_.push_back({open_.size() - 1, i});
        requests.push_back(open.job->requests[i]);
      }
    }
    return requests;
  }

  std::vector<lm::TextRequest> more() override {
    std::vector<std::unique_ptr<Job>> jobs;
    {
      std::lock_guard lock(service_.mutex_);
      // Oldest first: the batch takes jobs from the front of the queue while they are for its model and fit. Once
      // another model's job (or one too large) is the oldest, it takes no more and ends, so that job is next.
      auto& queue = service_.queue_;
      std::size_t sequences = 0;
      while (!queue.empty() && queue.front()->name == name_ &&
             sequences + queue.front()->requests.size() <= service_.options_.max_batch) {
        sequences += queue.front()->requests.size();
        jobs.push_back(std::move(queue.front()));
        queue.pop_front();
      }
      service_.stats_.requests += jobs.size();
      service_.stats_.sequences += sequences;
      service_.stats_.joined += jobs.size();
    }
    return admit(std::move(jobs));
  }

  void finished(std::size_t id, lm::TextCompletion completion) override {
    auto& open = open_[owner_[id].job];
    service_.count_decoding(-1, completion.finish_reason == "cancelled" ? 1 : 0);
    open.results[owner_[id].index] = std::move(completion);
    if (--open.left == 0) open.job->done.set_value(std::move(open.results));
  }

  bool cancelled(std::size_t id) const override {
    return service_.stopping_ || open_[owner_[id].job].job->cancelled->load();
  }

  // A failure of the decoding itself (not of a request): every client still waiting gets it.
  void fail_open(std::exception_ptr error) {
    for (auto& open : open_)
      if (open.left > 0) {
        service_.count_decoding(-static_cast<std::ptrdiff_t>(open.left), 0);
        open.left = 0;
        open.job->done.set_exception(error);
      }
  }

 private:
  struct Open {
    std::unique_ptr<Job> job;
    std::vector<lm::TextCompletion> results;
    std::size_t left;
  };
  struct Owner {
    std::size_t job, index;
  };
  GenerationService& service_;
  std::string name_;
  std::deque<Open> open_;     // stable addresses as jobs are added
  std::vector<Owner> owner_;  // by request id
};

std::vector<std::unique_ptr<GenerationService::Job>> GenerationService::take_jobs(const std::string& name) {
  std::vector<std::unique_ptr<Job>> jobs;
  std::size_t sequences = 0;
  for (auto it = queue_.begin(); it != queue_.end();) {
    // A job larger than the limit goes alone, as the first of a batch.
    const bool fits = sequences + (*it)->requests.size() <= options_.max_batch || jobs.empty();
    if ((*it)->name == name && fits) {
      sequences += (*it)->requests.size();
      jobs.push_back(std::move(*it));
      it = queue_.erase(it);
    } else {
      ++it;
    }
  }
  stats_.requests += jobs.size();
  stats_.sequences += sequences;
  return jobs;
}

void GenerationService::count_decoding(std::ptrdiff_t sequences, std::size_t cancelled) {
  std::lock_guard lock(mutex_);
  stats_.decoding = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(stats_.decoding) + sequences);
  stats_.cancelled_sequences += cancelled;
}

void GenerationService::fail_queued() {
  for (auto& job : queue_) job->done.set_exception(std::make_exception_ptr(GenerationCancelled("the server is stopping")));
  queue_.clear();
}

void GenerationService::decode_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (stopping_) return fail_queued();
    // The first request waits a moment for others, so concurrent clients share one decode.
    wake_.wait_for(lock, std::chrono::duration<double>(options_.batch_window_s), [this] {
      std::size_t queued = 0;
      for (const auto& job : queue_) queued += job->requests.size();
      return stopping_ || queued >= options_.max_batch;
    });
    if (stopping_) return fail_queued();
    if (queue_.empty()) continue;  // its only request was abandoned while it waited for company
    // One batch: the oldest job's model, and every queued job for it while the batch has room; later jobs for it
    // join while it decodes.
    const std::string name = queue_.front()->name;
    auto jobs = take_jobs(name);
    std::size_t sequences = 0;
    for (const auto& job : jobs) sequences += job->requests.size();
    ++stats_.batches;
    stats_.largest_batch = std::max(stats_.largest_batch, sequences);
    lock.unlock();
    Feed feed(*this, name);
    try {
      const auto requests = feed.admit(std::move(jobs));
      auto adapter = adapters_.find(name);
      model_.transformer().use_adapter(adapter == adapters_.end() ? nullptr : adapter->second.get());
      model_.generate(requests, feed);
    } catch (...) {
      feed.fail_open(std::current_exception());
    }
    lock.lock();
  }
}

}  // namespace crucible::serving
