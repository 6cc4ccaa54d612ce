// sam-replay: offline evaluation of drafters on recorded prompt/output traces
// (exact greedy replay, DESIGN.md section 6). sam-traces renders the GSM8K and
// HumanEval reference traces it replays.
//
//   sam-replay --index all.sam --tokenizer llama-32k.model --traces t.jsonl
//              --policy sam --policy pld --json
//
// Exit codes: 0 success, 1 runtime error (unreadable traces, index or data), 2 usage error.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli.h"
#include "session_flags.h"
#include "sam/error.h"
#include "sam/format/error.h"
#include "sam/format/index.h"
#include "sam/runtime/budget.h"
#include "sam/runtime/chain.h"
#include "sam/format/shard_set.h"
#include "sam/runtime/shard_set.h"
#include "sam/runtime/pld.h"
#include "sam/runtime/recycling.h"
#include "sam/runtime/percentile.h"
#include "sam/runtime/replay.h"
#include "sam/runtime/session.h"
#include "sam/runtime/sglang_ngram.h"
#include "replay_report.h"
#include "trace_io.h"

namespace {

namespace rt = sam::runtime;
using nlohmann::json;
using sam::tools::ReadTraces;
using sam::indexer::Tokenizer;
using sam::tools::UsageError;

// ------------------------------------------------------------------ policies

// A session with a Token Recycling fallback, fed from the recorded output.
// Replay has no model logits: after each step the table learns, for every
// committed token, the one token that followed it (top-1 instead of the
// model's top-8, and only on the accepted path), so this under-estimates
// Token Recycling.
class RecordedRecyclingSession : public rt::Drafter {
 public:
  RecordedRecyclingSession(rt::SessionOptions options, uint32_t vocab_size)
      : recycling_(vocab_size) {
    options.fallback = &recycling_;
    session_ = std::make_unique<rt::Session>(options);
  }
  rt::Session& session() { return *session_; }
  std::string_view name() const override { return "sam-rec"; }
  void Reset() override {
    session_->Reset();
    has_last_ = false;
  }
  void Prefill(std::span<const uint32_t> prompt) override {
    session_->Prefill(prompt);
    has_last_ = !prompt.empty();
    if (has_last_) last_ = prompt.back();
  }
  bool Propose(uint32_t start, size_t max_nodes, rt::DraftTree* out) override {
    return session_->Propose(start, max_nodes, out);
  }
  void Commit(std::span<const uint32_t> tokens) override {
    session_->Commit(tokens);
    pairs_.clear();
    next_.clear();
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i == 0 && !has_last_) continue;
      pairs_.push_back(i == 0 ? last_ : tokens[i - 1]);
      next_.push_back(tokens[i]);
    }
    session_->ObserveTopK(pairs_, next_, 1);
    if (!tokens.empty()) {
      last_ = tokens.back();
      has_last_ = true;
    }
  }

 private:
  rt::RecyclingDrafter recycling_;
  std::unique_ptr<rt::Session> session_;
  std::vector<uint32_t> pairs_, next_;
  uint32_t last_ = 0;
  bool has_last_ = false;
};

// A drafter's trees as chains (--shape chain), for the drafters that are not
// sessions (which shape their own: SessionOptions::shape).
class ChainDrafter : public rt::Drafter {
 public:
  ChainDrafter(std::unique_ptr<rt::Drafter> inner, rt::ChainOptions options)
      : inner_(std::move(inner)), options_(options) {}
  std::string_view name() const override { return inner_->name(); }
  void Reset() override { inner_->Reset(); }
  void Prefill(std::span<const uint32_t> prompt) override { inner_->Prefill(prompt); }
  bool Propose(uint32_t start, size_t max_nodes, rt::DraftTree* out) override {
    inner_->Propose(start, max_nodes, &tree_);
    shaper_.Shape(tree_, options_, out);
    return out->size() > 1;
  }
  void Commit(std::span<const uint32_t> tokens) override { inner_->Commit(tokens); }

 private:
  std::unique_ptr<rt::Drafter> inner_;
  rt::ChainOptions options_;
  rt::ChainShaper shaper_;
  rt::DraftTree tree_;
};

struct PolicyRun {
  std::string name;
  std::unique_ptr<rt::Drafter> drafter;
  rt::Session* session = nullptr;  // the drafter's session (null for pld)
  size_t max_nodes = 1 << 16;
};

// The session policies (runtime/selection.h) plus the PLD and SGLang NGRAM baselines.
constexpr const char* kPld = "pld";
constexpr const char* kSglang = "sglang-ngram";

std::string PolicyHelpText() {
  return "pld       prompt lookup decoding (n-gram 3..1, 10 tokens)\n"
         "sglang-ngram  SGLang's NGRAM drafting (its trie of the request's n-grams, 12 nodes,\n"
         "          BFS; --sglang-* flags), the first --index as its external corpus\n" +
         rt::PolicyHelp() +
         "\n(in replay, sam-rec's Token Recycling table learns only the recorded next tokens:\n"
         "no logits offline)";
}

// The session policy named `name`; null for the PLD baseline. Throws
// UsageError listing every valid name for an unknown one.
const rt::NamedPolicy* FindSessionPolicy(const std::string& name) {
  if (name == kPld || name == kSglang) return nullptr;
  for (const rt::NamedPolicy& p : rt::NamedPolicies())
    if (p.name == name) return &p;
  throw UsageError("unknown policy '" + name + "' (valid: " + kPld + ", " + kSglang + ", " +
                   rt::PolicyNameList() + ")");
}

struct Tuning {
  // The session options of --draft-size, --shape, ... and --experimental (SessionFlags).
  rt::SessionOptions session;
  bool draft_size_given = false;  // --draft-size (sglang-ngram's draft_token_num too)
  size_t dynamic_bytes = size_t{64} << 20;
  rt::CostCurve cost_curve;                    // sam-cal sizes its trees by it when set
  // A budget-curve point: every policy drafts at most this many nodes (start token
  // included): draft_size, sam-tree's tree.nodes, PLD's tokens + 1.
  std::optional<size_t> budget;
  rt::SglangNgramOptions sglang;                   // sglang-ngram
  std::shared_ptr<const rt::SglangCorpus> sglang_corpus;
};

// --shape chain for a drafter that is not a session: its trees' chains, at most
// max_nodes - 1 tokens.
std::unique_ptr<rt::Drafter> Shaped(std::unique_ptr<rt::Drafter> drafter, const Tuning& tuning,
                                    size_t max_nodes) {
  if (tuning.session.shape == rt::DraftShape::kTree) return drafter;
  rt::ChainOptions o;
  o.max_tokens = std::max<size_t>(max_nodes, 1) - 1;
  o.min_path_probability = tuning.session.tuning.chain_min_path_probability;
  return std::make_unique<ChainDrafter>(std::move(drafter), o);
}

// One entry per --index: an index file (one StaticIndex) or a shard set (one
// a shard, attached as one index).
struct SharedIndex {
  std::vector<std::shared_ptr<const rt::StaticIndex>> shards;
  bool shard_set = false;
};
using SharedIndexes = std::vector<SharedIndex>;

void Attach(rt::Session& session, const SharedIndexes& views) {
  for (const auto& v : views) {
    if (v.shard_set) session.AttachShardSet(v.shards);
    else session.AttachIndex(v.shards[0]);
  }
}

PolicyRun MakePolicy(const std::string& name, const Tuning& tuning, uint32_t vocab_size,
                     const SharedIndexes& views) {
  PolicyRun run;
  run.name = name;
  if (tuning.budget) run.max_nodes = *tuning.budget;
  if (name == kSglang) {
    rt::SglangNgramOptions o = tuning.sglang;
    if (tuning.draft_size_given) o.draft_token_num = tuning.session.draft_size;
    if (tuning.budget) o.draft_token_num = *tuning.budget;
    run.drafter = Shaped(std::make_unique<rt::SglangNgramDrafter>(o, tuning.sglang_corpus), tuning,
                         o.draft_token_num);
    return run;
  }
  if (name == kPld) {
    const size_t tokens = tuning.budget ? std::max<size_t>(*tuning.budget, 2) - 1 : 10;
    run.drafter = Shaped(std::make_unique<rt::PldDrafter>(3, tokens), tuning, tokens + 1);
    return run;
  }
  rt::SessionOptions o = tuning.session;
  o.max_dynamic_bytes = tuning.dynamic_bytes;
  o.cost_curve = tuning.cost_curve;
  // A budget bounds what is verified: a tree's nodes, or a chain's (cut from the
  // policy's tree of its own size: run.max_nodes).
  if (tuning.budget && o.shape == rt::DraftShape::kTree) o.draft_size = o.tree.nodes = *tuning.budget;
  const rt::NamedPolicy& named = *FindSessionPolicy(name);
  o.policy = named.policy;
  if (named.recycling_fallback) {
    auto rec = std::make_unique<RecordedRecyclingSession>(o, vocab_size);
    Attach(rec->session(), views);
    run.session = &rec->session();
    run.drafter = std::move(rec);
    return run;
  }
  auto session = std::make_unique<rt::Session>(o);
  Attach(*session, views);
  run.session = session.get();
  run.drafter = std::move(session);
  return run;
}

// Lower edges (us) of the step-time histogram's bins; the last bin is open.
constexpr double kStepTimeEdgesUs[] = {0, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512};

// Steps by propose + commit time.
json StepTimeHistogram(const rt::ReplayReport& r) {
  std::vector<uint64_t> counts(std::size(kStepTimeEdgesUs), 0);
  for (size_t i = 0; i < r.propose_ns.size(); ++i) {
    const double us = (static_cast<double>(r.propose_ns[i]) + r.commit_ns[i]) / 1000.0;
    size_t bin = 0;
    while (bin + 1 < counts.size() && us >= kStepTimeEdgesUs[bin + 1]) ++bin;
    ++counts[bin];
  }
  return {{"edges_us", kStepTimeEdgesUs}, {"counts", counts}};
}

json PolicyJson(const std::string& name, const rt::ReplayReport& r, const Tuning& tuning,
                const rt::CostCurve& projection) {
  json p;
  p["name"] = name;
  p["mat"] = r.total.Mat();
  p["tokens_per_step"] = r.total.TokensPerStep();
  if (!projection.empty()) {
    p["projected_speedup"] = r.ProjectedSpeedup(projection);
    const rt::NamedPolicy* session_policy = FindSessionPolicy(name);
    p["cost_aware"] = session_policy != nullptr &&
                      session_policy->policy == rt::Policy::kCalibrated && !tuning.cost_curve.empty();
  }
  p["draft_share"] = r.DraftShare();
  p["steps"] = r.total.steps;
  p["tokens"] = r.total.Tokens();
  p["propose_us_p50"] = rt::Percentile(r.propose_ns, 50) / 1000.0;
  p["propose_us_p99"] = rt::Percentile(r.propose_ns, 99) / 1000.0;
  p["commit_us_p50"] = rt::Percentile(r.commit_ns, 50) / 1000.0;
  p["commit_us_p99"] = rt::Percentile(r.commit_ns, 99) / 1000.0;
  json cats = json::object();
  for (const auto& [cat, t] : r.by_category)
    cats[cat] = {{"mat", t.Mat()}, {"tokens_per_step", t.TokensPerStep()}, {"steps", t.steps}};
  p["by_category"] = cats;
  json sources = json::object();
  for (size_t s = 0; s < rt::kNumDraftSources; ++s) {
    const rt::SourceStatistics& t = r.by_source[s];
    if (t.steps == 0) continue;
    sources[std::string(rt::DraftSourceName(static_cast<rt::DraftSource>(s)))] = {
        {"share", static_cast<double>(t.steps) / r.total.steps}, {"mat", t.Mat()}};
  }
  p["by_source"] = sources;
  json depth = json::array();
  for (size_t d = 0; d < 16 && r.total.steps; ++d)
    depth.push_back(static_cast<double>(r.total.accepted_at_depth[d]) / r.total.steps);
  p["accepted_at_depth"] = depth;  // share of steps whose accepted path reached depth d+1
  p["step_us_histogram"] = StepTimeHistogram(r);
  return p;
}

void PrintTable(const json& policies) {
  std::vector<std::string> cats;
  for (const auto& p : policies)
    for (const auto& [c, _] : p["by_category"].items())
      if (std::find(cats.begin(), cats.end(), c) == cats.end()) cats.push_back(c);
  const bool speedup = !policies.empty() && policies[0].contains("projected_speedup");
  std::printf("%-10s %7s %9s %7s %12s %12s %10s", "policy", "MAT", "tok/step", "draft%",
              "propose p50", "propose p99", "commit p50");
  if (speedup) std::printf(" %9s", "speed-up");
  for (const auto& c : cats) std::printf(" %12s", ("MAT " + c.substr(0, 8)).c_str());
  std::printf("\n");
  for (const auto& p : policies) {
    std::printf("%-10s %7.3f %9.2f %6.1f%% %10.1fus %10.1fus %8.1fus",
                p["name"].get<std::string>().c_str(), p["mat"].get<double>(),
                p["tokens_per_step"].get<double>(), 100 * p["draft_share"].get<double>(),
                p["propose_us_p50"].get<double>(), p["propose_us_p99"].get<double>(),
                p["commit_us_p50"].get<double>());
    if (speedup) std::printf(" %8.2fx", p["projected_speedup"].get<double>());
    for (const auto& c : cats) {
      if (p["by_category"].contains(c))
        std::printf(" %12.3f", p["by_category"][c]["mat"].get<double>());
      else
        std::printf(" %12s", "-");
    }
    std::printf("\n    sources:");
    for (const auto& [s, v] : p["by_source"].items())
      std::printf("  %s %.1f%% (MAT %.2f)", s.c_str(), 100 * v["share"].get<double>(),
                  v["mat"].get<double>());
    std::printf("\n");
  }
}

// The budget curve of every policy: one row per policy, "MAT @ tokens/step" per draft size.
void PrintBudgetCurves(const json& policies, const std::vector<size_t>& sizes, bool with_speedup) {
  std::printf("\nbudget curve: MAT @ tokens verified per step%s, by draft size\n%-10s",
              with_speedup ? " (projected speed-up)" : "", "policy");
  for (size_t s : sizes) std::printf(" %*zu", with_speedup ? 22 : 14, s);
  std::printf("\n");
  for (const auto& p : policies) {
    std::printf("%-10s", p["name"].get<std::string>().c_str());
    for (const auto& point : p["budget_curve"]) {
      char cell[64];
      if (with_speedup)
        std::snprintf(cell, sizeof cell, "%.3f @ %.1f (%.2fx)", point["mat"].get<double>(),
                      point["tokens_per_step"].get<double>(),
                      point["projected_speedup"].get<double>());
      else
        std::snprintf(cell, sizeof cell, "%.3f @ %.1f", point["mat"].get<double>(),
                      point["tokens_per_step"].get<double>());
      std::printf(" %*s", with_speedup ? 22 : 14, cell);
    }
    std::printf("\n");
  }
}

// The flags of sam-replay, in the order main binds them to CLI11.
struct ReplayFlags {
  std::vector<std::string> index_paths, policies;
  std::string tokenizer_path, traces_path;
  bool as_json = false;
  size_t dynamic_mib = 64;
  Tuning tuning;
  std::vector<size_t> draft_sizes;
  std::string cost_curve_path, report_dir;
  bool project_only = false;
  sam::tools::SessionFlags session_flags;
  std::string sglang_match = "bfs";
  bool child_records = false;
  bool cross_request = false, cache_prompts = false;
  std::string tenant_field;
  size_t cache_mib = 64;
  bool cache_compile = false;
  std::string save_cache_path, load_cache_path;
  bool print_prompt_ids = false;
};

// One run of sam-replay over its parsed flags: checks the flags, opens the tokenizer, indexes and
// traces, replays every policy (with its budget curve) and prints or writes the results.
class ReplayCommand : private ReplayFlags {
 public:
  ReplayFlags& flags() { return *this; }
  bool cache_mib_given = false;  // --cache-mib was given
  json given_options;            // every option given (GivenOptions), for the report

  int Run() {
    CheckFlags();
    OpenInputs();
    traces_ = ReadTraces(traces_path, tokenizer_.get(), bos_, vocab_, tenant_field);
    if (print_prompt_ids) {
      for (const auto& t : traces_)
        std::cout << json{{"id", t.id}, {"prompt_ids", t.prompt}}.dump() << "\n";
      return 0;
    }

    if (tuning.sglang.external_sam_budget > 0 &&
        std::find(policies.begin(), policies.end(), kSglang) != policies.end()) {
      if (indexes_.empty()) throw UsageError("--sglang-corpus-budget needs an --index (its corpus)");
      tuning.sglang_corpus = rt::SglangCorpus::Create(indexes_[0].shared_view());
    }
    json out_policies = json::array();
    tuning.dynamic_bytes = dynamic_mib << 20;
    session_vocab_ = vocab_ == UINT32_MAX ? 1 << 20 : vocab_;
    for (const auto& name : policies) out_policies.push_back(ReplayPolicy(name));
    Output(out_policies);
    return 0;
  }

 private:
  // The checks that need no file but the cost curve.
  void CheckFlags() {
    if (traces_path.empty()) throw UsageError("--traces is required");
    session_flags.Apply(&tuning.session);
    tuning.draft_size_given = session_flags.given("draft_size");
    for (const char* name :
         {"chain_min_path_probability", "chain_calibrated_width", "chain_max_static_lookups"})
      if (session_flags.experimental_given(name) && tuning.session.shape != rt::DraftShape::kChain)
        throw UsageError(std::string("--experimental ") + name + " needs --shape chain");
    if (!cross_request && (!tenant_field.empty() || cache_prompts || cache_mib_given ||
                           !save_cache_path.empty() || !load_cache_path.empty() || cache_compile))
      throw UsageError("--tenant-field, --cache-mib, --cache-prompts, --cache-compile, "
                       "--load-cache and --save-cache need --cross-request");
    // Every file read: an output may be none of them.
    std::vector<std::string> inputs = sam::tools::IndexInputs(index_paths);
    inputs.insert(inputs.end(), {traces_path, tokenizer_path, load_cache_path, cost_curve_path});
    if (!save_cache_path.empty())
      sam::tools::CheckOutputPath("--save-cache", save_cache_path, inputs);
    tuning.sglang.match = sglang_match == "prob" ? rt::SglangNgramOptions::Match::kProb
                                                  : rt::SglangNgramOptions::Match::kBfs;
    // With --cross-request the trie is shared across the traces, as SGLang's
    // one trie per worker is.
    tuning.sglang.shared_trie = cross_request;
    if (policies.empty()) {  // all of them
      policies = {kPld, kSglang};
      for (const rt::NamedPolicy& p : rt::NamedPolicies()) policies.emplace_back(p.name);
    }
    for (const auto& name : policies) FindSessionPolicy(name);  // before any loading
    if (!save_cache_path.empty() &&
        std::all_of(policies.begin(), policies.end(),
                    [](const auto& n) { return n == kPld || n == kSglang; }))
      throw UsageError("--save-cache: pld keeps no cache, nor does sglang-ngram; replay a "
                       "session policy too");
    if (!report_dir.empty())
      sam::tools::CheckReportDir(report_dir, inputs);
    if (project_only && cost_curve_path.empty()) throw UsageError("--project-only needs --cost-curve");
    if (!cost_curve_path.empty()) projection_ = rt::CostCurve::Load(cost_curve_path);
    if (!project_only) tuning.cost_curve = projection_;
  }

  // The tokenizer and the indexes (one shared StaticIndex per file for all policies: same
  // drafts, faster trees), checked against each other.
  void OpenInputs() {
    sam::format::OpenOptions open;
    if (!tokenizer_path.empty()) {
      tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::Load(tokenizer_path));
      open.expected_tokenizer_sha256 = tokenizer_->sha256();
      open.expected_vocab_size = tokenizer_->vocab_size();
    }
    const rt::StaticIndex::Options prepare = rt::PrepareOptions(child_records);
    for (const auto& p : index_paths) {
      if (sam::format::LooksLikeShardSet(p)) {  // NAME.samset: its shards as one index
        sam::format::ShardSet set = sam::format::ShardSet::Open(p, open);
        SharedIndex group{{}, true};
        for (const auto& f : set.shards()) {
          group.shards.push_back(
              rt::StaticIndex::Create(f.shared_view(), rt::ShardIndexOptions(prepare)));
          indexes_.push_back(sam::format::IndexFile::Open(f.path(), open));
          sam::tools::NoteWithoutAccelerators("sam-replay", f.path(), f.view().hubs().present());
        }
        views_.push_back(std::move(group));
        continue;
      }
      indexes_.push_back(sam::format::IndexFile::Open(p, open));
      sam::tools::NoteWithoutAccelerators("sam-replay", p, indexes_.back().view().hubs().present());
      views_.push_back({{rt::StaticIndex::Create(indexes_.back().shared_view(), prepare)}, false});
    }
    vocab_ = tokenizer_ ? tokenizer_->vocab_size()
                        : (indexes_.empty() ? UINT32_MAX : indexes_[0].header().vocab_size);
    bos_ = tokenizer_ ? tokenizer_->bos_id() : (indexes_.empty() ? 1 : indexes_[0].header().bos_id);
    for (const auto& f : indexes_)
      if (f.header().vocab_size != vocab_ && !tokenizer_)
        throw sam::Error(sam::ErrorCode::kTokenizerMismatch, {.file = f.path()},
                         "vocabulary size " + std::to_string(f.header().vocab_size) +
                             " differs from " + indexes_[0].path());
    if (tokenizer_) cache_tokenizer_ = tokenizer_->sha256();
    else if (!indexes_.empty()) cache_tokenizer_ = indexes_[0].header().tokenizer_sha256;
  }

  // One replay of a policy; with --cross-request, over a fresh response cache
  // that each finished trace's text joins before the next trace.
  rt::ReplayReport Replay(PolicyRun& r, std::shared_ptr<rt::ResponseCache>* cache_out) {
    std::shared_ptr<rt::ResponseCache> cache;
    rt::ReplayHooks hooks;
    if (cross_request && r.session != nullptr) {
      rt::ResponseCache::CompileOptions compile;
      compile.enabled = cache_compile;
      cache = std::make_shared<rt::ResponseCache>(cache_mib << 20, compile);
      // The indexes' vocabulary first: a cache file of another one is refused.
      if (vocab_ != UINT32_MAX) cache->RequireVocabulary(vocab_);
      if (!load_cache_path.empty()) cache->Load(load_cache_path, cache_tokenizer_);
      rt::Session* session = r.session;
      hooks.before_trace = [&, session](const rt::ReplayTrace& t) {
        session->AttachCache(cache, t.tenant);
      };
      hooks.after_trace = [&](const rt::ReplayTrace& t) {
        std::vector<uint32_t> text;
        if (cache_prompts) text = t.prompt;
        text.insert(text.end(), t.output.begin(), t.output.end());
        cache->Insert(t.tenant, text);
      };
    }
    rt::ReplayReport report = rt::Replay(*r.drafter, traces_, r.max_nodes, hooks);
    if (cache_out) *cache_out = cache;
    return report;
  }

  // A policy's results: its replay, its cache, its budget curve.
  json ReplayPolicy(const std::string& name) {
    PolicyRun run = MakePolicy(name, tuning, session_vocab_, views_);
    std::shared_ptr<rt::ResponseCache> cache;
    const rt::ReplayReport report = Replay(run, &cache);
    if (cache && !save_cache_path.empty() && !saved_cache_) {
      cache->Save(save_cache_path, cache_tokenizer_);
      saved_cache_ = true;
    }
    json p = PolicyJson(name, report, tuning, projection_);
    if (cache)
      p["cache"] = {{"bytes", cache->bytes()},
                    {"compiled_bytes", cache->compiled_bytes()},
                    {"compiles", cache->num_compiles()},
                    {"responses", cache->num_responses()},
                    {"evicted", cache->num_evicted()},
                    {"tenants", cache->num_tenants()}};
    if (!draft_sizes.empty()) {
      json curve = json::array();
      for (size_t size : draft_sizes) {
        Tuning at = tuning;
        at.budget = size;
        PolicyRun sized = MakePolicy(name, at, session_vocab_, views_);
        const rt::ReplayReport r = Replay(sized, nullptr);
        json point = {{"draft_size", size},
                      {"mat", r.total.Mat()},
                      {"tokens_per_step", r.total.TokensPerStep()}};
        if (!projection_.empty()) point["projected_speedup"] = r.ProjectedSpeedup(projection_);
        curve.push_back(point);
      }
      p["budget_curve"] = curve;
    }
    return p;
  }

  void Output(const json& out_policies) const {
    json out;
    out["traces"] = traces_.size();
    out["cross_request"] = cross_request;
    out["run"] = {
        {"indexes", index_paths}, {"traces_file", traces_path}, {"options", given_options}};
    out["shape"] = std::string(rt::DraftShapeName(tuning.session.shape));
    if (!cost_curve_path.empty()) {
      json points = json::array();
      for (const rt::CostPoint& c : projection_.points())
        points.push_back({c.tokens, c.cost / projection_.points().front().cost});
      out["cost_curve"] = {{"file", cost_curve_path}, {"relative", points}};
    }
    out["policies"] = out_policies;
    if (as_json) {
      std::cout << out.dump(2) << "\n";
    } else {
      std::printf("%zu traces from %s\n", traces_.size(), traces_path.c_str());
      PrintTable(out_policies);
      if (!draft_sizes.empty())
        PrintBudgetCurves(out_policies, draft_sizes, !projection_.empty());
    }
    if (!report_dir.empty()) {
      const std::string page = sam::tools::WriteReport(report_dir, out, traces_path);
      std::fprintf(stderr, "sam-replay: wrote the report %s\n", page.c_str());
    }
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<sam::format::IndexFile> indexes_;
  SharedIndexes views_;
  uint32_t vocab_ = UINT32_MAX, bos_ = 1, session_vocab_ = 1 << 20;
  // The tokenizer a cache file records (--load-cache checks it, --save-cache writes it):
  // --tokenizer's, else the first index's (all zero for an index built from ids).
  sam::format::Sha256Digest cache_tokenizer_{};
  rt::CostCurve projection_;
  std::vector<rt::ReplayTrace> traces_;
  bool saved_cache_ = false;
};

// What was replayed: every option given (the report names them), but the indexes, the traces
// and the output flags.
json GivenOptions(const CLI::App& app) {
  json options = json::object();
  for (const CLI::Option* opt : app.get_options()) {
    const std::string name = opt->get_name();
    if (opt->count() == 0 || name == "--index" || name == "--traces" || name == "--json" ||
        name == "--report" || name == "--help")
      continue;
    options[name] = opt->get_expected_max() == 0 ? json(true) : json(opt->results());
  }
  return options;
}

std::string Help() {
  return
      "sam-replay: replay recorded greedy outputs through drafters and report the mean\n"
      "accepted tokens per step (MAT, bonus included: plain decoding = 1.00), tokens\n"
      "verified per step, sources and timings. No model is needed: acceptance against\n"
      "a recorded greedy output is exact.\n"
      "Exit status: 0 success, 1 runtime error, 2 usage error.\n\n"
      "Examples:\n"
      "  sam-replay --index chat.sam --tokenizer llama-32k.model --traces traces.jsonl\n"
      "  sam-replay --index chat.sam --tokenizer llama-32k.model --traces traces.jsonl \\\n"
      "             --policy sam --policy pld --json\n"
      "  sam-replay --index chat.sam --tokenizer llama-32k.model --traces traces.jsonl \\\n"
      "             --draft-sizes 8,16,24,40,64 --cost-curve cpu.csv --report report/\n"
      "  sam-replay --index chat.sam --tokenizer llama-32k.model --traces traces.jsonl \\\n"
      "             --cross-request --tenant-field category --cache-mib 64\n\n"
      "Cross-request replay (--cross-request): each session policy gets a fresh response\n"
      "cache (docs/runtime.md); traces are replayed in file order and each finished trace's\n"
      "output (with --cache-prompts, prompt and output) is added to the cache under its tenant\n"
      "(the --tenant-field value, else one tenant for all) before the next trace: what a\n"
      "server would have seen. pld ignores the cache; --draft-sizes curves use it too.\n"
      "--load-cache starts each policy's cache from a saved one; --save-cache writes the\n"
      "cache after the last trace (sam-build --corpus cache=FILE turns it into a tenant index).\n"
      "\nPolicies:\n" +
          PolicyHelpText();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{Help(), "sam-replay"};
  ReplayCommand command;
  auto& [index_paths, policies, tokenizer_path, traces_path, as_json, dynamic_mib, tuning,
         draft_sizes, cost_curve_path, report_dir, project_only, session_flags, sglang_match,
         child_records, cross_request, cache_prompts, tenant_field, cache_mib,
         cache_compile, save_cache_path, load_cache_path, print_prompt_ids] = command.flags();
  app.add_option("--index", index_paths,
                 "static index file, or shard set manifest NAME.samset (sam-build --max-memory; "
                 "its shards drafted from as one index); repeatable");
  app.add_option("--tokenizer", tokenizer_path,
                 "SentencePiece model (string traces; checked against each index)");
  app.add_option("--traces", traces_path,
                 "JSONL traces {id, category, prompt, output} (sam-traces writes them; required)");
  app.add_option("--policy", policies, "policy to replay (repeatable; default: all)");
  app.add_option("--dynamic-mib", dynamic_mib, "memory bound of each dynamic automaton (MiB)")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  // Budgets, cost curves and the HTML report (kept together).
  app.add_option("--draft-sizes", draft_sizes,
                 "budget curve: also replay every policy at each of these draft sizes (nodes "
                 "incl. the start token; comma-separated, e.g. 8,16,24,40,64) and report MAT "
                 "against tokens verified per step. A tree is drafted at each size; with "
                 "--shape chain each size cuts the chain from the policy's draft of "
                 "--draft-size nodes, as an engine's limit does (vLLM's "
                 "num_speculative_tokens K: K + 1)")
      ->delimiter(',')
      ->type_name("UINT[,UINT...]")
      ->check(CLI::Range(size_t{1}, rt::kMaxDraftSize));
  app.add_option("--cost-curve", cost_curve_path,
                 "verification cost curve (CSV 'tokens,cost' rows, as bench-generate "
                 "--cost-curve-out writes; docs/runtime.md): sam-cal sizes each tree to "
                 "maximise tokens per unit of time, and every policy gets a projected speed-up")
      ->type_name("FILE");
  app.add_flag("--project-only", project_only,
               "with --cost-curve: project every policy's speed-up, but let sam-cal draft as "
               "without a curve (to compare with its cost-aware sizes)");
  app.add_option("--report", report_dir,
                 "write an HTML report with charts to DIR/index.html (created if missing; an "
                 "index.html there is replaced only if sam-replay wrote it)")
      ->type_name("DIR");
  session_flags.Add(app, {"draft_size", "shape", "l_bias", "l_threshold", "tree_nodes", "tree_width"});
  app.add_option("--sglang-match", sglang_match,
                 "sglang-ngram: BFS (recency) or PROB (frequency) trees, as "
                 "--speculative-ngram-match-type")
      ->check(CLI::IsMember({"bfs", "prob"}))
      ->capture_default_str();
  app.add_option("--sglang-corpus-budget", tuning.sglang.external_sam_budget,
                 "sglang-ngram: draft nodes from the external corpus (the first --index's "
                 "documents), as --speculative-ngram-external-sam-budget (0: none, the trie "
                 "alone)")
      ->capture_default_str();
  app.add_flag("--child-records", child_records,
               "compute child records at open for an index file without them "
               "(StaticIndex::Options::record_min_count 2, as SAM_OPEN_CHILD_RECORDS): the same "
               "drafts, cheaper sam-cal steps, about 23 bytes per corpus token of private memory "
               "(a file built with sam-build --child-records has them already, and they are "
               "used without this flag)");
  app.add_flag("--json", as_json, "print one JSON object (default: a table)");
  app.add_flag("--cross-request", cross_request,
               "draft also from a response cache of the earlier traces (see above)");
  app.add_option("--tenant-field", tenant_field,
                 "with --cross-request: the trace field whose value is the tenant key "
                 "(e.g. category); traces of different tenants never draft for each other");
  app.add_option("--cache-mib", cache_mib, "with --cross-request: the cache's bound (MiB)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app.add_flag("--cache-prompts", cache_prompts,
               "with --cross-request: cache each trace's prompt before its output");
  app.add_flag("--cache-compile", cache_compile,
               "with --cross-request: the cache also compiles each tenant's responses into an "
               "index in memory (ResponseCache::CompileOptions: from 512 tokens, again after 25% "
               "growth, a quarter of --cache-mib), which sam-cal drafts count-weighted trees from");
  app.add_option("--load-cache", load_cache_path,
                 "with --cross-request: start every policy's cache from this saved response cache "
                 "(ResponseCache::Save; --save-cache) instead of empty, as a restarted server would")
      ->type_name("FILE");
  app.add_option("--save-cache", save_cache_path,
                 "with --cross-request: save the cache as it is after the last trace (the same for "
                 "every policy: each trace's text joins it) to FILE, written atomically; "
                 "`sam-build --corpus cache=FILE` indexes it")
      ->type_name("FILE");
  app.add_flag("--print-prompt-ids", print_prompt_ids,
               "print each trace's prompt ids, one JSON object {id, prompt_ids} a line, as the "
               "replay feeds them (BOS first), and exit without replaying");

  sam::tools::SetUpTool("sam-replay");
  if (const auto status = sam::tools::ParseCommandLine(app, argc, argv)) return *status;
  command.cache_mib_given = app.count("--cache-mib") > 0;
  command.given_options = GivenOptions(app);
  return sam::tools::RunTool("sam-replay", [&] { return command.Run(); });
}
