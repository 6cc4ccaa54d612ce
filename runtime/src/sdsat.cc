// SDSAT's drafter: trees from the adaptive positions' rows (sdsat.h).
#include "sam/runtime/sdsat.h"

#include <algorithm>
#include <string>

#include "sam/error.h"

namespace sam::runtime {
namespace {

[[noreturn]] void Fail(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, message);
}

}  // namespace

std::vector<uint32_t> ExpandSdsatTokens(std::span<const uint32_t> ids, size_t k) {
  if (k < 1 || k > kMaxSdsatTokens)
    Fail("SDSAT: k (the adaptive tokens per step) must be in [1, " +
         std::to_string(kMaxSdsatTokens) + "], got " + std::to_string(k));
  if (ids.empty()) Fail("SDSAT: no adaptive token ids");
  if (ids.size() == 1) return std::vector<uint32_t>(k, ids[0]);
  if (ids.size() != k)
    Fail("SDSAT: " + std::to_string(ids.size()) + " adaptive ids for k = " + std::to_string(k) +
         " (give one id, repeated k times, or exactly k ids)");
  return std::vector<uint32_t>(ids.begin(), ids.end());
}

std::string_view SdsatSchemeName(SdsatScheme scheme) {
  return scheme == SdsatScheme::kTwoPass ? "two-pass" : "one-pass";
}

TreeDraftOptions SdsatTreeOptions(size_t k, size_t width, bool greedy, bool without_replacement) {
  if (width < 1) Fail("SDSAT: the draft width must be >= 1");
  TreeDraftOptions o;
  o.greedy = greedy;
  o.depth = k;
  o.width = width;
  if (greedy) {
    o.mode = width == 1 ? TreeMode::kChain : TreeMode::kTree;
  } else {
    o.mode = without_replacement ? TreeMode::kRsdS : TreeMode::kTree;
  }
  return o;
}

// Node depth d expands with q_{d+1}: every node of a level gets the same row.
class SdsatDrafter::RowExpander : public TreeExpander {
 public:
  explicit RowExpander(const SdsatDrafter& d) : d_(d) {}
  size_t vocab_size() const override { return d_.vocab_; }
  void Expand(const DraftTree& tree, std::span<const int32_t> nodes, std::span<float> rows) override {
    const size_t v = d_.vocab_;
    for (size_t j = 0; j < nodes.size(); ++j) {
      // The builder never expands a node at depth k (the trees are k deep).
      const size_t level = std::min<size_t>(tree.depths[nodes[j]], d_.k() - 1);
      std::copy_n(d_.rows_.begin() + static_cast<std::ptrdiff_t>(level * v), v,
                  rows.begin() + static_cast<std::ptrdiff_t>(j * v));
    }
  }

 private:
  const SdsatDrafter& d_;
};

SdsatDrafter::SdsatDrafter(const SdsatOptions& options, size_t vocab)
    : options_(options), vocab_(vocab) {
  const size_t k = options_.adaptive_tokens.size();
  if (k < 1 || k > kMaxSdsatTokens)
    Fail("SDSAT: " + std::to_string(k) + " adaptive tokens per step (expected 1 to " +
         std::to_string(kMaxSdsatTokens) + ")");
  if (vocab == 0) Fail("SDSAT: empty vocabulary");
  for (const uint32_t id : options_.adaptive_tokens)
    if (id >= vocab)
      Fail("SDSAT: adaptive token id " + std::to_string(id) + " is outside the vocabulary (" +
           std::to_string(vocab) + " tokens)");
  tree_ = SdsatTreeOptions(k, options_.width, true, options_.without_replacement);
  tree_.Validate();
}

SdsatDrafter::~SdsatDrafter() = default;

void SdsatDrafter::Configure(const SamplingParams& sampling, uint64_t seed) {
  const bool greedy = sampling.temperature == 0.0f;
  tree_ = SdsatTreeOptions(k(), options_.width, greedy, options_.without_replacement);
  row_params_ = greedy ? SamplingParams{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f} : sampling;
  rng_.Seed(seed);
  Reset();
}

void SdsatDrafter::Reset() {
  have_rows_ = false;
  wanted_ = false;
}

void SdsatDrafter::SetRows(std::span<const float> rows) {
  CheckRows(rows.size());
  rows_.assign(rows.begin(), rows.end());
  have_rows_ = true;
  wanted_ = false;
}

void SdsatDrafter::SwapRows(std::vector<float>* rows) {
  CheckRows(rows->size());
  rows_.swap(*rows);
  have_rows_ = true;
  wanted_ = false;
}

void SdsatDrafter::CheckRows(size_t size) const {
  if (size != k() * vocab_)
    Fail("SDSAT: got " + std::to_string(size) + " floats of rows, expected k * vocab = " +
         std::to_string(k() * vocab_));
}

bool SdsatDrafter::Propose(uint32_t start_token, size_t max_nodes, DraftTree* out) {
  if (!have_rows_) {
    wanted_ = true;
    out->Reset(start_token, DraftSource::kNone);
    return false;
  }
  have_rows_ = false;
  RowExpander expander(*this);
  BuildTreeDraft(tree_, start_token, std::max<size_t>(max_nodes, 1), expander, rng_, &draft_);
  draft_.tree.source = DraftSource::kSdsat;
  *out = draft_.tree;
  return out->size() > 1;
}

}  // namespace sam::runtime
