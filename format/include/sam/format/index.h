// Read access to a static suffix-automaton index file (format v1).
//
// Usage:
//
//   #include "sam/format/index.h"
//   auto index = sam::format::IndexFile::Open("corpus.sam");   // O(1): mmap + header checks
//   const sam::format::IndexView& v = index.view();
//   uint64_t state = sam::format::kRoot;
//   for (uint32_t token : query) {                             // longest-suffix matching
//     state = v.Next(state, token); if (state == sam::format::kNoState) break;
//   }
//   uint64_t end = v.MinEndpos(state);                         // first occurrence ends here
//   for (uint64_t p = end + 1; p <= v.num_tokens() && !v.IsDocumentEnd(p); ++p)
//     draft.push_back(v.Token(p));                             // what followed it
//
// Model. The corpus is the concatenation of documents, each "BOS? tokens SEP"
// where SEP = separator() = vocab_size() is an id outside the vocabulary that
// marks a document end. Positions are 1-based: Token(1..num_tokens()).
// States are numbered 0 = root, 1..N = the state created at position i
// (len = i, min_endpos = i, count = 1), N+1..N+C = clones. Transitions on SEP
// are not stored, so no match ever crosses a document boundary.
//
// Thread safety: an IndexView is immutable; any number of threads may use one
// concurrently.
// Lifetime: an IndexFile's view lives in a heap block that the file shares
// with every IndexFile::shared_view() of it. Its address never changes, even
// when the IndexFile is moved (into a growing std::vector, say), and the
// memory stays mapped while the IndexFile or any shared_view() lives. A
// `&file.view()` (or a StaticCursor, StaticIndex or Session given one)
// borrows: the file must outlive it. Holders that must not depend on that
// take shared_view() instead (StaticIndex::Create and Session::AttachIndex
// accept one and keep the file mapped).
// Robustness: on a corrupted file that passed the open checks (a re-sealed
// one passes every checksum), accessors never read outside the mapped
// sections and no query's work depends on what the file claims: impossible
// values read as kNoState / 0, and a state's explicit edge range holds at
// most vocab_size() transitions, found by scanning at most that many bits.
// IndexFile::Open with verify = true (IndexFile::Verify) finds such corruption.
#ifndef SAM_FORMAT_INDEX_H_
#define SAM_FORMAT_INDEX_H_

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "sam/export.h"
#include "sam/format/accelerators.h"
#include "sam/format/child_records.h"
#include "sam/format/error.h"
#include "sam/format/packed.h"

namespace sam::format {

inline constexpr uint64_t kRoot = 0;
inline constexpr uint64_t kNoState = ~uint64_t{0};
inline constexpr uint32_t kNoToken = ~uint32_t{0};

using Sha256Digest = std::array<uint8_t, 32>;

// The fixed-size header's parameters (FORMAT.md, "Header").
struct SAM_API IndexHeader {
  uint16_t major_version = 0;
  uint16_t minor_version = 0;
  uint64_t required_features = 0;
  uint64_t optional_features = 0;
  uint64_t file_size = 0;
  uint64_t num_tokens = 0;     // N, separators and BOS included
  uint64_t num_clones = 0;     // C
  uint64_t num_states = 0;     // 1 + N + C
  uint64_t num_edges = 0;      // E, explicit transitions (root and implicit ones excluded)
  uint64_t num_documents = 0;
  uint64_t num_prefix_counts = 0;  // K: non-clone states 1..K have stored counts
  uint32_t vocab_size = 0;
  uint32_t separator_id = 0;   // == vocab_size
  uint32_t bos_id = kNoToken;  // kNoToken when absent
  uint32_t eos_id = kNoToken;
  uint8_t token_width = 0;
  uint8_t state_width = 0;
  uint8_t position_width = 0;
  uint8_t clone_len_width = 0;
  uint8_t count_width = 0;
  uint8_t select_width = 0;
  uint16_t select_rate_log2 = 0;
  Sha256Digest tokenizer_sha256{};  // all zero when built from pre-tokenized ids
  bool has_tokenizer() const;
};

// One corpus of the manifest.
struct SAM_API CorpusManifestEntry {
  std::string name;           // e.g. "alpaca_data.json"
  std::string kind;           // alpaca, python18k, gsm8k, hagrid, jsonl, text, ids
  std::string source;         // path given at build time
  std::string source_sha256;  // hex digest of the source file (or directory listing)
  uint64_t records = 0;
  uint64_t documents = 0;
  uint64_t skipped = 0;
  uint64_t tokens = 0;
};

// The cold metadata (META section, zstd-compressed JSON).
struct SAM_API Metadata {
  std::string tool_version;
  std::string created_utc;
  std::string tokenizer;          // tokenizer file name given at build time ("" for ids)
  std::string tokenizer_kind;     // "sentencepiece" or "tokenizer.json"; "" for ids or older files
  std::string template_name;      // raw / vicuna
  std::vector<CorpusManifestEntry> corpora;
  std::string build_options_json; // the build options as a JSON object
  std::string json;               // the whole META JSON document
};

// Size of one section, for reports.
struct SAM_API SectionInfo {
  std::string tag;        // four ASCII characters, e.g. "TEXT"
  std::string codec;      // "raw" or "zstd"
  uint64_t offset = 0;
  uint64_t stored_bytes = 0;
  uint64_t raw_bytes = 0;
  uint64_t checksum = 0;  // XXH3-64 of the stored bytes
  bool required = false;
};

class SAM_API IndexView {
 public:
  IndexView() = default;

  uint64_t num_tokens() const { return n_; }
  uint64_t num_states() const { return s_; }
  uint64_t num_clones() const { return s_ - 1 - n_; }
  uint64_t num_edges() const { return edges_.size(); }
  uint32_t vocab_size() const { return vocab_size_; }
  uint32_t separator() const { return vocab_size_; }

  // Token at 1-based position p in [1, N]; separator() at document ends.
  uint32_t Token(uint64_t p) const { return static_cast<uint32_t>(text_.Get(p - 1)); }
  bool IsDocumentEnd(uint64_t p) const { return Token(p) == vocab_size_; }

  bool IsClone(uint64_t v) const { return v > n_; }
  uint64_t Len(uint64_t v) const {
    return v <= n_ ? v : clone_len_.Get(v - n_ - 1);
  }
  uint64_t Link(uint64_t v) const {
    uint64_t l = link_.Get(v);
    return l < s_ ? l : kRoot;
  }
  // First end position (1-based) of the state's strings; 0 for the root.
  uint64_t MinEndpos(uint64_t v) const {
    if (v <= n_) return v;
    uint64_t e = clone_min_endpos_.Get(v - n_ - 1);
    return e <= n_ ? e : 0;
  }
  // Number of occurrences (|endpos|) of the state's strings; N for the root.
  // A non-clone state i holds the prefix of length i, which recurs only for
  // i <= K (if a prefix recurs so do its prefixes), so counts are stored for
  // states 1..K and for clones; every other state occurs once.
  uint64_t Count(uint64_t v) const {
    if (v == kRoot) return n_;
    if (v <= n_) return v <= prefix_count_.size() ? prefix_count_.Get(v - 1) : 1;
    return clone_count_.Get(v - n_ - 1);
  }
  // The token every string of state v ends with (kNoToken for the root).
  uint32_t LastToken(uint64_t v) const {
    uint64_t e = MinEndpos(v);
    return e == 0 ? kNoToken : Token(e);
  }

  // Transition from v on token c, or kNoState. O(log degree); the common
  // cases (root, the implicit transition of a non-clone state) are O(1).
  uint64_t Next(uint64_t v, uint32_t c) const {
    if (c >= vocab_size_) return kNoState;
    if (v == kRoot) {
      uint64_t t = root_.Get(c);
      return (t != 0 && t < s_) ? t : kNoState;
    }
    if (v < n_ && text_.Get(v) == c) return v + 1;  // implicit v -> v+1
    auto [lo, hi] = EdgeRange(v);
    while (hi - lo > kScanEdges) {  // binary search on the implicit labels
      uint64_t mid = lo + (hi - lo) / 2;
      uint64_t t = edges_.Get(mid);
      uint32_t label = LabelOfTarget(t);  // kNoToken (corrupt) sorts last
      if (label == c) return t;
      if (label < c) lo = mid + 1; else hi = mid;
    }
    PrefetchLabels(lo, hi);
    for (; lo < hi; ++lo) {
      uint64_t t = edges_.Get(lo);
      uint32_t label = LabelOfTarget(t);
      if (label == c) return t;
      if (label > c) break;
    }
    return kNoState;
  }
  // Starts loading the labels of the targets of edges [lo, hi). A label costs
  // one cache miss (a position's token, a clone's CLAB entry) or, in a file
  // without CLAB, two dependent ones for a clone (its first end position,
  // then the token there): started for every edge first, in two stages,
  // they overlap instead of following one another.
  void PrefetchLabels(uint64_t lo, uint64_t hi) const {
    const bool labels = clone_labels_.size() != 0;
    for (uint64_t e = lo; e < hi; ++e) {
      const uint64_t t = edges_.Get(e);
      if (t > n_) {
        if (t < s_) (labels ? clone_labels_ : clone_min_endpos_).Prefetch(t - n_ - 1);
      } else if (t != kRoot) {
        text_.Prefetch(t - 1);
      }
    }
    if (labels) return;
    for (uint64_t e = lo; e < hi; ++e) {
      const uint64_t t = edges_.Get(e);
      if (t > n_ && t < s_) {
        const uint64_t end = MinEndpos(t);
        if (end != 0) text_.Prefetch(end - 1);
      }
    }
  }
  // Starts loading what Count(v) reads.
  void PrefetchCount(uint64_t v) const {
    if (v == kRoot) return;
    if (v <= n_) {
      if (v <= prefix_count_.size()) prefix_count_.Prefetch(v - 1);
    } else if (v - n_ - 1 < clone_count_.size()) {
      clone_count_.Prefetch(v - n_ - 1);
    }
  }
  // Starts loading Token(p) (p in [1, N]; others ignored).
  void PrefetchToken(uint64_t p) const {
    if (p >= 1 && p <= n_) text_.Prefetch(p - 1);
  }
  // Starts loading the select sample that EdgeRange(v) reads first.
  void PrefetchEdgeRange(uint64_t v) const {
    const uint64_t j = v >> select_rate_log2_;
    if (j < select_samples_.size()) select_samples_.Prefetch(j);
  }
  // Starts loading what a suffix-link step from v reads (its link and, for a
  // clone, its length): matching climbs links while other lookups are in flight.
  void PrefetchLink(uint64_t v) const {
    link_.Prefetch(v);
    if (v > n_) clone_len_.Prefetch(v - n_ - 1);
  }

  // Calls f(token, target) for every outgoing transition of v in increasing
  // token order (document-end transitions excluded, and targets that only a
  // corrupt file could hold skipped). The labels and occurrence counts of
  // all the targets start loading first (PrefetchChildren), so that their
  // cache misses overlap. The one child enumeration: the runtime's tree
  // builders and hub tables use it too.
  template <typename F>
  void ForEachChild(uint64_t v, F&& f) const {
    const auto [lo, hi] = v == kRoot ? std::pair<uint64_t, uint64_t>{0, 0} : EdgeRange(v);
    ForEachChild(v, lo, hi, f);
  }
  // The same for a state v whose explicit transitions are edges [lo, hi), a
  // range found by the caller (EdgeRange, ForEachEdgeRange; ignored for the
  // root, whose transitions are the ROOT table).
  template <typename F>
  void ForEachChild(uint64_t v, uint64_t lo, uint64_t hi, F&& f) const {
    if (v == kRoot) {
      for (uint32_t c = 0; c < vocab_size_; ++c) {
        uint64_t t = root_.Get(c);
        if (t != 0 && t < s_) f(c, t);
      }
      return;
    }
    uint32_t implicit = (v < n_) ? static_cast<uint32_t>(text_.Get(v)) : kNoToken;
    bool implicit_done = implicit >= vocab_size_;
    PrefetchChildren(lo, hi);
    for (; lo < hi; ++lo) {
      uint64_t t = edges_.Get(lo);
      uint32_t label = LabelOfTarget(t);  // kNoToken for an impossible target
      if (label >= vocab_size_) continue;
      if (!implicit_done && implicit < label) { f(implicit, v + 1); implicit_done = true; }
      f(label, t);
    }
    if (!implicit_done) f(implicit, v + 1);
  }
  // Starts loading the labels (PrefetchLabels) and the occurrence counts of
  // the targets of edges [lo, hi).
  void PrefetchChildren(uint64_t lo, uint64_t hi) const {
    PrefetchLabels(lo, hi);
    for (uint64_t e = lo; e < hi; ++e) {
      const uint64_t t = edges_.Get(e);
      if (t == kRoot || t >= s_) continue;
      if (t > n_) clone_count_.Prefetch(t - n_ - 1);
      else if (t <= prefix_count_.size()) prefix_count_.Prefetch(t - 1);
    }
  }
  // Number of outgoing transitions (document-end transitions excluded).
  uint64_t Degree(uint64_t v) const;

  // [begin, end) of v's explicit transitions in the edge array. Bounded by
  // the structure, not by what the file says: the range lies inside EDGE and
  // holds at most vocab_size() transitions (their labels are distinct tokens),
  // and finding it scans at most that many bits of the degree vector. A
  // corrupt degree vector or select sample that breaks this gives an empty
  // range (the state then has no explicit transitions).
  std::pair<uint64_t, uint64_t> EdgeRange(uint64_t v) const {
    const uint64_t end_one = Select1(v);  // degree_bit_count_ when not found
    if (end_one >= degree_bit_count_ || end_one < v) return {0, 0};
    const uint64_t end = end_one - v;  // zeros before v's one
    if (end > edges_.size()) return {0, 0};
    if (v == 0) return {0, end <= vocab_size_ ? end : 0};
    const uint64_t prev_one = PrevOne(end_one);  // within vocab_size + 1 bits, or not found
    if (prev_one >= end_one || prev_one + 1 < v) return {0, 0};
    return {prev_one + 1 - v, end};
  }

  // Calls f(v, begin, end) for every state v in increasing order with
  // EdgeRange(v), reading the degree bit vector once from start to end
  // (O(states + edges) in all, instead of a select per state). A corrupt
  // vector gives clamped, possibly empty ranges of at most vocab_size()
  // transitions, as EdgeRange does (the two agree when the select samples
  // agree with the degree vector, which --verify checks).
  template <typename F>
  void ForEachEdgeRange(F&& f) const {
    const uint64_t num_edges = edges_.size();
    const uint64_t nwords = (degree_bit_count_ + 63) / 64;
    uint64_t v = 0, begin = 0;
    for (uint64_t w = 0; w < nwords && v < s_; ++w) {
      uint64_t word = degree_bits_[w];
      if (w + 1 == nwords && degree_bit_count_ % 64 != 0)
        word &= (uint64_t{1} << (degree_bit_count_ % 64)) - 1;
      while (word != 0 && v < s_) {
        const uint64_t pos = (w << 6) + static_cast<unsigned>(__builtin_ctzll(word));
        word &= word - 1;
        uint64_t end = pos >= v ? pos - v : 0;  // zeros before this one
        if (end > num_edges) end = num_edges;
        if (begin > end || end - begin > vocab_size_) begin = end;  // corrupt: empty
        f(v, begin, end);
        begin = end;
        ++v;
      }
    }
    for (; v < s_; ++v) f(v, num_edges, num_edges);  // ones missing: corrupt
  }

  // Raw sections, for verification and tools.
  const PackedView& text() const { return text_; }
  const PackedView& links() const { return link_; }
  const PackedView& clone_lens() const { return clone_len_; }
  const PackedView& clone_min_endpos() const { return clone_min_endpos_; }
  const PackedView& clone_counts() const { return clone_count_; }
  const PackedView& prefix_counts() const { return prefix_count_; }
  const PackedView& root_table() const { return root_; }
  const PackedView& edges() const { return edges_; }
  // EDEG: (degree_bit_count() + 63) / 64 little-endian words and one zero word.
  const uint64_t* degree_words() const { return degree_bits_; }
  uint64_t degree_bit_count() const { return degree_bit_count_; }
  const PackedView& select_samples() const { return select_samples_; }
  unsigned select_rate_log2() const { return select_rate_log2_; }
  // CLAB: the label of every clone (the token its strings end with, the
  // separator for strings that end a document), or empty in a file without
  // it. Checked by --verify only: a label above the separator reads as no
  // transition.
  const PackedView& clone_labels() const { return clone_labels_; }
  // The accelerator sections (HUBS, FILT), parsed at open; absent (present()
  // false) in a file that has none. Their contents are checked by --verify
  // only: a reader bounds every value it takes from them.
  const HubTables& hubs() const { return hubs_; }
  const EdgeFilter& edge_filter() const { return edge_filter_; }
  // The child records (RECS, sam/format/child_records.h), parsed at open;
  // absent in a file without them. Checked like the sections above.
  const ChildRecords& child_records() const { return child_records_; }

 private:
  friend class IndexFile;

  // Explicit edges at most this many are scanned (with their labels
  // prefetched) rather than binary searched.
  static constexpr uint64_t kScanEdges = 16;

  // The token a transition into t is labelled with: a clone's from CLAB
  // when the file has it (one read), else the token at its first end
  // position (two dependent reads).
  uint32_t LabelOfTarget(uint64_t t) const {
    if (t >= s_ || t == kRoot) return kNoToken;
    if (t > n_ && clone_labels_.size() != 0) {
      const uint64_t label = clone_labels_.Get(t - n_ - 1);
      return label <= vocab_size_ ? static_cast<uint32_t>(label) : kNoToken;  // SEP: a document end
    }
    uint64_t e = MinEndpos(t);
    return e == 0 ? kNoToken : Token(e);
  }
  // Position of the k-th one (0-based) of the degree bit vector, found by
  // scanning from its select sample at most as far as k's distance to the
  // sample allows (vocab_size() + 1 bits per state); degree_bit_count_ when
  // it is not there (a corrupt vector or sample).
  uint64_t Select1(uint64_t k) const;
  // Position of the last one strictly before position pos < degree_bit_count_,
  // looked for within the vocab_size() + 1 bits before it (a state has at most
  // vocab_size() explicit transitions); pos when there is none there.
  uint64_t PrevOne(uint64_t pos) const;

  uint64_t n_ = 0;
  uint64_t s_ = 1;
  uint32_t vocab_size_ = 0;
  PackedView text_, link_, clone_len_, clone_min_endpos_, clone_count_, prefix_count_, root_,
      edges_;
  const uint64_t* degree_bits_ = nullptr;  // S ones (state ends) and E zeros
  uint64_t degree_bit_count_ = 0;
  PackedView select_samples_;              // position of every 2^r-th one
  unsigned select_rate_log2_ = 6;
  PackedView clone_labels_;                // CLAB (size 0: none)
  HubTables hubs_;
  EdgeFilter edge_filter_;
  ChildRecords child_records_;
};

struct SAM_API OpenOptions {
  // Checks every checksum, every stored value and the self-test samples
  // (O(file size)); without it, opening is O(1) in the index size.
  bool verify = false;
  // When set, an index whose tokenizer fingerprint differs is refused
  // (ErrorCode::kTokenizerMismatch), and so is one built from raw ids.
  std::optional<Sha256Digest> expected_tokenizer_sha256;
  // When set, an index with another vocabulary size is refused.
  std::optional<uint32_t> expected_vocab_size;
  // Open(): ask the kernel to read the whole file ahead (madvise WILLNEED) so
  // that the first queries do not fault pages in one by one. Off by default:
  // opening stays O(1).
  bool prefetch = false;
  // Open(): read the whole file and map every page up front (madvise
  // MADV_POPULATE_READ, or touching each page on kernels without it), so that
  // no query takes a page fault. O(file size) (about 10-20 ms for an 80 MB
  // index in the page cache); the pages stay shared with other processes.
  // Implies prefetch.
  bool populate = false;
};

// An open index file. Movable, not copyable. Holds the mapping (or buffer),
// shared with its shared_view()s. Moving it keeps view() at the same address;
// a moved-from IndexFile's view() is an empty index (root only), and it may
// only be assigned to or destroyed.
class SAM_API IndexFile {
 public:
  // Memory-maps path read-only and checks the header and the section table.
  // Throws FormatError; a path that is not a regular file (a directory, a
  // FIFO, a device) is refused by name with kIo, without blocking.
  static IndexFile Open(const std::string& path, const OpenOptions& options = {});
  // Reads the whole file into memory instead of mapping it.
  static IndexFile Read(const std::string& path, const OpenOptions& options = {});
  // Uses a caller's buffer, which must stay valid and unchanged while the
  // IndexFile or a shared_view() of it lives, and be 8-byte aligned. `name`
  // is used in messages.
  static IndexFile FromBuffer(const void* data, size_t size, const std::string& name,
                              const OpenOptions& options = {});

  IndexFile(IndexFile&&) noexcept;
  IndexFile& operator=(IndexFile&&) noexcept;
  ~IndexFile();

  // The view, at an address that stays the same for the file's lifetime,
  // moves included. Borrowed: valid while this IndexFile (or whatever it was
  // moved into) or a shared_view() of it lives.
  const IndexView& view() const;
  // The same view, owning: it keeps the mapping (or buffer) alive after the
  // IndexFile is destroyed. With FromBuffer, the caller's buffer must still
  // outlive it.
  std::shared_ptr<const IndexView> shared_view() const { return view_; }
  const IndexHeader& header() const { return header_; }
  const std::string& path() const { return path_; }
  const std::vector<SectionInfo>& sections() const { return sections_; }
  // Whether the file has the section with this tag.
  bool HasSection(const char* tag) const { return FindSection(tag) != nullptr; }
  // A section's bytes as stored in the file (compressed ones compressed).
  std::span<const uint8_t> StoredBytes(const SectionInfo& s) const {
    return std::span<const uint8_t>(SectionData(s), s.stored_bytes);
  }
  // Parses the META section (zstd JSON). Throws FormatError if corrupt.
  Metadata ReadMetadata() const;
  // The vocabulary pieces stored at build time (VOCB section); empty if absent.
  std::vector<std::string> ReadVocabulary() const;

  // Deep checks: every checksum, the structure of every section and the
  // self-test samples. Throws FormatError naming the first problem.
  void Verify() const;

 private:
  struct Storage;
  IndexFile();
  void Init(const OpenOptions& options);
  const uint8_t* SectionData(const SectionInfo& s) const;
  const SectionInfo* FindSection(const char* tag) const;
  std::vector<uint8_t> SectionBytes(const SectionInfo& s) const;  // decompressed

  std::shared_ptr<Storage> storage_;         // mapping or buffer, and the view
  std::shared_ptr<const IndexView> view_;    // &storage_->view, sharing storage_
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  std::string path_;
  IndexHeader header_;
  std::vector<SectionInfo> sections_;
};

}  // namespace sam::format

#endif  // SAM_FORMAT_INDEX_H_
