// Online suffix automaton construction (Blumer et al. 1985) with implicit
// non-clone states and a compact edge arena, and the freeze into format v1.
#include "sam/indexer/builder.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <random>
#include <string>
#include <sys/mman.h>

#include "sam/format/packed.h"
#include "sam/format/sections.h"
#include "sam/format/writer.h"

namespace sam::indexer {
namespace {

using format::ErrorCode;
using format::FormatError;

constexpr uint32_t kClone = 1u << 31;  // state id tag: clone number in the low bits
constexpr uint32_t kNil = ~0u;
constexpr unsigned kSelectRateLog2 = 6;

struct Edge {
  uint32_t label;
  uint32_t target;
};

// A state's suffix link and explicit edges (a sorted chunk of the arena whose
// capacity is the power of two at or above the degree), kept together so
// that one cache line serves the climb.
struct StateRec {
  uint32_t link = 0;
  uint32_t offset = 0;
  uint32_t degree = 0;
};

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

}  // namespace

struct SuffixAutomatonBuilder::Impl {
  uint32_t vocab_size;
  uint32_t separator;
  uint64_t documents = 0;
  uint32_t last = 0;

  // The document being added, for error contexts: "document N" (0-based, in the order added).
  std::string CurrentDocument() const { return "document " + std::to_string(documents); }

  std::vector<uint32_t> text;          // text[p] = token at position p + 1
  std::vector<StateRec> nc;            // index = position (0 = root)
  std::vector<StateRec> cl;            // clones
  std::vector<uint32_t> cl_len, cl_mep;
  std::vector<uint32_t> root_next;     // dense root transitions (0 = none)
  std::vector<Edge> arena;
  std::vector<std::vector<uint32_t>> free_chunks;  // per capacity class

  uint32_t Len(uint32_t v) const { return (v & kClone) ? cl_len[v & ~kClone] : v; }
  StateRec& Rec(uint32_t v) { return (v & kClone) ? cl[v & ~kClone] : nc[v]; }
  const StateRec& Rec(uint32_t v) const { return (v & kClone) ? cl[v & ~kClone] : nc[v]; }
  uint32_t Link(uint32_t v) const { return Rec(v).link; }
  void SetLink(uint32_t v, uint32_t l) { Rec(v).link = l; }
  uint32_t Mep(uint32_t v) const { return (v & kClone) ? cl_mep[v & ~kClone] : v; }

  // Index of label in the chunk, or the insertion point with found = false.
  uint32_t Find(const StateRec& l, uint32_t c, bool* found) const {
    const Edge* e = arena.data() + l.offset;
    uint32_t lo = 0, hi = l.degree;
    while (hi - lo > 8) {
      const uint32_t mid = (lo + hi) / 2;
      if (e[mid].label < c) lo = mid + 1; else hi = mid;
    }
    while (lo < hi && e[lo].label < c) ++lo;
    *found = lo < l.degree && e[lo].label == c;
    return lo;
  }

  uint32_t Get(uint32_t p, uint32_t c) const {
    if (p == 0) return root_next[c];
    if (!(p & kClone) && p < text.size() && text[p] == c) return p + 1;  // implicit
    const StateRec& l = Rec(p);
    if (l.degree == 0) return 0;
    bool found;
    const uint32_t i = Find(l, c, &found);
    return found ? arena[l.offset + i].target : 0;
  }

  uint32_t Allocate(unsigned cls) {
    auto& fl = free_chunks[cls];
    if (!fl.empty()) {
      const uint32_t off = fl.back();
      fl.pop_back();
      return off;
    }
    const uint64_t off = arena.size();
    if (off + (uint64_t{1} << cls) >= kNil)
      throw FormatError(ErrorCode::kCapacity, {.record = CurrentDocument()},
                        "corpus too large for the builder's 32-bit edge arena");
    arena.resize(off + (uint64_t{1} << cls));
    return static_cast<uint32_t>(off);
  }

  // Sets an explicit transition (inserting or overwriting).
  void Set(uint32_t p, uint32_t c, uint32_t target) {
    if (p == 0) {
      root_next[c] = target;
      return;
    }
    StateRec& l = Rec(p);
    bool found = false;
    const uint32_t i = l.degree ? Find(l, c, &found) : 0;
    if (found) {
      arena[l.offset + i].target = target;
      return;
    }
    Insert(l, i, c, target);
  }

  // Adds the transition (c -> target) at sorted index i of l's chunk.
  void Insert(StateRec& l, uint32_t i, uint32_t c, uint32_t target) {
    const unsigned cls = CapacityClass(l.degree);
    if (l.degree == 0 || l.degree == (1u << cls)) {  // full (or none): move to a bigger chunk
      const unsigned new_cls = l.degree == 0 ? 0 : cls + 1;
      const uint32_t off = Allocate(new_cls);  // may reallocate the arena
      Edge* dst = arena.data() + off;
      const Edge* src = arena.data() + l.offset;
      std::copy(src, src + i, dst);
      dst[i] = {c, target};
      std::copy(src + i, src + l.degree, dst + i + 1);
      if (l.degree) free_chunks[cls].push_back(l.offset);
      l.offset = off;
    } else {
      Edge* e = arena.data() + l.offset;
      std::copy_backward(e + i, e + l.degree, e + l.degree + 1);
      e[i] = {c, target};
    }
    ++l.degree;
  }

  uint32_t NewClone(uint32_t p, uint32_t q) {
    const uint32_t k = static_cast<uint32_t>(cl_len.size());
    if (k >= kClone - 1)
      throw FormatError(ErrorCode::kCapacity, {.record = CurrentDocument()},
                        "too many states for the builder");
    const uint32_t clone = k | kClone;
    cl_len.push_back(Len(p) + 1);
    cl_mep.push_back(Mep(q));
    const StateRec src = Rec(q);
    cl.push_back({src.link, 0, 0});
    // Copy q's transitions: its explicit ones and, for a non-clone, the
    // implicit q -> q+1 (which becomes explicit for the clone).
    const bool implicit = !(q & kClone) && q < text.size();
    const uint32_t degree = src.degree + (implicit ? 1 : 0);
    if (degree > 0) {
      const unsigned cls = CapacityClass(degree);
      const uint32_t off = Allocate(cls);
      Edge* dst = arena.data() + off;
      const Edge* s = arena.data() + src.offset;
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
    const uint32_t cur = static_cast<uint32_t>(text.size());
    nc.push_back({});
    // last -> cur is the implicit transition; start the climb above it.
    uint32_t p = last == 0 ? 0 : Link(last);
    uint32_t q = 0;
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
      StateRec& l = Rec(p);
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
        const uint32_t clone = NewClone(p, q);
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

  uint64_t Map(uint32_t v) const {
    return (v & kClone) ? text.size() + 1 + (v & ~kClone) : v;
  }

  uint64_t MemoryBytes() const {
    return text.capacity() * 4 + nc.capacity() * sizeof(StateRec) +
           cl.capacity() * sizeof(StateRec) + (cl_len.capacity() + cl_mep.capacity()) * 4 +
           root_next.capacity() * 4 + arena.capacity() * sizeof(Edge);
  }
};

SuffixAutomatonBuilder::SuffixAutomatonBuilder(uint32_t vocab_size, uint64_t expected_tokens)
    : impl_(std::make_unique<Impl>()) {
  if (vocab_size == 0 || vocab_size >= (1u << 31))
    throw FormatError(ErrorCode::kInvalidArgument,
                      "vocab size " + std::to_string(vocab_size) + " outside [1, 2^31)");
  if (expected_tokens >= (kClone - 2))
    throw FormatError(ErrorCode::kCapacity,
                      "corpus of " + std::to_string(expected_tokens) +
                          " tokens exceeds the builder's limit of 2^31 tokens");
  impl_->vocab_size = vocab_size;
  impl_->separator = vocab_size;
  impl_->root_next.assign(uint64_t{vocab_size} + 1, 0);
  impl_->free_chunks.resize(33);
  if (expected_tokens) {
    impl_->text.reserve(expected_tokens);
    impl_->nc.reserve(expected_tokens + 1);
    const uint64_t clones = expected_tokens / 2;
    impl_->cl_len.reserve(clones);
    impl_->cl_mep.reserve(clones);
    impl_->cl.reserve(clones);
    impl_->arena.reserve(expected_tokens * 3 / 2);
    AdviseHuge(impl_->text);
    AdviseHuge(impl_->nc);
    AdviseHuge(impl_->cl);
    AdviseHuge(impl_->arena);
  }
  impl_->nc.push_back({kNil, 0, 0});  // the root
}

SuffixAutomatonBuilder::~SuffixAutomatonBuilder() = default;

void SuffixAutomatonBuilder::AddDocument(std::span<const uint32_t> ids) {
  if (ids.empty()) return;
  Impl& m = *impl_;
  if (m.text.size() + ids.size() + 1 >= kClone - 2)
    throw FormatError(ErrorCode::kCapacity, {.record = m.CurrentDocument()},
                      "a document of " + std::to_string(ids.size()) + " tokens after " +
                          std::to_string(m.text.size()) +
                          " exceeds the builder's limit of 2^31 tokens");
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] >= m.vocab_size)
      throw FormatError(ErrorCode::kInvalidArgument, {.record = m.CurrentDocument()},
                        "token id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                            " is not below the vocab size " + std::to_string(m.vocab_size));
  const void* before[4] = {m.text.data(), m.nc.data(), m.cl.data(), m.arena.data()};
  for (uint32_t id : ids) m.Extend(id);
  m.Extend(m.separator);
  ++m.documents;
  // A vector that grew past its reservation was reallocated: advise again.
  if (before[0] != m.text.data()) AdviseHuge(m.text);
  if (before[1] != m.nc.data()) AdviseHuge(m.nc);
  if (before[2] != m.cl.data()) AdviseHuge(m.cl);
  if (before[3] != m.arena.data()) AdviseHuge(m.arena);
}

uint64_t SuffixAutomatonBuilder::num_tokens() const { return impl_->text.size(); }
uint64_t SuffixAutomatonBuilder::num_documents() const { return impl_->documents; }
uint64_t SuffixAutomatonBuilder::num_states() const {
  return 1 + impl_->text.size() + impl_->cl_len.size();
}
uint64_t SuffixAutomatonBuilder::num_clones() const { return impl_->cl_len.size(); }
uint64_t SuffixAutomatonBuilder::memory_bytes() const { return impl_->MemoryBytes(); }

WriteReport SuffixAutomatonBuilder::Write(const std::string& path, const IndexInfo& info) {
  Impl& m = *impl_;
  if (m.documents == 0)
    throw FormatError(ErrorCode::kInvalidArgument, {.file = path},
                      "no documents to index (all inputs were empty)");
  const auto t0 = std::chrono::steady_clock::now();
  const uint64_t n = m.text.size(), c = m.cl_len.size(), s = 1 + n + c;
  WriteReport report;
  report.tokens = n;
  report.documents = m.documents;
  report.states = s;
  report.clones = c;

  // Occurrence counts: 1 for every non-clone state, then cnt[link[v]] += cnt[v]
  // in decreasing length order. Non-clone i has length i, so only the clones
  // need a counting sort by length.
  std::vector<uint32_t> cl_cnt(c, 0);
  std::vector<uint32_t> nc_cnt(n + 1, 1);
  {
    uint32_t max_len = 0;
    for (uint32_t l : m.cl_len) max_len = std::max(max_len, l);
    std::vector<uint32_t> start(uint64_t{max_len} + 2, 0);
    for (uint32_t l : m.cl_len) ++start[l + 1];
    for (uint64_t l = 1; l < start.size(); ++l) start[l] += start[l - 1];
    std::vector<uint32_t> by_len(c);
    {
      std::vector<uint32_t> fill(start.begin(), start.end() - 1);
      for (uint32_t k = 0; k < c; ++k) by_len[fill[m.cl_len[k]]++] = k;
    }
    auto add = [&](uint32_t target, uint32_t amount) {
      if (target == kNil || target == 0) return;
      if (target & kClone) cl_cnt[target & ~kClone] += amount; else nc_cnt[target] += amount;
    };
    for (uint64_t len = n; len >= 1; --len) {
      add(m.nc[len].link, nc_cnt[len]);
      if (len <= max_len)
        for (uint32_t i = start[len]; i < start[len + 1]; ++i) {
          const uint32_t k = by_len[i];
          add(m.cl[k].link, cl_cnt[k]);
        }
    }
  }
  // Non-clone i holds the length-i prefix; it recurs only for i <= K.
  uint64_t prefix_counts = n;
  while (prefix_counts > 0 && nc_cnt[prefix_counts] == 1) --prefix_counts;
  auto count_of = [&](uint32_t v) -> uint64_t {
    if (v == 0) return n;
    return (v & kClone) ? cl_cnt[v & ~kClone] : nc_cnt[v];
  };

  // Self-test samples: random substrings inside documents, with the answers
  // of the construction structures.
  std::vector<format::SelfTestSample> tests;
  {
    std::mt19937_64 rng(info.self_test_seed);
    for (uint32_t attempt = 0;
         tests.size() < info.self_test_samples && attempt < info.self_test_samples * 20;
         ++attempt) {
      const uint64_t start = 1 + rng() % n;
      uint64_t len = 1 + rng() % 12;
      uint64_t ok = 0;
      while (ok < len && start + ok <= n && m.text[start + ok - 1] != m.separator) ++ok;
      if (ok == 0) continue;
      len = ok;
      uint32_t v = 0;
      for (uint64_t k = 0; k < len; ++k) v = m.Get(v, m.text[start + k - 1]);
      tests.push_back({start, len, count_of(v), v == 0 ? 0 : m.Mep(v)});
    }
  }

  // Widths.
  uint32_t max_clone_len = 1;
  for (uint32_t l : m.cl_len) max_clone_len = std::max(max_clone_len, l);
  uint32_t max_count = 1;
  for (uint32_t k : cl_cnt) max_count = std::max(max_count, k);
  for (uint64_t i = 1; i <= prefix_counts; ++i) max_count = std::max(max_count, nc_cnt[i]);
  format::IndexHeader h;
  h.num_tokens = n;
  h.num_clones = c;
  h.num_states = s;
  h.num_documents = m.documents;
  h.num_prefix_counts = prefix_counts;
  h.vocab_size = m.vocab_size;
  h.separator_id = m.separator;
  h.bos_id = info.bos_id;
  h.eos_id = info.eos_id;
  h.token_width = static_cast<uint8_t>(format::BitsFor(m.vocab_size));
  h.state_width = static_cast<uint8_t>(format::BitsFor(s - 1));
  h.position_width = static_cast<uint8_t>(format::BitsFor(n));
  h.clone_len_width = static_cast<uint8_t>(format::BitsFor(max_clone_len));
  h.count_width = static_cast<uint8_t>(format::BitsFor(max_count));
  h.select_rate_log2 = kSelectRateLog2;
  h.tokenizer_sha256 = info.tokenizer_sha256;

  format::IndexWriter writer(path);
  auto emit = [&](const char* tag, format::PackedWriter& pw) {
    const auto bytes = pw.Finish();
    writer.AddSection(tag, bytes);
  };
  {
    format::PackedWriter pw(h.token_width, n);
    for (uint32_t t : m.text) pw.Push(t);
    emit("TEXT", pw);
  }
  {
    format::PackedWriter pw(h.state_width, s);
    pw.Push(0);
    for (uint64_t i = 1; i <= n; ++i) pw.Push(m.Map(m.nc[i].link));
    for (const StateRec& r : m.cl) pw.Push(m.Map(r.link));
    emit("LINK", pw);
  }
  {
    format::PackedWriter pw(h.clone_len_width, c);
    for (uint32_t l : m.cl_len) pw.Push(l);
    emit("CLEN", pw);
    std::vector<uint32_t>().swap(m.cl_len);
  }
  {
    format::PackedWriter pw(h.position_width, c);
    for (uint32_t e : m.cl_mep) pw.Push(e);
    emit("CMEP", pw);
    std::vector<uint32_t>().swap(m.cl_mep);
  }
  {
    format::PackedWriter pw(h.count_width, c);
    for (uint32_t k : cl_cnt) pw.Push(k);
    emit("CCNT", pw);
    std::vector<uint32_t>().swap(cl_cnt);
  }
  {
    format::PackedWriter pw(h.count_width, prefix_counts);
    for (uint64_t i = 1; i <= prefix_counts; ++i) pw.Push(nc_cnt[i]);
    emit("NCNT", pw);
    std::vector<uint32_t>().swap(nc_cnt);
  }
  {
    format::PackedWriter pw(h.state_width, m.vocab_size);
    for (uint32_t t = 0; t < m.vocab_size; ++t) pw.Push(m.Map(m.root_next[t]));
    emit("ROOT", pw);
  }
  // Explicit edges in final state order, document-end transitions dropped;
  // the degree bit vector has deg(v) zeros then a one per state.
  uint64_t edges = 0;
  {
    format::PackedWriter edge_pw(h.state_width, n + c);
    format::DegreeVectorWriter degrees(kSelectRateLog2, s + n + c);
    auto emit_state = [&](const StateRec& l) {
      const Edge* e = m.arena.data() + l.offset;
      for (uint32_t i = 0; i < l.degree; ++i) {
        if (e[i].label == m.separator) continue;
        edge_pw.Push(m.Map(e[i].target));
        degrees.AddEdge();
        ++edges;
      }
      degrees.EndState();
    };
    degrees.EndState();  // the root: its transitions live in ROOT
    for (uint64_t i = 1; i <= n; ++i) emit_state(m.nc[i]);
    for (const StateRec& l : m.cl) emit_state(l);
    std::vector<StateRec>().swap(m.nc);
    std::vector<StateRec>().swap(m.cl);
    std::vector<Edge>().swap(m.arena);
    h.num_edges = edges;
    emit("EDGE", edge_pw);
    const format::DegreeSections d = degrees.Finish();
    h.select_width = static_cast<uint8_t>(d.select_width);
    writer.AddSection("EDEG", d.degree_bytes);
    writer.AddSection("ESEL", d.select_bytes);
  }
  report.freeze_seconds = Seconds(t0);
  const auto t1 = std::chrono::steady_clock::now();
  writer.AddSection("META", std::span<const uint8_t>(
                                reinterpret_cast<const uint8_t*>(info.metadata_json.data()),
                                info.metadata_json.size()),
                    /*compress=*/true);
  if (!info.vocabulary.empty())
    writer.AddSection("VOCB", format::EncodeVocabulary(info.vocabulary), /*compress=*/true);
  writer.AddSection("TEST", format::EncodeSelfTest(tests), /*compress=*/true);
  writer.Finish(h);
  report.write_seconds = Seconds(t1);
  report.explicit_edges = edges;
  report.sections = writer.sections();
  for (const auto& sec : report.sections)
    report.file_bytes = std::max(report.file_bytes, sec.offset + sec.stored_bytes);
  // Transitions = root + implicit (non-clone i -> i+1 within documents) + explicit.
  uint64_t root_edges = 0;
  for (uint32_t t = 0; t < m.vocab_size; ++t) root_edges += m.root_next[t] != 0;
  uint64_t implicit = 0;
  for (uint64_t i = 1; i < n; ++i) implicit += m.text[i] != m.separator;
  report.transitions = root_edges + implicit + edges;
  std::vector<uint32_t>().swap(m.text);
  return report;
}

WriteReport BuildIndexFile(const std::vector<std::vector<uint32_t>>& documents,
                           uint32_t vocab_size, const std::string& path,
                           const IndexInfo& info) {
  uint64_t total = 0;
  for (const auto& d : documents) total += d.size() + 1;
  SuffixAutomatonBuilder b(vocab_size, total);
  for (const auto& d : documents) b.AddDocument(d);
  return b.Write(path, info);
}

}  // namespace sam::indexer
