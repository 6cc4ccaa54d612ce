// Structural invariants of an index file; see structure_checks.h. The checks
// run in an order that names the damaged section: first what one section
// holds on its own (padding, text, clone fields, prefix counts, degree bits),
// then what ties sections together, each message listing every section the
// check read.
#include "structure_checks.h"

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "sam/format/error.h"
#include "sam/format/packed.h"

namespace sam::format::internal {
namespace {

std::string Num(uint64_t v) { return std::to_string(v); }

class Checker {
 public:
  Checker(const IndexView& view, const IndexHeader& header, const std::string& path)
      : v_(view),
        h_(header),
        path_(path),
        n_(view.num_tokens()),
        s_(view.num_states()),
        e_(view.num_edges()),
        sep_(view.separator()) {}

  void Open() const {
    ReadAhead();
    Padding(v_.text(), "TEXT");
    Padding(v_.links(), "LINK");
    Padding(v_.clone_lens(), "CLEN");
    Padding(v_.clone_min_endpos(), "CMEP");
    Padding(v_.clone_counts(), "CCNT");
    Padding(v_.prefix_counts(), "NCNT");
    Padding(v_.root_table(), "ROOT");
    Padding(v_.edges(), "EDGE");
    Padding(v_.select_samples(), "ESEL");
    DegreePadding();
    const bool labels = v_.clone_labels().size() != 0;
    if (labels) Padding(v_.clone_labels(), "CLAB");
    // Text: every document, the last one included, ends with the separator.
    if (v_.Token(1) > sep_)
      Fail("TEXT", "tokens must be at most the separator",
           "token " + Num(v_.Token(1)) + " at position 1");
    if (v_.Token(n_) != sep_)
      Fail("TEXT", "the text must end with a document end",
           "token " + Num(v_.Token(n_)) + " at position " + Num(n_));
    // Links of the root and of the first position's state (length 1).
    if (v_.links().Get(0) != 0) Fail("LINK", "the root's link must be 0", "");
    if (v_.links().Get(1) != 0)
      Fail("LINK", "state 1 (length 1) must link to the root",
           "it links to " + Num(v_.links().Get(1)));
    const uint64_t c = v_.num_clones();
    if (c > 0) {
      Clone(0);
      Clone(c - 1);
      if (labels) {
        CloneLabel(0);
        CloneLabel(c - 1);
      }
    }
    const uint64_t k = v_.prefix_counts().size();
    if (k > 0) {
      PrefixCount(0);
      PrefixCount(k - 1);
      if (v_.prefix_counts().Get(k - 1) > v_.prefix_counts().Get(0))
        Fail("NCNT", "prefix occurrence counts must not increase",
             "state " + Num(k) + " occurs more often than state 1");
    }
    // The first token has a transition from the root.
    const uint32_t first = v_.Token(1);
    if (first < sep_) {
      const uint64_t t = v_.root_table().Get(first);
      if (t == 0 || t >= s_)
        Fail("ROOT, TEXT", "every token of the text must have a transition from the root",
             "the first token " + Num(first) + " leads to " + Num(t));
    }
    if (e_ > 0) {
      EdgeTarget(0);
      EdgeTarget(e_ - 1);
    }
    // Degree bits: the root's one comes first (no explicit transitions), the
    // last state's one is the last bit.
    const uint64_t bits = v_.degree_bit_count();
    if (!Bit(0))
      Fail("EDEG", "the root has no explicit transitions", "bit 0 of the degree vector is 0");
    if (!Bit(bits - 1))
      Fail("EDEG", "the last bit must end the last state",
           "bit " + Num(bits - 1) + " of the degree vector is 0");
    // Select samples: the first one is the root's one; the last one points
    // to a one that has as many ones before it as its number says.
    const PackedView& sel = v_.select_samples();
    const unsigned r = v_.select_rate_log2();
    if (sel.Get(0) != 0)
      Fail("ESEL, EDEG", "select samples must point to the ones they count",
           "sample 0 is " + Num(sel.Get(0)) + ", the root's one is at 0");
    const uint64_t j = sel.size() - 1;
    const uint64_t pos = sel.Get(j), ones_before = j << r;
    if (pos >= bits || pos < ones_before || pos - ones_before > e_ || !Bit(pos))
      Fail("ESEL, EDEG", "select samples must point to the ones they count",
           "sample " + Num(j) + " is " + Num(pos) + ", which is not a one preceded by " +
               Num(ones_before) + " ones and at most " + Num(e_) + " zeros");
  }

  void Full() const {
    Open();
    // Text: tokens, document ends, which tokens occur.
    std::vector<uint8_t> occurs(v_.vocab_size(), 0);
    uint64_t docs = 0;
    for (uint64_t p = 1; p <= n_; ++p) {
      const uint32_t t = v_.Token(p);
      if (t > sep_)
        Fail("TEXT", "tokens must be at most the separator",
             "token " + Num(t) + " at position " + Num(p));
      if (t == sep_)
        ++docs;
      else
        occurs[t] = 1;
    }
    if (docs != h_.num_documents)
      Fail("TEXT", "the document ends must match the header's document count",
           Num(docs) + " document ends, the header says " + Num(h_.num_documents));
    for (uint64_t k = 0; k < v_.num_clones(); ++k) Clone(k);
    if (v_.clone_labels().size() != 0)
      for (uint64_t k = 0; k < v_.num_clones(); ++k) CloneLabel(k);
    for (uint64_t i = 0; i < v_.prefix_counts().size(); ++i) {
      PrefixCount(i);
      if (i > 0 && v_.prefix_counts().Get(i) > v_.prefix_counts().Get(i - 1))
        Fail("NCNT", "prefix occurrence counts must not increase",
             "state " + Num(i + 1) + " occurs more often than state " + Num(i));
    }
    DegreeBits();
    SelectSamples();
    Links();
    Counts();
    RootTable(occurs);
    Edges();
  }

 private:
  [[noreturn]] void Fail(const std::string& sections, const std::string& invariant,
                         const std::string& details) const {
    throw FormatError(ErrorCode::kCorruptStructure,
                      path_ + ": " + sections + ": " + invariant +
                          (details.empty() ? std::string() : ": " + details));
  }

  // Asks the kernel to start reading every page that Open() reads, so that
  // on a cold page cache the twenty-odd reads overlap instead of following
  // one another (about 60 ms down to a few on this machine's disk). A hint:
  // failures are ignored, and memory that is not a file mapping is unaffected.
  void ReadAhead() const {
#if defined(__linux__) && defined(MADV_WILLNEED)
    auto advise = [](const uint8_t* p) {
      const uintptr_t page = reinterpret_cast<uintptr_t>(p) & ~uintptr_t{4095};
      madvise(reinterpret_cast<void*>(page), 4096, MADV_WILLNEED);
    };
    for (const PackedView* a : {&v_.text(), &v_.links(), &v_.clone_lens(), &v_.clone_min_endpos(),
                                &v_.clone_counts(), &v_.prefix_counts(), &v_.root_table(),
                                &v_.edges(), &v_.select_samples()}) {
      advise(a->data());
      advise(a->data() + PackedBytes(a->size(), a->width()) - 1);
    }
    const auto* edeg = reinterpret_cast<const uint8_t*>(v_.degree_words());
    advise(edeg);
    advise(edeg + (v_.degree_bit_count() + 63) / 64 * 8 + 7);
#endif
  }

  bool Bit(uint64_t i) const { return (v_.degree_words()[i >> 6] >> (i & 63)) & 1; }

  // Bits after the last value and the 8 padding bytes of a packed array are 0.
  void Padding(const PackedView& a, const char* tag) const {
    const uint64_t bits = a.size() * a.width();
    const uint64_t bytes = PackedBytes(a.size(), a.width());
    const uint8_t* d = a.data();
    uint64_t i = bits >> 3;
    const bool bad_tail = (bits & 7) != 0 && (d[i] >> (bits & 7)) != 0;
    if ((bits & 7) != 0) ++i;
    bool bad_pad = false;
    for (; i < bytes; ++i) bad_pad |= d[i] != 0;
    if (bad_tail || bad_pad)
      Fail(tag, "padding must be zero",
           "bits after value " + Num(a.size()) + " of " + Num(a.width()) + " bits are set");
  }

  void DegreePadding() const {
    const uint64_t bits = v_.degree_bit_count();
    const uint64_t words = (bits + 63) / 64;
    const uint64_t* w = v_.degree_words();
    if ((bits & 63) != 0 && (w[words - 1] >> (bits & 63)) != 0)
      Fail("EDEG", "padding must be zero", "bits after bit " + Num(bits) + " are set");
    if (w[words] != 0) Fail("EDEG", "padding must be zero", "the padding word is not zero");
  }

  // CLAB holds the token clone k's strings end with (after Clone(k): its
  // first end position is in the text).
  void CloneLabel(uint64_t k) const {
    const uint64_t state = n_ + 1 + k;
    const uint64_t label = v_.clone_labels().Get(k);
    if (label != v_.LastToken(state))
      Fail("CLAB, CMEP, TEXT", "a clone's label must be the token its strings end with",
           "clone state " + Num(state) + " is labelled " + Num(label) + ", its first end position " +
               Num(v_.MinEndpos(state)) + " holds token " + Num(v_.LastToken(state)));
  }

  void Clone(uint64_t k) const {
    const uint64_t state = n_ + 1 + k;
    const uint64_t len = v_.clone_lens().Get(k), mep = v_.clone_min_endpos().Get(k),
                   count = v_.clone_counts().Get(k);
    if (len == 0) Fail("CLEN", "a clone's length must be at least 1", "state " + Num(state));
    if (mep == 0 || mep > n_)
      Fail("CMEP", "a clone's first end position must lie in the text",
           "state " + Num(state) + " first ends at " + Num(mep));
    if (len > mep)
      Fail("CLEN, CMEP", "a clone's length must not exceed its first end position",
           "state " + Num(state) + " has length " + Num(len) + " and first ends at " + Num(mep));
    if (count < 2 || count > n_)
      Fail("CCNT", "a clone occurs at least twice and at most N times",
           "state " + Num(state) + " has count " + Num(count));
  }

  void PrefixCount(uint64_t i) const {
    const uint64_t count = v_.prefix_counts().Get(i);
    if (count < 2 || count > n_)
      Fail("NCNT", "a stored prefix count must be at least 2 and at most N",
           "state " + Num(i + 1) + " has count " + Num(count));
  }

  void EdgeTarget(uint64_t i) const {
    const uint64_t t = v_.edges().Get(i);
    if (t == 0 || t >= s_)
      Fail("EDGE", "a stored transition must lead to a non-root state",
           "edge " + Num(i) + " leads to " + Num(t));
  }

  // One 1 per state, one 0 per stored transition, at most vocab_size zeros
  // before a one (a state's labels are distinct tokens).
  void DegreeBits() const {
    const uint64_t bits = v_.degree_bit_count();
    const uint64_t* w = v_.degree_words();
    uint64_t ones = 0, prev = 0;  // position after the previous one
    for (uint64_t i = 0; i < (bits + 63) / 64; ++i) {
      for (uint64_t word = w[i]; word != 0; word &= word - 1) {
        const uint64_t pos = (i << 6) + static_cast<unsigned>(__builtin_ctzll(word));
        if (pos - prev > v_.vocab_size())
          Fail("EDEG", "a state has at most vocab_size explicit transitions",
               "state " + Num(ones) + " has " + Num(pos - prev));
        prev = pos + 1;
        ++ones;
      }
    }
    if (ones != s_)
      Fail("EDEG", "the degree bits must hold one 1 per state and one 0 per stored transition",
           Num(ones) + " ones for " + Num(s_) + " states");
  }

  // Sample j is the position of one number j * 2^r.
  void SelectSamples() const {
    const uint64_t bits = v_.degree_bit_count();
    const uint64_t* w = v_.degree_words();
    const PackedView& sel = v_.select_samples();
    const uint64_t mask = (uint64_t{1} << v_.select_rate_log2()) - 1;
    uint64_t ones = 0;
    for (uint64_t i = 0; i < (bits + 63) / 64; ++i) {
      for (uint64_t word = w[i]; word != 0; word &= word - 1, ++ones) {
        if ((ones & mask) != 0) continue;
        const uint64_t pos = (i << 6) + static_cast<unsigned>(__builtin_ctzll(word));
        const uint64_t j = ones >> v_.select_rate_log2();
        if (sel.Get(j) != pos)
          Fail("ESEL, EDEG", "select samples must point to the ones they count",
               "sample " + Num(j) + " is " + Num(sel.Get(j)) + ", one " + Num(ones) + " is at " +
                   Num(pos));
      }
    }
  }

  void Links() const {
    const PackedView& links = v_.links();
    for (uint64_t st = 1; st < s_; ++st) {
      const uint64_t l = links.Get(st);
      if (l >= s_)
        Fail("LINK", "a suffix link must name a state",
             "state " + Num(st) + " links to " + Num(l) + " of " + Num(s_));
      if (v_.Len(l) >= v_.Len(st))
        Fail("LINK, CLEN", "a suffix link must lead to a shorter state",
             "state " + Num(st) + " (length " + Num(v_.Len(st)) + ") links to " + Num(l) +
                 " (length " + Num(v_.Len(l)) + ")");
      if (l != kRoot && v_.LastToken(l) != v_.LastToken(st))
        Fail("LINK, CMEP, TEXT", "a state and its suffix link must end with the same token",
             "state " + Num(st) + " ends with " + Num(v_.LastToken(st)) + ", its link " + Num(l) +
                 " with " + Num(v_.LastToken(l)));
      if (v_.MinEndpos(l) > v_.MinEndpos(st))
        Fail("LINK, CMEP",
             "a suffix link's strings must first end no later than the state's (they are "
             "suffixes of them)",
             "state " + Num(st) + " first ends at " + Num(v_.MinEndpos(st)) + ", its link " +
                 Num(l) + " at " + Num(v_.MinEndpos(l)));
    }
    // The implicit transition i -> i+1 extends state i's strings by one token,
    // so the shortest string of i+1 is at most one longer than i's.
    for (uint64_t i = 0; i < n_; ++i) {
      if (v_.Len(links.Get(i + 1)) > v_.Len(links.Get(i)) + 1)
        Fail("LINK, CLEN",
             "the link of state i+1 is at most one longer than the link of state i (the "
             "transition i -> i+1)",
             "i = " + Num(i) + ": lengths " + Num(v_.Len(links.Get(i))) + " and " +
                 Num(v_.Len(links.Get(i + 1))));
    }
  }

  // count(v) = own (1 for a non-clone, 0 for a clone) + the counts of the
  // states that link to v; the root's (N by convention) is the sum alone.
  template <typename Sum>
  void CountsWith() const {
    const uint64_t cap = n_ + 1;  // sums saturate here: any larger one is wrong
    std::vector<Sum> sum(s_, 0);
    for (uint64_t st = 1; st < s_; ++st) {
      Sum& to = sum[v_.links().Get(st)];  // < s_: checked by Links()
      const uint64_t add = v_.Count(st);
      to = static_cast<Sum>(add >= cap - to ? cap : to + add);
    }
    constexpr const char* kInvariant =
        "occurrence counts must agree with the suffix links (a count is the state's own, 1 or 0 "
        "for a clone, plus the counts of the states linking to it)";
    if (sum[0] != n_)
      Fail("LINK, NCNT, CCNT", kInvariant,
           "the states linking to the root have " + Num(sum[0]) +
               " occurrences, expected N = " + Num(n_));
    for (uint64_t st = 1; st < s_; ++st) {
      const uint64_t expected = uint64_t{sum[st]} + (st <= n_ ? 1 : 0);
      if (v_.Count(st) != expected)
        Fail("LINK, NCNT, CCNT", kInvariant,
             "state " + Num(st) + " has count " + Num(v_.Count(st)) + ", expected " +
                 Num(expected));
    }
  }
  void Counts() const {
    if (n_ < UINT32_MAX)
      CountsWith<uint32_t>();
    else
      CountsWith<uint64_t>();
  }

  void RootTable(const std::vector<uint8_t>& occurs) const {
    for (uint32_t c = 0; c < v_.vocab_size(); ++c) {
      const uint64_t t = v_.root_table().Get(c);
      if (t >= s_)
        Fail("ROOT", "a transition must name a state",
             "the transition on " + Num(c) + " leads to " + Num(t));
      if (t == 0) {
        if (occurs[c])
          Fail("ROOT, TEXT", "every token of the text must have a transition from the root",
               "token " + Num(c) + " has none");
        continue;
      }
      if (v_.LastToken(t) != c)
        Fail("ROOT, CMEP, TEXT", "the root's transition on c must lead to a state ending with c",
             "the transition on " + Num(c) + " leads to state " + Num(t) + ", ending with " +
                 Num(v_.LastToken(t)));
      if (v_.links().Get(t) != kRoot)
        Fail("ROOT, LINK",
             "the root's transition on c must lead to the state whose shortest string is c "
             "(it links to the root)",
             "the transition on " + Num(c) + " leads to state " + Num(t) + ", which links to " +
                 Num(v_.links().Get(t)));
    }
  }

  void Edges() const {
    v_.ForEachEdgeRange([&](uint64_t u, uint64_t lo, uint64_t hi) {
      if (u == kRoot) {
        if (lo != hi) Fail("EDEG", "the root has no explicit transitions", "");
        return;
      }
      const uint32_t implicit = u < n_ ? v_.Token(u + 1) : kNoToken;
      uint32_t prev = 0;
      for (uint64_t i = lo; i < hi; ++i) {
        const uint64_t t = v_.edges().Get(i);
        auto what = [&] { return "state " + Num(u) + " -> " + Num(t) + " (edge " + Num(i) + ")"; };
        if (t == 0 || t >= s_)
          Fail("EDGE", "a stored transition must lead to a non-root state", what());
        const uint32_t label = v_.LastToken(t);
        if (label >= sep_)
          Fail("EDGE, CMEP, TEXT", "a stored transition's label must be a token", what());
        if (i > lo && label <= prev)
          Fail("EDGE, CMEP, TEXT", "a state's transition labels must be strictly increasing",
               what() + " has label " + Num(label) + " after " + Num(prev));
        if (label == implicit)
          Fail("EDGE, CMEP, TEXT", "a stored transition must not repeat the implicit one", what());
        prev = label;
        if (v_.Len(t) <= v_.Len(u))
          Fail("EDGE, CLEN", "a transition must lead to a longer state",
               what() + ": lengths " + Num(v_.Len(u)) + " and " + Num(v_.Len(t)));
        if (v_.Len(v_.Link(t)) > v_.Len(v_.Link(u)) + 1)
          Fail("EDGE, LINK, CLEN",
               "a transition must lead to the state of every source string extended by its "
               "label (the target's shortest string is at most one longer than the source's)",
               what());
        if (v_.Count(t) > v_.Count(u))
          Fail("EDGE, NCNT, CCNT", "a transition's target cannot occur more often than its source",
               what() + ": counts " + Num(v_.Count(u)) + " and " + Num(v_.Count(t)));
        if (v_.MinEndpos(t) <= v_.MinEndpos(u))
          Fail("EDGE, CMEP", "a transition's target must first end after its source",
               what() + ": first ends " + Num(v_.MinEndpos(u)) + " and " + Num(v_.MinEndpos(t)));
      }
    });
  }

  const IndexView& v_;
  const IndexHeader& h_;
  const std::string& path_;
  const uint64_t n_, s_, e_;
  const uint32_t sep_;
};

}  // namespace

void CheckOpenInvariants(const IndexView& view, const IndexHeader& header,
                         const std::string& path) {
  Checker(view, header, path).Open();
}

void VerifyStructure(const IndexView& view, const IndexHeader& header, const std::string& path) {
  Checker(view, header, path).Full();
}

}  // namespace sam::format::internal
