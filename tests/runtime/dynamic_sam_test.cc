// Dynamic suffix automaton against brute-force search.
#include "sam/runtime/dynamic_sam.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <random>
#include <vector>

#include "sam/error.h"

namespace sam::runtime {
namespace {

using Text = std::vector<uint32_t>;

// First (1-based) end position in text of s[from, from+len), 0 if absent.
size_t FirstEnd(const Text& text, const Text& s, size_t from, size_t len) {
  for (size_t end = len; end <= text.size(); ++end) {
    bool ok = true;
    for (size_t k = 0; k < len && ok; ++k) ok = text[end - len + k] == s[from + k];
    if (ok) return end;
  }
  return 0;
}

// Longest suffix of text + token occurring in text, with its first end.
std::pair<size_t, size_t> BruteLookup(const Text& text, uint32_t token) {
  Text s = text;
  s.push_back(token);
  for (size_t len = text.size(); len > 0; --len) {
    size_t end = FirstEnd(text, s, s.size() - len, len);
    if (end) return {len, end};
  }
  return {0, 0};
}

Text RandomText(std::mt19937& rng, size_t n, uint32_t alphabet) {
  Text t(n);
  for (auto& x : t) x = rng() % alphabet;
  return t;
}

void CheckStructure(const DynamicSam& sam, const Text& text) {
  ASSERT_EQ(sam.size(), text.size());
  EXPECT_LE(sam.num_states(), 2 * text.size() + 1);
  EXPECT_LE(sam.num_transitions(), 3 * text.size() + 1);
  for (uint32_t v = 1; v < sam.num_states(); ++v) {
    const size_t len = sam.Len(v), end = sam.MinEndpos(v);
    ASSERT_GE(end, len);
    ASSERT_LE(end, text.size());
    ASSERT_LT(sam.Len(sam.Link(v)), len);
    // The longest string of v first occurs ending at MinEndpos ...
    EXPECT_EQ(FirstEnd(text, text, end - len, len), end) << "state " << v;
    // ... and spelling it from the root reaches v.
    uint32_t w = DynamicSam::kRoot;
    for (size_t k = end - len; k < end; ++k) w = sam.Next(w, text[k]);
    EXPECT_EQ(w, v);
  }
}

void CheckLookups(const DynamicSam& sam, const Text& text, uint32_t alphabet) {
  for (uint32_t c = 0; c <= alphabet; ++c) {  // alphabet itself never occurs
    auto [len, end] = BruteLookup(text, c);
    DynamicSam::Match m = sam.Lookup(c);
    ASSERT_EQ(m.len, len) << "token " << c << " n=" << text.size();
    if (len == 0) {
      EXPECT_EQ(m.state, DynamicSam::kRoot);
      continue;
    }
    EXPECT_EQ(sam.MinEndpos(m.state), end);
    // Linear continuation without climbing: exactly the text after `end`.
    for (size_t want : {1, 5, 40}) {
      std::vector<uint32_t> out(want);
      size_t got = sam.Continuation(m, want, false, out.data());
      size_t expect = std::min(want, text.size() - end);
      ASSERT_EQ(got, expect);
      for (size_t k = 0; k < got; ++k) EXPECT_EQ(out[k], text[end + k]);
      // With climbing: never shorter; comes from a suffix of the match.
      uint32_t used = 0;
      size_t climbed = sam.Continuation(m, want, true, out.data(), &used);
      EXPECT_GE(climbed, got);
      // The match may be shorter than the longest string of its state.
      const size_t used_len = std::min<size_t>(sam.Len(used), len);
      const size_t e2 = sam.MinEndpos(used);
      EXPECT_EQ(climbed, std::min(want, text.size() - e2));
      for (size_t k = 0; k < climbed; ++k) EXPECT_EQ(out[k], text[e2 + k]);
      // It climbs only to suffixes of at least kMinClimbLength tokens.
      if (used != m.state) {
        EXPECT_GE(sam.Len(used), DynamicSam::kMinClimbLength);
      }
      if (climbed < want) {  // no longer suffix to climb to
        EXPECT_TRUE(sam.Link(used) == DynamicSam::kRoot ||
                    sam.Len(sam.Link(used)) < DynamicSam::kMinClimbLength);
      }
      // The used state's strings are suffixes of text + c, first ending at e2.
      Text s = text;
      s.push_back(c);
      EXPECT_EQ(FirstEnd(text, s, s.size() - used_len, used_len), e2);
    }
  }
}

class DynamicSamRandom : public ::testing::TestWithParam<uint32_t> {};

TEST_P(DynamicSamRandom, MatchesBruteForceWhileGrowing) {
  const uint32_t alphabet = GetParam();
  std::mt19937 rng(1234 + alphabet);
  for (int round = 0; round < 6; ++round) {
    DynamicSam sam(256);
    Text text;
    const size_t n = 20 + rng() % 100;
    Text all = RandomText(rng, n, alphabet);
    for (size_t i = 0; i < n; ++i) {
      sam.Extend(all[i]);
      text.push_back(all[i]);
      if (i % 7 == 0 || i + 1 == n) CheckLookups(sam, text, alphabet);
    }
    CheckStructure(sam, text);
  }
}

INSTANTIATE_TEST_SUITE_P(Alphabets, DynamicSamRandom, ::testing::Values(1u, 2u, 3u, 8u, 50u));

TEST(DynamicSam, RepetitiveText) {
  Text text;
  for (int i = 0; i < 30; ++i)
    for (uint32_t t : {5u, 6u, 7u, 5u, 6u}) text.push_back(t);
  DynamicSam sam(512);
  sam.Extend(text);
  CheckStructure(sam, text);
  CheckLookups(sam, text, 8);
}

TEST(DynamicSam, ResetReusesMemoryAndForgets) {
  std::mt19937 rng(7);
  DynamicSam sam(128);
  sam.Extend(RandomText(rng, 100, 4));
  sam.Reset();
  EXPECT_EQ(sam.size(), 0u);
  EXPECT_EQ(sam.num_states(), 1u);
  EXPECT_EQ(sam.Lookup(1).len, 0u);
  Text t = RandomText(rng, 90, 3);
  sam.Extend(t);
  CheckStructure(sam, t);
  CheckLookups(sam, t, 3);
}

TEST(DynamicSam, WindowKeepsRecentHalfWhenFull) {
  std::mt19937 rng(11);
  const size_t cap = 64;
  DynamicSam sam(cap);
  Text all = RandomText(rng, 1000, 3);
  sam.Extend(all);
  EXPECT_EQ(sam.total_extended(), 1000u);
  ASSERT_LE(sam.size(), cap);
  ASSERT_GE(sam.size(), cap / 2);
  Text window(all.end() - sam.size(), all.end());
  DynamicSam fresh(cap);
  fresh.Extend(window);
  CheckStructure(sam, window);
  for (uint32_t c = 0; c < 4; ++c) {
    EXPECT_EQ(sam.Lookup(c).len, fresh.Lookup(c).len);
    EXPECT_EQ(sam.MinEndpos(sam.Lookup(c).state), fresh.MinEndpos(fresh.Lookup(c).state));
  }
}

TEST(DynamicSam, CapacityAndBytes) {
  size_t bytes = DynamicSam::BytesForCapacity(1 << 16);
  EXPECT_EQ(DynamicSam::CapacityForBytes(bytes), size_t{1} << 16);
  EXPECT_LT(DynamicSam::BytesForCapacity(1 << 16), size_t{200} << 16);  // < 200 B/token
  EXPECT_GE(DynamicSam::CapacityForBytes(0), 4u);
  EXPECT_THROW(DynamicSam(size_t{1} << 31), sam::Error);
}

// A plain suffix automaton (Blumer et al., one std::map of transitions a
// state): the same states in the same order as DynamicSam, without its
// inline transitions and table.
struct PlainSam {
  std::vector<uint32_t> len{0}, link{DynamicSam::kNone}, first_end{0};
  std::vector<std::map<uint32_t, uint32_t>> next{1};
  uint32_t last = 0;
  size_t n = 0;
  void Extend(uint32_t c) {
    const uint32_t cur = New(len[last] + 1, static_cast<uint32_t>(++n));
    int64_t p = last;
    while (p != DynamicSam::kNone && !next[p].count(c)) {
      next[p][c] = cur;
      p = link[p];
    }
    if (p == DynamicSam::kNone) {
      link[cur] = 0;
    } else if (const uint32_t q = next[p][c]; len[p] + 1 == len[q]) {
      link[cur] = q;
    } else {
      const uint32_t clone = New(len[p] + 1, first_end[q]);
      next[clone] = next[q];
      link[clone] = link[q];
      for (; p != DynamicSam::kNone && next[p].count(c) && next[p][c] == q; p = link[p])
        next[p][c] = clone;
      link[q] = link[cur] = clone;
    }
    last = cur;
  }
  uint32_t New(uint32_t l, uint32_t end) {
    len.push_back(l);
    link.push_back(DynamicSam::kNone);
    first_end.push_back(end);
    next.emplace_back();
    return static_cast<uint32_t>(len.size() - 1);
  }
  // Transitions beyond the first two of a state: those DynamicSam hashes.
  size_t Hashed() const {
    size_t h = 0;
    for (const auto& m : next) h += m.size() > 2 ? m.size() - 2 : 0;
    return h;
  }
};

// Every state's length, link, first end and transitions (present and, for
// a few other tokens, absent), as the plain automaton has them.
void ExpectSameAutomaton(const DynamicSam& sam, const PlainSam& plain, uint32_t alphabet) {
  ASSERT_EQ(sam.num_states(), plain.len.size());
  size_t edges = 0;
  for (uint32_t v = 0; v < sam.num_states(); ++v) {
    ASSERT_EQ(sam.Len(v), plain.len[v]) << "state " << v;
    ASSERT_EQ(sam.Link(v), plain.link[v]) << "state " << v;
    ASSERT_EQ(sam.MinEndpos(v), plain.first_end[v]) << "state " << v;
    for (const auto& [token, target] : plain.next[v])
      ASSERT_EQ(sam.Next(v, token), target) << "state " << v << " token " << token;
    for (uint32_t token : {alphabet, alphabet + 1, 7u * v % (alphabet + 3)})
      if (!plain.next[v].count(token)) {
        ASSERT_EQ(sam.Next(v, token), DynamicSam::kNone);
      }
    edges += plain.next[v].size();
  }
  EXPECT_EQ(sam.num_transitions(), edges);
}

// The smallest table (a power of two, at least 64 slots) that holds
// `hashed` transitions at a load of at most 1/2, but at most half the
// reservation.
size_t TableFor(size_t hashed, size_t reserved) {
  size_t slots = std::min<size_t>(64, reserved);
  while (hashed * 2 > slots && 2 * slots <= reserved / 2) slots *= 2;
  return slots;
}

// The transition table grows with the text, through many doublings, and
// starts small again after Reset: the automaton stays the plain one
// throughout, and the table is the smallest that holds its transitions.
TEST(DynamicSam, TableGrowsWithTheTextAndShrinksAtReset) {
  std::mt19937 rng(21);
  DynamicSam sam(1 << 16);
  for (uint32_t alphabet : {3u, 40u, 3000u}) {
    sam.Reset();
    EXPECT_EQ(sam.table_slots(), 64u);
    PlainSam plain;
    // Random text, then a stretch that repeats an earlier part (long
    // matches, clones copying hashed transitions).
    Text text = RandomText(rng, 12000, alphabet);
    text.insert(text.end(), text.begin() + 100, text.begin() + 3000);
    for (size_t i = 0; i < text.size(); ++i) {
      sam.Extend(text[i]);
      plain.Extend(text[i]);
      if (i % 997 == 0) {
        ASSERT_EQ(sam.table_slots(), TableFor(plain.Hashed(), sam.reserved_table_slots()));
      }
    }
    ExpectSameAutomaton(sam, plain, alphabet);
    EXPECT_EQ(sam.table_slots(), TableFor(plain.Hashed(), sam.reserved_table_slots()));
    if (alphabet == 3000) {
      EXPECT_GE(sam.table_slots(), 16384u) << "grew through 8 doublings";
    }
    EXPECT_LT(sam.table_slots(), sam.reserved_table_slots());
  }
}

// The texts that hash the most transitions for their length (every token
// new, every second one repeated; all pairs of a few symbols, a de Bruijn
// sequence) up to the capacity: at most n - 1 transitions in the table
// (states + n - 2 in all, one or two of each state inline), so the table
// stays within half the reservation (which Grow uses as room) at a load of
// at most 3/4. The window's rebuild (Reset inside) starts it small again.
TEST(DynamicSam, TableStaysWithinHalfTheReservation) {
  auto de_bruijn = [](uint32_t m, size_t n) {  // pairs of 0..m-1, then again
    Text t;
    while (t.size() < n)
      for (uint32_t a = 0; a < m && t.size() < n; ++a)
        for (uint32_t b = 0; b < m && t.size() < n; ++b) {
          t.push_back(a);
          if (t.size() < n) t.push_back(b);
        }
    return t;
  };
  for (size_t capacity : {size_t{48}, size_t{600}, size_t{5000}}) {
    Text fresh, pairs = de_bruijn(static_cast<uint32_t>(std::sqrt(capacity)) + 1, capacity);
    for (uint32_t t = 0; t < capacity; ++t) fresh.push_back(t % 2 == 0 ? t : 1);
    for (const Text& text : {fresh, pairs}) {
      DynamicSam sam(capacity);
      PlainSam plain;
      for (uint32_t t : text) {
        sam.Extend(t);
        plain.Extend(t);
      }
      ASSERT_EQ(sam.size(), capacity);
      ExpectSameAutomaton(sam, plain, static_cast<uint32_t>(capacity));
      EXPECT_LE(plain.Hashed(), capacity - 1);
      EXPECT_EQ(sam.table_slots(), TableFor(plain.Hashed(), sam.reserved_table_slots()));
      EXPECT_LE(sam.table_slots(), sam.reserved_table_slots() / 2) << "capacity " << capacity;
      EXPECT_LE(plain.Hashed() * 4, sam.table_slots() * 3) << "capacity " << capacity;
      sam.Extend(3);
      PlainSam window;
      for (size_t p = 1; p <= sam.size(); ++p) window.Extend(sam.Token(p));
      ExpectSameAutomaton(sam, window, static_cast<uint32_t>(capacity));
      EXPECT_EQ(sam.table_slots(), TableFor(window.Hashed(), sam.reserved_table_slots()));
    }
  }
}

// Extending by a long span (a prompt) sizes the table once, up front, for
// the most the text can hash (n - 1 transitions over n tokens, n bounded by
// the capacity): the same automaton as token by token, a table that never
// doubled on the way (one that holds n - 1 at a load of 1/2, capped at half
// the reservation), and short spans (an accepted draft) leave the table to
// grow by itself. A span that crosses the capacity rebuilds the window.
TEST(DynamicSam, LongSpanSizesTheTableOnce) {
  std::mt19937 rng(5);
  for (uint32_t alphabet : {2u, 30u, 5000u}) {
    const Text prompt = RandomText(rng, 9000, alphabet);
    DynamicSam sam(1 << 15);
    PlainSam plain;
    sam.Extend(Text(prompt.begin(), prompt.begin() + 40));  // short: grows by itself
    for (size_t i = 0; i < 40; ++i) plain.Extend(prompt[i]);
    EXPECT_EQ(sam.table_slots(), TableFor(plain.Hashed(), sam.reserved_table_slots()));
    sam.Extend(Text(prompt.begin() + 40, prompt.end()));
    for (size_t i = 40; i < prompt.size(); ++i) plain.Extend(prompt[i]);
    ExpectSameAutomaton(sam, plain, alphabet);
    EXPECT_EQ(sam.table_slots(), TableFor(prompt.size() - 1, sam.reserved_table_slots()))
        << "alphabet " << alphabet;
    EXPECT_LE(plain.Hashed() * 2, sam.table_slots());
  }
  // Across the capacity: the window's automaton over the recent half.
  const size_t capacity = 3000;
  const Text text = RandomText(rng, 4000, 20);
  DynamicSam sam(capacity);
  sam.Extend(text);
  PlainSam window;
  for (size_t p = 1; p <= sam.size(); ++p) window.Extend(sam.Token(p));
  ASSERT_LT(sam.size(), capacity);
  EXPECT_EQ(sam.Token(sam.size()), text.back());
  ExpectSameAutomaton(sam, window, 20);
  EXPECT_LE(sam.table_slots(), sam.reserved_table_slots() / 2);
  EXPECT_LE(window.Hashed() * 2, sam.table_slots());
}

TEST(DynamicSam, LookupDoesNotCommit) {
  DynamicSam sam(64);
  Text t = {1, 2, 3, 1, 2};
  sam.Extend(t);
  auto m = sam.Lookup(3);
  EXPECT_EQ(m.len, 3u);  // "1 2 3"
  EXPECT_EQ(sam.MinEndpos(m.state), 3u);
  EXPECT_EQ(sam.size(), 5u);
  uint32_t out[4];
  EXPECT_EQ(sam.Continuation(m, 4, false, out), 2u);  // "1 2", end of text
  EXPECT_EQ(out[0], 1u);
  EXPECT_EQ(out[1], 2u);
  EXPECT_EQ(sam.Lookup(9).len, 0u);
}

}  // namespace
}  // namespace sam::runtime
