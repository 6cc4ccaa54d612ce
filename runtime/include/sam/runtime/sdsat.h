// SDSAT (Liu and Zhu 2024): a checkpoint fine-tuned with adaptive tokens
// drafts its own next tokens. k adaptive tokens S_1..S_k placed after the
// context (S_j at rotary position p + j after the last context position p)
// make the model predict, at S_j, the token j + 1 positions ahead. The target
// model's pass that verifies one step can therefore carry the next step's
// drafter: a chain of k adaptive nodes below the node that ends up last
// accepted gives, at its k positions, distributions q_1..q_k over the tokens
// that follow the step's bonus token.
//
// This drafter holds those k rows and builds the next step's tree from them
// with the tree builder of tree_draft.h: node depth d draws its children from
// q_{d+1} (the adaptive positions do not see the drafted path, so every node
// of a level shares one row). Nothing here runs a model: the caller (the torch
// backend's Generator) forwards the adaptive nodes and hands their processed
// rows over with SetRows after each verification.
//
//   sam::runtime::SdsatDrafter drafter({.adaptive_tokens = sam::runtime::ExpandSdsatTokens({32011}, 4)},
//                                      /*vocab=*/32016);
//   drafter.Configure(sampling, seed);            // per request
//   drafter.SetRows(rows);                        // k * vocab floats after a verification
//   drafter.Propose(bonus_token, 40, &tree);      // tree.source == DraftSource::kSdsat
//   // verify with drafter.last_draft().verify_mode and .ProposalRow(node)
//
// Tree shapes (SdsatOptions::tree; its depth is k): under greedy decoding the
// argmax chain (width 1, the official scheme) or the best-first top-W tree;
// under sampling either drafts drawn without replacement from q (RSD-S beams,
// verified by recursive rejection with q: DraftMode::kWithoutReplacement) or
// the deterministic top-W tree (verified by the deterministic rule). Rows are
// processed exactly like the target's (ApplySampling with the request's
// temperature, top-k and top-p; temperature 1 under greedy decoding, where
// they only rank).
//
// Errors: sam::Error (kInvalidArgument) for an empty or oversized adaptive
// list, ids outside the vocabulary, rows of the wrong size. Never prints.
// Thread safety: one thread at a time.
#ifndef SAM_RUNTIME_SDSAT_H_
#define SAM_RUNTIME_SDSAT_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "sam/export.h"
#include "sam/runtime/drafter.h"
#include "sam/runtime/tree_draft.h"
#include "sam/runtime/verify.h"

namespace sam::runtime {

// The most adaptive tokens per step (k).
inline constexpr size_t kMaxSdsatTokens = 64;

// The adaptive ids of one step: one id repeated k times (as the released
// CodeLlama checkpoints, id 32011), or k ids used in order. Throws
// sam::Error (kInvalidArgument) for k < 1, k > kMaxSdsatTokens, an empty
// list, or a list of several ids whose length is not k.
SAM_API std::vector<uint32_t> ExpandSdsatTokens(std::span<const uint32_t> ids, size_t k);

// How adaptive tokens ride on the target's passes.
enum class SdsatScheme {
  // The official scheme: pass 1 on [c, S x k] gives the next token and the
  // drafts (the S positions' KV dropped), pass 2 verifies them.
  kTwoPass,
  // One pass per step: a branch of k adaptive nodes below every draft node;
  // the branch below the last accepted node holds the next step's drafts.
  kOnePass,
};
// "two-pass", "one-pass".
SAM_API std::string_view SdsatSchemeName(SdsatScheme scheme);

// The tree options of an SDSAT draft of `k` levels and `width` (>= 1):
// greedy: chain for width 1, else the top-W tree; sampling: RSD-S beams of
// width W when `without_replacement`, else the deterministic top-W tree.
SAM_API TreeDraftOptions SdsatTreeOptions(size_t k, size_t width, bool greedy,
                                          bool without_replacement);

struct SAM_API SdsatOptions {
  std::vector<uint32_t> adaptive_tokens;  // k ids (ExpandSdsatTokens)
  // Width W of the draft trees (1: a chain) and, under sampling, the rule:
  // true = drawn without replacement (RSD-S), false = deterministic top-W.
  size_t width = 1;
  bool without_replacement = true;
  SdsatScheme scheme = SdsatScheme::kOnePass;
};

class SAM_API SdsatDrafter : public Drafter {
 public:
  // Throws sam::Error (kInvalidArgument) for unusable options or an adaptive
  // id >= vocab.
  SdsatDrafter(const SdsatOptions& options, size_t vocab);
  ~SdsatDrafter() override;

  std::string_view name() const override { return "sdsat"; }
  void Reset() override;
  // A tree rooted at start_token from the rows of the last SetRows (which are
  // consumed: the next Propose needs new rows). Returns false without rows;
  // `wanted()` then tells the caller that a step asked for SDSAT drafts.
  bool Propose(uint32_t start_token, size_t max_nodes, DraftTree* out) override;

  // Per request: greedy (temperature 0) or sampling, and the drafting seed.
  void Configure(const SamplingParams& sampling, uint64_t seed);
  // The processed rows q_1..q_k (k * vocab floats: non-negative, each with a
  // positive sum) of the adaptive positions below the last accepted node.
  void SetRows(std::span<const float> rows);
  // The same without a copy: *rows (k * vocab floats) becomes the drafter's
  // and *rows gets its previous buffer back, for the caller to refill.
  void SwapRows(std::vector<float>* rows);
  // Forgets the rows (a step without adaptive nodes).
  void ClearRows() { have_rows_ = false; }
  bool has_rows() const { return have_rows_; }
  // True when a Propose since the last SetRows / ClearRows found no rows.
  bool wanted() const { return wanted_; }

  size_t k() const { return options_.adaptive_tokens.size(); }
  size_t vocab() const { return vocab_; }
  const SdsatOptions& options() const { return options_; }
  const std::vector<uint32_t>& adaptive_tokens() const { return options_.adaptive_tokens; }
  // How rows are processed for this request (temperature 1 under greedy).
  const SamplingParams& row_params() const { return row_params_; }
  // The last proposal: tree, verification mode and proposal rows; valid
  // until the next Propose.
  const TreeDraft& last_draft() const { return draft_; }

 private:
  class RowExpander;
  void CheckRows(size_t size) const;
  SdsatOptions options_;
  size_t vocab_;
  TreeDraftOptions tree_;
  SamplingParams row_params_{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f};
  Rng rng_;
  std::vector<float> rows_;
  bool have_rows_ = false;
  bool wanted_ = false;
  TreeDraft draft_;
};

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_SDSAT_H_
