// The drafter interface: anything that proposes draft trees (suffix automata,
// Token Recycling, prompt lookup, a small model, EAGLE-style heads, SDSAT
// adaptive tokens) plugs into a session through it.
//
// Call order for one request:
//   Prefill(prompt)                          once, with the prompt ids
//   loop:
//     Propose(start, max_nodes, &tree)       start = last token the model produced
//     ObserveTopK(...)                       after the verification pass (optional)
//     Commit(accepted)                       accepted = start + accepted draft tokens
//                                            (the bonus token is the next start)
// Reset() ends a request; drafters may keep cross-request state (Token
// Recycling keeps its table) but no per-request state may leak across Reset().
#ifndef SAM_RUNTIME_DRAFTER_H_
#define SAM_RUNTIME_DRAFTER_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "sam/export.h"
#include "sam/runtime/draft.h"

namespace sam::runtime {

class SAM_API Drafter {
 public:
  virtual ~Drafter() = default;
  virtual std::string_view name() const = 0;

  // Forget per-request state.
  virtual void Reset() {}
  // The request's prompt (already tokenized).
  virtual void Prefill(std::span<const uint32_t> /*prompt*/) {}
  // Proposes a tree rooted at start_token with at most max_nodes nodes (the
  // root included) into *out. Returns false (and leaves a root-only tree) when
  // it has nothing to propose. Must not allocate in steady state when out's
  // capacity suffices.
  virtual bool Propose(uint32_t start_token, size_t max_nodes, DraftTree* out) = 0;
  // Tokens that became part of the verified context this step, in order.
  virtual void Commit(std::span<const uint32_t> /*tokens*/) {}
  // Model feedback after a verification pass: for each evaluated node i,
  // tokens[i] is the node's token and topk[i*k .. i*k+k) the model's k most
  // likely next tokens after it, best first.
  virtual void ObserveTopK(std::span<const uint32_t> /*tokens*/,
                           std::span<const uint32_t> /*topk*/, size_t /*k*/) {}
};

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_DRAFTER_H_
