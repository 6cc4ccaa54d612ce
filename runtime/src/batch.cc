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

// One job at a time. Propose publishes it under `mutex` with a new
// generation and wakes the workers; everyone (the caller included) claims
// indexes through `ticket`, which holds the generation (high 32 bits) and the
// next index (low 32 bits), so that a worker still holding an older job can
// never claim an index of the current one. `remaining` counts the current
// job's unfinished sessions; the caller returns as soon as it reaches 0,
// without waiting for workers that have not woken yet (a wake-up costs tens
// of microseconds, more than a small batch): they find nothing to claim.
struct DraftPool::State {
  struct Job {
    uint32_t generation = 0;
    std::span<Session* const> sessions;
    std::span<const uint32_t> starts;
    std::span<const size_t> max_nodes;  // empty: no limit
    std::span<BatchDraft> out;
  };

  std::mutex call_mutex;  // serializes Propose calls
  std::mutex mutex;
  std::condition_variable start_cv;
  std::condition_variable done_cv;
  Job job;  // guarded by mutex
  bool stopping = false;
  alignas(64) std::atomic<uint64_t> ticket{0};
  alignas(64) std::atomic<size_t> remaining{0};
  std::vector<std::thread> workers;

  // Drafts sessions of `j` until none is left to claim.
  void Drain(const Job& j) {
    const uint64_t n = j.sessions.size();
    uint64_t t = ticket.load(std::memory_order_relaxed);
    for (;;) {
      if ((t >> 32) != j.generation || (t & 0xFFFFFFFFu) >= n) return;
      if (!ticket.compare_exchange_weak(t, t + 1, std::memory_order_relaxed)) continue;
      const size_t i = t & 0xFFFFFFFFu;
      BatchDraft& d = j.out[i];
      try {
        d.tree = j.max_nodes.empty() ? &j.sessions[i]->Propose(j.starts[i])
                                     : &j.sessions[i]->Propose(j.starts[i], j.max_nodes[i]);
        d.error = nullptr;
      } catch (...) {
        d.tree = nullptr;
        d.error = std::current_exception();
      }
      if (remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard lock(mutex);  // the caller may be about to wait
        done_cv.notify_one();
      }
      t = ticket.load(std::memory_order_relaxed);
    }
  }

  void Work() {
    uint32_t seen = 0;
    for (;;) {
      Job j;
      {
        std::unique_lock lock(mutex);
        start_cv.wait(lock, [&] { return stopping || job.generation != seen; });
        if (stopping) return;
        j = job;
        seen = j.generation;
      }
      Drain(j);
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
  Propose(sessions, start_tokens, {}, out);
}

void DraftPool::Propose(std::span<Session* const> sessions,
                        std::span<const uint32_t> start_tokens, std::span<const size_t> max_nodes,
                        std::span<BatchDraft> out) {
  if (start_tokens.size() != sessions.size() || out.size() != sessions.size())
    throw Error(ErrorCode::kInvalidArgument,
                "DraftPool::Propose: " + std::to_string(sessions.size()) + " sessions, " +
                    std::to_string(start_tokens.size()) + " start tokens, " +
                    std::to_string(out.size()) + " outputs; expected equal sizes");
  if (!max_nodes.empty() && max_nodes.size() != sessions.size())
    throw Error(ErrorCode::kInvalidArgument,
                "DraftPool::Propose: " + std::to_string(sessions.size()) + " sessions but " +
                    std::to_string(max_nodes.size()) + " node limits");
  for (size_t i = 0; i < sessions.size(); ++i)
    if (sessions[i] == nullptr)
      throw Error(ErrorCode::kInvalidArgument,
                  "DraftPool::Propose: session " + std::to_string(i) + " is null");
  if (sessions.size() > 0xFFFFFFFFu)
    throw Error(ErrorCode::kInvalidArgument, "DraftPool::Propose: more than 2^32 - 1 sessions");
  if (sessions.empty()) return;
  State& s = *state_;
  std::lock_guard call(s.call_mutex);
  State::Job j;
  {
    std::lock_guard lock(s.mutex);
    j = {s.job.generation + 1, sessions, start_tokens, max_nodes, out};
    s.job = j;
    s.remaining.store(sessions.size(), std::memory_order_relaxed);
    s.ticket.store(uint64_t{j.generation} << 32, std::memory_order_relaxed);
  }
  // One session is not worth a wake-up.
  if (sessions.size() > 1) s.start_cv.notify_all();
  s.Drain(j);
  if (s.remaining.load(std::memory_order_acquire) != 0) {
    std::unique_lock lock(s.mutex);
    s.done_cv.wait(lock, [&] { return s.remaining.load(std::memory_order_acquire) == 0; });
  }
}

}  // namespace sam::runtime
