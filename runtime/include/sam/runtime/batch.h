// Batched drafting: one call proposes drafts for many sessions on a fixed
// thread pool.
//
//   sam::runtime::DraftPool pool(4);                 // threads made once
//   std::vector<sam::runtime::Session*> sessions = ...;   // one per request
//   std::vector<uint32_t> starts = ...;                    // start token of each
//   std::vector<sam::runtime::BatchDraft> drafts(sessions.size());
//   pool.Propose(sessions, starts, drafts);          // returns when all are done
//   for (size_t i = 0; i < drafts.size(); ++i) {
//     if (drafts[i].error) { /* std::rethrow_exception(drafts[i].error) */ continue; }
//     const sam::runtime::DraftTree& tree = *drafts[i].tree;   // session i's own tree
//   }
//
// Propose gives the same drafts as calling sessions[i]->Propose(starts[i])
// (or Propose(starts[i], max_nodes[i])) for each i in turn: sessions do not interact. Each session's tree is its
// own (Session::Propose), so a step allocates nothing beyond what a session
// allocates itself (an error's exception_ptr aside).
//
// Threads: the pool owns num_threads - 1 worker threads; the calling thread
// drafts too. Everyone takes sessions one at a time from a shared counter, so
// a slow session does not hold up the others' shares, and the call returns
// as soon as every session is drafted, without waiting for workers that have
// not woken up yet (a wake-up costs tens of microseconds, more than drafting
// a small batch). Each session is drafted by one thread, and what the caller
// did to it before the call happens before its drafting (and that before the
// call returns). Concurrent Propose calls on one pool run one after the
// other. A session may appear only once in a batch, and must not be used by
// another thread during the call.
#ifndef SAM_RUNTIME_BATCH_H_
#define SAM_RUNTIME_BATCH_H_

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>

#include "sam/export.h"
#include "sam/runtime/draft.h"
#include "sam/runtime/session.h"

namespace sam::runtime {

// The outcome of one session's proposal in a batch: its tree (valid until
// the session's next call) or the exception its Propose threw.
struct SAM_API BatchDraft {
  const DraftTree* tree = nullptr;  // null when error is set
  std::exception_ptr error;         // null on success
};

class SAM_API DraftPool {
 public:
  // A pool drafting on num_threads threads, the caller's included (0: the
  // hardware's core count; 1: no worker thread). Throws sam::Error
  // (kInvalidArgument) above 1024 threads.
  explicit DraftPool(size_t num_threads);
  // Joins the workers.
  ~DraftPool();
  DraftPool(const DraftPool&) = delete;
  DraftPool& operator=(const DraftPool&) = delete;

  size_t num_threads() const;

  // Drafts sessions[i]->Propose(start_tokens[i]) into out[i] for every i and
  // returns when all are done. An exception from one session goes to its
  // out[i].error; the others are unaffected. Throws sam::Error
  // (kInvalidArgument) when the three spans differ in size or a session is
  // null (before drafting anything).
  void Propose(std::span<Session* const> sessions, std::span<const uint32_t> start_tokens,
               std::span<BatchDraft> out);
  // The same with sessions[i]->Propose(start_tokens[i], max_nodes[i]): a
  // per-session limit on the draft's nodes (Session::Propose). Throws
  // sam::Error (kInvalidArgument) when max_nodes's size differs too.
  void Propose(std::span<Session* const> sessions, std::span<const uint32_t> start_tokens,
               std::span<const size_t> max_nodes, std::span<BatchDraft> out);

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_BATCH_H_
