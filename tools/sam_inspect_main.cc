// sam-inspect: what is in an index file (header, manifest, sections, stats),
// and --verify to check every checksum, value and self-test sample.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "sam/format/error.h"
#include "sam/format/index.h"
#include "sam/format/response_cache_file.h"
#include "sam/format/sha256.h"
#include "sam/format/shard_set.h"

namespace {

using sam::format::IndexFile;

std::string Id(uint32_t id) { return id == sam::format::kNoToken ? "none" : std::to_string(id); }

double MsSince(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// The accelerator sections' line of the text report.
void PrintAccelerators(const sam::format::IndexView& view, bool clone_labels,
                       const std::string& path) {
  const sam::format::HubTables& hubs = view.hubs();
  if (!hubs.present()) {
    std::printf("accelerators: none (computed by every process at open; sam-build --upgrade "
                "%s adds them)\n", path.c_str());
    return;
  }
  std::string filter;
  if (view.edge_filter().present())
    filter = ", edge filter " + std::to_string(view.edge_filter().bits_per_edge) +
             " bits per transition";
  std::printf("accelerators: %llu hubs (states with >= %u transitions, top %u children each)%s%s\n",
              (unsigned long long)hubs.num_hubs, hubs.min_degree, hubs.top_k, filter.c_str(),
              clone_labels ? ", clone labels" : "");
  if (!clone_labels)
    std::printf("clone labels: none (sam-build --upgrade %s adds them: cheaper transition "
                "lookups, the same drafts)\n", path.c_str());
  const sam::format::ChildRecords& records = view.child_records();
  if (records.present())
    std::printf("child records: %llu slots, top %u children of every repeated string "
                "occurring >= %u times (%.2f bytes/token)\n",
                (unsigned long long)records.num_slots, records.top_k, records.min_count,
                view.num_tokens() == 0 ? 0.0 : double(records.bytes) / double(view.num_tokens()));
  else
    std::printf("child records: none (sam-build --upgrade --child-records %s adds them: "
                "cheaper sam-cal steps, a larger file)\n", path.c_str());
}

// A response cache file (ResponseCache::Save): read and checked whole (the
// blob's checksum, the payload), then its tokenizer and, per tenant, the
// responses and tokens. --verify changes nothing: reading it is the check.
int InspectResponseCache(const std::string& path, bool json) {
  const auto t0 = std::chrono::steady_clock::now();
  const sam::format::ResponseCacheFile file = sam::format::ReadResponseCacheFile(path);
  const double ms = MsSince(t0);
  struct Tenant {
    uint64_t responses = 0, tokens = 0;
  };
  std::map<std::string, Tenant> tenants;
  uint64_t tokens = 0;
  uint32_t max_id = 0;  // shown: a cache holding ids of another vocabulary stands out
  for (const auto& r : file.responses) {
    for (uint32_t id : r.tokens) max_id = std::max(max_id, id);
    Tenant& t = tenants[r.tenant];
    ++t.responses;
    t.tokens += r.tokens.size();
    tokens += r.tokens.size();
  }
  const bool has_tokenizer = file.tokenizer_sha256 != sam::format::Sha256Digest{};
  const std::string tokenizer =
      has_tokenizer ? sam::format::DigestToHex(file.tokenizer_sha256) : "";
  if (json) {
    nlohmann::json j;
    j["file"] = path;
    j["kind"] = "response cache";
    j["tokenizer_sha256"] = tokenizer;
    j["responses"] = file.responses.size();
    j["tokens"] = tokens;
    j["max_id"] = max_id;
    j["read_ms"] = ms;
    j["tenants"] = nlohmann::json::array();
    for (const auto& [key, t] : tenants)
      j["tenants"].push_back({{"tenant", key}, {"responses", t.responses}, {"tokens", t.tokens}});
    // A tenant key is bytes: one that is not UTF-8 is shown with U+FFFD, not refused.
    std::cout << j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return 0;
  }
  std::printf("file:       %s (response cache, read and checked in %.1f ms)\n", path.c_str(), ms);
  std::printf("tokenizer:  %s\n", has_tokenizer ? tokenizer.c_str() : "none (raw ids)");
  std::printf("responses:  %zu, %llu tokens, %zu tenant%s\n", file.responses.size(),
              static_cast<unsigned long long>(tokens), tenants.size(),
              tenants.size() == 1 ? "" : "s");
  std::printf("largest id: %u (sessions of a smaller vocabulary refuse this cache)\n", max_id);
  for (const auto& [key, t] : tenants)
    std::printf("  tenant '%s': %llu responses, %llu tokens\n", key.c_str(),
                static_cast<unsigned long long>(t.responses),
                static_cast<unsigned long long>(t.tokens));
  return 0;
}

// A shard set: the manifest, then one line per shard; --verify checks every
// shard's SHA-256 and runs the deep checks of each.
int InspectShardSet(const std::string& path, bool json, bool verify) {
  const auto t0 = std::chrono::steady_clock::now();
  sam::format::OpenOptions options;
  options.verify = verify;
  const sam::format::ShardSet set = sam::format::ShardSet::Open(path, options);
  const double ms = MsSince(t0);
  const auto& m = set.manifest();
  uint64_t bytes = 0, states = 0;
  for (const auto& s : m.shards) bytes += s.bytes, states += s.states;
  const double tokens = static_cast<double>(set.num_tokens());
  const bool has_tokenizer = m.tokenizer_sha256 != sam::format::Sha256Digest{};
  if (json) {
    nlohmann::json j;
    j["file"] = path;
    j["kind"] = "shard set";
    j["shard_set_version"] = sam::format::kShardSetVersion;
    j["documents"] = set.num_documents();
    j["tokens"] = set.num_tokens();
    j["states"] = states;
    j["vocab_size"] = m.vocab_size;
    j["tokenizer_sha256"] = has_tokenizer ? sam::format::DigestToHex(m.tokenizer_sha256) : "";
    j["file_bytes"] = bytes;
    j["bytes_per_token"] = bytes / tokens;
    j[verify ? "verify_ms" : "open_ms"] = ms;
    if (verify) j["verified"] = true;
    j["build"] = nlohmann::json::parse(m.build_json);
    j["shards"] = nlohmann::json::array();
    for (size_t k = 0; k < m.shards.size(); ++k) {
      const auto& s = m.shards[k];
      const auto& h = set.shards()[k].header();
      j["shards"].push_back({{"file", s.file}, {"bytes", s.bytes},
                             {"sha256", sam::format::DigestToHex(s.sha256)},
                             {"documents", s.documents}, {"tokens", s.tokens}, {"states", s.states},
                             {"state_width", h.state_width}});
    }
    std::cout << j.dump(2) << "\n";
    return 0;
  }
  std::printf("%s: SAM shard set, version %u, %zu shards, %llu bytes (%.2f bytes/token), "
              "opened in %.3f ms\n",
              path.c_str(), sam::format::kShardSetVersion, m.shards.size(),
              (unsigned long long)bytes, bytes / tokens, ms);
  std::printf("tokenizer sha256 %s, vocab %u\n",
              has_tokenizer ? sam::format::DigestToHex(m.tokenizer_sha256).c_str() : "-",
              m.vocab_size);
  std::printf("documents %llu, tokens %llu, states %llu (%.3f/token)\n",
              (unsigned long long)set.num_documents(), (unsigned long long)set.num_tokens(),
              (unsigned long long)states, states / tokens);
  std::printf("shards:\n");
  for (size_t k = 0; k < m.shards.size(); ++k) {
    const auto& s = m.shards[k];
    std::printf("  %3zu %-28s documents %9llu  tokens %11llu  states %11llu  %6.2f B/token  "
                "sha256 %.12s...\n",
                k, s.file.c_str(), (unsigned long long)s.documents, (unsigned long long)s.tokens,
                (unsigned long long)s.states, static_cast<double>(s.bytes) / s.tokens,
                sam::format::DigestToHex(s.sha256).c_str());
  }
  if (verify)
    std::printf("verify: OK (manifest checksum; every shard's SHA-256, checksums, structure, "
                "self-test samples) in %.0f ms\n", ms);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "sam-inspect: show the header, corpus manifest, sections and statistics of a SAM\n"
      "index file, or of every shard of a shard set (NAME.samset, written by\n"
      "sam-build --max-memory). Opening checks the header, the section table and a few values of\n"
      "each section (O(1)); --verify also checks every checksum, every structural\n"
      "invariant (format/FORMAT.md section 6) and the self-test samples.\n"
      "A saved response cache (ResponseCache::Save, sam-replay --save-cache) is read and\n"
      "checked whole, and its tenants are listed.\n"
      "Exit status: 0 valid, 1 invalid or unreadable file, 2 usage error.\n\n"
      "Examples:\n"
      "  sam-inspect chat.sam\n"
      "  sam-inspect --verify --top 20 chat.sam\n"
      "  sam-inspect --json chat.sam\n"
      "  sam-inspect --verify chat.samset   (the manifest and every shard)\n"
      "  sam-inspect --json server.samc     (a response cache: tenants, responses, tokens)",
      "sam-inspect"};
  std::string path;
  bool json = false, verify = false;
  int top = 0;
  app.add_option("file", path,
                 "index file (.sam), shard set manifest (.samset) or response cache file")
      ->required();
  app.add_flag("--json", json, "print one JSON object (default: text)");
  app.add_flag("--verify", verify,
               "deep check: checksums, structure, self-test samples (default: open checks only)");
  app.add_option("--top", top, "also list the N most frequent tokens (needs VOCB)")
      ->check(CLI::Range(0, 1000))
      ->capture_default_str();
  if (const auto status = sam::tools::ParseCommandLine(app, argc, argv)) return *status;
  return sam::tools::RunTool("sam-inspect", [&] {
    if (sam::format::LooksLikeShardSet(path)) return InspectShardSet(path, json, verify);
    if (sam::format::LooksLikeResponseCache(path)) return InspectResponseCache(path, json);
    const auto t0 = std::chrono::steady_clock::now();
    IndexFile f = IndexFile::Open(path);
    const double open_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    double verify_ms = 0;
    if (verify) {
      const auto t1 = std::chrono::steady_clock::now();
      f.Verify();
      verify_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t1)
                      .count();
    }
    const auto& h = f.header();
    const auto meta = f.ReadMetadata();
    const auto& v = f.view();
    uint64_t root_edges = 0;
    for (uint32_t c = 0; c < h.vocab_size; ++c) root_edges += v.root_table().Get(c) != 0;
    // Implicit transitions i -> i+1 (1 <= i < N) whose target is not a document
    // end: every separator sits at a position >= 2, so N - 1 - documents.
    const uint64_t implicit = h.num_tokens - 1 - h.num_documents;
    const uint64_t transitions = root_edges + implicit + h.num_edges;
    const double tokens = static_cast<double>(h.num_tokens);
    const bool has_clone_labels = f.HasSection("CLAB");
    std::vector<std::pair<uint64_t, uint32_t>> frequent;
    std::vector<std::string> vocab;
    if (top > 0) {
      vocab = f.ReadVocabulary();
      for (uint32_t c = 0; c < h.vocab_size; ++c) {
        const uint64_t s = v.Next(sam::format::kRoot, c);
        if (s != sam::format::kNoState) frequent.push_back({v.Count(s), c});
      }
      std::sort(frequent.rbegin(), frequent.rend());
      if (frequent.size() > static_cast<size_t>(top)) frequent.resize(top);
    }
    if (json) {
      nlohmann::json j;
      j["file"] = path;
      j["format_version"] = std::to_string(h.major_version) + "." + std::to_string(h.minor_version);
      j["documents"] = h.num_documents;
      j["tokens"] = h.num_tokens;
      j["states"] = h.num_states;
      j["clones"] = h.num_clones;
      j["transitions"] = transitions;
      j["explicit_edges"] = h.num_edges;
      j["vocab_size"] = h.vocab_size;
      j["bos_id"] = h.bos_id == sam::format::kNoToken ? nlohmann::json() : nlohmann::json(h.bos_id);
      j["eos_id"] = h.eos_id == sam::format::kNoToken ? nlohmann::json() : nlohmann::json(h.eos_id);
      j["tokenizer_sha256"] = h.has_tokenizer() ? sam::format::DigestToHex(h.tokenizer_sha256) : "";
      j["file_bytes"] = h.file_size;
      j["bytes_per_token"] = h.file_size / tokens;
      j["open_ms"] = open_ms;
      const sam::format::HubTables& hubs = f.view().hubs();
      j["clone_labels"] = has_clone_labels;
      j["accelerators"] = hubs.present()
          ? nlohmann::json{{"hubs", hubs.num_hubs}, {"min_degree", hubs.min_degree},
                           {"top_k", hubs.top_k},
                           {"filter_bits_per_edge", f.view().edge_filter().present()
                                                        ? f.view().edge_filter().bits_per_edge
                                                        : 0}}
          : nlohmann::json(nullptr);
      const sam::format::ChildRecords& records = f.view().child_records();
      j["child_records"] = records.present()
          ? nlohmann::json{{"min_count", records.min_count}, {"top_k", records.top_k},
                           {"slots", records.num_slots}, {"bytes", records.bytes}}
          : nlohmann::json(nullptr);
      if (verify) j["verified"] = true, j["verify_ms"] = verify_ms;
      j["sections"] = nlohmann::json::array();
      for (const auto& s : f.sections())
        j["sections"].push_back({{"tag", s.tag}, {"codec", s.codec}, {"bytes", s.stored_bytes},
                                 {"raw_bytes", s.raw_bytes}, {"offset", s.offset},
                                 {"bytes_per_token", s.stored_bytes / tokens}});
      j["metadata"] = nlohmann::json::parse(meta.json);
      if (top > 0) {
        j["top_tokens"] = nlohmann::json::array();
        for (auto [count, c] : frequent)
          j["top_tokens"].push_back({{"id", c}, {"count", count},
                                     {"piece", c < vocab.size() ? vocab[c] : ""}});
      }
      std::cout << j.dump(2) << "\n";
      return 0;
    }
    std::printf("%s: SAM index, format %u.%u, %llu bytes (%.2f bytes/token), opened in %.3f ms\n",
                path.c_str(), h.major_version, h.minor_version, (unsigned long long)h.file_size,
                h.file_size / tokens, open_ms);
    std::printf("built by %s at %s, template %s\n", meta.tool_version.c_str(),
                meta.created_utc.c_str(), meta.template_name.c_str());
    const std::string kind = meta.tokenizer_kind.empty() ? "" : " (" + meta.tokenizer_kind + ")";
    std::printf("tokenizer %s%s sha256 %s, vocab %u, BOS %s, EOS %s\n",
                meta.tokenizer.empty() ? "(none: pre-tokenized ids)" : meta.tokenizer.c_str(),
                kind.c_str(),
                h.has_tokenizer() ? sam::format::DigestToHex(h.tokenizer_sha256).c_str() : "-",
                h.vocab_size, Id(h.bos_id).c_str(), Id(h.eos_id).c_str());
    std::printf("documents %llu, tokens %llu\n", (unsigned long long)h.num_documents,
                (unsigned long long)h.num_tokens);
    std::printf("states %llu (%.3f/token, clones %.3f/token), transitions %llu (%.3f/token: "
                "root %llu, implicit %llu, explicit %llu)\n",
                (unsigned long long)h.num_states, h.num_states / tokens, h.num_clones / tokens,
                (unsigned long long)transitions, transitions / tokens,
                (unsigned long long)root_edges, (unsigned long long)implicit,
                (unsigned long long)h.num_edges);
    std::printf("field widths (bits): token %u, state %u, position %u, clone length %u, count %u\n",
                h.token_width, h.state_width, h.position_width, h.clone_len_width, h.count_width);
    PrintAccelerators(f.view(), has_clone_labels, path);
    std::printf("corpora:\n");
    for (const auto& c : meta.corpora)
      std::printf("  %-10s %-28s records %llu, documents %llu, skipped %llu, tokens %llu, "
                  "sha256 %.12s...\n",
                  c.kind.c_str(), c.name.c_str(), (unsigned long long)c.records,
                  (unsigned long long)c.documents, (unsigned long long)c.skipped,
                  (unsigned long long)c.tokens, c.source_sha256.c_str());
    std::printf("sections:\n");
    for (const auto& s : f.sections())
      std::printf("  %s %-4s offset %10llu  %11llu bytes  %6.3f B/token%s\n", s.tag.c_str(),
                  s.codec.c_str(), (unsigned long long)s.offset,
                  (unsigned long long)s.stored_bytes, s.stored_bytes / tokens,
                  s.required ? "" : "  (optional)");
    for (auto [count, c] : frequent)
      std::printf("  token %6u %-16s occurs %llu times\n", c,
                  c < vocab.size() ? vocab[c].c_str() : "", (unsigned long long)count);
    if (verify) std::printf("verify: OK (checksums, structure, accelerators, self-test samples) in %.0f ms\n",
                            verify_ms);
    return 0;
  });
}
