#include "sam/runtime/batch.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sam/error.h"

namespace sam::runtime {

// One job at a time: Propose publishes it under `mutex`, bumps `generation`
// and wakes the workers; everyone (the caller included) claims indexes from
// `next` until the batch is exhausted; the caller then waits until every
// worker has left the job (`busy` back to 0) before returning, so that no
// worker touches the spans afterwards.
struct DraftPool::State {
  std::mutex call_mutex;  // serializes Propose calls
  std::mutex mutex;
  std::condition_variable start_cv;
  std::condition_variable done_cv;
  uint64_t generation = 0;
  size_t busy = 0;
  bool stopping = false;
  // The current job (read by workers after they saw its generation).
  std::span<Session* const> sessions;
  std::span<const uint32_t> starts;
  std::span<BatchDraft> out;
  std::atomic<size_t> next{0};
  std::vector<std::thread> workers;

  void Drain() {
    for (size_t i = next.fetch_add(1, std::memory_order_relaxed); i < sessions.size();
         i = next.fetch_add(1, std::memory_order_relaxed)) {
      BatchDraft& d = out[i];
      try {
        d.tree = &sessions[i]->Propose(starts[i]);
        d.error = nullptr;
      } catch (...) {
        d.tree = nullptr;
        d.error = std::current_exception();
      }
    }
  }

  void Work() {
    uint64_t seen = 0;
    for (;;) {
      {
        std::unique_lock lock(mutex);
        start_cv.wait(lock, [&] { return stopping || generation != seen; });
        if (stopping) return;
        seen = generation;
      }
      Drain();
      {
        std::lock_guard lock(mutex);
        if (--busy == 0) done_cv.notify_one();
      }
    }
  }
};

DraftPool::DraftPool(size_t num_threads) : state_(std::make_unique<State>()) {
  if (num_threads == 0) num_threads = std::max(1u, std::thread::hardware_concurrency());
  if (num_threads > 1024)
    throw Error(ErrorCode::kInvalidArgument,
                "DraftPool: " + std::to_string(num_threads) + " threads, at most 1024");
  state_->workers.reserve(num_threads - 1);
  for (size_t i = 1; i < num_threads; ++i) state_->workers.emplace_back([s = state_.get()] {
    s->Work();
  });
}

DraftPool::~DraftPool() {
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
  }
  state_->start_cv.notify_all();
  for (std::thread& t : state_->workers) t.join();
}

size_t DraftPool::num_threads() const { return state_->workers.size() + 1; }

void DraftPool::Propose(std::span<Session* const> sessions,
                        std::span<const uint32_t> start_tokens, std::span<BatchDraft> out) {
  if (start_tokens.size() != sessions.size() || out.size() != sessions.size())
    throw Error(ErrorCode::kInvalidArgument,
                "DraftPool::Propose: " + std::to_string(sessions.size()) + " sessions, " +
                    std::to_string(start_tokens.size()) + " start tokens, " +
                    std::to_string(out.size()) + " outputs; expected equal sizes");
  for (size_t i = 0; i < sessions.size(); ++i)
    if (sessions[i] == nullptr)
      throw Error(ErrorCode::kInvalidArgument,
                  "DraftPool::Propose: session " + std::to_string(i) + " is null");
  State& s = *state_;
  std::lock_guard call(s.call_mutex);
  // Small batches are not worth waking the workers (about as costly as a
  // proposal each).
  const bool wake = !s.workers.empty() && sessions.size() > 1;
  {
    std::lock_guard lock(s.mutex);
    s.sessions = sessions;
    s.starts = start_tokens;
    s.out = out;
    s.next.store(0, std::memory_order_relaxed);
    if (wake) {
      s.busy = s.workers.size();
      ++s.generation;
    }
  }
  if (wake) s.start_cv.notify_all();
  s.Drain();
  if (wake) {
    std::unique_lock lock(s.mutex);
    s.done_cv.wait(lock, [&] { return s.busy == 0; });
  }
}

}  // namespace sam::runtime
