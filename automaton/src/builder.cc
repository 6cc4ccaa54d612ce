// Online suffix automaton construction (Blumer et al. 1985) with implicit
// non-clone states and a compact edge arena, and the freeze into format v1.
#include "sam/automaton/builder.h"

#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <bit>
#include <chrono>
#include <exception>
#include <random>
#include <string>
#include <sys/mman.h>
#include <thread>
#include <type_traits>
#include <utility>

#include "sam/format/packed.h"
#include "sam/format/sections.h"
#include "sam/format/writer.h"

namespace sam::automaton {
namespace {

using format::ErrorCode;
using format::FormatError;

constexpr unsigned kSelectRateLog2 = 6;
// Arena offsets of the narrow (32-bit) automaton stay below this.
constexpr uint64_t kNarrowArenaLimit = ~uint32_t{0};

// Asks for transparent huge pages on a large array: construction is a random
// walk over hundreds of megabytes, and TLB misses dominate without them.
template <typename T>
void AdviseHuge(std::vector<T>& v) {
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(v.data()) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t end = reinterpret_cast<uintptr_t>(v.data() + v.capacity()) & ~(kHuge - 1);
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
}

unsigned CapacityClass(uint32_t degree) {  // log2 of the chunk capacity
  return degree <= 1 ? 0 : static_cast<unsigned>(std::bit_width(degree - 1));
}

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// The construction structures, with state ids (and arena offsets, lengths,
// positions and counts) of type Id: uint32_t (12-byte state records, 8-byte
// edges; up to 2^31 - 3 tokens) or uint64_t (20-byte records, 12-byte edges;
// up to 2^56 tokens, the format's limit). pack(4) leaves the narrow layout
// as it is and keeps the wide one free of padding.
#pragma pack(push, 4)
template <typename Id>
struct Edge {
  uint32_t label;
  Id target;
};

// A state's suffix link and explicit edges (a sorted chunk of the arena whose
// capacity is the power of two at or above the degree), kept together so
// that one cache line serves the climb.
template <typename Id>
struct StateRec {
  Id link = 0;
  Id offset = 0;
  uint32_t degree = 0;
};
#pragma pack(pop)
static_assert(sizeof(Edge<uint32_t>) == 8 && sizeof(StateRec<uint32_t>) == 12);
static_assert(sizeof(Edge<uint64_t>) == 12 && sizeof(StateRec<uint64_t>) == 20);

template <typename Id>
struct Automaton {
  static constexpr Id kClone = Id{1} << (8 * sizeof(Id) - 1);  // tag: clone number in the low bits
  static constexpr Id kNil = ~Id{0};
  using EdgeT = Edge<Id>;
  using Rec = StateRec<Id>;

  uint32_t vocab_size = 0;
  uint32_t separator = 0;
  uint64_t documents = 0;
  Id last = 0;

  // The document being added, for error contexts: "document N" (0-based, in the order added).
  std::string CurrentDocument() const { return "document " + std::to_string(documents); }

  std::vector<uint32_t> text;          // text[p] = token at position p + 1
  std::vector<Rec> nc;                 // index = position (0 = root)
  std::vector<Rec> cl;                 // clones
  std::vector<Id> cl_len, cl_mep;
  std::vector<Id> root_next;           // dense root transitions (0 = none)
  std::vector<EdgeT> arena;
  std::vector<std::vector<Id>> free_chunks;  // per capacity class

  Id Len(Id v) const { return (v & kClone) ? cl_len[v & ~kClone] : v; }
  Rec& RecOf(Id v) { return (v & kClone) ? cl[v & ~kClone] : nc[v]; }
  const Rec& RecOf(Id v) const { return (v & kClone) ? cl[v & ~kClone] : nc[v]; }
  Id Link(Id v) const { return RecOf(v).link; }
  void SetLink(Id v, Id l) { RecOf(v).link = l; }
  Id Mep(Id v) const { return (v & kClone) ? cl_mep[v & ~kClone] : v; }

  // Index of label in the chunk, or the insertion point with found = false.
  uint32_t Find(const Rec& l, uint32_t c, bool* found) const {
    const EdgeT* e = arena.data() + l.offset;
    uint32_t lo = 0, hi = l.degree;
    while (hi - lo > 8) {
      const uint32_t mid = (lo + hi) / 2;
      if (e[mid].label < c) lo = mid + 1; else hi = mid;
    }
    while (lo < hi && e[lo].label < c) ++lo;
    *found = lo < l.degree && e[lo].label == c;
    return lo;
  }

  Id Get(Id p, uint32_t c) const {
    if (p == 0) return root_next[c];
    if (!(p & kClone) && p < text.size() && text[p] == c) return p + 1;  // implicit
    const Rec& l = RecOf(p);
    if (l.degree == 0) return 0;
    bool found;
    const uint32_t i = Find(l, c, &found);
    return found ? Id{arena[l.offset + i].target} : Id{0};
  }

  Id Allocate(unsigned cls) {
    auto& fl = free_chunks[cls];
    if (!fl.empty()) {
      const Id off = fl.back();
      fl.pop_back();
      return off;
    }
    const uint64_t off = arena.size();
    // The builder widens the ids before a document that could reach this
    // (SuffixAutomatonBuilder::AddDocument), so a narrow arena never does.
    if (off + (uint64_t{1} << cls) >= uint64_t{kNil})
      throw FormatError(ErrorCode::kCapacity, {.record = CurrentDocument()},
                        "corpus too large for the builder's edge arena");
    arena.resize(off + (uint64_t{1} << cls));
    return static_cast<Id>(off);
  }

  // Sets an explicit transition (inserting or overwriting).
  void Set(Id p, uint32_t c, Id target) {
    if (p == 0) {
      root_next[c] = target;
      return;
    }
    Rec& l = RecOf(p);
    bool found = false;
    const uint32_t i = l.degree ? Find(l, c, &found) : 0;
    if (found) {
      arena[l.offset + i].target = target;
      return;
    }
    Insert(l, i, c, target);
  }

  // Adds the transition (c -> target) at sorted index i of l's chunk.
  void Insert(Rec& l, uint32_t i, uint32_t c, Id target) {
    const unsigned cls = CapacityClass(l.degree);
    if (l.degree == 0 || l.degree == (1u << cls)) {  // full (or none): move to a bigger chunk
      const unsigned new_cls = l.degree == 0 ? 0 : cls + 1;
      const Id off = Allocate(new_cls);  // may reallocate the arena
      EdgeT* dst = arena.data() + off;
      const EdgeT* src = arena.data() + l.offset;
      std::copy(src, src + i, dst);
      dst[i] = {c, target};
      std::copy(src + i, src + l.degree, dst + i + 1);
      // (A copy: a reference may not bind to a packed, unaligned field.)
      if (l.degree) free_chunks[cls].push_back(Id{l.offset});
      l.offset = off;
    } else {
      EdgeT* e = arena.data() + l.offset;
      std::copy_backward(e + i, e + l.degree, e + l.degree + 1);
      e[i] = {c, target};
    }
    ++l.degree;
  }

  Id NewClone(Id p, Id q) {
    const Id k = static_cast<Id>(cl_len.size());
    if (k >= kClone - 1)
      throw FormatError(ErrorCode::kCapacity, {.record = CurrentDocument()},
                        "too many states for the builder");
    const Id clone = k | kClone;
    cl_len.push_back(Len(p) + 1);
    cl_mep.push_back(Mep(q));
    const Rec src = RecOf(q);
    cl.push_back({src.link, 0, 0});
    // Copy q's transitions: its explicit ones and, for a non-clone, the
    // implicit q -> q+1 (which becomes explicit for the clone).
    const bool implicit = !(q & kClone) && q < text.size();
    const uint32_t degree = src.degree + (implicit ? 1 : 0);
    if (degree > 0) {
      const unsigned cls = CapacityClass(degree);
      const Id off = Allocate(cls);
      EdgeT* dst = arena.data() + off;
      const EdgeT* s = arena.data() + src.offset;
      uint32_t j = 0;
      bool placed = !implicit;
      for (uint32_t i = 0; i < src.degree; ++i) {
        if (!placed && text[q] < s[i].label) {
          dst[j++] = {text[q], q + 1};
          placed = true;
        }
        dst[j++] = s[i];
      }
      if (!placed) dst[j++] = {text[q], q + 1};
      cl.back().offset = off;
      cl.back().degree = degree;
    }
    return clone;
  }

  void Extend(uint32_t c) {
    text.push_back(c);
    const Id cur = static_cast<Id>(text.size());
    nc.push_back({});
    // last -> cur is the implicit transition; start the climb above it.
    Id p = last == 0 ? 0 : Link(last);
    Id q = 0;
    // Climb while p has no transition on c, adding p -c-> cur. One search per
    // state: the insertion point of a failed search is reused.
    for (;;) {
      if (p == 0) {
        q = root_next[c];
        if (q == 0) root_next[c] = cur;
        break;
      }
      if (!(p & kClone) && text[p] == c) {  // implicit p -> p+1 (p < cur - 1 here)
        q = p + 1;
        break;
      }
      Rec& l = RecOf(p);
      bool found = false;
      const uint32_t i = l.degree ? Find(l, c, &found) : 0;
      if (found) {
        q = arena[l.offset + i].target;
        break;
      }
      Insert(l, i, c, cur);
      p = l.link;
    }
    if (q == 0) {
      SetLink(cur, 0);
    } else {
      if (Len(p) + 1 == Len(q)) {
        SetLink(cur, q);
      } else {
        const Id clone = NewClone(p, q);
        while (p != kNil && Get(p, c) == q) {
          Set(p, c, clone);
          p = p == 0 ? kNil : Link(p);
        }
        SetLink(q, clone);
        SetLink(cur, clone);
      }
    }
    last = cur;
  }

  // The written state id of v: non-clones keep theirs, clone k is N+1+k.
  uint64_t Map(Id v) const {
    return (v & kClone) ? text.size() + 1 + (v & ~kClone) : v;
  }

  uint64_t MemoryBytes() const {
    return text.capacity() * 4 + (nc.capacity() + cl.capacity()) * sizeof(Rec) +
           (cl_len.capacity() + cl_mep.capacity() + root_next.capacity()) * sizeof(Id) +
           arena.capacity() * sizeof(EdgeT);
  }

  void AdviseAll() {
    AdviseHuge(text);
    AdviseHuge(nc);
    AdviseHuge(cl);
    AdviseHuge(arena);
  }

  void AddDocument(std::span<const uint32_t> ids) {
    const void* before[4] = {text.data(), nc.data(), cl.data(), arena.data()};
    for (uint32_t id : ids) Extend(id);
    Extend(separator);
    ++documents;
    // A vector that grew past its reservation was reallocated: advise again.
    if (before[0] != text.data()) AdviseHuge(text);
    if (before[1] != nc.data()) AdviseHuge(nc);
    if (before[2] != cl.data()) AdviseHuge(cl);
    if (before[3] != arena.data()) AdviseHuge(arena);
  }

  // Freezes into `writer` (a file's or a buffer's).
  WriteReport Write(format::IndexWriter& writer, const IndexInfo& info, unsigned min_width);

  // The freeze's steps (Write), in the order of the sections they write.
  struct Counts {            // occurrence counts (|endpos|) of every state
    std::vector<Id> nc;      // non-clone state i at i (0: the root)
    std::vector<Id> cl;      // clone k at k
    std::vector<Id> by_len;  // scratch: clones sorted by length
    std::vector<Id> start;   // scratch: where each length starts in by_len
    uint64_t prefix = 0;     // non-clone states 1..prefix may count more than 1 (NCNT)
  };
  void AllocateCounts(Counts* counts) const;
  void CountOccurrences(Counts* counts) const;
  uint64_t CountOf(const Counts& counts, Id v) const {
    if (v == 0) return text.size();
    return (v & kClone) ? counts.cl[v & ~kClone] : counts.nc[v];
  }
  std::vector<format::SelfTestSample> SelfTests(const IndexInfo& info, const Counts& counts) const;
  format::IndexHeader Header(const IndexInfo& info, unsigned min_width) const;
  void SetCountWidths(const Counts& counts, unsigned min_width, format::IndexHeader* h) const;
  void WriteText(format::IndexWriter& writer, const format::IndexHeader& h) const;
  void WriteLinks(format::IndexWriter& writer, const format::IndexHeader& h) const;
  void WriteCloneSections(format::IndexWriter& writer, const format::IndexHeader& h,
                          Counts& counts);
  uint64_t WriteEdges(format::IndexWriter& writer, format::IndexHeader* h);
  uint64_t CountTransitions(uint64_t explicit_edges) const;
};

// Converts a narrow id (kNil and the clone tag included) to the wide type.
uint64_t WidenId(uint32_t v) {
  if (v == Automaton<uint32_t>::kNil) return Automaton<uint64_t>::kNil;
  if (v & Automaton<uint32_t>::kClone)
    return (v & ~Automaton<uint32_t>::kClone) | Automaton<uint64_t>::kClone;
  return v;
}

// Moves a narrow automaton into the wide type, array by array (each narrow
// array is released once converted, so the peak is the wide automaton plus
// its largest narrow array).
std::unique_ptr<Automaton<uint64_t>> Widen(Automaton<uint32_t>& a) {
  auto w = std::make_unique<Automaton<uint64_t>>();
  w->vocab_size = a.vocab_size;
  w->separator = a.separator;
  w->documents = a.documents;
  w->last = WidenId(a.last);
  w->text.swap(a.text);
  auto ids = [](std::vector<uint32_t>& from, std::vector<uint64_t>& to, bool are_states) {
    to.reserve(from.capacity());
    for (uint32_t v : from) to.push_back(are_states ? WidenId(v) : v);
    std::vector<uint32_t>().swap(from);
  };
  auto recs = [](std::vector<StateRec<uint32_t>>& from, std::vector<StateRec<uint64_t>>& to) {
    to.reserve(from.capacity());
    for (const auto& r : from) to.push_back({WidenId(r.link), r.offset, r.degree});
    std::vector<StateRec<uint32_t>>().swap(from);
  };
  recs(a.nc, w->nc);
  recs(a.cl, w->cl);
  ids(a.cl_len, w->cl_len, false);
  ids(a.cl_mep, w->cl_mep, false);
  ids(a.root_next, w->root_next, true);
  w->arena.reserve(a.arena.capacity());
  for (const auto& e : a.arena) w->arena.push_back({e.label, WidenId(e.target)});
  std::vector<Edge<uint32_t>>().swap(a.arena);
  w->free_chunks.resize(a.free_chunks.size());
  for (size_t k = 0; k < a.free_chunks.size(); ++k) ids(a.free_chunks[k], w->free_chunks[k], false);
  w->AdviseAll();
  return w;
}

}  // namespace

struct SuffixAutomatonBuilder::Impl {
  BuilderOptions options;
  // Exactly one is set: the narrow automaton until the corpus needs wide ids.
  std::unique_ptr<Automaton<uint32_t>> narrow;
  std::unique_ptr<Automaton<uint64_t>> wide;

  template <typename F>
  decltype(auto) Visit(F&& f) {
    return narrow ? f(*narrow) : f(*wide);
  }
  template <typename F>
  decltype(auto) Visit(F&& f) const {
    return narrow ? f(std::as_const(*narrow)) : f(std::as_const(*wide));
  }
};

SuffixAutomatonBuilder::SuffixAutomatonBuilder(uint32_t vocab_size, uint64_t expected_tokens)
    : SuffixAutomatonBuilder(vocab_size, expected_tokens, BuilderOptions{}) {}

SuffixAutomatonBuilder::SuffixAutomatonBuilder(uint32_t vocab_size, uint64_t expected_tokens,
                                               const BuilderOptions& options)
    : impl_(std::make_unique<Impl>()) {
  if (vocab_size == 0 || vocab_size >= (1u << 31))
    throw FormatError(ErrorCode::kInvalidArgument,
                      "vocab size " + std::to_string(vocab_size) + " outside [1, 2^31)");
  if (expected_tokens >= kMaxBuilderTokens)
    throw FormatError(ErrorCode::kCapacity,
                      "corpus of " + std::to_string(expected_tokens) +
                          " tokens exceeds the builder's limit of 2^56 tokens");
  if (options.min_width > format::kMaxPackedWidth)
    throw FormatError(ErrorCode::kInvalidArgument,
                      "minimum width " + std::to_string(options.min_width) + " above " +
                          std::to_string(format::kMaxPackedWidth));
  impl_->options = options;
  const bool wide = options.ids == BuilderOptions::Ids::kWide ||
                    expected_tokens >= kNarrowBuilderTokens;
  auto init = [&](auto& a) {
    a.vocab_size = vocab_size;
    a.separator = vocab_size;
    a.root_next.assign(uint64_t{vocab_size} + 1, 0);
    a.free_chunks.resize(33);
    if (expected_tokens) {
      a.text.reserve(expected_tokens);
      a.nc.reserve(expected_tokens + 1);
      const uint64_t clones = expected_tokens / 2;
      a.cl_len.reserve(clones);
      a.cl_mep.reserve(clones);
      a.cl.reserve(clones);
      a.arena.reserve(expected_tokens * 3 / 2);
      a.AdviseAll();
    }
    using A = std::remove_reference_t<decltype(a)>;
    a.nc.push_back({A::kNil, 0, 0});  // the root
  };
  if (wide) {
    impl_->wide = std::make_unique<Automaton<uint64_t>>();
    init(*impl_->wide);
  } else {
    impl_->narrow = std::make_unique<Automaton<uint32_t>>();
    init(*impl_->narrow);
  }
}

SuffixAutomatonBuilder::~SuffixAutomatonBuilder() = default;

void SuffixAutomatonBuilder::AddDocument(std::span<const uint32_t> ids) {
  if (ids.empty()) return;
  Impl& m = *impl_;
  const uint64_t tokens = num_tokens();
  // (Made only for an error: this runs once per document.)
  auto document = [&] { return m.Visit([](const auto& a) { return a.CurrentDocument(); }); };
  if (tokens + ids.size() + 1 >= kMaxBuilderTokens)
    throw FormatError(ErrorCode::kCapacity, {.record = document()},
                      "a document of " + std::to_string(ids.size()) + " tokens after " +
                          std::to_string(tokens) + " exceeds the builder's limit of 2^56 tokens");
  const uint32_t vocab_size = m.Visit([](const auto& a) { return a.vocab_size; });
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= vocab_size)
      throw FormatError(ErrorCode::kInvalidArgument, {.record = document()},
                        "token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                            " is not below the vocab size " + std::to_string(vocab_size));
  if (m.narrow) {
    // Widen before a document that could take the narrow ids past their
    // limits. Tokens: 2^31 - 3 (state ids carry a clone tag bit). Arena
    // offsets: an arena never exceeds 4 slots per transition ever added
    // (chunks double; freed chunks are reused), transitions never exceed
    // 3 per token (Blumer et al.), and one token adds at most 3 chunk
    // allocations (the climb's amortized 2, a clone's copy) of at most
    // 2 (vocab + 1) slots; the smaller of the two bounds decides.
    const uint64_t after = tokens + ids.size() + 1;
    const uint64_t arena_bound =
        std::min<uint64_t>(12 * after, m.narrow->arena.size() +
                                           6 * (ids.size() + 1) * (uint64_t{vocab_size} + 2));
    const uint64_t widen_at = m.options.widen_at_tokens ? m.options.widen_at_tokens
                                                        : kNarrowBuilderTokens;
    if (after >= std::min(widen_at, kNarrowBuilderTokens) || arena_bound >= kNarrowArenaLimit) {
      m.wide = Widen(*m.narrow);
      m.narrow.reset();
    }
  }
  m.Visit([&](auto& a) { a.AddDocument(ids); });
}

uint64_t SuffixAutomatonBuilder::num_tokens() const {
  return impl_->Visit([](const auto& a) -> uint64_t { return a.text.size(); });
}
uint64_t SuffixAutomatonBuilder::num_documents() const {
  return impl_->Visit([](const auto& a) { return a.documents; });
}
uint64_t SuffixAutomatonBuilder::num_states() const {
  return impl_->Visit([](const auto& a) -> uint64_t { return 1 + a.text.size() + a.cl_len.size(); });
}
uint64_t SuffixAutomatonBuilder::num_clones() const {
  return impl_->Visit([](const auto& a) -> uint64_t { return a.cl_len.size(); });
}
uint64_t SuffixAutomatonBuilder::memory_bytes() const {
  return impl_->Visit([](const auto& a) { return a.MemoryBytes(); });
}
bool SuffixAutomatonBuilder::wide_ids() const { return impl_->wide != nullptr; }

namespace {

// Write and WriteToMemory refuse an empty builder before any output exists.
void RequireDocuments(uint64_t documents, const std::string& name) {
  if (documents == 0)
    throw FormatError(ErrorCode::kInvalidArgument, {.file = name},
                      "no documents to index (all inputs were empty)");
}

}  // namespace

WriteReport SuffixAutomatonBuilder::Write(const std::string& path, const IndexInfo& info) {
  RequireDocuments(num_documents(), path);
  format::IndexWriter writer(path);
  const unsigned min_width = impl_->options.min_width;
  return impl_->Visit([&](auto& a) { return a.Write(writer, info, min_width); });
}

WriteReport SuffixAutomatonBuilder::WriteToMemory(const IndexInfo& info,
                                                  std::vector<uint8_t>* out,
                                                  const std::string& name) {
  RequireDocuments(num_documents(), name);
  format::IndexWriter writer(out, name);
  const unsigned min_width = impl_->options.min_width;
  return impl_->Visit([&](auto& a) { return a.Write(writer, info, min_width); });
}

namespace {

// Sizes the count arrays (1 for every non-clone state, 0 for clones) and the
// counting sort's scratch on the calling thread: CountOccurrences may run on
// another, and memory allocated there would stay in that thread's arena.
template <typename Id>
void Automaton<Id>::AllocateCounts(Counts* counts) const {
  Id max_len = 0;
  for (Id l : cl_len) max_len = std::max(max_len, l);
  counts->nc.assign(text.size() + 1, 1);
  counts->cl.assign(cl_len.size(), 0);
  counts->by_len.resize(cl_len.size());
  counts->start.assign(uint64_t{max_len} + 2, 0);
}

// Occurrence counts: cnt[link[v]] += cnt[v] in decreasing length order.
// Non-clone i has length i, so only the clones need a counting sort by
// length. (Counts never exceed N, so Id holds them.) Reads the links and
// lengths only.
template <typename Id>
void Automaton<Id>::CountOccurrences(Counts* counts) const {
  std::vector<Id>& start = counts->start;
  std::vector<Id>& by_len = counts->by_len;
  std::vector<Id>& nc_cnt = counts->nc;
  std::vector<Id>& cl_cnt = counts->cl;
  const uint64_t n = text.size(), max_len = start.size() - 2;
  for (Id l : cl_len) ++start[l + 1];
  for (uint64_t l = 1; l < start.size(); ++l) start[l] += start[l - 1];
  for (Id k = 0; k < cl_len.size(); ++k) by_len[start[cl_len[k]]++] = k;
  // (start[l] now ends length l's run; shift back to where each run begins.)
  for (uint64_t l = start.size() - 1; l > 0; --l) start[l] = start[l - 1];
  start[0] = 0;
  auto add = [&](Id target, Id amount) {
    if (target == kNil || target == 0) return;
    if (target & kClone) cl_cnt[target & ~kClone] += amount; else nc_cnt[target] += amount;
  };
  for (uint64_t len = n; len >= 1; --len) {
    add(nc[len].link, nc_cnt[len]);
    if (len <= max_len)
      for (Id i = start[len]; i < start[len + 1]; ++i) {
        const Id k = by_len[i];
        add(cl[k].link, cl_cnt[k]);
      }
  }
  std::vector<Id>().swap(by_len);
  std::vector<Id>().swap(start);
  // Non-clone i holds the length-i prefix; it recurs only for i <= K.
  counts->prefix = n;
  while (counts->prefix > 0 && nc_cnt[counts->prefix] == 1) --counts->prefix;
}

// Self-test samples: random substrings inside documents, with the answers of
// the construction structures.
template <typename Id>
std::vector<format::SelfTestSample> Automaton<Id>::SelfTests(const IndexInfo& info,
                                                             const Counts& counts) const {
  const uint64_t n = text.size();
  std::vector<format::SelfTestSample> tests;
  std::mt19937_64 rng(info.self_test_seed);
  for (uint32_t attempt = 0;
       tests.size() < info.self_test_samples && attempt < info.self_test_samples * 20; ++attempt) {
    const uint64_t start = 1 + rng() % n;
    uint64_t len = 1 + rng() % 12;
    uint64_t ok = 0;
    while (ok < len && start + ok <= n && text[start + ok - 1] != separator) ++ok;
    if (ok == 0) continue;
    len = ok;
    Id v = 0;
    for (uint64_t k = 0; k < len; ++k) v = Get(v, text[start + k - 1]);
    tests.push_back({start, len, CountOf(counts, v), v == 0 ? 0 : uint64_t{Mep(v)}});
  }
  return tests;
}

// The header, widths from the data (at least min_width for those that grow
// with it), except the count width (SetCountWidths) and the edge fields
// (WriteEdges).
template <typename Id>
format::IndexHeader Automaton<Id>::Header(const IndexInfo& info, unsigned min_width) const {
  const uint64_t n = text.size(), c = cl_len.size(), s = 1 + n + c;
  Id max_clone_len = 1;
  for (Id l : cl_len) max_clone_len = std::max(max_clone_len, l);
  auto width = [&](uint64_t max_value) {
    return static_cast<uint8_t>(std::max(format::BitsFor(max_value), min_width));
  };
  format::IndexHeader h;
  h.num_tokens = n;
  h.num_clones = c;
  h.num_states = s;
  h.num_documents = documents;
  h.vocab_size = vocab_size;
  h.separator_id = separator;
  h.bos_id = info.bos_id;
  h.eos_id = info.eos_id;
  h.token_width = static_cast<uint8_t>(format::BitsFor(vocab_size));
  h.state_width = width(s - 1);
  h.position_width = width(n);
  h.clone_len_width = width(max_clone_len);
  h.select_rate_log2 = kSelectRateLog2;
  h.tokenizer_sha256 = info.tokenizer_sha256;
  return h;
}

template <typename Id>
void Automaton<Id>::SetCountWidths(const Counts& counts, unsigned min_width,
                                   format::IndexHeader* h) const {
  Id max_count = 1;
  for (Id k : counts.cl) max_count = std::max(max_count, k);
  for (uint64_t i = 1; i <= counts.prefix; ++i) max_count = std::max(max_count, counts.nc[i]);
  h->num_prefix_counts = counts.prefix;
  h->count_width = static_cast<uint8_t>(std::max(format::BitsFor(max_count), min_width));
}

void AddPacked(format::IndexWriter& writer, const char* tag, format::PackedWriter& pw) {
  const auto bytes = pw.Finish();
  writer.AddSection(tag, bytes);
}

template <typename Id>
void Automaton<Id>::WriteText(format::IndexWriter& writer, const format::IndexHeader& h) const {
  format::PackedWriter pw(h.token_width, text.size());
  for (uint32_t t : text) pw.Push(t);
  AddPacked(writer, "TEXT", pw);
}

template <typename Id>
void Automaton<Id>::WriteLinks(format::IndexWriter& writer, const format::IndexHeader& h) const {
  format::PackedWriter pw(h.state_width, h.num_states);
  pw.Push(0);
  for (uint64_t i = 1; i <= text.size(); ++i) pw.Push(Map(nc[i].link));
  for (const Rec& r : cl) pw.Push(Map(r.link));
  AddPacked(writer, "LINK", pw);
}

// CLEN, CMEP, CCNT, NCNT and ROOT, releasing each array once written.
template <typename Id>
void Automaton<Id>::WriteCloneSections(format::IndexWriter& writer, const format::IndexHeader& h,
                                       Counts& counts) {
  const uint64_t c = cl_len.size();
  {
    format::PackedWriter pw(h.clone_len_width, c);
    for (Id l : cl_len) pw.Push(l);
    AddPacked(writer, "CLEN", pw);
    std::vector<Id>().swap(cl_len);
  }
  {
    format::PackedWriter pw(h.position_width, c);
    for (Id e : cl_mep) pw.Push(e);
    AddPacked(writer, "CMEP", pw);
    std::vector<Id>().swap(cl_mep);
  }
  {
    format::PackedWriter pw(h.count_width, c);
    for (Id k : counts.cl) pw.Push(k);
    AddPacked(writer, "CCNT", pw);
    std::vector<Id>().swap(counts.cl);
  }
  {
    format::PackedWriter pw(h.count_width, counts.prefix);
    for (uint64_t i = 1; i <= counts.prefix; ++i) pw.Push(counts.nc[i]);
    AddPacked(writer, "NCNT", pw);
    std::vector<Id>().swap(counts.nc);
  }
  {
    format::PackedWriter pw(h.state_width, vocab_size);
    for (uint32_t t = 0; t < vocab_size; ++t) pw.Push(Map(root_next[t]));
    AddPacked(writer, "ROOT", pw);
  }
}

// Explicit edges in final state order, document-end transitions dropped; the
// degree bit vector has deg(v) zeros then a one per state. Releases the
// states and the arena. Returns the number of edges written.
template <typename Id>
uint64_t Automaton<Id>::WriteEdges(format::IndexWriter& writer, format::IndexHeader* h) {
  const uint64_t n = text.size(), c = cl.size();
  uint64_t edges = 0;
  format::PackedWriter edge_pw(h->state_width, n + c);
  format::DegreeVectorWriter degrees(kSelectRateLog2, h->num_states + n + c);
  auto emit_state = [&](const Rec& l) {
    const EdgeT* e = arena.data() + l.offset;
    for (uint32_t i = 0; i < l.degree; ++i) {
      if (e[i].label == separator) continue;
      edge_pw.Push(Map(e[i].target));
      degrees.AddEdge();
      ++edges;
    }
    degrees.EndState();
  };
  degrees.EndState();  // the root: its transitions live in ROOT
  for (uint64_t i = 1; i <= n; ++i) emit_state(nc[i]);
  for (const Rec& l : cl) emit_state(l);
  std::vector<Rec>().swap(nc);
  std::vector<Rec>().swap(cl);
  std::vector<EdgeT>().swap(arena);
  h->num_edges = edges;
  AddPacked(writer, "EDGE", edge_pw);
  const format::DegreeSections d = degrees.Finish();
  h->select_width = static_cast<uint8_t>(d.select_width);
  writer.AddSection("EDEG", d.degree_bytes);
  writer.AddSection("ESEL", d.select_bytes);
  return edges;
}

// Transitions = root + implicit (non-clone i -> i+1 within documents) + explicit.
template <typename Id>
uint64_t Automaton<Id>::CountTransitions(uint64_t explicit_edges) const {
  uint64_t root_edges = 0;
  for (uint32_t t = 0; t < vocab_size; ++t) root_edges += root_next[t] != 0;
  uint64_t implicit = 0;
  for (uint64_t i = 1; i < text.size(); ++i) implicit += text[i] != separator;
  return root_edges + implicit + explicit_edges;
}

template <typename Id>
WriteReport Automaton<Id>::Write(format::IndexWriter& writer, const IndexInfo& info,
                                 unsigned min_width) {
  const auto t0 = std::chrono::steady_clock::now();
  WriteReport report;
  report.tokens = text.size();
  report.documents = documents;
  report.clones = cl_len.size();
  report.states = 1 + text.size() + cl_len.size();
  format::IndexHeader h = Header(info, min_width);
  // The counts (a pass over the links in length order) are computed on
  // another thread while this one writes TEXT and LINK: both only read the
  // construction structures. The section order, and so the file, is the same.
  Counts counts;
  AllocateCounts(&counts);
  std::exception_ptr counting_error;
  std::thread counting([&] {
    try {
      CountOccurrences(&counts);
    } catch (...) {
      counting_error = std::current_exception();
    }
  });
  try {
    WriteText(writer, h);
    WriteLinks(writer, h);
  } catch (...) {
    counting.join();
    throw;
  }
  counting.join();
  if (counting_error) std::rethrow_exception(counting_error);
  SetCountWidths(counts, min_width, &h);
  const std::vector<format::SelfTestSample> tests = SelfTests(info, counts);
  WriteCloneSections(writer, h, counts);
  report.explicit_edges = WriteEdges(writer, &h);
  report.freeze_seconds = Seconds(t0);
  const auto t1 = std::chrono::steady_clock::now();
  writer.AddSection("META", std::span<const uint8_t>(
                                reinterpret_cast<const uint8_t*>(info.metadata_json.data()),
                                info.metadata_json.size()),
                    /*compress=*/true);
  if (!info.vocabulary.empty())
    writer.AddSection("VOCB", format::EncodeVocabulary(info.vocabulary), /*compress=*/true);
  writer.AddSection("TEST", format::EncodeSelfTest(tests), /*compress=*/true);
  report.write_seconds = Seconds(t1);
  report.transitions = CountTransitions(report.explicit_edges);
  // What the accelerator pass below holds (the written file's pages it
  // reads, and its tables) comes on top of whatever the build still keeps:
  // the construction is given back first, so that the pass stays below the
  // construction's peak (the bound --max-memory plans for). glibc keeps
  // freed blocks below its mmap threshold in the heap until trimmed.
  std::vector<uint32_t>().swap(text);
  std::vector<std::vector<Id>>().swap(free_chunks);
#ifdef __GLIBC__
  ::malloc_trim(0);
#endif
  if (info.accelerators) {
    const auto t2 = std::chrono::steady_clock::now();
    writer.AddAccelerators(h, *info.accelerators);
    report.accelerator_seconds = Seconds(t2);
  }
  const auto t3 = std::chrono::steady_clock::now();
  writer.Finish(h);
  report.write_seconds += Seconds(t3);
  report.sections = writer.sections();
  for (const auto& sec : report.sections)
    report.file_bytes = std::max(report.file_bytes, sec.offset + sec.stored_bytes);
  return report;
}

}  // namespace

WriteReport BuildIndexFile(const std::vector<std::vector<uint32_t>>& documents,
                           uint32_t vocab_size, const std::string& path,
                           const IndexInfo& info) {
  return BuildIndexFile(documents, vocab_size, path, info, BuilderOptions{});
}

WriteReport BuildIndexFile(const std::vector<std::vector<uint32_t>>& documents,
                           uint32_t vocab_size, const std::string& path, const IndexInfo& info,
                           const BuilderOptions& options) {
  uint64_t total = 0;
  for (const auto& d : documents) total += d.size() + 1;
  SuffixAutomatonBuilder b(vocab_size, total, options);
  for (const auto& d : documents) b.AddDocument(d);
  return b.Write(path, info);
}

}  // namespace sam::automaton
