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
#include <filesystem>
#include <fstream>
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
#include "sam/indexer/builder.h"
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

BuildReport BuildIndex(const BuildConfig& cfg, const ProgressFn& progress) {
  const auto t_start = Clock::now();
  auto report_progress = [&](const Progress& p) {
    if (progress) progress(p);
  };
  if (cfg.output_path.empty()) throw BuildError("no output file given");
  if (cfg.corpora.empty()) throw BuildError("no corpus given (use --corpus KIND=PATH)");
  bool all_ids = true;
  for (const auto& c : cfg.corpora) all_ids = all_ids && c.kind == kIdsKind;
  for (const auto& c : cfg.corpora) CheckCorpusKind(c.kind);  // validates the names early
  const std::vector<std::string> inputs = BuildInputPaths(cfg);
  for (const std::string& out : BuildOutputPaths(cfg)) {
    try {
      format::CheckOutputPath(out, inputs);
    } catch (const sam::Error& e) {  // an output that cannot be written: an I/O error
      throw BuildError(ErrorCode::kIo, e.context(), e.problem());
    }
  }

  for (const auto& c : cfg.corpora)
    if (c.kind == kCacheKind && cfg.tokenizer_path.empty())
      throw BuildError("cache corpora need --tokenizer MODEL (the one the cache was saved with): " +
                       c.path);
  std::optional<Tokenizer> tok;
  uint32_t vocab = cfg.vocab_size;
  if (!cfg.tokenizer_path.empty()) {
    try {
      tok = Tokenizer::Load(cfg.tokenizer_path);
    } catch (const TokenizerError& e) {
      throw BuildError(e);
    }
    if (vocab != 0 && vocab != tok->vocab_size())
      throw BuildError(ErrorCode::kUsage,  // a flag conflict: sam-build exits 2
                       "--vocab-size " + std::to_string(vocab) + " differs from the tokenizer's " +
                           std::to_string(tok->vocab_size()) + " (" + cfg.tokenizer_path + ")");
    vocab = tok->vocab_size();
  } else if (!all_ids) {
    throw BuildError("text corpora need --tokenizer MODEL (only `ids` corpora can be indexed "
                     "without one)");
  } else if (vocab == 0) {
    throw BuildError(ErrorCode::kUsage,
                     "pre-tokenized (ids) corpora without --tokenizer need --vocab-size");
  }
  std::error_code output_error;  // (without it, is_directory throws a std::filesystem_error)
  if (std::filesystem::is_directory(cfg.output_path, output_error))
    throw BuildError(ErrorCode::kIo, {.file = cfg.output_path}, "output path is a directory");

  corpora::ReadOptions ropts;
  try {
    ropts.templ = corpora::ParseTemplate(cfg.template_name);
  } catch (const corpora::CorpusError& e) {
    throw BuildError(e);
  }
  ropts.text_field = cfg.text_field;
  if (cfg.text_split == "file") ropts.text_split = corpora::TextSplit::kPerFile;
  else if (cfg.text_split == "blank-line") ropts.text_split = corpora::TextSplit::kBlankLine;
  else throw BuildError("--text-split must be 'file' or 'blank-line', got '" + cfg.text_split + "'");
  ropts.skip_bad = cfg.skip_bad;

  unsigned threads = cfg.threads ? cfg.threads : std::max(1u, std::thread::hardware_concurrency());
  threads = std::min(threads, 256u);
  const uint32_t bos = (tok && cfg.add_bos) ? tok->bos_id() : format::kNoToken;

  BuildReport rep;
  rep.segment_cache = tok && tok->segment_cache_exact();
  std::vector<Tokenizer::Cache> caches(threads);
  // The builder is created once the first corpus is tokenized (to reserve
  // memory from the token count of what is read so far, grown as needed).
  std::unique_ptr<SuffixAutomatonBuilder> builder;
  uint64_t tokens_added = 0;
  // Reserve for the whole build up front from the input sizes (about 3 bytes
  // of JSON per token at most; ids are larger): reserved but untouched memory
  // costs nothing, and no reallocation happens mid-build.
  uint64_t input_bytes = 0, largest_input = 0;
  for (const auto& spec : cfg.corpora) {
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
    largest_input = std::max(largest_input, bytes);
  }
  uint64_t reserve_tokens = std::min<uint64_t>(input_bytes / 3 + 1024, uint64_t{1} << 30);

  // Memory-bounded builds: tokens per shard from the bound, less what the
  // build holds besides the automaton: this process when the shard starts
  // (tokenizer, its segment caches, the documents of the corpus being built,
  // memory the allocator kept) and the rendered documents of a corpus read
  // during the shard (at most the largest input), and 1/16 of the bound for
  // what grows during a shard besides the automaton (the tokenizer's segment
  // caches, allocator slack: measured 2-4% of the bound). Planned again per
  // shard.
  uint64_t held_input_bytes = 0;  // documents of the corpus being built, held in memory
  uint64_t documents_read = 0;    // over the corpora so far (the --shard partition)
  if (cfg.shard_count && cfg.shard_index >= cfg.shard_count)
    throw BuildError("--shard " + std::to_string(cfg.shard_index) + "/" +
                     std::to_string(cfg.shard_count) + ": I must be below N");
  if (cfg.shard_count && cfg.max_memory_bytes)
    throw BuildError("--shard and --max-memory cannot be combined");
  auto plan_shard = [&]() -> uint64_t {
    const uint64_t overhead =
        CurrentRssBytes() + (largest_input > held_input_bytes ? largest_input - held_input_bytes : 0) +
        cfg.max_memory_bytes / 16;
    const uint64_t needed = overhead + kMinShardTokens * kBuildPeakBytesPerToken;
    if (cfg.max_memory_bytes < needed) {
      // The hint is a bound that passes this check when given: the overhead
      // holds 1/16 of the bound itself, so solve B >= fixed + B/16, i.e.
      // B >= fixed * 16/15; then a quarter more for the memory the process
      // gains between shards (measured: 15 MiB when the first shard is
      // planned, 18-20 MiB at later ones with a 32K tokenizer), rounded up
      // to MiB.
      const uint64_t fixed = needed - cfg.max_memory_bytes / 16;
      const uint64_t mib = uint64_t{1} << 20;
      const uint64_t hint = (fixed * 16 / 15 * 5 / 4 + mib - 1) / mib;
      throw BuildError(ErrorCode::kCapacity,
                       "--max-memory " + std::to_string(cfg.max_memory_bytes) +
                           " bytes is too small: the process and the largest corpus take " +
                           std::to_string(overhead) + " bytes; give at least " +
                           std::to_string(hint) + "M");
    }
    return (cfg.max_memory_bytes - overhead) / kBuildPeakBytesPerToken;
  };
  uint64_t shard_budget = 0;  // tokens of the current shard (0: no bound)
  if (cfg.max_memory_bytes) {
    shard_budget = plan_shard();
    rep.shard_token_budget = shard_budget;
    reserve_tokens = std::min(reserve_tokens, shard_budget + 1024);
  }

  // Backpressure: workers claim chunks of `chunk` documents, at most `window`
  // chunks beyond the last one built, so at most window * chunk <= max_pending
  // documents are tokenized ahead of construction.
  const uint64_t max_pending =
      cfg.max_pending_documents ? cfg.max_pending_documents : kDefaultMaxPendingDocuments;
  const size_t chunk = static_cast<size_t>(
      std::clamp<uint64_t>(max_pending / (2 * uint64_t{threads}), 1, 256));
  const size_t window = static_cast<size_t>(std::max<uint64_t>(1, max_pending / chunk));
  rep.max_pending_documents = max_pending;
  // The current shard (the whole build when it is not bounded).
  uint64_t documents_added = 0;  // over the whole build
  ShardReport shard;
  Clock::time_point shard_start;
  struct Slice {  // documents of one corpus in the current shard
    size_t corpus;
    uint64_t documents = 0, tokens = 0;
  };
  std::vector<Slice> slices;
  // Shards written so far, under their temporary names (the files this build
  // created); removed if the build fails.
  struct WrittenShards {
    std::vector<std::string> paths;
    bool keep = false;
    ~WrittenShards() {
      if (keep) return;
      for (const auto& p : paths) {
        ::unlink(p.c_str());
        format::UnregisterTempFile(p);
      }
    }
  } written;
  auto new_builder = [&] {
    if (builder) return;
    if (cfg.max_memory_bytes && !rep.shards.empty()) {
      shard_budget = plan_shard();
      rep.shard_token_budget = std::min(rep.shard_token_budget, shard_budget);
    }
    builder = std::make_unique<SuffixAutomatonBuilder>(vocab, reserve_tokens, cfg.builder_options);
    shard = ShardReport{};
    shard.token_budget = shard_budget;
    shard.first_document = documents_added;
    shard_start = Clock::now();
    slices.clear();
  };
  // Everything an index file holds besides the automaton; `meta` for META.
  auto index_info = [&](const nlohmann::json& meta) {
    IndexInfo info;
    if (tok) {
      info.tokenizer_sha256 = tok->sha256();
      info.bos_id = tok->bos_id();
      info.eos_id = tok->eos_id();
      info.vocabulary = tok->Pieces();
    }
    info.metadata_json = meta.dump();
    return info;
  };
  auto build_options = [&] {
    nlohmann::json o = {{"template", cfg.template_name},   {"text_field", cfg.text_field},
                        {"text_split", cfg.text_split},    {"skip_bad", cfg.skip_bad},
                        {"add_bos", cfg.add_bos && tok.has_value()},
                        {"separator", "vocab_size"},       {"threads", threads},
                        {"segment_cache", rep.segment_cache}};
    if (cfg.max_memory_bytes) {
      o["max_memory_bytes"] = cfg.max_memory_bytes;
      o["shard_token_budget"] = rep.shard_token_budget;
    }
    return o;
  };
  auto base_meta = [&] {
    nlohmann::json meta;
    meta["tool_version"] = cfg.tool_version;
    meta["created_utc"] = UtcNow();
    meta["tokenizer"] = tok ? std::filesystem::path(tok->path()).filename().string() : "";
    if (tok) meta["tokenizer_kind"] = TokenizerKindName(tok->kind());
    meta["template"] = cfg.template_name;
    meta["corpora"] = nlohmann::json::array();
    return meta;
  };
  std::vector<std::string> source_sha256(cfg.corpora.size());
  // Writes the current builder as the next shard.
  auto finish_shard = [&] {
    const uint64_t k = rep.shards.size();
    if (k >= format::kMaxShards)
      throw BuildError(ErrorCode::kCapacity,
                       "--max-memory " + std::to_string(cfg.max_memory_bytes) + " bytes needs more than " +
                           std::to_string(format::kMaxShards) +
                           " shards, the most a shard set holds: give a larger bound");
    shard.path = ShardFilePath(cfg.output_path, k);
    nlohmann::json meta = base_meta();
    for (const Slice& sl : slices) {
      const CorpusSpec& spec = cfg.corpora[sl.corpus];
      meta["corpora"].push_back({{"name", std::filesystem::path(spec.path).filename().string()},
                                 {"kind", spec.kind},
                                 {"source", spec.path},
                                 {"source_sha256", source_sha256[sl.corpus]},
                                 {"records", sl.documents},
                                 {"documents", sl.documents},
                                 {"skipped", 0},
                                 {"tokens", sl.tokens}});
    }
    meta["build_options"] = build_options();
    meta["shard"] = {{"index", k}, {"first_document", shard.first_document},
                     {"token_budget", shard.token_budget},
                     {"documents", builder->num_documents()}, {"tokens", builder->num_tokens()}};
    report_progress({"write", shard.path, 0, 0, builder->num_tokens(), cfg.corpora.size(),
                     cfg.corpora.size()});
    shard.documents = builder->num_documents();
    shard.tokens = builder->num_tokens();
    shard.states = builder->num_states();
    // Under a temporary name until the whole set is written (CommitShardSet).
    format::CheckOutputPath(shard.path, inputs);
    const std::string staged = StagedShardPath(shard.path);
    const WriteReport w = builder->Write(staged, index_info(meta));
    written.paths.push_back(staged);
    format::RegisterTempFile(staged);  // a signal removes it (when the registry has room)
    builder.reset();
#ifdef __GLIBC__
    // Give the freed automaton back to the system: glibc raises its mmap
    // threshold after large frees, so the next shard's arrays (and the
    // freeze's buffers) come from the heap, which free() does not shrink.
    ::malloc_trim(0);
#endif
    shard.file_bytes = w.file_bytes;
    shard.seconds = Since(shard_start);
    shard.peak_rss_bytes = PeakRssBytes();
    rep.transitions += w.transitions;
    rep.edges += w.explicit_edges;
    rep.shards.push_back(shard);
    ResetPeakRss();
  };
  // Gives a document (non-empty) of corpus ci to the builder, first closing
  // the shard when the document would take it past its budget.
  auto add_document = [&](size_t ci, const std::vector<uint32_t>& doc) {
    if (shard_budget && builder && builder->num_documents() > 0 &&
        builder->num_tokens() + doc.size() + 1 > shard_budget)
      finish_shard();
    new_builder();
    builder->AddDocument(doc);
    ++documents_added;
    if (slices.empty() || slices.back().corpus != ci) slices.push_back({ci});
    ++slices.back().documents;
    slices.back().tokens += doc.size() + 1;
  };
  if (shard_budget) ResetPeakRss();

  for (size_t ci = 0; ci < cfg.corpora.size(); ++ci) {
    const CorpusSpec& spec = cfg.corpora[ci];
    CorpusReport cr;
    cr.spec = spec;
    // Opened once: a pipe or FIFO is read into memory here, hashed from those
    // bytes and parsed from them (reading it twice would find it empty).
    auto t = Clock::now();
    std::optional<corpora::Input> input;
    std::vector<std::string> texts;
    std::vector<std::vector<uint32_t>> ids;
    corpora::ReadStats rs;
    const bool pretokenized = spec.kind == kIdsKind || spec.kind == kCacheKind;
    try {
      if (spec.kind == kCacheKind) {  // a regular file, read whole by its own reader
        // Read first: its reader refuses a FIFO without waiting for a writer.
        ReadCacheCorpus(spec.path, cfg.cache_tenant, *tok, &ids);
        cr.source_sha256 = SourceHash(spec.path);
        rs.records = rs.documents = ids.size();
      } else {
        input = corpora::Input::Open(spec.path);
        if (input->type() == corpora::Input::Type::kStream) {
          const std::string_view bytes = input->stream_bytes();
          cr.source_sha256 = format::DigestToHex(format::Sha256(bytes.data(), bytes.size()));
        } else {
          cr.source_sha256 = SourceHash(spec.path);
        }
      }
      source_sha256[ci] = cr.source_sha256;
    } catch (const sam::Error& e) {
      throw BuildError(e);
    } catch (const std::exception& e) {
      throw BuildError(CodeOf(e), e.what());
    }
    // Read all documents of this corpus (a cache's are read above).
    try {
      if (spec.kind == kIdsKind) {
        rs = corpora::ReadIdDocuments(*input, vocab, cfg.skip_bad,
                                      [&](std::vector<uint32_t>&& d) { ids.push_back(std::move(d)); });
      } else if (spec.kind != kCacheKind) {
        rs = corpora::ReadCorpus(corpora::ParseKind(spec.kind), *input, ropts,
                                 [&](std::string&& d) { texts.push_back(std::move(d)); });
      }
    } catch (const corpora::CorpusError& e) {
      throw BuildError(e);
    }
    input.reset();
    if (cfg.shard_count) {  // --shard I/N: keep documents g with g mod N == I
      auto keep = [&](auto& docs) {
        const uint64_t read = docs.size();
        size_t kept = 0;
        for (size_t d = 0; d < docs.size(); ++d)
          if ((documents_read + d) % cfg.shard_count == cfg.shard_index) {
            if (kept != d) docs[kept] = std::move(docs[d]);
            ++kept;
          }
        docs.resize(kept);
        documents_read += read;
      };
      if (pretokenized) keep(ids); else keep(texts);
    }
    held_input_bytes = 0;
    for (const auto& text : texts) held_input_bytes += text.size();
    for (const auto& doc : ids) held_input_bytes += doc.size() * sizeof(uint32_t);
    cr.records = rs.records;
    cr.skipped = rs.skipped;
    for (const auto& [code, count] : rs.skipped_by_code)
      cr.skipped_by_reason.emplace_back(corpora::ReasonName(code), count);
    cr.skip_examples = rs.skip_examples;
    cr.skip_summary = corpora::DescribeSkips(rs);
    rep.read_seconds += Since(t);
    report_progress({"read", spec.path, rs.documents, rs.documents, tokens_added, ci,
                     cfg.corpora.size()});

    t = Clock::now();
    if (!pretokenized) {
      // Tokenize in parallel (chunks claimed in order, within the window), and
      // feed the builder in document order as chunks complete.
      const size_t ndocs = texts.size();
      ids.assign(ndocs, {});
      const size_t nchunks = (ndocs + chunk - 1) / chunk;
      auto chunk_end = [&](size_t c) { return std::min(ndocs, (c + 1) * chunk); };
      std::mutex mu;
      std::condition_variable cv;
      bool stop = false;             // set on an error or when the pool is joined
      size_t next_chunk = 0;         // the next chunk a worker claims
      size_t built_chunks = 0;       // chunks handed to the builder
      uint64_t pending = 0;          // documents claimed but not yet built
      std::vector<char> done(nchunks, 0);
      std::string worker_error;                          // the first failure of a tokenizer
      ErrorCode worker_code = ErrorCode::kInvalidArgument;  // thread, and the code it keeps
      auto work = [&](unsigned w) {
        for (;;) {
          size_t c;
          {
            std::unique_lock<std::mutex> lock(mu);
            cv.wait(lock, [&] {
              return stop || next_chunk >= nchunks || next_chunk < built_chunks + window;
            });
            if (stop || next_chunk >= nchunks) return;
            c = next_chunk++;
            pending += chunk_end(c) - c * chunk;
            rep.peak_pending_documents = std::max(rep.peak_pending_documents, pending);
          }
          size_t d = c * chunk;
          try {
            for (; d < chunk_end(c); ++d) {
              auto& out = ids[d];
              if (bos != format::kNoToken) out.push_back(bos);
              tok->Encode(texts[d], &out, &caches[w]);
              std::string().swap(texts[d]);
              if (cfg.hooks.after_tokenize) cfg.hooks.after_tokenize(ci, d);
            }
          } catch (const std::exception& e) {
            std::lock_guard<std::mutex> lock(mu);
            if (worker_error.empty()) {
              worker_error = DocumentContext(spec.path, d, ndocs, e);
              worker_code = CodeOf(e);
            }
            stop = true;
          } catch (...) {
            std::lock_guard<std::mutex> lock(mu);
            if (worker_error.empty())
              worker_error = spec.path + ": document " + std::to_string(d + 1) + " of " +
                             std::to_string(ndocs) + ": unknown exception while tokenizing";
            stop = true;
          }
          {
            std::lock_guard<std::mutex> lock(mu);
            done[c] = 1;
          }
          cv.notify_all();
        }
      };
      double waited = 0;
      {
        WorkerPool pool(mu, cv, stop);
        pool.Start(threads, work);
        // Construction overlaps tokenization: this thread builds chunk c as
        // soon as it is tokenized, then lets the workers claim one more.
        uint64_t d = 0;  // the document being handled, for messages
        try {
          for (size_t c = 0; c < nchunks; ++c) {
            {
              auto tw = Clock::now();
              std::unique_lock<std::mutex> lock(mu);
              cv.wait(lock, [&] { return done[c] || !worker_error.empty(); });
              waited += Since(tw);
              if (!worker_error.empty()) break;
            }
            new_builder();
            for (d = c * chunk; d < chunk_end(c); ++d) {
              if (cfg.hooks.before_add) cfg.hooks.before_add(ci, d);
              if (ids[d].size() > (bos != format::kNoToken ? 1u : 0u)) {
                add_document(ci, ids[d]);
                ++cr.documents;
                cr.tokens += ids[d].size() + 1;
              }
              std::vector<uint32_t>().swap(ids[d]);
            }
            d = chunk_end(c) - 1;
            {
              std::lock_guard<std::mutex> lock(mu);
              built_chunks = c + 1;
              pending -= chunk_end(c) - c * chunk;
            }
            cv.notify_all();
            tokens_added = builder->num_tokens();
            try {
              report_progress({"construct", spec.path, chunk_end(c), ndocs, tokens_added, ci,
                               cfg.corpora.size()});
            } catch (const std::exception& e) {
              throw BuildError(spec.path + ": progress callback failed after document " +
                               std::to_string(d + 1) + " of " + std::to_string(ndocs) + ": " +
                               e.what());
            }
          }
        } catch (const BuildError&) {
          throw;
        } catch (const std::exception& e) {
          throw BuildError(CodeOf(e), DocumentContext(spec.path, d, ndocs, e));
        }
        pool.Join();
      }
      if (!worker_error.empty()) throw BuildError(worker_code, worker_error);
      const double total = Since(t);
      // Time the main thread spent waiting is tokenization; the rest is construction.
      rep.tokenize_seconds += waited;
      rep.construct_seconds += total - waited;
    } else {
      const uint64_t ndocs = ids.size();
      uint64_t d = 0;
      try {
        new_builder();
        for (d = 0; d < ndocs; ++d) {
          if (cfg.hooks.before_add) cfg.hooks.before_add(ci, d);
          if (!ids[d].empty()) {
            add_document(ci, ids[d]);
            ++cr.documents;
            cr.tokens += ids[d].size() + 1;
          }
          std::vector<uint32_t>().swap(ids[d]);
        }
      } catch (const std::exception& e) {
        throw BuildError(CodeOf(e), DocumentContext(spec.path, d, ndocs, e));
      }
      rep.construct_seconds += Since(t);
      tokens_added = builder->num_tokens();
      try {
        report_progress({"construct", spec.path, ndocs, ndocs, tokens_added, ci,
                         cfg.corpora.size()});
      } catch (const std::exception& e) {
        throw BuildError(spec.path + ": progress callback failed after document " +
                         std::to_string(ndocs) + " of " + std::to_string(ndocs) + ": " +
                         e.what());
      }
    }
    rep.documents += cr.documents;
    rep.tokens += cr.tokens;
    rep.corpora.push_back(std::move(cr));
    held_input_bytes = 0;  // (texts and ids are released with this iteration)
  }
  if (!builder || builder->num_documents() == 0) {
    // Say why: per corpus, what was read and, when records were skipped, why.
    std::string why;
    for (const auto& c : rep.corpora) {
      why += "\n  " + c.spec.kind + "=" + c.spec.path + ": " + std::to_string(c.records) +
             " records, " + std::to_string(c.documents) + " documents";
      if (!c.skip_summary.empty()) why += "; " + c.skip_summary;
    }
    throw BuildError("the corpora contain no documents; nothing to index:" + why);
  }

  // Metadata of the whole build (the index's META, or the manifest's build).
  nlohmann::json meta = base_meta();
  for (const auto& c : rep.corpora)
    meta["corpora"].push_back({{"name", std::filesystem::path(c.spec.path).filename().string()},
                               {"kind", c.spec.kind},
                               {"source", c.spec.path},
                               {"source_sha256", c.source_sha256},
                               {"records", c.records},
                               {"documents", c.documents},
                               {"skipped", c.skipped},
                               {"tokens", c.tokens}});
  meta["build_options"] = build_options();
  if (cfg.shard_count)
    meta["partition"] = {{"shard", cfg.shard_index},
                         {"shards", cfg.shard_count},
                         {"rule", "document g (0-based, every document read, corpora in the order "
                                  "given) belongs to shard g mod shards"}};

  if (rep.shards.empty()) {
    rep.index_path = SingleIndexPath(cfg.output_path);
    report_progress({"write", rep.index_path, 0, 0, tokens_added, cfg.corpora.size(),
                     cfg.corpora.size()});
    WriteReport w;
    try {
      rep.states = builder->num_states();
      rep.clones = builder->num_clones();
      w = builder->Write(rep.index_path, index_info(meta));
    } catch (const format::FormatError& e) {
      throw BuildError(e);
    }
    builder.reset();
    rep.write_seconds = w.freeze_seconds + w.write_seconds;
    rep.transitions = w.transitions;
    rep.edges = w.explicit_edges;
    rep.file_bytes = w.file_bytes;
    rep.sections = w.sections;
  } else {
    const auto tw = Clock::now();
    format::ShardSetManifest manifest;
    try {
      finish_shard();
      if (tok) manifest.tokenizer_sha256 = tok->sha256();
      manifest.vocab_size = vocab;
      manifest.build_json = meta.dump();
      for (const ShardReport& sh : rep.shards) {
        format::ShardEntry e;
        e.file = std::filesystem::path(sh.path).filename().string();
        e.bytes = sh.file_bytes;
        e.sha256 = format::Sha256File(StagedShardPath(sh.path));
        e.tokens = sh.tokens;
        e.documents = sh.documents;
        e.states = sh.states;
        manifest.shards.push_back(e);
        rep.states += sh.states;
        rep.clones += sh.states - 1 - sh.tokens;
        rep.file_bytes += sh.file_bytes;
      }
      rep.index_path = ShardSetPath(cfg.output_path);
      format::CheckOutputPath(rep.index_path, inputs);
      std::vector<std::string> finals;
      for (const ShardReport& sh : rep.shards) finals.push_back(sh.path);
      CommitShardSet(rep.index_path, manifest, written.paths, finals);
    } catch (const sam::Error& e) {
      throw BuildError(e);
    }
    written.keep = true;
    rep.write_seconds = Since(tw);
  }
  uint64_t hits = 0, misses = 0;
  for (const auto& c : caches) {
    hits += c.hits;
    misses += c.misses;
  }
  rep.cache_hit_rate = hits + misses ? static_cast<double>(hits) / (hits + misses) : 0;
  rep.total_seconds = Since(t_start);
  rep.peak_rss_bytes = PeakRssBytes();  // a sharded build reset it per shard: the largest
  for (const ShardReport& sh : rep.shards)
    rep.peak_rss_bytes = std::max(rep.peak_rss_bytes, sh.peak_rss_bytes);
  return rep;
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
