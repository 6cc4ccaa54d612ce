// Token Recycling (Luo et al. 2024, arXiv 2408.08696): a model-free drafter
// that recycles the candidate tokens the model itself ranked highly.
//
//   sam::runtime::RecyclingDrafter recycling(vocab_size);   // kept across requests
//   // after every forward pass, for every evaluated position:
//   recycling.ObserveTopK(evaluated_tokens, top8_ids, 8);
//   sam::runtime::DraftTree tree;
//   recycling.Propose(start_token, 81, &tree);               // up to 80 draft nodes
//
// State: a |V| x 8 table of next-token candidates. Row t holds the top
// candidates the model predicted after token t the last time t was evaluated
// (last writer wins); every row starts unset. The table is shared by all
// requests: Reset() keeps it (it is the drafter's knowledge, not request
// state); Clear() empties it. Memory: 33 bytes per vocabulary entry (8
// uint32 candidates plus a one-byte count of valid ones), 1 MiB for a 32K
// vocabulary.
//
// Draft: a fixed tree template of 80 nodes under the root, with 8, 21, 25,
// 15, 8, 3 nodes at depths 1..6 (the "2.2.2" template of the paper's code).
// The template is expressed per depth as the number of children of each
// node of the previous depth, in rank order (breadth-first order: a parent's
// children in candidate order, parents in their own rank order), so higher
// ranked parents get more children:
//   depth 1: root 8
//   depth 2: 8 4 3 2 1 1 1 1
//   depth 3: 8 3 2 1 1 1 1 1 | 2 1 0 0 | 1 0 0 | 1 0 | 1 | 1 | 0 | 0
//   depth 4: 5 2 1 1 1 0 0 0 | 1 0 0 | 1 0 | 0 | 0 | 0 | 0 | 0 | 1 0 | 0 | 1 | 1 | 0 | 0
//   depth 5: 3 1 1 0 0 | 1 0 | 0 | 0 | 0 | 1 | 0 | 1 | 0 | 0
//   depth 6: 2 0 0 | 1 | 0 | 0 | 0 | 0
// (bars separate the children of different grandparents). The j-th child of
// a node with token t carries row[t][j]. The tree is filled breadth-first
// from the start token; a template slot is skipped, with its whole subtree,
// when its parent's row was never written or holds fewer than j + 1
// candidates. Filling stops at max_nodes nodes (root included).
//
// Thread safety: none; one drafter serves one generation loop at a time.
#ifndef SAM_RUNTIME_RECYCLING_H_
#define SAM_RUNTIME_RECYCLING_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "sam/export.h"
#include "sam/runtime/drafter.h"

namespace sam::runtime {

class SAM_API RecyclingDrafter : public Drafter {
 public:
  static constexpr size_t kCandidates = 8;      // table width
  static constexpr size_t kTemplateNodes = 80;  // template size, root excluded
  static constexpr size_t kTemplateDepth = 6;

  // One template slot: the slot of its parent (0 = the root, slots are
  // numbered 1..kTemplateNodes in breadth-first order) and which candidate of
  // the parent's row it takes.
  struct TemplateSlot {
    uint8_t parent;
    uint8_t rank;
    uint8_t depth;
  };
  // The template in breadth-first order (slot s is element s - 1).
  static const std::array<TemplateSlot, kTemplateNodes>& Template();

  // The largest vocabulary a table is made for: 16 times the largest model
  // vocabularies in use (256K ids); the table takes 32 bytes an id (128 MiB here).
  static constexpr uint32_t kMaxVocabSize = uint32_t{1} << 22;
  // Throws sam::Error (kInvalidArgument) when vocab_size is 0 or above kMaxVocabSize.
  explicit RecyclingDrafter(uint32_t vocab_size);

  std::string_view name() const override { return "recycling"; }

  // Keeps the table (it is shared across requests).
  void Reset() override {}
  // Empties the table: every row unset.
  void Clear();

  // Fills *out with the template (see above); returns false when the start
  // token's row is unset (or max_nodes <= 1), leaving a root-only tree.
  // No allocation once out's capacity holds max_nodes nodes.
  // Throws sam::Error (kInvalidArgument) when start_token >= vocab_size().
  bool Propose(uint32_t start_token, size_t max_nodes, DraftTree* out) override;

  // For every position i: row[tokens[i]] = topk[i*k .. i*k + min(k, 8)).
  // Later positions overwrite earlier ones with the same token. k = 0 is a
  // no-op. Throws sam::Error kInvalidArgument (and changes nothing) when
  // topk.size() != tokens.size() * k or any id is >= vocab_size().
  void ObserveTopK(std::span<const uint32_t> tokens, std::span<const uint32_t> topk,
                   size_t k) override;

  uint32_t vocab_size() const { return vocab_size_; }
  // The candidates stored for token (empty if the row is unset). Throws
  // sam::Error (kInvalidArgument) when token >= vocab_size().
  std::span<const uint32_t> Row(uint32_t token) const;

 private:
  uint32_t vocab_size_;
  std::vector<uint32_t> table_;  // vocab_size_ * kCandidates, row-major
  std::vector<uint8_t> counts_;  // valid candidates per row, 0 = unset
};

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_RECYCLING_H_
