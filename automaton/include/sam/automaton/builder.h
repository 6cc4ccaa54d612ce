// Building a static suffix automaton and writing it as an index file.
//
//   sam::automaton::SuffixAutomatonBuilder b(/*vocab_size=*/32000);
//   b.AddDocument(ids1);                // BOS (if wanted) included by the caller
//   b.AddDocument(ids2);                // a document end is appended for each
//   sam::automaton::IndexInfo info;       // tokenizer fingerprint, ids, metadata
//   auto report = b.Write("corpus.sam", info);
//
// Construction is Blumer et al.'s online algorithm over the concatenation of
// the documents, each followed by a separator id (= vocab_size) that no
// transition of the written index carries, so matches never cross documents.
// States created at position i are numbered i (their length and first end
// position are i and need no storage); transitions i-1 -> i are implicit.
// Memory: about 40 bytes per token while building.
//
// Ids: construction starts with 32-bit state ids (12-byte state records,
// 8-byte edges) and moves to 64-bit ids (20-byte records, 12-byte edges;
// about 1.4 times the memory) before the first document that could take a
// 32-bit id past its limit (about 2^31 tokens). The move converts the
// structures array by array (a pause of a few seconds per billion tokens;
// peak: the wide automaton plus one narrow array). The written index is the
// same either way: its bit widths come from the data (FORMAT.md).
//
// Not thread-safe; one builder per thread.
#ifndef SAM_AUTOMATON_BUILDER_H_
#define SAM_AUTOMATON_BUILDER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sam/format/index.h"

namespace sam::automaton {

// Everything about an index that is not the automaton itself.
struct IndexInfo {
  format::Sha256Digest tokenizer_sha256{};  // zero for pre-tokenized input
  uint32_t bos_id = format::kNoToken;
  uint32_t eos_id = format::kNoToken;
  std::string metadata_json = "{}";         // META section (a JSON object)
  std::vector<std::string> vocabulary;      // pieces for VOCB (empty: no section)
  uint32_t self_test_samples = 64;          // TEST section samples
  uint64_t self_test_seed = 12345;
  // The accelerator sections (HUBS, FILT, CLAB) with these parameters; none when
  // empty (a file the runtime prepares at open).
  std::optional<format::AcceleratorParams> accelerators;
};

// Sizes and timings of a written index.
struct WriteReport {
  uint64_t tokens = 0, documents = 0, states = 0, clones = 0, transitions = 0;
  uint64_t explicit_edges = 0;
  uint64_t file_bytes = 0;
  std::vector<format::SectionInfo> sections;
  double freeze_seconds = 0, write_seconds = 0;
  double accelerator_seconds = 0;  // computing HUBS, FILT and CLAB (within write_seconds' span, not in it)
};

// Token limits of the builder: with 32-bit ids (then it widens), and at all
// (the format's 57-bit positions).
inline constexpr uint64_t kNarrowBuilderTokens = (uint64_t{1} << 31) - 2;
inline constexpr uint64_t kMaxBuilderTokens = uint64_t{1} << 56;

// How the builder holds and writes ids. The defaults are what every build
// wants; the others exist to test the 64-bit paths on small corpora (the
// written automaton is the same; only widths differ with min_width).
struct BuilderOptions {
  enum class Ids {
    kAuto,  // 32-bit ids, widened when the corpus needs it
    kWide,  // 64-bit ids from the start
  };
  Ids ids = Ids::kAuto;
  // kAuto: widen before the document that takes the corpus to this many
  // tokens (0: at the 32-bit limit).
  uint64_t widen_at_tokens = 0;
  // Lower bound on the state, position, clone length and count widths of the
  // written file (0: from the data alone; at most format::kMaxPackedWidth).
  unsigned min_width = 0;
};

class SuffixAutomatonBuilder {
 public:
  // vocab_size bounds the ids; expected_tokens reserves memory up front (a
  // corpus expected to pass kNarrowBuilderTokens starts with 64-bit ids).
  // Throws format::FormatError: kInvalidArgument for vocab_size outside
  // [1, 2^31) or min_width > 57, kCapacity past kMaxBuilderTokens.
  explicit SuffixAutomatonBuilder(uint32_t vocab_size, uint64_t expected_tokens = 0);
  SuffixAutomatonBuilder(uint32_t vocab_size, uint64_t expected_tokens,
                         const BuilderOptions& options);
  ~SuffixAutomatonBuilder();
  SuffixAutomatonBuilder(const SuffixAutomatonBuilder&) = delete;
  SuffixAutomatonBuilder& operator=(const SuffixAutomatonBuilder&) = delete;

  // Appends one document and its end. Ids must be < vocab_size (throws
  // format::FormatError(kInvalidArgument) naming the id otherwise; kCapacity
  // past kMaxBuilderTokens). The error's context().record is "document N", N
  // counting the documents added before it. Empty documents are ignored.
  void AddDocument(std::span<const uint32_t> ids);

  uint64_t num_tokens() const;     // including one separator per document
  uint64_t num_documents() const;
  uint64_t num_states() const;     // root included
  uint64_t num_clones() const;
  uint64_t memory_bytes() const;   // bytes held by the construction structures
  bool wide_ids() const;           // true once the builder holds 64-bit ids

  // Freezes the automaton into format v1 and writes it atomically. The
  // builder is consumed (its memory is released while writing). Throws
  // format::FormatError on I/O errors or if no document was added.
  WriteReport Write(const std::string& path, const IndexInfo& info);
  // The same index into *out instead of a file (format::IndexWriter's memory
  // mode; open it with format::IndexFile::FromBuffer while *out lives);
  // `name` is used in messages. The builder is consumed likewise.
  WriteReport WriteToMemory(const IndexInfo& info, std::vector<uint8_t>* out,
                            const std::string& name);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Convenience for tests and small tools: builds an index over in-memory
// documents (ids as given, no BOS added) and writes it to path.
WriteReport BuildIndexFile(const std::vector<std::vector<uint32_t>>& documents,
                           uint32_t vocab_size, const std::string& path,
                           const IndexInfo& info = {});
WriteReport BuildIndexFile(const std::vector<std::vector<uint32_t>>& documents,
                           uint32_t vocab_size, const std::string& path, const IndexInfo& info,
                           const BuilderOptions& options);

}  // namespace sam::automaton

#endif  // SAM_AUTOMATON_BUILDER_H_
