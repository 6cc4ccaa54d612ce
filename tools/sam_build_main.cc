// sam-build: corpora -> one memory-mappable static suffix automaton index.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "sam/corpora/corpora.h"
#include "sam/corpora/error.h"
#include "sam/corpora/presets.h"
#include "sam/corpora/templates.h"
#include "sam/format/error.h"
#include "sam/format/index.h"
#include "sam/format/packed.h"
#include "sam/format/writer.h"
#include "sam/indexer/pipeline.h"

namespace {

namespace fs = std::filesystem;
using sam::indexer::BuildConfig;
using sam::indexer::BuildReport;
using sam::tools::UsageError;

std::string Human(double v) {
  char buf[32];
  if (v >= 1e9) std::snprintf(buf, sizeof buf, "%.2fG", v / 1e9);
  else if (v >= 1e6) std::snprintf(buf, sizeof buf, "%.2fM", v / 1e6);
  else if (v >= 1e3) std::snprintf(buf, sizeof buf, "%.1fK", v / 1e3);
  else std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

void PrintSummary(const BuildReport& r, const std::string& path) {
  const double tokens = static_cast<double>(r.tokens);
  std::printf("wrote %s\n", path.c_str());
  std::printf("  %-26s %s\n", "corpus", "records  documents  skipped  tokens");
  for (const auto& c : r.corpora)
    std::printf("  %-26s %7llu  %9llu  %7llu  %s\n",
                (c.spec.kind + ":" + fs::path(c.spec.path).filename().string()).substr(0, 26).c_str(),
                (unsigned long long)c.records, (unsigned long long)c.documents,
                (unsigned long long)c.skipped, Human(static_cast<double>(c.tokens)).c_str());
  for (const auto& c : r.corpora)
    if (!c.skip_summary.empty())
      std::printf("  %s=%s: %s\n", c.spec.kind.c_str(), c.spec.path.c_str(),
                  c.skip_summary.c_str());
  std::printf("documents %llu, tokens %llu (separators and BOS included)\n",
              (unsigned long long)r.documents, (unsigned long long)r.tokens);
  std::printf("states %llu (%.3f/token; clones %.3f/token), transitions %llu (%.3f/token), "
              "explicit edges %llu\n",
              (unsigned long long)r.states, r.states / tokens, r.clones / tokens,
              (unsigned long long)r.transitions, r.transitions / tokens,
              (unsigned long long)r.edges);
  std::printf("file %llu bytes = %.2f bytes/token\n", (unsigned long long)r.file_bytes,
              r.file_bytes / tokens);
  for (const auto& s : r.sections)
    std::printf("  %s %-4s %12llu bytes  %6.3f B/token\n", s.tag.c_str(), s.codec.c_str(),
                (unsigned long long)s.stored_bytes, s.stored_bytes / tokens);
  if (!r.shards.empty()) {
    std::printf("shard set: %zu shards (budgets planned at %llu bytes/token from the memory "
                "left when each starts)\n",
                r.shards.size(), (unsigned long long)sam::indexer::kBuildPeakBytesPerToken);
    for (const auto& s : r.shards)
      std::printf("  %-24s documents %8llu  tokens %10llu of %10llu  %6.2f bytes/token  "
                  "%6.2f s  peak RSS %7.1f MiB\n",
                  fs::path(s.path).filename().string().c_str(), (unsigned long long)s.documents,
                  (unsigned long long)s.tokens, (unsigned long long)s.token_budget,
                  static_cast<double>(s.file_bytes) / s.tokens, s.seconds,
                  s.peak_rss_bytes / 1048576.0);
  }
  std::printf("seconds: read %.2f, tokenize %.2f, construct %.2f, write %.2f (of which "
              "accelerators %.2f), total %.2f (%.2fM tokens/s end to end)\n",
              r.read_seconds, r.tokenize_seconds, r.construct_seconds, r.write_seconds,
              r.accelerator_seconds, r.total_seconds, tokens / r.total_seconds / 1e6);
  std::printf("peak RSS %.1f MiB = %.1f bytes/token; tokenizer segment cache %s (hit rate %.1f%%)\n",
              r.peak_rss_bytes / 1048576.0, r.peak_rss_bytes / tokens,
              r.segment_cache ? "on" : "off", 100 * r.cache_hit_rate);
}

// "123", "512K", "1.5G", ... (powers of 1024) in bytes; UsageError otherwise.
uint64_t ParseSize(const std::string& flag, const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  std::string unit = text.substr(used);
  if (!unit.empty() && (unit.back() == 'B' || unit.back() == 'b')) unit.pop_back();
  double scale = 1;
  if (unit == "K" || unit == "k") scale = 1024.0;
  else if (unit == "M" || unit == "m") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "g") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "t") scale = 1024.0 * 1024 * 1024 * 1024;
  else if (!unit.empty()) used = 0;
  if (used == 0 || !(value > 0) || value * scale > 1e18)
    throw UsageError(flag + " expects a positive size such as 512M or 24G, got '" + text + "'");
  const uint64_t bytes = static_cast<uint64_t>(value * scale);
  // Below this no shard fits, whatever else the process holds.
  const uint64_t least = sam::indexer::kMinShardTokens * sam::indexer::kBuildPeakBytesPerToken;
  if (bytes < least)
    throw UsageError(flag + " " + text + " is below the smallest bound a build can keep (" +
                     std::to_string(least) + " bytes for " +
                     std::to_string(sam::indexer::kMinShardTokens) + " tokens, plus the process)");
  return bytes;
}

nlohmann::json ReportJson(const BuildReport& r, const std::string& path) {
  nlohmann::json j;
  j["output"] = path;
  j["documents"] = r.documents;
  j["tokens"] = r.tokens;
  j["states"] = r.states;
  j["clones"] = r.clones;
  j["transitions"] = r.transitions;
  j["explicit_edges"] = r.edges;
  j["file_bytes"] = r.file_bytes;
  j["bytes_per_token"] = static_cast<double>(r.file_bytes) / r.tokens;
  j["seconds"] = {{"read", r.read_seconds}, {"tokenize", r.tokenize_seconds},
                  {"construct", r.construct_seconds}, {"write", r.write_seconds},
                  {"accelerators", r.accelerator_seconds},
                  {"total", r.total_seconds}};
  j["tokens_per_second"] = r.tokens / r.total_seconds;
  j["peak_rss_bytes"] = r.peak_rss_bytes;
  j["peak_rss_bytes_per_token"] = static_cast<double>(r.peak_rss_bytes) / r.tokens;
  j["sections"] = nlohmann::json::array();
  for (const auto& s : r.sections)
    j["sections"].push_back({{"tag", s.tag}, {"codec", s.codec}, {"bytes", s.stored_bytes}});
  j["shard_token_budget"] = r.shard_token_budget;
  j["shards"] = nlohmann::json::array();
  for (const auto& s : r.shards)
    j["shards"].push_back({{"path", s.path}, {"first_document", s.first_document},
                           {"documents", s.documents}, {"tokens", s.tokens},
                           {"token_budget", s.token_budget},
                           {"states", s.states}, {"file_bytes", s.file_bytes},
                           {"seconds", s.seconds}, {"peak_rss_bytes", s.peak_rss_bytes}});
  j["corpora"] = nlohmann::json::array();
  for (const auto& c : r.corpora)
    j["corpora"].push_back({{"kind", c.spec.kind}, {"path", c.spec.path},
                            {"records", c.records}, {"documents", c.documents},
                            {"skipped", c.skipped}, {"tokens", c.tokens},
                            {"source_sha256", c.source_sha256}});
  return j;
}


std::string Help() {
  return
      "sam-build: index corpora as one compact, memory-mappable static suffix automaton.\n"
      "Documents are rendered from each corpus record, tokenized with the model's\n"
      "SentencePiece tokenizer (BOS first) and indexed with per-state first end position\n"
      "and occurrence count. The file is written atomically.\n\n"
      "Examples:\n"
      "  sam-build --tokenizer llama-32k.model --corpus alpaca=alpaca_data.json -o alpaca.sam\n"
      "  sam-build --data-dir ../shared/data --preset default -o chat.sam\n"
      "  sam-build --vocab-size 32000 --corpus ids=tokens.jsonl -o ids.sam\n"
      "  sam-build --tokenizer llama-32k.model --corpus cache=server.samc --cache-tenant team-a \\\n"
      "            -o team-a.sam   (a saved response cache's responses: a tenant index)\n"
      "  sam-build --data-dir ../shared/data --preset default --max-memory 128M -o chat.sam\n"
      "    (writes chat.sam if the build fits, else chat.0.sam, chat.1.sam, ... and chat.samset)\n"
      "  sam-build --data-dir ../shared/data --preset default --shard 2/4 -o out/chat.2.sam\n"
      "  sam-build --write-samset -o out/chat.samset out/chat.0.sam out/chat.1.sam ...\n"
      "  sam-build --upgrade old.sam   (adds the accelerator sections to a format 1.0 file)";
}

// --write-samset: joins finished shard files into a manifest.
int WriteSamset(const BuildConfig& cfg, const std::vector<std::string>& corpus_args,
                const std::string& preset, const std::vector<std::string>& shard_files) {
  if (!cfg.corpora.empty() || !corpus_args.empty() || !preset.empty())
    throw UsageError("--write-samset joins shard files; it takes no corpora");
  if (shard_files.empty()) throw UsageError("--write-samset needs the shard files");
  sam::tools::CheckOutputPath("-o", cfg.output_path, shard_files);
  sam::indexer::WriteShardSet(shard_files, cfg.output_path, cfg.tool_version);
  std::printf("wrote %s (%zu shards)\n", cfg.output_path.c_str(), shard_files.size());
  return 0;
}

// --upgrade: adds the accelerator sections to index files written without
// them, in place (atomically), without the corpora.
int Upgrade(const BuildConfig& cfg, const std::vector<std::string>& corpus_args,
            const std::string& preset, const std::vector<std::string>& files) {
  if (!cfg.corpora.empty() || !corpus_args.empty() || !preset.empty() || !cfg.output_path.empty())
    throw UsageError("--upgrade rewrites the index files given as arguments; it takes no "
                     "corpora and no -o");
  if (files.empty()) throw UsageError("--upgrade needs the index files");
  for (const std::string& path : files) {
    if (path.size() >= 7 && path.compare(path.size() - 7, 7, ".samset") == 0)
      throw UsageError(path + " is a shard set: upgrade its shard files, then join them again "
                       "with --write-samset");
    const auto t = std::chrono::steady_clock::now();
    // A shard (of --max-memory or --shard) keeps the longer child lists a
    // shard set's drafting reads, as sam-build writes them.
    sam::format::AcceleratorParams params;
    {
      const auto meta = nlohmann::json::parse(
          sam::format::IndexFile::Open(path).ReadMetadata().json, nullptr, false);
      if (meta.is_object() && (meta.contains("shard") || meta.contains("partition")))
        params.top_k = sam::format::kShardTopK;
    }
    if (cfg.child_records) params.record_min_count = sam::format::kChildRecordMinCount;
    const bool changed = sam::format::AddAcceleratorsToFile(path, params);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
    if (changed)
      std::printf("%s: added the accelerator sections%s (verified first; %.2f s)\n", path.c_str(),
                  cfg.child_records ? " and child records" : "", s);
    else
      std::printf("%s: already has the accelerator sections%s; unchanged\n", path.c_str(),
                  cfg.child_records ? " and child records" : "");
  }
  return 0;
}

// --shard I/N into cfg->shard_index and cfg->shard_count.
void ParseShardSpec(const std::string& shard_spec, const std::string& max_memory,
                    BuildConfig* cfg) {
  // Two decimal numbers around one slash.
  const auto slash = shard_spec.find('/');
  auto number = [](const std::string& digits, uint64_t* out) {
    if (digits.empty() || digits.size() > 18 ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      return false;
    *out = std::stoull(digits);
    return true;
  };
  if (slash == std::string::npos || !number(shard_spec.substr(0, slash), &cfg->shard_index) ||
      !number(shard_spec.substr(slash + 1), &cfg->shard_count))
    throw UsageError("--shard expects I/N (e.g. 3/16), got '" + shard_spec + "'");
  if (cfg->shard_count == 0 || cfg->shard_index >= cfg->shard_count)
    throw UsageError("--shard " + shard_spec + ": need 0 <= I < N");
  if (!max_memory.empty()) throw UsageError("--shard and --max-memory cannot be combined");
}

// The corpora of --corpus (relative paths also looked up in --data-dir) and --preset; the
// tokenizer of --data-dir when one is needed.
void AddCorpora(const std::vector<std::string>& corpus_args, const std::string& data_dir,
                const std::string& preset, bool quiet, BuildConfig* cfg) {
  for (const auto& arg : corpus_args) {
    const auto eq = arg.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == arg.size())
      throw UsageError("--corpus expects KIND=PATH, got '" + arg + "'");
    std::string path = arg.substr(eq + 1);
    if (!data_dir.empty() && fs::path(path).is_relative() && !fs::exists(path))
      path = (fs::path(data_dir) / path).string();
    cfg->corpora.push_back({arg.substr(0, eq), path});
  }
  if (!preset.empty()) {
    if (data_dir.empty()) throw UsageError("--preset needs --data-dir");
    sam::corpora::ResolvedPreset resolved;
    try {
      resolved = sam::corpora::ResolvePreset(preset, data_dir);
    } catch (const sam::Error& e) {
      if (e.code() == sam::ErrorCode::kInvalidArgument) throw UsageError(e.what());
      throw;
    }
    for (const auto& note : resolved.notes) std::cerr << "sam-build: note: " << note << "\n";
    for (const auto& c : resolved.corpora)
      cfg->corpora.push_back({std::string(sam::corpora::KindName(c.kind)), c.path});
  }
  for (const auto& c : cfg->corpora)  // a named FIFO (not a pipe such as /dev/fd/N) may wait
    if (std::error_code ec; !quiet && fs::is_fifo(fs::symlink_status(c.path, ec)))
      std::cerr << "sam-build: note: " << c.path << " is a FIFO: waiting for its writer\n";
  if (cfg->tokenizer_path.empty() && !data_dir.empty()) {
    bool all_ids = true;
    for (const auto& c : cfg->corpora) all_ids = all_ids && c.kind == "ids";
    if (!all_ids || cfg->vocab_size == 0)
      cfg->tokenizer_path = (fs::path(data_dir) / "tokenizer/llama-32k.model").string();
  }
}

// Usage errors before any work: names of kinds and templates, the output paths.
void CheckBeforeWork(const BuildConfig& cfg) {
  if (cfg.corpora.empty()) throw UsageError("no corpus given (use --corpus KIND=PATH or --preset)");
  if (!cfg.cache_tenant.empty() &&
      std::none_of(cfg.corpora.begin(), cfg.corpora.end(),
                   [](const auto& c) { return c.kind == sam::indexer::kCacheKind; }))
    throw UsageError("--cache-tenant needs a `cache` corpus (--corpus cache=FILE)");
  std::vector<std::string> inputs;
  for (const auto& c : cfg.corpora) {
    try {
      sam::indexer::CheckCorpusKind(c.kind);  // the sam::corpora kinds, "ids" and "cache"
    } catch (const sam::Error& e) {
      throw UsageError(std::string("--corpus: ") + e.what());
    }
    inputs.push_back(c.path);
  }
  try {
    sam::corpora::ParseTemplate(cfg.template_name);
  } catch (const sam::corpora::CorpusError& e) {
    throw UsageError(std::string("--template: ") + e.what());
  }
  if (cfg.text_split != "file" && cfg.text_split != "blank-line")
    throw UsageError("--text-split must be 'file' or 'blank-line', got '" + cfg.text_split + "'");
  if (!cfg.tokenizer_path.empty()) inputs.push_back(cfg.tokenizer_path);
  // -o and, with --max-memory, the manifest and shard files derived from it.
  for (const std::string& out : sam::indexer::BuildOutputPaths(cfg))
    sam::tools::CheckOutputPath(out == cfg.output_path ? "-o" : "-o " + cfg.output_path + ": output",
                                out, inputs);
}

// Progress lines on stderr: rewritten in place on a terminal (every 200 ms), else one line every
// 2 s; each stage's last line always.
class ProgressPrinter {
 public:
  explicit ProgressPrinter(bool quiet) : quiet_(quiet) {}

  void Print(const sam::indexer::Progress& p) {
    if (quiet_) return;
    const auto now = std::chrono::steady_clock::now();
    const bool final_line = p.stage == "write" || (p.total && p.done == p.total);
    if (!final_line && now - last_ < std::chrono::milliseconds(tty_ ? 200 : 2000)) return;
    last_ = now;
    const double secs = std::chrono::duration<double>(now - start_).count();
    const double rate = secs > 0 ? p.tokens / secs : 0;
    if (p.corpus_index != corpus_seen_) {
      corpus_seen_ = p.corpus_index;
      corpus_start_ = now;
    }
    std::string eta;
    const double in_corpus = std::chrono::duration<double>(now - corpus_start_).count();
    if (p.stage == "construct" && p.total && p.done && p.done < p.total) {
      char buf[48];
      std::snprintf(buf, sizeof buf, ", ETA %.0fs for this corpus",
                    in_corpus * static_cast<double>(p.total - p.done) / p.done);
      eta = buf;
    }
    std::fprintf(stderr, "%ssam-build: [%s %zu/%zu] %s: %s/%s docs, %s tokens, %s tokens/s%s%s",
                 tty_ ? "\r\033[K" : "", p.stage.c_str(),
                 std::min(p.corpus_index + 1, p.corpus_count), p.corpus_count,
                 fs::path(p.detail).filename().string().c_str(),
                 Human(static_cast<double>(p.done)).c_str(),
                 Human(static_cast<double>(p.total)).c_str(),
                 Human(static_cast<double>(p.tokens)).c_str(), Human(rate).c_str(), eta.c_str(),
                 tty_ ? "" : "\n");
    if (tty_ && final_line) std::fputc('\n', stderr);
  }

 private:
  const bool quiet_;
  const bool tty_ = isatty(2);
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_ = start_ - std::chrono::seconds(10);
  std::chrono::steady_clock::time_point corpus_start_ = start_;
  size_t corpus_seen_ = 0;
};

// Corpora that gave no documents; a peak RSS above --max-memory.
void WarnAfterBuild(const BuildReport& r, const BuildConfig& cfg) {
  for (const auto& c : r.corpora)
    if (c.documents == 0)
      std::cerr << "sam-build: warning: " << c.spec.kind << "=" << c.spec.path
                << " gave no documents (" << c.records << " records"
                << (c.skip_summary.empty() ? "" : "; " + c.skip_summary) << ")\n";
  // Child records need 32-bit states and slots: a larger index is written
  // without them, which drafts the same, only more slowly.
  if (cfg.child_records) {
    std::vector<std::string> files;
    if (r.shards.empty()) files.push_back(r.index_path);
    for (const auto& s : r.shards) files.push_back(s.path);
    for (const std::string& f : files)
      if (!sam::format::IndexFile::Open(f).view().child_records().present())
        std::fprintf(stderr,
                     "sam-build: warning: %s is too large for child records (2^32 states, "
                     "tokens or record slots or more); written without them (the same drafts, "
                     "costlier sam-cal steps)\n", f.c_str());
  }
  // The plan is an estimate (bytes a token, the process's memory at each
  // shard's start): say so when the measured peak went past the bound.
  if (cfg.max_memory_bytes && r.peak_rss_bytes > cfg.max_memory_bytes)
    std::fprintf(stderr,
                 "sam-build: warning: the peak RSS, %.1f MiB, exceeded --max-memory %.1f MiB "
                 "(the shards' plan is an estimate; give a larger bound to stay within it)\n",
                 r.peak_rss_bytes / 1048576.0, cfg.max_memory_bytes / 1048576.0);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{Help(), "sam-build"};
  sam::tools::SetUpTool("sam-build");
  BuildConfig cfg;
  std::vector<std::string> corpus_args;
  std::string data_dir, preset;
  bool json = false, quiet = false, no_bos = false;
  app.add_option("--tokenizer", cfg.tokenizer_path,
                 "SentencePiece model of the target model (default with --data-dir: "
                 "DATA/tokenizer/llama-32k.model)");
  std::string kinds;
  for (const auto& k : sam::indexer::CorpusKindNames()) kinds += (kinds.empty() ? "" : ", ") + k;
  app.add_option("--corpus", corpus_args,
                 "KIND=PATH, repeatable. KIND: " + kinds +
                     ". PATH may be a pipe or FIFO (read once into memory), except for `cache`: a "
                     "response cache file (ResponseCache::Save, sam_cache_save), whose responses "
                     "of one tenant are indexed as they were cached (no BOS)");
  app.add_option("--cache-tenant", cfg.cache_tenant,
                 "`cache` corpora: the tenant whose responses are indexed (default: the file's "
                 "only tenant; a file with several needs it)");
  app.add_option("--data-dir", data_dir,
                 "data folder (corpora/README.md layout); env SAM_DATA_DIR. Relative corpus "
                 "paths are looked up there too")
      ->envname("SAM_DATA_DIR");
  app.add_option("--preset", preset,
                 "corpus set from --data-dir: 'default' (alpaca/alpaca_data.json, "
                 "code_alpaca/*.json, gsm8k/train.jsonl; python18k/train.jsonl and "
                 "hagrid/train.jsonl if present, with a note when absent) or 'gsm8k'");
  app.add_option("--template", cfg.template_name, "document template: raw or vicuna")
      ->capture_default_str();
  app.add_option("--text-field", cfg.text_field, "string field of `jsonl` records")
      ->capture_default_str();
  app.add_option("--text-split", cfg.text_split,
                 "`text` corpora: 'file' (one document per file) or 'blank-line'")
      ->capture_default_str();
  app.add_flag("--skip-bad", cfg.skip_bad,
               "skip (and count) malformed records instead of failing (default: fail)");
  app.add_flag("--no-bos", no_bos, "do not put BOS before each tokenized document (default: BOS)");
  app.add_option("--vocab-size", cfg.vocab_size,
                 "vocabulary size for `ids` corpora built without --tokenizer (default: the "
                 "tokenizer's)");
  app.add_option("--threads", cfg.threads, "tokenizer threads (0 = all cores)")
      ->capture_default_str();
  app.add_option("-o,--output", cfg.output_path,
                 "output index file (required, except with --upgrade; a new or regular file, "
                 "not an input)");
  app.add_flag("--json", json, "print the build report as one JSON object on stdout (default: "
               "a table)");
  app.add_flag("-q,--quiet", quiet, "no progress on stderr (default: progress)");
  std::string max_memory;
  app.add_option("--max-memory", max_memory,
                 "bound the build's memory (SIZE: bytes, or with K, M, G, T; powers of 1024). "
                 "Corpora that need more (planned at 56 bytes/token) are split at document "
                 "boundaries into shards OUT.0.sam, OUT.1.sam, ... listed in the manifest "
                 "OUT.samset; a build that fits writes one index as usual (default: no bound)");
  std::string shard_spec;
  app.add_option("--shard", shard_spec,
                 "I/N: build only shard I (0-based) of the partition of the documents into N: "
                 "document g (0-based, every document read, corpora in the order given) belongs "
                 "to shard g mod N; depends only on the inputs and N (one task of a distributed "
                 "build, tools/slurm/; join the N files with --write-samset)");
  bool write_samset = false;
  std::vector<std::string> shard_files;
  app.add_flag("--write-samset", write_samset,
               "join finished --shard files (given as arguments, in the folder of -o) into the "
               "shard set manifest -o NAME.samset, after deep checks of every file");
  bool upgrade = false;
  app.add_flag("--upgrade", upgrade,
               "add the drafting accelerators (hub tables, edge filter, clone labels) to index "
               "files written without them (format 1.0, or by an earlier sam-build), in "
               "place and atomically, after a deep check; the files are given as arguments, no "
               "corpora needed");
  app.add_option("shard_files", shard_files,
                 "with --write-samset: the shard index files; with --upgrade: the index files");
  bool wide_ids = false;
  unsigned min_width = 0;
  app.add_flag("--wide-ids", wide_ids,
               "testing: build with 64-bit state ids from the start (default: 32-bit ids, "
               "widened automatically before a corpus reaches 2^31 tokens); same index");
  app.add_flag("--child-records", cfg.child_records,
               "also store child records (every repeated string's heaviest continuations in one "
               "place): `sam-cal` drafting steps about half as costly, the same drafts, for "
               "a file about 2.4 times as large; every process maps them, none computes them. "
               "With --upgrade: adds them to files that lack them");
  bool no_accelerators = false;
  app.add_flag("--no-accelerators", no_accelerators,
               "testing: leave out the accelerator sections (hub tables, edge filter, clone "
               "labels), as "
               "format 1.0 files do; every process then computes them at open (default: "
               "written)");
  app.add_option("--min-width", min_width,
                 "testing: at least this many bits for the state, position, clone length and "
                 "count widths, to exercise the readers' wide paths on a small corpus "
                 "(default 0: widths from the data; at most 57)");
  if (const auto status = sam::tools::ParseCommandLine(app, argc, argv)) return *status;
  cfg.add_bos = !no_bos;
  cfg.tool_version = "sam-build " SAM_VERSION;
  return sam::tools::RunTool("sam-build", [&] {
    if (min_width > sam::format::kMaxPackedWidth)
      throw UsageError("--min-width " + std::to_string(min_width) + " is above " +
                       std::to_string(sam::format::kMaxPackedWidth));
    if (write_samset && upgrade) throw UsageError("--write-samset and --upgrade exclude each other");
    if (!upgrade && cfg.output_path.empty()) throw UsageError("--output is required");
    if (write_samset) return WriteSamset(cfg, corpus_args, preset, shard_files);
    if (upgrade) return Upgrade(cfg, corpus_args, preset, shard_files);
    if (!shard_files.empty())
      throw UsageError("index files as arguments need --write-samset or --upgrade");
    if (!shard_spec.empty()) ParseShardSpec(shard_spec, max_memory, &cfg);
    if (!max_memory.empty()) cfg.max_memory_bytes = ParseSize("--max-memory", max_memory);
    if (wide_ids) cfg.builder_options.ids = sam::automaton::BuilderOptions::Ids::kWide;
    cfg.builder_options.min_width = min_width;
    cfg.accelerators = !no_accelerators;
    if (cfg.child_records && no_accelerators)
      throw UsageError("--child-records needs the accelerator sections; drop --no-accelerators");
    if (cfg.threads > 1024)
      throw UsageError("--threads " + std::to_string(cfg.threads) + " is absurd (at most 1024)");
    AddCorpora(corpus_args, data_dir, preset, quiet, &cfg);
    CheckBeforeWork(cfg);
    ProgressPrinter printer(quiet);
    const BuildReport r = sam::indexer::BuildIndex(
        cfg, [&](const sam::indexer::Progress& p) { printer.Print(p); });
    WarnAfterBuild(r, cfg);
    if (json) std::cout << ReportJson(r, r.index_path).dump(2) << "\n";
    else PrintSummary(r, r.index_path);
    return 0;
  });
}
