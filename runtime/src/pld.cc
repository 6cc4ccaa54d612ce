#include "sam/runtime/pld.h"

#include <algorithm>
#include <string>

#include "sam/error.h"

namespace sam::runtime {

PldDrafter::PldDrafter(size_t max_ngram_size, size_t num_pred_tokens)
    : max_ngram_size_(max_ngram_size), num_pred_tokens_(num_pred_tokens), first_(max_ngram_size) {
  if (max_ngram_size == 0)
    throw Error(ErrorCode::kInvalidArgument, "PldDrafter: max_ngram_size is 0");
  if (num_pred_tokens == 0)
    throw Error(ErrorCode::kInvalidArgument, "PldDrafter: num_pred_tokens is 0");
}

void PldDrafter::Reset() {
  history_.clear();
  for (auto& map : first_) map.clear();
}

void PldDrafter::Prefill(std::span<const uint32_t> prompt) { Append(prompt); }

void PldDrafter::Commit(std::span<const uint32_t> tokens) { Append(tokens); }

uint64_t PldDrafter::HashNgram(size_t n, size_t from, uint32_t start_token) const {
  uint64_t h = 0x9e3779b97f4a7c15ULL * n;
  for (size_t j = from; j < from + n; ++j) {
    const uint32_t t = j < history_.size() ? history_[j] : start_token;
    h = (h ^ t) * 0xff51afd7ed558ccdULL;
    h ^= h >> 32;
  }
  return h;
}

void PldDrafter::Append(std::span<const uint32_t> tokens) {
  history_.reserve(history_.size() + tokens.size());
  for (uint32_t t : tokens) {
    history_.push_back(t);
    const size_t size = history_.size();
    for (size_t n = 1; n <= max_ngram_size_ && n <= size; ++n)
      first_[n - 1].emplace(HashNgram(n, size - n, 0), size - n);  // keeps the earliest
  }
}

int64_t PldDrafter::EarliestOccurrence(size_t n, size_t from, uint32_t start_token) const {
  auto text = [&](size_t j) { return j < history_.size() ? history_[j] : start_token; };
  auto occurs_at = [&](size_t i) {
    for (size_t j = 0; j < n; ++j)
      if (history_[i + j] != text(from + j)) return false;
    return true;
  };
  const auto& map = first_[n - 1];
  const auto it = map.find(HashNgram(n, from, start_token));
  if (it == map.end()) return -1;
  if (occurs_at(it->second)) return static_cast<int64_t>(it->second);
  // Hash collision with another n-gram: scan.
  for (size_t i = 0; i + n <= history_.size(); ++i)
    if (occurs_at(i)) return static_cast<int64_t>(i);
  return -1;
}

bool PldDrafter::Propose(uint32_t start_token, size_t max_nodes, DraftTree* out) {
  out->Reset(start_token, DraftSource::kPld);
  if (max_nodes <= 1) return false;
  const size_t length = history_.size() + 1;  // text = history + start token
  for (size_t n = max_ngram_size_; n >= 1; --n) {
    if (n > length) continue;
    // The earliest occurrence is the best candidate: both conditions below
    // only get easier as the position decreases.
    const int64_t found = EarliestOccurrence(n, length - n, start_token);
    if (found < 0) continue;
    const size_t i = static_cast<size_t>(found);
    if (i + n + num_pred_tokens_ > length || i + n + n >= length) continue;
    const size_t count = std::min(num_pred_tokens_, max_nodes - 1);
    for (size_t j = 0; j < count; ++j) {
      const size_t pos = i + n + j;
      out->Add(static_cast<int>(j), pos < history_.size() ? history_[pos] : start_token);
    }
    out->match_len = static_cast<uint32_t>(n);
    return true;
  }
  return false;
}

}  // namespace sam::runtime
