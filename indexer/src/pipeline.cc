#include "sam/indexer/pipeline.h"

#include <malloc.h>
#include <pthread.h>
#include <unistd.h>

#include <csignal>
#include <cstring>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <exception>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>
#include <thread>

#include "sam/corpora/corpora.h"
#include "sam/corpora/error.h"
#include "sam/format/file_checks.h"
#include "sam/format/response_cache_file.h"
#include "sam/format/temp_files.h"
#include "sam/format/sha256.h"
#include "sam/format/shard_set.h"
#include "sam/automaton/builder.h"
#include "sam/indexer/tokenizer.h"

namespace sam::indexer {
namespace {

using Clock = std::chrono::steady_clock;
double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

std::string SourceHash(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    // A directory of text files: the hash of "name hash\n" lines in name order.
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(path, ec))
      if (e.is_regular_file()) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    std::string listing;
    for (const auto& f : files)
      listing += fs::path(f).filename().string() + " " +
                 format::DigestToHex(format::Sha256File(f)) + "\n";
    return format::DigestToHex(format::Sha256(listing.data(), listing.size()));
  }
  return format::DigestToHex(format::Sha256File(path));
}

std::string UtcNow() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// "PATH: document N of M: WHAT" for an exception thrown while document `index`
// (0-based) of a corpus of `count` documents was being handled.
std::string DocumentContext(const std::string& path, uint64_t index, uint64_t count,
                            const std::exception& e) {
  std::string what = e.what();
  if (dynamic_cast<const std::bad_alloc*>(&e)) what = "out of memory (" + what + ")";
  return path + ": document " + std::to_string(index + 1) + " of " + std::to_string(count) +
         ": " + what;
}

// The code a BuildError made from `e` keeps: a sam::Error's own, kCapacity when
// memory ran out, kInvalidArgument otherwise (a caller's callback or hook).
ErrorCode CodeOf(const std::exception& e) {
  if (const auto* error = dynamic_cast<const sam::Error*>(&e)) return error->code();
  if (dynamic_cast<const std::bad_alloc*>(&e)) return ErrorCode::kCapacity;
  return ErrorCode::kInvalidArgument;
}

// The documents of a `cache` corpus: the responses of one tenant of the saved
// response cache at `path` (`tenant`, or the file's only one when empty),
// oldest first. Errors name the file: the file's own, kTokenizerMismatch when
// it was saved with another tokenizer, kInvalidArgument for a missing or
// unnamed tenant (listing the file's) and for an id outside the vocabulary.
void ReadCacheCorpus(const std::string& path, const std::string& tenant, const Tokenizer& tok,
                     std::vector<std::vector<uint32_t>>* documents) {
  format::ResponseCacheFile file = format::ReadResponseCacheFile(path);
  if (file.tokenizer_sha256 != tok.sha256())
    throw BuildError(ErrorCode::kTokenizerMismatch, {.file = path},
                     "the cache was saved with tokenizer " +
                         format::DigestToHex(file.tokenizer_sha256) + ", --tokenizer is " +
                         format::DigestToHex(tok.sha256()));
  std::set<std::string> tenants;
  for (const format::CachedResponse& r : file.responses) tenants.insert(r.tenant);
  auto listed = [&] {
    std::string list;
    for (const std::string& t : tenants) list += (list.empty() ? "'" : ", '") + t + "'";
    return list.empty() ? std::string("none: the cache is empty") : list;
  };
  std::string chosen = tenant;
  if (chosen.empty()) {
    if (tenants.size() != 1)
      throw BuildError(ErrorCode::kInvalidArgument, {.file = path},
                       "the cache holds " + std::to_string(tenants.size()) +
                           " tenants; choose one with --cache-tenant (tenants: " + listed() + ")");
    chosen = *tenants.begin();
  } else if (!tenants.contains(chosen)) {
    throw BuildError(ErrorCode::kInvalidArgument, {.file = path},
                     "no tenant '" + chosen + "' in the cache (tenants: " + listed() + ")");
  }
  for (size_t i = 0; i < file.responses.size(); ++i) {
    format::CachedResponse& r = file.responses[i];
    if (r.tenant != chosen) continue;
    for (uint32_t id : r.tokens)
      if (id >= tok.vocab_size())
        throw BuildError(ErrorCode::kInvalidArgument, {.file = path},
                         "response " + std::to_string(i + 1) + " holds id " + std::to_string(id) +
                             ", outside the tokenizer's vocabulary of " +
                             std::to_string(tok.vocab_size()));
    documents->push_back(std::move(r.tokens));
  }
}

// Tokenizer threads, stopped and joined however the scope is left: an
// exception on the calling thread never meets a joinable std::thread.
class WorkerPool {
 public:
  WorkerPool(std::mutex& mu, std::condition_variable& cv, bool& stop)
      : mu_(mu), cv_(cv), stop_(stop) {}
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  ~WorkerPool() { Join(); }

  template <typename Fn>
  void Start(unsigned n, Fn fn) {
    for (unsigned w = 0; w < n; ++w) threads_.emplace_back(fn, w);
  }

  void Join() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
  }

 private:
  std::mutex& mu_;
  std::condition_variable& cv_;
  bool& stop_;
  std::vector<std::thread> threads_;
};

}  // namespace

std::vector<std::string> CorpusKindNames() {
  std::vector<std::string> names;
  for (corpora::Kind kind : corpora::AllKinds()) names.emplace_back(corpora::KindName(kind));
  names.emplace_back(kIdsKind);
  names.emplace_back(kCacheKind);
  return names;
}

void CheckCorpusKind(const std::string& kind) {
  const std::vector<std::string> names = CorpusKindNames();
  if (std::find(names.begin(), names.end(), kind) != names.end()) return;
  std::string valid;
  for (const auto& name : names) valid.append(valid.empty() ? "" : ", ").append(name);
  throw BuildError("unknown corpus kind '" + kind + "' (valid: " + valid + ")");
}

namespace {
// A "Key:   123 kB" line of /proc/self/status, in bytes; 0 when the key is
// missing or its value unreadable (never throws: these are statistics).
uint64_t ProcStatusBytes(std::string_view key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) != 0) continue;
    const char* p = line.c_str() + key.size();
    while (*p == ' ' || *p == '\t') ++p;
    uint64_t kib = 0;
    const auto [end, ec] = std::from_chars(p, line.c_str() + line.size(), kib);
    return ec == std::errc() && end != p ? kib * 1024 : 0;
  }
  return 0;
}
}  // namespace

uint64_t PeakRssBytes() { return ProcStatusBytes("VmHWM:"); }

uint64_t CurrentRssBytes() { return ProcStatusBytes("VmRSS:"); }

bool ResetPeakRss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

namespace {

std::string OutputBase(const std::string& output) {
  for (const std::string suffix : {".samset", ".sam"})
    if (output.size() > suffix.size() &&
        output.compare(output.size() - suffix.size(), suffix.size(), suffix) == 0)
      return output.substr(0, output.size() - suffix.size());
  return output;
}

// Where shard `final_path` is written until the whole set is.
std::string StagedShardPath(const std::string& final_path) {
  return final_path + ".new-" + std::to_string(::getpid());
}

// Makes the new set visible at once: the manifest is written under a
// temporary name first (the step that needs disk space), then, with the
// termination signals blocked in this thread, every staged shard is renamed
// to its name and the manifest last. An earlier set of that name stays usable
// until these renames, which do not fail for lack of space.
void CommitShardSet(const std::string& manifest_path, const format::ShardSetManifest& manifest,
                    const std::vector<std::string>& staged, const std::vector<std::string>& finals) {
  const std::string staged_manifest = StagedShardPath(manifest_path);
  format::WriteShardSetManifest(staged_manifest, manifest);
  format::RegisterTempFile(staged_manifest);
  sigset_t block, old;
  sigemptyset(&block);
  for (const int sig : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&block, sig);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  auto fail = [&](const std::string& from, const std::string& to) {
    const std::string why = std::strerror(errno);
    ::unlink(staged_manifest.c_str());
    format::UnregisterTempFile(staged_manifest);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    throw BuildError(ErrorCode::kIo, "cannot rename " + from + " to " + to + ": " + why);
  };
  for (size_t k = 0; k < staged.size(); ++k) {
    if (std::rename(staged[k].c_str(), finals[k].c_str()) != 0) fail(staged[k], finals[k]);
    format::UnregisterTempFile(staged[k]);
  }
  if (std::rename(staged_manifest.c_str(), manifest_path.c_str()) != 0)
    fail(staged_manifest, manifest_path);
  format::UnregisterTempFile(staged_manifest);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  format::FsyncParentDirectory(manifest_path);
}

}  // namespace

std::string SingleIndexPath(const std::string& output) {
  return OutputBase(output) == output || output.ends_with(".sam") ? output
                                                                   : OutputBase(output) + ".sam";
}
std::string ShardSetPath(const std::string& output) { return OutputBase(output) + ".samset"; }
std::string ShardFilePath(const std::string& output, uint64_t k) {
  return OutputBase(output) + "." + std::to_string(k) + ".sam";
}

std::vector<std::string> BuildOutputPaths(const BuildConfig& cfg) {
  std::vector<std::string> paths = {SingleIndexPath(cfg.output_path)};
  if (cfg.output_path != paths[0]) paths.insert(paths.begin(), cfg.output_path);
  if (!cfg.max_memory_bytes) return paths;
  paths.push_back(ShardSetPath(cfg.output_path));
  paths.push_back(ShardFilePath(cfg.output_path, 0));
  // Every BASE.K.sam there now: a later shard may take any of these names.
  const std::filesystem::path base(OutputBase(cfg.output_path));
  std::filesystem::path dir = base.parent_path();
  const std::string prefix = base.filename().string() + ".";
  std::error_code ec;
  for (const auto& entry :
       std::filesystem::directory_iterator(dir.empty() ? "." : dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.size() <= prefix.size() + 4 || name.compare(0, prefix.size(), prefix) != 0 ||
        !name.ends_with(".sam"))
      continue;
    const std::string k = name.substr(prefix.size(), name.size() - prefix.size() - 4);
    if (k.find_first_not_of("0123456789") != std::string::npos || k == "0") continue;
    paths.push_back((dir / name).string());
  }
  return paths;
}

std::vector<std::string> BuildInputPaths(const BuildConfig& cfg) {
  std::vector<std::string> inputs;
  for (const auto& c : cfg.corpora) inputs.push_back(c.path);
  if (!cfg.tokenizer_path.empty()) inputs.push_back(cfg.tokenizer_path);
  return inputs;
}

namespace {

// One corpus read into memory: its documents (texts, or ids for `ids` and
// `cache` corpora), the reader's statistics and the source's hash.
struct CorpusRead {
  std::vector<std::string> texts;
  std::vector<std::vector<uint32_t>> ids;
  corpora::ReadStats stats;
  std::string source_sha256;
};

// Reads corpus `spec` whole (a pipe or FIFO is read into memory once, hashed
// from those bytes and parsed from them: reading it twice would find it
// empty). `tok` is needed for `cache` corpora, `vocab` for `ids`. Thread-safe:
// a build reads the next corpus on another thread while it builds one.
CorpusRead ReadWholeCorpus(const CorpusSpec& spec, const BuildConfig& cfg,
                           const corpora::ReadOptions& ropts, const Tokenizer* tok,
                           uint32_t vocab) {
  CorpusRead r;
  std::optional<corpora::Input> input;
  try {
    if (spec.kind == kCacheKind) {  // a regular file, read whole by its own reader
      // Read first: its reader refuses a FIFO without waiting for a writer.
      ReadCacheCorpus(spec.path, cfg.cache_tenant, *tok, &r.ids);
      r.source_sha256 = SourceHash(spec.path);
      r.stats.records = r.stats.documents = r.ids.size();
    } else {
      input = corpora::Input::Open(spec.path);
      if (input->type() == corpora::Input::Type::kStream) {
        const std::string_view bytes = input->stream_bytes();
        r.source_sha256 = format::DigestToHex(format::Sha256(bytes.data(), bytes.size()));
      } else {
        r.source_sha256 = SourceHash(spec.path);
      }
    }
  } catch (const sam::Error& e) {
    throw BuildError(e);
  } catch (const std::exception& e) {
    throw BuildError(CodeOf(e), e.what());
  }
  try {
    if (spec.kind == kIdsKind) {
      r.stats = corpora::ReadIdDocuments(
          *input, vocab, cfg.skip_bad,
          [&](std::vector<uint32_t>&& d) { r.ids.push_back(std::move(d)); });
    } else if (spec.kind != kCacheKind) {
      r.stats = corpora::ReadCorpus(corpora::ParseKind(spec.kind), *input, ropts,
                                    [&](std::string&& d) { r.texts.push_back(std::move(d)); });
    }
  } catch (const corpora::CorpusError& e) {
    throw BuildError(e);
  }
  return r;
}

// True when `path` may be read ahead on another thread: a regular file or a
// folder (never a pipe or FIFO, which may wait for its writer).
bool MayReadAhead(const std::string& path) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  return !ec && (std::filesystem::is_regular_file(status) ||
                 std::filesystem::is_directory(status));
}

// The state shared by the tokenizer threads of one corpus and the thread that
// builds it: chunks of documents are claimed in order, at most `window` chunks
// beyond the last one built (backpressure), and built in order as they
// complete.
struct TokenizeQueue {
  size_t ndocs = 0, chunk = 1, window = 1, nchunks = 0;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;        // set on an error or when the pool is joined
  size_t next_chunk = 0;    // the next chunk a worker claims
  size_t built_chunks = 0;  // chunks handed to the builder
  uint64_t pending = 0;     // documents claimed but not yet built
  uint64_t* peak_pending = nullptr;
  std::vector<char> done;
  std::string worker_error;                             // the first failure of a tokenizer
  ErrorCode worker_code = ErrorCode::kInvalidArgument;  // thread, and the code it keeps

  size_t ChunkBegin(size_t c) const { return c * chunk; }
  size_t ChunkEnd(size_t c) const { return std::min(ndocs, (c + 1) * chunk); }

  // A worker: the next chunk it may tokenize, or false when there is none.
  bool Claim(size_t* c) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] {
      return stop || next_chunk >= nchunks || next_chunk < built_chunks + window;
    });
    if (stop || next_chunk >= nchunks) return false;
    *c = next_chunk++;
    pending += ChunkEnd(*c) - ChunkBegin(*c);
    *peak_pending = std::max(*peak_pending, pending);
    return true;
  }
  void Fail(const std::string& message, ErrorCode code) {
    std::lock_guard<std::mutex> lock(mu);
    if (worker_error.empty()) {
      worker_error = message;
      worker_code = code;
    }
    stop = true;
  }
  void Done(size_t c) {
    {
      std::lock_guard<std::mutex> lock(mu);
      done[c] = 1;
    }
    cv.notify_all();
  }
  // The builder: waits for chunk c; false when a worker failed instead.
  bool WaitFor(size_t c) {
    std::unique_lock<std::mutex> lock(mu);
    cv.wait(lock, [&] { return done[c] || !worker_error.empty(); });
    return worker_error.empty();
  }
  void Built(size_t c) {
    {
      std::lock_guard<std::mutex> lock(mu);
      built_chunks = c + 1;
      pending -= ChunkEnd(c) - ChunkBegin(c);
    }
    cv.notify_all();
  }
};

// Shards written so far, under their temporary names (the files this build
// created); removed if the build fails.
struct WrittenShards {
  std::vector<std::string> paths;
  bool keep = false;
  WrittenShards() = default;
  WrittenShards(const WrittenShards&) = delete;
  WrittenShards& operator=(const WrittenShards&) = delete;
  ~WrittenShards() {
    if (keep) return;
    for (const auto& p : paths) {
      ::unlink(p.c_str());
      format::UnregisterTempFile(p);
    }
  }
};

// One run of BuildIndex: the configuration checks, then per corpus read ->
// tokenize -> construct (the next corpus read meanwhile), then the write of
// the index or of the shard set.
class IndexBuild {
 public:
  IndexBuild(const BuildConfig& cfg, const ProgressFn& progress)
      : cfg_(cfg), progress_(progress), t_start_(Clock::now()) {}

  BuildReport Run();

 private:
  struct Slice {  // documents of one corpus in the current shard
    size_t corpus;
    uint64_t documents = 0, tokens = 0;
  };

  void Report(const Progress& p) const {
    if (progress_) progress_(p);
  }
  void CheckConfig();
  void LoadTokenizer();
  void ParseReadOptions();
  void PlanMemory();
  uint64_t PlanShard() const;
  std::future<CorpusRead> StartRead(size_t ci);
  void BuildCorpus(size_t ci, CorpusRead&& read);
  void TokenizeAndBuild(size_t ci, std::vector<std::string>& texts,
                        std::vector<std::vector<uint32_t>>& ids, CorpusReport& cr);
  void BuildPretokenized(size_t ci, std::vector<std::vector<uint32_t>>& ids, CorpusReport& cr);
  void ReportConstructed(size_t ci, uint64_t done, uint64_t ndocs);
  void NewBuilder();
  void AddDocument(size_t ci, const std::vector<uint32_t>& doc);
  automaton::IndexInfo MakeIndexInfo(const nlohmann::json& meta, bool shard) const;
  nlohmann::json BuildOptionsJson() const;
  nlohmann::json BaseMeta() const;
  nlohmann::json WholeBuildMeta() const;
  void FinishShard();
  void WriteSingleIndex(const nlohmann::json& meta);
  void WriteShards(const nlohmann::json& meta);

  const BuildConfig& cfg_;
  const ProgressFn& progress_;
  const Clock::time_point t_start_;
  BuildReport rep_;
  std::vector<std::string> inputs_;
  bool all_ids_ = true;
  std::optional<Tokenizer> tok_;
  uint32_t vocab_ = 0;
  corpora::ReadOptions ropts_;
  unsigned threads_ = 1;
  uint32_t bos_ = format::kNoToken;
  std::vector<Tokenizer::Cache> caches_;
  // The builder is created when the first document reaches it (a new one per
  // shard), reserving memory for the whole build from the input sizes.
  std::unique_ptr<automaton::SuffixAutomatonBuilder> builder_;
  uint64_t tokens_added_ = 0;
  uint64_t largest_input_ = 0, reserve_tokens_ = 0;
  // Memory-bounded builds: tokens per shard from the bound, less what the
  // build holds besides the automaton (PlanShard), planned again per shard.
  uint64_t held_input_bytes_ = 0;  // documents of the corpus being built, held in memory
  uint64_t documents_read_ = 0;    // over the corpora so far (the --shard partition)
  uint64_t shard_budget_ = 0;      // tokens of the current shard (0: no bound)
  // Backpressure of the tokenizer threads (TokenizeQueue).
  size_t chunk_ = 1, window_ = 1;
  // The current shard (the whole build when it is not bounded).
  uint64_t documents_added_ = 0;  // over the whole build
  ShardReport shard_;
  Clock::time_point shard_start_;
  std::vector<Slice> slices_;
  WrittenShards written_;
  std::vector<std::string> source_sha256_;
};

void IndexBuild::CheckConfig() {
  if (cfg_.output_path.empty()) throw BuildError("no output file given");
  if (cfg_.corpora.empty()) throw BuildError("no corpus given (use --corpus KIND=PATH)");
  for (const auto& c : cfg_.corpora) all_ids_ = all_ids_ && c.kind == kIdsKind;
  for (const auto& c : cfg_.corpora) CheckCorpusKind(c.kind);  // validates the names early
  inputs_ = BuildInputPaths(cfg_);
  for (const std::string& out : BuildOutputPaths(cfg_)) {
    try {
      format::CheckOutputPath(out, inputs_);
    } catch (const sam::Error& e) {  // an output that cannot be written: an I/O error
      throw BuildError(ErrorCode::kIo, e.context(), e.problem());
    }
  }
  for (const auto& c : cfg_.corpora)
    if (c.kind == kCacheKind && cfg_.tokenizer_path.empty())
      throw BuildError("cache corpora need --tokenizer MODEL (the one the cache was saved with): " +
                       c.path);
  if (cfg_.shard_count && cfg_.shard_index >= cfg_.shard_count)
    throw BuildError("--shard " + std::to_string(cfg_.shard_index) + "/" +
                     std::to_string(cfg_.shard_count) + ": I must be below N");
  if (cfg_.shard_count && cfg_.max_memory_bytes)
    throw BuildError("--shard and --max-memory cannot be combined");
}

// Loads the tokenizer (when --tokenizer is given) and settles the vocabulary
// size.
void IndexBuild::LoadTokenizer() {
  vocab_ = cfg_.vocab_size;
  if (!cfg_.tokenizer_path.empty()) {
    try {
      tok_ = Tokenizer::Load(cfg_.tokenizer_path);
    } catch (const TokenizerError& e) {
      throw BuildError(e);
    }
    if (vocab_ != 0 && vocab_ != tok_->vocab_size())
      throw BuildError(ErrorCode::kUsage,  // a flag conflict: sam-build exits 2
                       "--vocab-size " + std::to_string(vocab_) + " differs from the tokenizer's " +
                           std::to_string(tok_->vocab_size()) + " (" + cfg_.tokenizer_path + ")");
    vocab_ = tok_->vocab_size();
  } else if (!all_ids_) {
    throw BuildError("text corpora need --tokenizer MODEL (only `ids` corpora can be indexed "
                     "without one)");
  } else if (vocab_ == 0) {
    throw BuildError(ErrorCode::kUsage,
                     "pre-tokenized (ids) corpora without --tokenizer need --vocab-size");
  }
  std::error_code output_error;  // (without it, is_directory throws a std::filesystem_error)
  if (std::filesystem::is_directory(cfg_.output_path, output_error))
    throw BuildError(ErrorCode::kIo, {.file = cfg_.output_path}, "output path is a directory");
}

void IndexBuild::ParseReadOptions() {
  try {
    ropts_.templ = corpora::ParseTemplate(cfg_.template_name);
  } catch (const corpora::CorpusError& e) {
    throw BuildError(e);
  }
  ropts_.text_field = cfg_.text_field;
  if (cfg_.text_split == "file") ropts_.text_split = corpora::TextSplit::kPerFile;
  else if (cfg_.text_split == "blank-line") ropts_.text_split = corpora::TextSplit::kBlankLine;
  else throw BuildError("--text-split must be 'file' or 'blank-line', got '" + cfg_.text_split + "'");
  ropts_.skip_bad = cfg_.skip_bad;
}

// Memory: the builder reserves for the whole build up front from the input
// sizes (about 3 bytes of JSON per token at most; ids are larger): reserved
// but untouched memory costs nothing, and no reallocation happens mid-build.
void IndexBuild::PlanMemory() {
  uint64_t input_bytes = 0;
  for (const auto& spec : cfg_.corpora) {
    std::error_code ec;
    uint64_t bytes = 0;
    if (std::filesystem::is_directory(spec.path, ec)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(spec.path, ec))
        if (e.is_regular_file()) bytes += e.file_size();
    } else {
      bytes = std::filesystem::file_size(spec.path, ec);
      if (ec) bytes = 0;
    }
    input_bytes += bytes;
    largest_input_ = std::max(largest_input_, bytes);
  }
  reserve_tokens_ = std::min<uint64_t>(input_bytes / 3 + 1024, uint64_t{1} << 30);
  if (cfg_.max_memory_bytes) {
    shard_budget_ = PlanShard();
    rep_.shard_token_budget = shard_budget_;
    reserve_tokens_ = std::min(reserve_tokens_, shard_budget_ + 1024);
  }
  // Backpressure: workers claim chunks of `chunk` documents, at most `window`
  // chunks beyond the last one built, so at most window * chunk <= max_pending
  // documents are tokenized ahead of construction.
  const uint64_t max_pending =
      cfg_.max_pending_documents ? cfg_.max_pending_documents : kDefaultMaxPendingDocuments;
  chunk_ = static_cast<size_t>(
      std::clamp<uint64_t>(max_pending / (2 * uint64_t{threads_}), 1, 256));
  window_ = static_cast<size_t>(std::max<uint64_t>(1, max_pending / chunk_));
  rep_.max_pending_documents = max_pending;
}

// Tokens of the next shard of a memory-bounded build: the bound less this
// process when the shard starts (tokenizer, its segment caches, the documents
// of the corpus being built, memory the allocator kept), the rendered
// documents of a corpus read during the shard (at most the largest input),
// and 1/16 of the bound for what grows during a shard besides the automaton
// (the tokenizer's segment caches, allocator slack: measured 2-4% of the
// bound).
uint64_t IndexBuild::PlanShard() const {
  const uint64_t overhead =
      CurrentRssBytes() +
      (largest_input_ > held_input_bytes_ ? largest_input_ - held_input_bytes_ : 0) +
      cfg_.max_memory_bytes / 16;
  const uint64_t needed = overhead + kMinShardTokens * kBuildPeakBytesPerToken;
  if (cfg_.max_memory_bytes < needed) {
    // The hint is a bound that passes this check when given: the overhead
    // holds 1/16 of the bound itself, so solve B >= fixed + B/16, i.e.
    // B >= fixed * 16/15; then a quarter more for the memory the process
    // gains between shards (measured: 15 MiB when the first shard is
    // planned, 18-20 MiB at later ones with a 32K tokenizer), and 8 MiB
    // for the run-to-run spread of this process's resident memory when it
    // plans (transparent huge pages: up to about 4 MiB on a busy machine),
    // rounded up to MiB.
    const uint64_t fixed = needed - cfg_.max_memory_bytes / 16;
    const uint64_t mib = uint64_t{1} << 20;
    const uint64_t hint = (fixed * 16 / 15 * 5 / 4 + 8 * mib + mib - 1) / mib;
    throw BuildError(ErrorCode::kCapacity,
                     "--max-memory " + std::to_string(cfg_.max_memory_bytes) +
                         " bytes is too small: the process and the largest corpus take " +
                         std::to_string(overhead) + " bytes; give at least " +
                         std::to_string(hint) + "M");
  }
  return (cfg_.max_memory_bytes - overhead) / kBuildPeakBytesPerToken;
}

// Reads corpus ci on another thread. A memory-bounded build reads in place
// (its plan counts one corpus's documents), and so does a pipe or FIFO.
std::future<CorpusRead> IndexBuild::StartRead(size_t ci) {
  const CorpusSpec& spec = cfg_.corpora[ci];
  const Tokenizer* tok = tok_ ? &*tok_ : nullptr;
  const bool needs_vocab = spec.kind == kCacheKind || spec.kind == kIdsKind;
  if (cfg_.max_memory_bytes || !MayReadAhead(spec.path) || (needs_vocab && vocab_ == 0))
    return {};
  return std::async(std::launch::async, [this, &spec, tok] {
    return ReadWholeCorpus(spec, cfg_, ropts_, tok, vocab_);
  });
}

void IndexBuild::NewBuilder() {
  if (builder_) return;
  if (cfg_.max_memory_bytes && !rep_.shards.empty()) {
    shard_budget_ = PlanShard();
    rep_.shard_token_budget = std::min(rep_.shard_token_budget, shard_budget_);
  }
  builder_ = std::make_unique<automaton::SuffixAutomatonBuilder>(vocab_, reserve_tokens_,
                                                                 cfg_.builder_options);
  shard_ = ShardReport{};
  shard_.token_budget = shard_budget_;
  shard_.first_document = documents_added_;
  shard_start_ = Clock::now();
  slices_.clear();
}

// Gives a document (non-empty) of corpus ci to the builder, first closing
// the shard when the document would take it past its budget.
void IndexBuild::AddDocument(size_t ci, const std::vector<uint32_t>& doc) {
  if (shard_budget_ && builder_ && builder_->num_documents() > 0 &&
      builder_->num_tokens() + doc.size() + 1 > shard_budget_)
    FinishShard();
  NewBuilder();
  builder_->AddDocument(doc);
  ++documents_added_;
  if (slices_.empty() || slices_.back().corpus != ci) slices_.push_back({ci});
  ++slices_.back().documents;
  slices_.back().tokens += doc.size() + 1;
}

// Everything an index file holds besides the automaton; `meta` for META.
automaton::IndexInfo IndexBuild::MakeIndexInfo(const nlohmann::json& meta, bool shard) const {
  automaton::IndexInfo info;
  if (tok_) {
    info.tokenizer_sha256 = tok_->sha256();
    info.bos_id = tok_->bos_id();
    info.eos_id = tok_->eos_id();
    info.vocabulary = tok_->Pieces();
  }
  info.metadata_json = meta.dump();
  // The drafting accelerators, computed once here instead of in every
  // process that opens the file: a shard's child lists are as long as a
  // shard set's drafting reads.
  format::AcceleratorParams accelerators;
  if (shard) accelerators.top_k = format::kShardTopK;
  if (cfg_.child_records) accelerators.record_min_count = format::kChildRecordMinCount;
  if (cfg_.accelerators) info.accelerators = accelerators;
  return info;
}

nlohmann::json IndexBuild::BuildOptionsJson() const {
  nlohmann::json o = {{"template", cfg_.template_name},   {"text_field", cfg_.text_field},
                      {"text_split", cfg_.text_split},    {"skip_bad", cfg_.skip_bad},
                      {"add_bos", cfg_.add_bos && tok_.has_value()},
                      {"separator", "vocab_size"},        {"threads", threads_},
                      {"segment_cache", rep_.segment_cache}};
  if (cfg_.max_memory_bytes) {
    o["max_memory_bytes"] = cfg_.max_memory_bytes;
    o["shard_token_budget"] = rep_.shard_token_budget;
  }
  return o;
}

nlohmann::json IndexBuild::BaseMeta() const {
  nlohmann::json meta;
  meta["tool_version"] = cfg_.tool_version;
  meta["created_utc"] = UtcNow();
  meta["tokenizer"] = tok_ ? std::filesystem::path(tok_->path()).filename().string() : "";
  if (tok_) meta["tokenizer_kind"] = TokenizerKindName(tok_->kind());
  meta["template"] = cfg_.template_name;
  meta["corpora"] = nlohmann::json::array();
  return meta;
}

// Metadata of the whole build (the index's META, or the manifest's build).
nlohmann::json IndexBuild::WholeBuildMeta() const {
  nlohmann::json meta = BaseMeta();
  for (const auto& c : rep_.corpora)
    meta["corpora"].push_back({{"name", std::filesystem::path(c.spec.path).filename().string()},
                               {"kind", c.spec.kind},
                               {"source", c.spec.path},
                               {"source_sha256", c.source_sha256},
                               {"records", c.records},
                               {"documents", c.documents},
                               {"skipped", c.skipped},
                               {"tokens", c.tokens}});
  meta["build_options"] = BuildOptionsJson();
  if (cfg_.shard_count)
    meta["partition"] = {{"shard", cfg_.shard_index},
                         {"shards", cfg_.shard_count},
                         {"rule", "document g (0-based, every document read, corpora in the order "
                                  "given) belongs to shard g mod shards"}};
  return meta;
}

// Writes the current builder as the next shard.
void IndexBuild::FinishShard() {
  const uint64_t k = rep_.shards.size();
  if (k >= format::kMaxShards)
    throw BuildError(ErrorCode::kCapacity,
                     "--max-memory " + std::to_string(cfg_.max_memory_bytes) +
                         " bytes needs more than " +
                         std::to_string(format::kMaxShards) +
                         " shards, the most a shard set holds: give a larger bound");
  shard_.path = ShardFilePath(cfg_.output_path, k);
  nlohmann::json meta = BaseMeta();
  for (const Slice& sl : slices_) {
    const CorpusSpec& spec = cfg_.corpora[sl.corpus];
    meta["corpora"].push_back({{"name", std::filesystem::path(spec.path).filename().string()},
                               {"kind", spec.kind},
                               {"source", spec.path},
                               {"source_sha256", source_sha256_[sl.corpus]},
                               {"records", sl.documents},
                               {"documents", sl.documents},
                               {"skipped", 0},
                               {"tokens", sl.tokens}});
  }
  meta["build_options"] = BuildOptionsJson();
  meta["shard"] = {{"index", k}, {"first_document", shard_.first_document},
                   {"token_budget", shard_.token_budget},
                   {"documents", builder_->num_documents()}, {"tokens", builder_->num_tokens()}};
  Report({"write", shard_.path, 0, 0, builder_->num_tokens(), cfg_.corpora.size(),
          cfg_.corpora.size()});
  shard_.documents = builder_->num_documents();
  shard_.tokens = builder_->num_tokens();
  shard_.states = builder_->num_states();
  // Under a temporary name until the whole set is written (CommitShardSet).
  format::CheckOutputPath(shard_.path, inputs_);
  const std::string staged = StagedShardPath(shard_.path);
  const automaton::WriteReport w = builder_->Write(staged, MakeIndexInfo(meta, /*shard=*/true));
  written_.paths.push_back(staged);
  format::RegisterTempFile(staged);  // a signal removes it (when the registry has room)
  builder_.reset();
#ifdef __GLIBC__
  // Give the freed automaton back to the system: glibc raises its mmap
  // threshold after large frees, so the next shard's arrays (and the
  // freeze's buffers) come from the heap, which free() does not shrink.
  ::malloc_trim(0);
#endif
  shard_.file_bytes = w.file_bytes;
  shard_.seconds = Since(shard_start_);
  shard_.peak_rss_bytes = PeakRssBytes();
  rep_.transitions += w.transitions;
  rep_.edges += w.explicit_edges;
  rep_.accelerator_seconds += w.accelerator_seconds;
  rep_.shards.push_back(shard_);
  ResetPeakRss();
}

void IndexBuild::ReportConstructed(size_t ci, uint64_t done, uint64_t ndocs) {
  tokens_added_ = builder_->num_tokens();
  try {
    Report({"construct", cfg_.corpora[ci].path, done, ndocs, tokens_added_, ci,
            cfg_.corpora.size()});
  } catch (const std::exception& e) {
    throw BuildError(cfg_.corpora[ci].path + ": progress callback failed after document " +
                     std::to_string(done) + " of " + std::to_string(ndocs) + ": " + e.what());
  }
}

// Tokenizes the texts of corpus ci on the tokenizer threads (chunks claimed in
// order, within the window) while this thread feeds the builder in document
// order as chunks complete.
void IndexBuild::TokenizeAndBuild(size_t ci, std::vector<std::string>& texts,
                                  std::vector<std::vector<uint32_t>>& ids, CorpusReport& cr) {
  const CorpusSpec& spec = cfg_.corpora[ci];
  const auto t = Clock::now();
  TokenizeQueue q;
  q.ndocs = texts.size();
  q.chunk = chunk_;
  q.window = window_;
  q.nchunks = (q.ndocs + chunk_ - 1) / chunk_;
  q.done.assign(q.nchunks, 0);
  q.peak_pending = &rep_.peak_pending_documents;
  ids.assign(q.ndocs, {});
  auto work = [&](unsigned w) {
    size_t c;
    while (q.Claim(&c)) {
      size_t d = q.ChunkBegin(c);
      try {
        for (; d < q.ChunkEnd(c); ++d) {
          auto& out = ids[d];
          if (bos_ != format::kNoToken) out.push_back(bos_);
          tok_->Encode(texts[d], &out, &caches_[w]);
          std::string().swap(texts[d]);
          if (cfg_.hooks.after_tokenize) cfg_.hooks.after_tokenize(ci, d);
        }
      } catch (const std::exception& e) {
        q.Fail(DocumentContext(spec.path, d, q.ndocs, e), CodeOf(e));
      } catch (...) {
        q.Fail(spec.path + ": document " + std::to_string(d + 1) + " of " +
                   std::to_string(q.ndocs) + ": unknown exception while tokenizing",
               ErrorCode::kInvalidArgument);
      }
      q.Done(c);
    }
  };
  double waited = 0;
  {
    WorkerPool pool(q.mu, q.cv, q.stop);
    pool.Start(threads_, work);
    // Construction overlaps tokenization: this thread builds chunk c as soon
    // as it is tokenized, then lets the workers claim one more.
    uint64_t d = 0;  // the document being handled, for messages
    try {
      for (size_t c = 0; c < q.nchunks; ++c) {
        const auto tw = Clock::now();
        const bool ok = q.WaitFor(c);
        waited += Since(tw);
        if (!ok) break;
        NewBuilder();
        for (d = q.ChunkBegin(c); d < q.ChunkEnd(c); ++d) {
          if (cfg_.hooks.before_add) cfg_.hooks.before_add(ci, d);
          if (ids[d].size() > (bos_ != format::kNoToken ? 1u : 0u)) {
            AddDocument(ci, ids[d]);
            ++cr.documents;
            cr.tokens += ids[d].size() + 1;
          }
          std::vector<uint32_t>().swap(ids[d]);
        }
        d = q.ChunkEnd(c) - 1;
        q.Built(c);
        ReportConstructed(ci, q.ChunkEnd(c), q.ndocs);
      }
    } catch (const BuildError&) {
      throw;
    } catch (const std::exception& e) {
      throw BuildError(CodeOf(e), DocumentContext(spec.path, d, q.ndocs, e));
    }
    pool.Join();
  }
  if (!q.worker_error.empty()) throw BuildError(q.worker_code, q.worker_error);
  // Time this thread spent waiting is tokenization; the rest is construction.
  rep_.tokenize_seconds += waited;
  rep_.construct_seconds += Since(t) - waited;
}

void IndexBuild::BuildPretokenized(size_t ci, std::vector<std::vector<uint32_t>>& ids,
                                   CorpusReport& cr) {
  const auto t = Clock::now();
  const uint64_t ndocs = ids.size();
  uint64_t d = 0;
  try {
    NewBuilder();
    for (d = 0; d < ndocs; ++d) {
      if (cfg_.hooks.before_add) cfg_.hooks.before_add(ci, d);
      if (!ids[d].empty()) {
        AddDocument(ci, ids[d]);
        ++cr.documents;
        cr.tokens += ids[d].size() + 1;
      }
      std::vector<uint32_t>().swap(ids[d]);
    }
  } catch (const std::exception& e) {
    throw BuildError(CodeOf(e), DocumentContext(cfg_.corpora[ci].path, d, ndocs, e));
  }
  rep_.construct_seconds += Since(t);
  ReportConstructed(ci, ndocs, ndocs);
}

// Builds corpus ci from what was read: the --shard selection, the report's
// read statistics, then its documents into the builder.
void IndexBuild::BuildCorpus(size_t ci, CorpusRead&& read) {
  const CorpusSpec& spec = cfg_.corpora[ci];
  const bool pretokenized = spec.kind == kIdsKind || spec.kind == kCacheKind;
  CorpusReport cr;
  cr.spec = spec;
  cr.source_sha256 = read.source_sha256;
  source_sha256_[ci] = read.source_sha256;
  std::vector<std::string>& texts = read.texts;
  std::vector<std::vector<uint32_t>>& ids = read.ids;
  if (cfg_.shard_count) {  // --shard I/N: keep documents g with g mod N == I
    auto keep = [&](auto& docs) {
      const uint64_t count = docs.size();
      size_t kept = 0;
      for (size_t d = 0; d < docs.size(); ++d)
        if ((documents_read_ + d) % cfg_.shard_count == cfg_.shard_index) {
          if (kept != d) docs[kept] = std::move(docs[d]);
          ++kept;
        }
      docs.resize(kept);
      documents_read_ += count;
    };
    if (pretokenized) keep(ids); else keep(texts);
  }
  held_input_bytes_ = 0;
  for (const auto& text : texts) held_input_bytes_ += text.size();
  for (const auto& doc : ids) held_input_bytes_ += doc.size() * sizeof(uint32_t);
  const corpora::ReadStats& rs = read.stats;
  cr.records = rs.records;
  cr.skipped = rs.skipped;
  for (const auto& [code, count] : rs.skipped_by_code)
    cr.skipped_by_reason.emplace_back(corpora::ReasonName(code), count);
  cr.skip_examples = rs.skip_examples;
  cr.skip_summary = corpora::DescribeSkips(rs);
  Report({"read", spec.path, rs.documents, rs.documents, tokens_added_, ci, cfg_.corpora.size()});

  if (!pretokenized) TokenizeAndBuild(ci, texts, ids, cr);
  else BuildPretokenized(ci, ids, cr);
  rep_.documents += cr.documents;
  rep_.tokens += cr.tokens;
  rep_.corpora.push_back(std::move(cr));
  held_input_bytes_ = 0;  // (texts and ids are released with `read`)
}

void IndexBuild::WriteSingleIndex(const nlohmann::json& meta) {
  rep_.index_path = SingleIndexPath(cfg_.output_path);
  Report({"write", rep_.index_path, 0, 0, tokens_added_, cfg_.corpora.size(),
          cfg_.corpora.size()});
  const automaton::IndexInfo info = MakeIndexInfo(meta, /*shard=*/cfg_.shard_count != 0);
#ifdef __GLIBC__
  // The corpora were read and tokenized on other threads, whose malloc arenas
  // keep the freed documents resident; give them back before the freeze
  // allocates its buffers (the build's peak).
  ::malloc_trim(0);
#endif
  // The tokenizer and its caches are no longer needed: another thread frees
  // them while this one writes.
  std::thread release([t = std::move(tok_), c = std::move(caches_)]() mutable {
    t.reset();
    c.clear();
  });
  tok_.reset();
  caches_.clear();
  automaton::WriteReport w;
  try {
    rep_.states = builder_->num_states();
    rep_.clones = builder_->num_clones();
    w = builder_->Write(rep_.index_path, info);
  } catch (const format::FormatError& e) {
    release.join();
    throw BuildError(e);
  } catch (...) {
    release.join();
    throw;
  }
  builder_.reset();
  release.join();
  rep_.write_seconds = w.freeze_seconds + w.write_seconds + w.accelerator_seconds;
  rep_.accelerator_seconds = w.accelerator_seconds;
  rep_.transitions = w.transitions;
  rep_.edges = w.explicit_edges;
  rep_.file_bytes = w.file_bytes;
  rep_.sections = w.sections;
}

void IndexBuild::WriteShards(const nlohmann::json& meta) {
  const auto tw = Clock::now();
  format::ShardSetManifest manifest;
  try {
    FinishShard();
    if (tok_) manifest.tokenizer_sha256 = tok_->sha256();
    manifest.vocab_size = vocab_;
    manifest.build_json = meta.dump();
    for (const ShardReport& sh : rep_.shards) {
      format::ShardEntry e;
      e.file = std::filesystem::path(sh.path).filename().string();
      e.bytes = sh.file_bytes;
      e.sha256 = format::Sha256File(StagedShardPath(sh.path));
      e.tokens = sh.tokens;
      e.documents = sh.documents;
      e.states = sh.states;
      manifest.shards.push_back(e);
      rep_.states += sh.states;
      rep_.clones += sh.states - 1 - sh.tokens;
      rep_.file_bytes += sh.file_bytes;
    }
    rep_.index_path = ShardSetPath(cfg_.output_path);
    format::CheckOutputPath(rep_.index_path, inputs_);
    std::vector<std::string> finals;
    for (const ShardReport& sh : rep_.shards) finals.push_back(sh.path);
    CommitShardSet(rep_.index_path, manifest, written_.paths, finals);
  } catch (const sam::Error& e) {
    throw BuildError(e);
  }
  written_.keep = true;
  rep_.write_seconds = Since(tw);
}

BuildReport IndexBuild::Run() {
  CheckConfig();
  std::exception_ptr read_options_error;
  try {
    ParseReadOptions();
  } catch (...) {
    read_options_error = std::current_exception();
  }
  threads_ = cfg_.threads ? cfg_.threads : std::max(1u, std::thread::hardware_concurrency());
  threads_ = std::min(threads_, 256u);
  // The first corpus is read on another thread while this one loads the
  // tokenizer (a text corpus: ids and cache corpora need its vocabulary). The
  // tokenizer is loaded here so that its memory comes from this thread's
  // arena, where the freed parse leaves no resident pages behind.
  std::future<CorpusRead> next;
  if (!read_options_error && cfg_.corpora[0].kind != kIdsKind &&
      cfg_.corpora[0].kind != kCacheKind)
    next = StartRead(0);
  // Errors in the order of a sequential build: the tokenizer's first.
  LoadTokenizer();
  if (read_options_error) std::rethrow_exception(read_options_error);
  bos_ = (tok_ && cfg_.add_bos) ? tok_->bos_id() : format::kNoToken;
  rep_.segment_cache = tok_ && tok_->segment_cache_exact();
  caches_.resize(threads_);
  source_sha256_.assign(cfg_.corpora.size(), "");
  PlanMemory();
  if (shard_budget_) ResetPeakRss();

  for (size_t ci = 0; ci < cfg_.corpora.size(); ++ci) {
    const auto t = Clock::now();
    CorpusRead read = next.valid() ? next.get()
                                   : ReadWholeCorpus(cfg_.corpora[ci], cfg_, ropts_,
                                                     tok_ ? &*tok_ : nullptr, vocab_);
    rep_.read_seconds += Since(t);
    next = ci + 1 < cfg_.corpora.size() ? StartRead(ci + 1) : std::future<CorpusRead>();
    BuildCorpus(ci, std::move(read));
  }
  if (!builder_ || builder_->num_documents() == 0) {
    // Say why: per corpus, what was read and, when records were skipped, why.
    std::string why;
    for (const auto& c : rep_.corpora) {
      why += "\n  " + c.spec.kind + "=" + c.spec.path + ": " + std::to_string(c.records) +
             " records, " + std::to_string(c.documents) + " documents";
      if (!c.skip_summary.empty()) why += "; " + c.skip_summary;
    }
    throw BuildError("the corpora contain no documents; nothing to index:" + why);
  }
  uint64_t hits = 0, misses = 0;
  for (const auto& c : caches_) {
    hits += c.hits;
    misses += c.misses;
  }
  rep_.cache_hit_rate = hits + misses ? static_cast<double>(hits) / (hits + misses) : 0;
  const nlohmann::json meta = WholeBuildMeta();
  if (rep_.shards.empty()) WriteSingleIndex(meta);
  else WriteShards(meta);
  rep_.total_seconds = Since(t_start_);
  rep_.peak_rss_bytes = PeakRssBytes();  // a sharded build reset it per shard: the largest
  for (const ShardReport& sh : rep_.shards)
    rep_.peak_rss_bytes = std::max(rep_.peak_rss_bytes, sh.peak_rss_bytes);
  return std::move(rep_);
}

}  // namespace

BuildReport BuildIndex(const BuildConfig& cfg, const ProgressFn& progress) {
  return IndexBuild(cfg, progress).Run();
}

void WriteShardSet(const std::vector<std::string>& shard_files, const std::string& manifest_path,
                   const std::string& tool_version) {
  namespace fs = std::filesystem;
  if (shard_files.empty()) throw BuildError("--write-samset: no shard files given");
  struct Found {
    std::string path;
    uint64_t shard = 0;
    format::ShardEntry entry;
  };
  std::vector<Found> found;
  uint64_t count = 0;
  format::ShardSetManifest manifest;
  nlohmann::json build;
  const fs::path folder = fs::absolute(manifest_path).parent_path();
  for (const std::string& path : shard_files) {
    auto fail = [&](const std::string& problem) {
      throw BuildError(ErrorCode::kInvalidArgument, {.file = path}, problem);
    };
    if (fs::absolute(path).parent_path() != folder)
      fail("not in the manifest's folder " + folder.string() + " (a shard set names its files "
           "relative to the manifest)");
    format::OpenOptions options;
    options.verify = true;
    format::IndexFile f = [&] {
      try {
        return format::IndexFile::Open(path, options);
      } catch (const sam::Error& e) {
        throw BuildError(e);
      }
    }();
    const nlohmann::json meta = nlohmann::json::parse(f.ReadMetadata().json, nullptr, false);
    if (!meta.is_object() || !meta.contains("partition") || !meta["partition"].is_object())
      fail("not built with sam-build --shard I/N (its metadata has no partition)");
    const nlohmann::json& part = meta["partition"];
    const uint64_t shard = part.value("shard", uint64_t{0}), shards = part.value("shards", uint64_t{0});
    if (shards == 0 || shard >= shards) fail("invalid partition in its metadata");
    if (found.empty()) {
      count = shards;
      manifest.tokenizer_sha256 = f.header().tokenizer_sha256;
      manifest.vocab_size = f.header().vocab_size;
      build = {{"tool_version", tool_version},
               {"partition", part},
               {"build_options", meta.value("build_options", nlohmann::json::object())},
               {"tokenizer", meta.value("tokenizer", "")},
               {"template", meta.value("template", "")}};
      if (meta.contains("tokenizer_kind")) build["tokenizer_kind"] = meta["tokenizer_kind"];
    } else {
      if (shards != count)
        fail("shard " + std::to_string(shard) + " of " + std::to_string(shards) +
             ", the others are of " + std::to_string(count));
      if (f.header().tokenizer_sha256 != manifest.tokenizer_sha256 ||
          f.header().vocab_size != manifest.vocab_size)
        fail("built with another tokenizer or vocabulary than " + found[0].path);
    }
    for (const Found& other : found)
      if (other.shard == shard)
        fail("shard " + std::to_string(shard) + " is also " + other.path);
    Found x{path, shard, {}};
    x.entry.file = fs::path(path).filename().string();
    x.entry.bytes = f.header().file_size;
    x.entry.sha256 = format::Sha256File(path);
    x.entry.tokens = f.header().num_tokens;
    x.entry.documents = f.header().num_documents;
    x.entry.states = f.header().num_states;
    found.push_back(std::move(x));
  }
  if (found.size() != count) {
    std::string missing;
    for (uint64_t k = 0; k < count; ++k) {
      bool have = false;
      for (const Found& f : found) have |= f.shard == k;
      if (!have) missing += (missing.empty() ? "" : ", ") + std::to_string(k);
    }
    throw BuildError(ErrorCode::kInvalidArgument, {.file = manifest_path},
                     "shards " + missing + " of " + std::to_string(count) + " are missing");
  }
  std::sort(found.begin(), found.end(),
            [](const Found& a, const Found& b) { return a.shard < b.shard; });
  for (const Found& f : found) manifest.shards.push_back(f.entry);
  manifest.build_json = build.dump();
  try {
    format::WriteShardSetManifest(manifest_path, manifest);
  } catch (const sam::Error& e) {
    throw BuildError(e);
  }
}

}  // namespace sam::indexer
