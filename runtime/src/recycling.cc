#include "sam/runtime/recycling.h"

#include <algorithm>
#include <string>

#include "sam/error.h"

namespace sam::runtime {
namespace {

// Children per parent, depth by depth, parents in breadth-first rank order
// (see recycling.h). Each depth's list has one entry per node of the previous
// depth; the sums are the per-depth widths 8, 21, 25, 15, 8, 3.
// clang-format off
constexpr uint8_t kDepth1[] = {8};
constexpr uint8_t kDepth2[] = {8, 4, 3, 2, 1, 1, 1, 1};
constexpr uint8_t kDepth3[] = {8, 3, 2, 1, 1, 1, 1, 1, 2, 1, 0, 0, 1, 0, 0, 1, 0, 1, 1, 0, 0};
constexpr uint8_t kDepth4[] = {5, 2, 1, 1, 1, 0, 0, 0, 1, 0, 0, 1, 0,
                               0, 0, 0, 0, 0, 1, 0, 0, 1, 1, 0, 0};
constexpr uint8_t kDepth5[] = {3, 1, 1, 0, 0, 1, 0, 0, 0, 0, 1, 0, 1, 0, 0};
constexpr uint8_t kDepth6[] = {2, 0, 0, 1, 0, 0, 0, 0};
// clang-format on
constexpr std::span<const uint8_t> kChildCounts[] = {kDepth1, kDepth2, kDepth3,
                                                     kDepth4, kDepth5, kDepth6};

std::array<RecyclingDrafter::TemplateSlot, RecyclingDrafter::kTemplateNodes> BuildTemplate() {
  std::array<RecyclingDrafter::TemplateSlot, RecyclingDrafter::kTemplateNodes> slots{};
  size_t next = 1;         // next slot number to assign
  size_t level_begin = 0;  // slots of the previous depth: [level_begin, level_end)
  size_t level_end = 1;    // (slot 0 = the root)
  for (size_t d = 0; d < RecyclingDrafter::kTemplateDepth; ++d) {
    const std::span<const uint8_t> counts = kChildCounts[d];
    // A miscounted table is a programming error caught by the template test;
    // throwing here keeps it from writing out of bounds.
    if (counts.size() != level_end - level_begin)
      throw Error(ErrorCode::kInternal, "Token Recycling template: depth " + std::to_string(d + 1) +
                                            " lists " + std::to_string(counts.size()) +
                                            " parents; the previous depth has " +
                                            std::to_string(level_end - level_begin));
    for (size_t i = 0; i < counts.size(); ++i) {
      for (uint8_t rank = 0; rank < counts[i]; ++rank) {
        if (next > RecyclingDrafter::kTemplateNodes || rank >= RecyclingDrafter::kCandidates)
          throw Error(ErrorCode::kInternal, "Token Recycling template: too many nodes");
        slots[next - 1] = {static_cast<uint8_t>(level_begin + i), rank,
                           static_cast<uint8_t>(d + 1)};
        ++next;
      }
    }
    level_begin = level_end;
    level_end = next;
  }
  if (next != RecyclingDrafter::kTemplateNodes + 1)
    throw Error(ErrorCode::kInternal, "Token Recycling template: too few nodes");
  return slots;
}

}  // namespace

const std::array<RecyclingDrafter::TemplateSlot, RecyclingDrafter::kTemplateNodes>&
RecyclingDrafter::Template() {
  static const auto slots = BuildTemplate();
  return slots;
}

namespace {
// Checked before the table is allocated.
uint32_t CheckedVocabSize(uint32_t vocab_size) {
  if (vocab_size == 0)
    throw Error(ErrorCode::kInvalidArgument, "recycling_vocab_size is 0");
  if (vocab_size > RecyclingDrafter::kMaxVocabSize)
    throw Error(ErrorCode::kInvalidArgument,
                "recycling_vocab_size " + std::to_string(vocab_size) + " is above the limit of " +
                    std::to_string(RecyclingDrafter::kMaxVocabSize) +
                    " ids (the model's vocabulary size is expected)");
  return vocab_size;
}
}  // namespace

RecyclingDrafter::RecyclingDrafter(uint32_t vocab_size)
    : vocab_size_(CheckedVocabSize(vocab_size)),
      table_(static_cast<size_t>(vocab_size) * kCandidates),
      counts_(vocab_size, 0) {
  Template();  // build (and check) the template now rather than on the first draft
}

void RecyclingDrafter::Clear() { std::fill(counts_.begin(), counts_.end(), uint8_t{0}); }

std::span<const uint32_t> RecyclingDrafter::Row(uint32_t token) const {
  if (token >= vocab_size_)
    throw Error(ErrorCode::kInvalidArgument, "RecyclingDrafter: token " + std::to_string(token) +
                                                 " outside the vocabulary of " +
                                                 std::to_string(vocab_size_));
  return {table_.data() + static_cast<size_t>(token) * kCandidates, counts_[token]};
}

bool RecyclingDrafter::Propose(uint32_t start_token, size_t max_nodes, DraftTree* out) {
  if (start_token >= vocab_size_)
    throw Error(ErrorCode::kInvalidArgument,
                "RecyclingDrafter::Propose: start token " + std::to_string(start_token) +
                    " outside the vocabulary of " + std::to_string(vocab_size_));
  out->Reset(start_token, DraftSource::kRecycling);
  // node_of_slot[s] = tree node filling template slot s, or -1 when the slot
  // was pruned (its subtree is then pruned too: parents precede children).
  std::array<int32_t, kTemplateNodes + 1> node_of_slot;
  node_of_slot[0] = 0;
  const auto& slots = Template();
  for (size_t s = 1; s <= kTemplateNodes; ++s) {
    node_of_slot[s] = -1;
    if (out->size() >= max_nodes) break;
    const TemplateSlot& slot = slots[s - 1];
    const int32_t parent = node_of_slot[slot.parent];
    if (parent < 0) continue;
    const uint32_t parent_token = out->tokens[parent];
    if (slot.rank >= counts_[parent_token]) continue;
    node_of_slot[s] =
        out->Add(parent, table_[static_cast<size_t>(parent_token) * kCandidates + slot.rank]);
  }
  return out->size() > 1;
}

void RecyclingDrafter::ObserveTopK(std::span<const uint32_t> tokens, std::span<const uint32_t> topk,
                                   size_t k) {
  if (k == 0) return;
  if (topk.size() != tokens.size() * k)
    throw Error(ErrorCode::kInvalidArgument,
                "RecyclingDrafter::ObserveTopK: " + std::to_string(topk.size()) +
                    " candidates for " + std::to_string(tokens.size()) + " positions at k = " +
                    std::to_string(k) + "; expected " + std::to_string(tokens.size() * k));
  auto check = [this](uint32_t id, const char* what) {
    if (id >= vocab_size_)
      throw Error(ErrorCode::kInvalidArgument,
                  std::string("RecyclingDrafter::ObserveTopK: ") + what + " " + std::to_string(id) +
                      " outside the vocabulary of " + std::to_string(vocab_size_));
  };
  // Validate everything first so a bad call leaves the table untouched.
  for (uint32_t t : tokens) check(t, "token");
  for (uint32_t t : topk) check(t, "candidate");
  const size_t width = std::min(k, kCandidates);
  for (size_t i = 0; i < tokens.size(); ++i) {
    std::copy_n(topk.begin() + i * k, width,
                table_.begin() + static_cast<size_t>(tokens[i]) * kCandidates);
    counts_[tokens[i]] = static_cast<uint8_t>(width);
  }
}

}  // namespace sam::runtime
