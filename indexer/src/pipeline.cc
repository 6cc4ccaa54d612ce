#include "sam/indexer/pipeline.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>

#include "sam/corpora/corpora.h"
#include "sam/corpora/error.h"
#include "sam/format/sha256.h"
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

// The builder's error `e` placed in document `document` (0-based, in reading order) of the corpus
// file `path`: the builder numbers documents across all corpora and knows no file.
BuildError InCorpusDocument(const sam::Error& e, const std::string& path, uint64_t document) {
  ErrorContext context = e.context();
  context.file = path;
  context.record = "document " + std::to_string(document);
  return BuildError(e.code(), std::move(context), e.problem());
}

}  // namespace

uint64_t PeakRssBytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
  return 0;
}

BuildReport BuildIndex(const BuildConfig& cfg, const ProgressFn& progress) {
  const auto t_start = Clock::now();
  auto report_progress = [&](const Progress& p) {
    if (progress) progress(p);
  };
  if (cfg.output_path.empty()) throw BuildError("no output file given");
  if (cfg.corpora.empty()) throw BuildError("no corpus given (use --corpus KIND=PATH)");
  bool all_ids = true;
  for (const auto& c : cfg.corpora) all_ids = all_ids && c.kind == "ids";
  for (const auto& c : cfg.corpora)
    if (c.kind != "ids") corpora::ParseKind(c.kind);  // validates the name early

  std::optional<Tokenizer> tok;
  uint32_t vocab = cfg.vocab_size;
  if (!cfg.tokenizer_path.empty()) {
    try {
      tok = Tokenizer::Load(cfg.tokenizer_path);
    } catch (const TokenizerError& e) {
      throw BuildError(e);
    }
    if (vocab != 0 && vocab != tok->vocab_size())
      throw BuildError("--vocab-size " + std::to_string(vocab) + " differs from the tokenizer's " +
                       std::to_string(tok->vocab_size()) + " (" + cfg.tokenizer_path + ")");
    vocab = tok->vocab_size();
  } else if (!all_ids) {
    throw BuildError("text corpora need --tokenizer MODEL (only `ids` corpora can be indexed "
                     "without one)");
  } else if (vocab == 0) {
    throw BuildError("pre-tokenized (ids) corpora without --tokenizer need --vocab-size");
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
  uint64_t input_bytes = 0;
  for (const auto& spec : cfg.corpora) {
    std::error_code ec;
    if (std::filesystem::is_directory(spec.path, ec)) {
      for (const auto& e : std::filesystem::recursive_directory_iterator(spec.path, ec))
        if (e.is_regular_file()) input_bytes += e.file_size();
    } else {
      input_bytes += std::filesystem::file_size(spec.path, ec);
    }
  }
  const uint64_t reserve_tokens = std::min<uint64_t>(input_bytes / 3 + 1024, uint64_t{1} << 30);

  for (size_t ci = 0; ci < cfg.corpora.size(); ++ci) {
    const CorpusSpec& spec = cfg.corpora[ci];
    CorpusReport cr;
    cr.spec = spec;
    try {
      cr.source_sha256 = SourceHash(spec.path);
    } catch (const sam::Error& e) {
      throw BuildError(e);
    }
    // Read all documents of this corpus.
    auto t = Clock::now();
    std::vector<std::string> texts;
    std::vector<std::vector<uint32_t>> ids;
    corpora::ReadStats rs;
    try {
      if (spec.kind == "ids") {
        rs = corpora::ReadIdDocuments(spec.path, vocab, cfg.skip_bad,
                                      [&](std::vector<uint32_t>&& d) { ids.push_back(std::move(d)); });
      } else {
        rs = corpora::ReadCorpus(corpora::ParseKind(spec.kind), spec.path, ropts,
                                 [&](std::string&& d) { texts.push_back(std::move(d)); });
      }
    } catch (const corpora::CorpusError& e) {
      throw BuildError(e);
    }
    cr.records = rs.records;
    cr.skipped = rs.skipped;
    cr.skip_examples = rs.skip_examples;
    rep.read_seconds += Since(t);
    report_progress({"read", spec.path, rs.documents, rs.documents, tokens_added, ci,
                     cfg.corpora.size()});

    // Tokenize in parallel (chunks handed out by an atomic counter), and feed
    // the builder in document order as chunks complete.
    t = Clock::now();
    if (spec.kind != "ids") {
      ids.assign(texts.size(), {});
      constexpr size_t kChunk = 256;
      const size_t nchunks = (texts.size() + kChunk - 1) / kChunk;
      std::atomic<size_t> next{0};
      std::vector<std::atomic<bool>> done(nchunks);
      std::mutex mu;
      std::condition_variable cv;
      std::string worker_error;
      auto work = [&](unsigned w) {
        for (;;) {
          const size_t c = next.fetch_add(1);
          if (c >= nchunks) return;
          try {
            for (size_t d = c * kChunk; d < std::min(texts.size(), (c + 1) * kChunk); ++d) {
              auto& out = ids[d];
              if (bos != format::kNoToken) out.push_back(bos);
              tok->Encode(texts[d], &out, &caches[w]);
              std::string().swap(texts[d]);
            }
          } catch (const std::exception& e) {
            std::lock_guard<std::mutex> lock(mu);
            if (worker_error.empty()) worker_error = spec.path + ": " + e.what();
          }
          {
            std::lock_guard<std::mutex> lock(mu);
            done[c].store(true);
          }
          cv.notify_all();
        }
      };
      std::vector<std::thread> pool;
      for (unsigned w = 0; w < threads; ++w) pool.emplace_back(work, w);
      // Construction overlaps tokenization: the main thread builds chunk c
      // as soon as it is tokenized.
      double waited = 0;
      for (size_t c = 0; c < nchunks; ++c) {
        {
          auto tw = Clock::now();
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return done[c].load() || !worker_error.empty(); });
          waited += Since(tw);
          if (!worker_error.empty()) break;
        }
        if (!builder) builder = std::make_unique<SuffixAutomatonBuilder>(vocab, reserve_tokens);
        for (size_t d = c * kChunk; d < std::min(texts.size(), (c + 1) * kChunk); ++d) {
          if (ids[d].size() > (bos != format::kNoToken ? 1u : 0u)) {
            builder->AddDocument(ids[d]);
            ++cr.documents;
            cr.tokens += ids[d].size() + 1;
          }
          std::vector<uint32_t>().swap(ids[d]);
        }
        tokens_added = builder->num_tokens();
        report_progress({"construct", spec.path, std::min(texts.size(), (c + 1) * kChunk),
                         texts.size(), tokens_added, ci, cfg.corpora.size()});
      }
      for (auto& th : pool) th.join();
      if (!worker_error.empty()) throw BuildError(worker_error);
      const double total = Since(t);
      // Time the main thread spent waiting is tokenization; the rest is construction.
      rep.tokenize_seconds += waited;
      rep.construct_seconds += total - waited;
    } else {
      if (!builder) builder = std::make_unique<SuffixAutomatonBuilder>(vocab, reserve_tokens);
      for (size_t d = 0; d < ids.size(); ++d) {
        if (!ids[d].empty()) {
          try {
            builder->AddDocument(ids[d]);
          } catch (const sam::Error& e) {
            throw InCorpusDocument(e, spec.path, d);
          }
          ++cr.documents;
          cr.tokens += ids[d].size() + 1;
        }
        std::vector<uint32_t>().swap(ids[d]);
      }
      rep.construct_seconds += Since(t);
      tokens_added = builder->num_tokens();
      report_progress({"construct", spec.path, ids.size(), ids.size(), tokens_added, ci,
                       cfg.corpora.size()});
    }
    rep.documents += cr.documents;
    rep.tokens += cr.tokens;
    rep.corpora.push_back(std::move(cr));
  }
  if (!builder || builder->num_documents() == 0)
    throw BuildError("the corpora contain no documents; nothing to index");

  // Metadata.
  nlohmann::json meta;
  meta["tool_version"] = cfg.tool_version;
  meta["created_utc"] = UtcNow();
  meta["tokenizer"] = tok ? std::filesystem::path(tok->path()).filename().string() : "";
  meta["template"] = cfg.template_name;
  meta["corpora"] = nlohmann::json::array();
  for (const auto& c : rep.corpora)
    meta["corpora"].push_back({{"name", std::filesystem::path(c.spec.path).filename().string()},
                               {"kind", c.spec.kind},
                               {"source", c.spec.path},
                               {"source_sha256", c.source_sha256},
                               {"records", c.records},
                               {"documents", c.documents},
                               {"skipped", c.skipped},
                               {"tokens", c.tokens}});
  meta["build_options"] = {{"template", cfg.template_name},   {"text_field", cfg.text_field},
                           {"text_split", cfg.text_split},    {"skip_bad", cfg.skip_bad},
                           {"add_bos", cfg.add_bos && tok.has_value()},
                           {"separator", "vocab_size"},       {"threads", threads},
                           {"segment_cache", rep.segment_cache}};
  IndexInfo info;
  if (tok) {
    info.tokenizer_sha256 = tok->sha256();
    info.bos_id = tok->bos_id();
    info.eos_id = tok->eos_id();
    info.vocabulary = tok->Pieces();
  }
  info.metadata_json = meta.dump();

  report_progress({"write", cfg.output_path, 0, 0, tokens_added, cfg.corpora.size(),
                   cfg.corpora.size()});
  WriteReport w;
  try {
    rep.states = builder->num_states();
    rep.clones = builder->num_clones();
    w = builder->Write(cfg.output_path, info);
  } catch (const format::FormatError& e) {
    throw BuildError(e);
  }
  builder.reset();
  rep.write_seconds = w.freeze_seconds + w.write_seconds;
  rep.transitions = w.transitions;
  rep.edges = w.explicit_edges;
  rep.file_bytes = w.file_bytes;
  rep.sections = w.sections;
  uint64_t hits = 0, misses = 0;
  for (const auto& c : caches) {
    hits += c.hits;
    misses += c.misses;
  }
  rep.cache_hit_rate = hits + misses ? static_cast<double>(hits) / (hits + misses) : 0;
  rep.total_seconds = Since(t_start);
  rep.peak_rss_bytes = PeakRssBytes();
  return rep;
}

}  // namespace sam::indexer
