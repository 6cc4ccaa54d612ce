// The whole offline build: corpora -> documents -> token ids -> automaton ->
// index file, with per-stage timings and progress reports.
//
//   sam::indexer::BuildConfig cfg;
//   cfg.tokenizer_path = "llama-32k.model";
//   cfg.corpora = {{"alpaca", "data/alpaca/alpaca_data.json"}};
//   cfg.output_path = "alpaca.sam";
//   sam::indexer::BuildReport r = sam::indexer::BuildIndex(cfg, [](const auto& p) {...});
//
// Errors (bad flags, unreadable or malformed corpora, a tokenizer that cannot
// be loaded, ids outside the vocabulary, I/O) are thrown as BuildError, a sam::Error (sam/error.h)
// that keeps the code and context of the error that stopped the build (a
// corpus error keeps kBadRecord, its file, line and field); the output path is
// then untouched. Flag conflicts (--vocab-size against the tokenizer's, ids
// corpora without a vocabulary size) have code kUsage.
// An exception thrown while a corpus is tokenized or built (the builder's
// 2^56-token limit, std::bad_alloc, the progress callback, a hook) stops and
// joins the tokenizer threads and reaches the caller as a BuildError naming the
// corpus and the document ("PATH: document N of M: ..."); exceptions not
// derived from std::exception propagate unchanged, also after the join.
//
// Memory-bounded builds: with BuildConfig::max_memory_bytes set, the documents
// are split, in reading order and at document boundaries, into shards, each
// of at most (max_memory_bytes - what the process holds besides the automaton
// when it starts - the largest corpus input) / kBuildPeakBytesPerToken tokens
// (one document alone may exceed it), each built and written as its own index
// (BASE.K.sam, K = 0, 1, ...) while the next is built, then listed in the
// manifest BASE.samset (sam/format/shard_set.h). A build whose documents fit
// one shard writes one index file, as without the bound. Every output path
// (BuildOutputPaths) is checked before any work (format::CheckOutputPath:
// never a device, FIFO, directory, symbolic link or an input). The shards are
// written under temporary names (BASE.K.sam.new-PID) and renamed, with the
// manifest, only once all are written: an error or a signal leaves an earlier
// set of that name usable, and removes only the files this build created.
//
// Stages overlap: the first corpus is read while the tokenizer loads, and the
// next corpus while one is built (regular files, builds without a memory
// bound; errors keep the order of a sequential build: the tokenizer's first).
//
// Memory: the rendered documents of one corpus are held while it is built;
// tokenization runs ahead of construction by at most
// BuildConfig::max_pending_documents documents (backpressure), so the token ids
// waiting for the builder never exceed that many documents' worth.
#ifndef SAM_INDEXER_PIPELINE_H_
#define SAM_INDEXER_PIPELINE_H_

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "sam/error.h"
#include "sam/format/index.h"
#include "sam/automaton/builder.h"

namespace sam::indexer {

// What BuildIndex throws: a sam::Error.
class BuildError : public sam::Error {
 public:
  using sam::Error::Error;
  // A configuration error (code kInvalidArgument) with a plain message.
  explicit BuildError(const std::string& message)
      : sam::Error(ErrorCode::kInvalidArgument, message) {}
  // The error `cause` (its code, context and message) as a BuildError.
  explicit BuildError(const sam::Error& cause) : sam::Error(cause) {}
};

struct CorpusSpec {
  std::string kind;  // one of CorpusKindNames()
  std::string path;  // a file, a `text` directory, or a pipe/FIFO (read once into memory)
};

// The kind of pre-tokenized corpora (sam::corpora::ReadIdDocuments).
inline constexpr char kIdsKind[] = "ids";
// A saved response cache (ResponseCache::Save; sam/format/response_cache_file.h):
// one document per retained response of one tenant (BuildConfig::cache_tenant),
// oldest first, ids as cached (no BOS). Needs the tokenizer the cache was saved
// with (kTokenizerMismatch otherwise). A regular file, not a pipe.
inline constexpr char kCacheKind[] = "cache";

// Every corpus kind BuildIndex accepts: the sam::corpora kinds, then "ids", "cache".
std::vector<std::string> CorpusKindNames();

// Throws BuildError "unknown corpus kind 'K' (valid: alpaca, ..., ids)" unless
// `kind` is one of CorpusKindNames().
void CheckCorpusKind(const std::string& kind);

// The default of BuildConfig::max_pending_documents.
inline constexpr uint64_t kDefaultMaxPendingDocuments = 16384;

// Test hooks (null: none). An exception thrown by a hook is handled as one
// thrown by the tokenizer or the builder at that point.
struct BuildHooks {
  // On a tokenizer thread, after document `document` (0-based, reading order)
  // of corpus `corpus` (index in BuildConfig::corpora) is tokenized.
  std::function<void(size_t corpus, uint64_t document)> after_tokenize;
  // On the calling thread, before that document goes to the builder (also for
  // `ids` corpora, and for documents that turn out empty).
  std::function<void(size_t corpus, uint64_t document)> before_add;
};

struct BuildConfig {
  std::string tokenizer_path;     // required unless every corpus is `ids`
  uint32_t vocab_size = 0;        // for ids without a tokenizer
  std::vector<CorpusSpec> corpora;
  std::string template_name = "raw";  // raw | vicuna
  std::string text_field = "text";    // jsonl
  std::string text_split = "file";    // text: file | blank-line
  bool skip_bad = false;
  bool add_bos = true;            // BOS before each tokenized document (not for ids, cache)
  // `cache` corpora: the tenant whose responses are indexed. Empty: the file's
  // only tenant (a file with several is refused, naming them).
  std::string cache_tenant;
  unsigned threads = 0;           // tokenizer threads; 0 = all cores
  std::string output_path;
  std::string tool_version;
  // Backpressure: documents claimed by the tokenizer threads but not yet given to
  // the builder never exceed this (0: kDefaultMaxPendingDocuments).
  uint64_t max_pending_documents = 0;
  // Id type and minimum widths (defaults: 32-bit ids widened as needed,
  // widths from the data); the others test the 64-bit paths.
  automaton::BuilderOptions builder_options;
  // The accelerator sections (HUBS, FILT, CLAB: format/FORMAT.md sections 12
  // and 14); off writes a format 1.0 file, which the runtime prepares at
  // open (tests and benchmarks of that path).
  bool accelerators = true;
  // Child records (RECS, format/FORMAT.md section 13) as well: every clone's
  // heaviest children in one place, which make `sam-cal` steps cheaper for
  // a larger file (with accelerators only).
  bool child_records = false;
  // Bound on the build's memory in bytes (0: none); see the top of this file.
  uint64_t max_memory_bytes = 0;
  // Distributed builds (sam-build --shard I/N): with shard_count N > 0, only
  // the documents of shard shard_index are built: document g, counting every
  // document read (before tokenization) from 0 over the corpora in the order
  // given, belongs to shard g mod N. The partition depends only on the inputs
  // and N. The index's META records it ("partition"); WriteShardSet() joins
  // the N files. Not with max_memory_bytes.
  uint64_t shard_index = 0, shard_count = 0;
  BuildHooks hooks;
};

struct CorpusReport {
  CorpusSpec spec;
  std::string source_sha256;
  uint64_t records = 0, documents = 0, skipped = 0, tokens = 0;
  // Skipped records by reason ("invalid JSON", "bad record", "bad value"), in a
  // fixed order; the counts sum to `skipped`.
  std::vector<std::pair<std::string, uint64_t>> skipped_by_reason;
  std::vector<std::string> skip_examples;  // the first few skip messages
  // One line saying why records were skipped: counts by reason, the examples,
  // and how many more were skipped ("" when none was). Tools print it.
  std::string skip_summary;
};

// One shard of a memory-bounded build.
struct ShardReport {
  std::string path;
  uint64_t first_document = 0;  // 0-based over the documents of the whole build
  uint64_t documents = 0, tokens = 0, states = 0, file_bytes = 0;
  uint64_t token_budget = 0;    // planned when it started
  double seconds = 0;           // from its first document to its file written
  uint64_t peak_rss_bytes = 0;  // the process's peak while it was built and written
};

struct BuildReport {
  std::vector<CorpusReport> corpora;
  uint64_t documents = 0, tokens = 0, states = 0, clones = 0, transitions = 0, edges = 0;
  uint64_t file_bytes = 0;
  std::vector<format::SectionInfo> sections;
  // Seconds the build spent on each stage: waiting for a corpus to be read
  // (the next corpus is read while one is built), waiting for tokenization,
  // constructing, freezing and writing.
  double read_seconds = 0, tokenize_seconds = 0, construct_seconds = 0, write_seconds = 0;
  double total_seconds = 0;
  // Of write_seconds: computing the accelerator sections (HUBS, FILT, CLAB).
  double accelerator_seconds = 0;
  uint64_t peak_rss_bytes = 0;
  bool segment_cache = false;
  double cache_hit_rate = 0;
  // Backpressure: the bound used, and the most documents ever tokenized (or
  // being tokenized) but not yet built; peak <= bound.
  uint64_t max_pending_documents = 0;
  uint64_t peak_pending_documents = 0;
  // What was written: the index file, or the shard set manifest (then
  // `shards` lists the shards and the counts above are their sums; sections
  // is empty). shard_token_budget: the smallest planned tokens per shard (0:
  // no bound).
  std::string index_path;
  std::vector<ShardReport> shards;
  uint64_t shard_token_budget = 0;
};

// Peak bytes a build holds per token, which memory-bounded builds plan with
// (docs/indexer.md, "Planning"; docs/performance.md, "Index", the current peak).
inline constexpr uint64_t kBuildPeakBytesPerToken = 56;
// Fewest tokens per shard a memory bound may leave room for.
inline constexpr uint64_t kMinShardTokens = 4096;

// Where a build with output path `output` writes: the single index (output,
// or BASE.sam when output ends in .samset), the manifest BASE.samset and
// shard K BASE.K.sam, BASE being output without a .sam or .samset suffix.
std::string SingleIndexPath(const std::string& output);
std::string ShardSetPath(const std::string& output);
std::string ShardFilePath(const std::string& output, uint64_t k);

// The files a build with `config` may replace: its single index and, with
// max_memory_bytes, its manifest and every shard file BASE.K.sam (K a decimal
// number) that exists now in the output's folder, plus BASE.0.sam. The paths
// the inputs are read from (corpora, tokenizer): BuildInputPaths.
std::vector<std::string> BuildOutputPaths(const BuildConfig& config);
std::vector<std::string> BuildInputPaths(const BuildConfig& config);

struct Progress {
  std::string stage;   // "read", "tokenize", "construct", "write"
  std::string detail;  // e.g. the corpus being read
  uint64_t done = 0;   // documents done in this corpus
  uint64_t total = 0;  // documents in this corpus (0 when unknown)
  uint64_t tokens = 0; // tokens in the automaton so far
  size_t corpus_index = 0, corpus_count = 0;
};
using ProgressFn = std::function<void(const Progress&)>;

BuildReport BuildIndex(const BuildConfig& config, const ProgressFn& progress = nullptr);

// Joins the indexes of a partitioned build (BuildConfig::shard_count; sam-build
// --write-samset): opens every file with deep checks, requires one shard of
// each number 0..N-1 of one partition, the same tokenizer fingerprint and
// vocabulary, and files in the manifest's folder; writes the manifest
// (format/shard_set.h) with the shards in partition order. Throws BuildError
// naming the file and the problem.
void WriteShardSet(const std::vector<std::string>& shard_files, const std::string& manifest_path,
                   const std::string& tool_version);

// Peak resident set size of this process (VmHWM), 0 if unknown.
uint64_t PeakRssBytes();
// Current resident set size (VmRSS), 0 if unknown.
uint64_t CurrentRssBytes();
// Resets the peak to the current size (Linux clear_refs); false if unsupported.
bool ResetPeakRss();

}  // namespace sam::indexer

#endif  // SAM_INDEXER_PIPELINE_H_
