// Prompt lookup decoding (PLD), the n-gram baseline of Spec-Bench
// (Saxena 2023; `find_candidate_pred_tokens` in Spec-Bench / HF transformers).
//
//   sam::runtime::PldDrafter pld;                 // max n-gram 3, 10 tokens
//   pld.Prefill(prompt_ids);
//   loop: pld.Propose(start, 41, &tree);          // linear draft, root = start
//         ...verify...
//         pld.Commit(start_and_accepted_ids);
//   pld.Reset();                                  // next request
//
// Text = the request's history (prompt + committed tokens) followed by the
// start token; L = its length. For n = max_ngram_size down to 1: let g be the
// last n tokens of the text; take the earliest position i with
// text[i, i+n) == g, i + n + num_pred_tokens <= L and i + n < L - n (the two
// conditions of the reference code: all num_pred_tokens following tokens
// exist, and the occurrence is not the suffix itself); the draft is
// text[i+n, i+n+num_pred_tokens), truncated to max_nodes - 1 tokens. The
// first n with such an occurrence wins; no occurrence at any n: no draft.
//
// Cost: Commit/Prefill O(max_ngram_size) expected per token (one hash-map
// insert per n-gram size keeps each n-gram's earliest position); Propose
// O(max_ngram_size + draft length) expected, no allocation once out's
// capacity suffices. Memory: the history plus one map entry per distinct
// n-gram. Thread safety: none.
#ifndef SAM_RUNTIME_PLD_H_
#define SAM_RUNTIME_PLD_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "sam/export.h"
#include "sam/runtime/drafter.h"

namespace sam::runtime {

class SAM_API PldDrafter : public Drafter {
 public:
  // Throws sam::Error (kInvalidArgument) when max_ngram_size or num_pred_tokens is 0.
  explicit PldDrafter(size_t max_ngram_size = 3, size_t num_pred_tokens = 10);

  std::string_view name() const override { return "pld"; }

  void Reset() override;
  // Appends the prompt to the history (call once per request, after Reset).
  void Prefill(std::span<const uint32_t> prompt) override;
  // Returns false (root-only tree) when no n-gram size finds an occurrence
  // or max_nodes <= 1.
  bool Propose(uint32_t start_token, size_t max_nodes, DraftTree* out) override;
  // Appends the committed tokens to the history.
  void Commit(std::span<const uint32_t> tokens) override;

  std::span<const uint32_t> history() const { return history_; }

 private:
  void Append(std::span<const uint32_t> tokens);
  // Earliest start of text[from, from+n) in the history, where text is the
  // history followed by start_token; -1 if it does not occur.
  int64_t EarliestOccurrence(size_t n, size_t from, uint32_t start_token) const;
  // Hash of the n-gram text[from, from+n) (see EarliestOccurrence).
  uint64_t HashNgram(size_t n, size_t from, uint32_t start_token) const;

  size_t max_ngram_size_;
  size_t num_pred_tokens_;
  std::vector<uint32_t> history_;
  // first_[n-1]: n-gram hash -> earliest start position in history_ of an
  // n-gram with that hash. A hash collision is detected on lookup (the
  // stored n-gram differs) and answered by a linear scan.
  std::vector<std::unordered_map<uint64_t, uint64_t>> first_;
};

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_PLD_H_
