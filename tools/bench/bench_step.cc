// bench-step: per-step drafting cost (Propose + Commit) against context length,
// for the paper rule, the calibrated policy and the PLD baseline in one run.
//
//   bench-step --index all.sam --traces raw.jsonl --tokenizer llama-32k.model
//              [--contexts 1024,4096,...] [--steps 2000] [--draft 40] [--runs 5]
//
// Streams (realistic acceptance): the traces (sam-traces: GSM8K
// test questions -> reference answers, HumanEval prompts -> canonical
// solutions) are shuffled; a context of L tokens is the concatenation of their
// prompts (each BOS first) cut to L tokens, and the generation is the
// concatenation of their recorded outputs. Each step proposes a draft of
// --draft nodes rooted at the next generation token, accepts the longest
// matching prefix (exact greedy replay) and commits the start token plus the
// accepted ones. Without --traces, the old corpus-text streams are used (the
// generation then copies the index's own text, so MAT is unrealistically high).
//
// Per context and policy: run 0 is a fresh session's first request ("cold":
// nothing cached by the session); runs 1..R reuse the session (Reset, Prefill)
// and their median p50 / p99 are reported. The runs repeat the same steps:
// at a short context a run reads the index lines the previous run left in
// the CPU caches (warm), while a long context's prefill evicts them first.
// --flush-mib N writes and reads N MiB before each run's steps, so that
// every context starts cold, as a request does in a busy server. The step
// time is the time spent in Propose plus the time spent in Commit
// (verification excluded), measured outside the session (its own timing is
// off). --prewarm proposes every step once more, untimed, right before its
// timed proposal (the same draft: nothing changes between the two), so that
// the timed step finds what it reads in the CPU caches: the step without its
// cache misses, whose difference to a plain run is what the misses cost.
// --draft, --tree-width and --experimental calibrated_width=... and
// max_static_lookups=... take comma lists: one row per policy and setting
// (sam-cal/d24/w8/L1); --interleave alternates the rows'
// runs (run 1 of each, then run 2, ...), so that on a machine whose speed
// drifts their medians come from the same minutes and compare.
// --memory-latency first prints what one dependent load costs on this
// machine at a few working-set sizes (figures of two machines compare only
// with it). --phases (a build configured with -DSAM_PHASE_TIMING=ON) prints,
// after each row, where the warm runs' steps spent their time: the median,
// 90th percentile and mean per step of every phase of Propose and Commit
// (sam/runtime/phase_timing.h), in time-stamp counter ticks. MAT = committed
// tokens / steps (SourceStatistics::Mat(): the mean over steps of accepted
// tokens + 1);
// ns/token = time per committed token over the steps at or below the p99
// (median over the warm runs).

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cli.h"
#include "sam/format/huge_buffer.h"
#include "sam/format/index.h"
#include "sam/format/shard_set.h"
#include "sam/runtime/shard_set.h"
#include "sam/runtime/percentile.h"
#include "sam/runtime/phase_timing.h"
#include "sam/runtime/pld.h"
#include "sam/runtime/recycling.h"
#include "sam/runtime/options.h"
#include "sam/runtime/replay.h"
#include "sam/runtime/session.h"
#include "session_flags.h"
#include "trace_io.h"

namespace {

namespace rt = sam::runtime;
using rt::Median;
using Clock = std::chrono::steady_clock;

// n tokens of the corpus from position `from` on, separators skipped (wraps).
std::vector<uint32_t> CorpusTokens(const sam::format::IndexView& v, uint64_t from, size_t n) {
  std::vector<uint32_t> out;
  out.reserve(n);
  for (uint64_t p = from; out.size() < n; p = p % v.num_tokens() + 1) {
    const uint32_t t = v.Token(p);
    if (t < v.separator()) out.push_back(t);
  }
  return out;
}

// Concatenation of part(order[0]), part(order[1]), ... (cycling) cut to n tokens.
template <typename Part>
std::vector<uint32_t> Concatenate(const std::vector<size_t>& order, size_t n, Part part) {
  std::vector<uint32_t> out;
  out.reserve(n);
  for (size_t k = 0; out.size() < n; k = (k + 1) % order.size()) {
    const std::vector<uint32_t>& p = part(order[k]);
    out.insert(out.end(), p.begin(), p.begin() + std::min(p.size(), n - out.size()));
  }
  return out;
}

struct Result {
  std::vector<uint32_t> step_ns;
  std::vector<uint32_t> step_tokens;  // committed tokens per step
  rt::SourceStatistics stats;         // MAT: stats.Mat()
  double prefill_ms = 0;
  // Time per committed token over the steps at or below the p99 step time:
  // on a shared machine a few preempted steps would otherwise dominate.
  double NsPerToken() const {
    const double p99 = rt::Percentile(step_ns, 99);
    double ns = 0, tok = 0;
    for (size_t i = 0; i < step_ns.size(); ++i)
      if (step_ns[i] <= p99) ns += step_ns[i], tok += step_tokens[i];
    return tok > 0 ? ns / tok : 0;
  }
};

// A row of the table: a policy with the settings it runs at (--draft,
// --tree-width and --experimental calibrated_width=... and max_static_lookups=...
// take lists).
struct Variant {
  std::string policy;
  size_t draft, width, max_static_lookups;
  std::string label;
};

// --experimental NAME=V[,V...]: every value checked by the option table (a bad one is a
// usage error naming it); returns the values as text.
std::vector<std::string> ExperimentalValues(const std::string& assignment, std::string* name) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos)
    throw sam::tools::UsageError("--experimental: '" + assignment + "' is not NAME=VALUE");
  *name = assignment.substr(0, eq);
  std::vector<std::string> values;
  std::string rest = assignment.substr(eq + 1);
  for (size_t at = 0;;) {
    const size_t comma = rest.find(',', at);
    values.push_back(rest.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  rt::SessionOptions scratch;
  for (const std::string& v : values) {
    try {
      rt::SetExperimentalOption(&scratch, *name, v);
    } catch (const sam::Error& e) {
      throw sam::tools::UsageError("--experimental: " + e.problem());
    }
  }
  return values;
}

// A row's drafter and what its runs measured.
struct Row {
  std::unique_ptr<rt::Drafter> drafter;
  std::unique_ptr<rt::RecyclingDrafter> recycling;
  rt::Session* session = nullptr;  // drafter's, unless pld
  rt::DraftTree pld_tree;
  std::vector<double> p50, p99, per_token;  // per warm run
  std::vector<std::vector<uint32_t>> phase_times = std::vector<std::vector<uint32_t>>(rt::kNumPhases);
  Result last;  // the last run's (its statistics give the MAT)
  double cold_p99 = 0;
};

std::string Join(const std::vector<size_t>& values) {
  std::string out;
  for (size_t v : values) out += (out.empty() ? "" : ",") + std::to_string(v);
  return out;
}

uint64_t Ns(Clock::time_point a, Clock::time_point b) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(b - a).count());
}

// Writes then reads every cache line of *buffer (--flush-mib): what the
// steps read before is then out of the CPU's caches, whatever their size up
// to the buffer's.
void FlushCaches(std::vector<uint64_t>* buffer, uint64_t pass) {
  for (size_t k = 0; k < buffer->size(); k += 8) (*buffer)[k] = pass + k;
  uint64_t sum = 0;
  for (size_t k = 0; k < buffer->size(); k += 8) sum += (*buffer)[k];
  volatile uint64_t sink = sum;  // the reads are not optimised away
  (void)sink;
}

// Nanoseconds per load of a chain of dependent loads that visits every cache
// line of a `bytes` block once, in a random cycle (on 2 MiB pages where
// available, as the index and the automata are): what a cache miss costs at
// that working-set size, TLB included.
double DependentLoadNs(size_t bytes, std::mt19937_64& rng) {
  struct alignas(64) Line {
    uint64_t next;
  };
  const size_t n = bytes / sizeof(Line);
  sam::format::HugeBuffer buffer(n * sizeof(Line));
  Line* lines = static_cast<Line*>(buffer.data());
  std::vector<uint64_t> cycle(n);
  std::iota(cycle.begin(), cycle.end(), 0);
  std::shuffle(cycle.begin(), cycle.end(), rng);
  for (size_t i = 0; i < n; ++i) lines[cycle[i]].next = cycle[(i + 1) % n];
  uint64_t p = cycle[0];
  for (size_t i = 0; i < n; ++i) p = lines[p].next;  // every line once: in the caches it fits
  const size_t loads = std::max<size_t>(n, 1 << 20);
  const auto t0 = Clock::now();
  for (size_t i = 0; i < loads; ++i) p = lines[p].next;
  const double ns = static_cast<double>(Ns(t0, Clock::now()));
  volatile uint64_t sink = p;  // the chain is not optimised away
  (void)sink;
  return ns / static_cast<double>(loads);
}

// One request: Reset, Prefill(context), the caches flushed (a non-empty
// `flush` buffer), then `steps` steps over `generation`. propose(start)
// returns the draft tree; with `prewarm` each step is proposed once more,
// untimed, before its timed proposal.
template <typename Propose>
Result Run(rt::Drafter& d, Propose&& propose, const std::vector<uint32_t>& context,
           const std::vector<uint32_t>& generation, size_t steps, std::vector<uint64_t>* flush,
           bool prewarm) {
  Result r;
  r.step_ns.reserve(steps);
  r.step_tokens.reserve(steps);
  d.Reset();
  auto t0 = Clock::now();
  d.Prefill(context);
  r.prefill_ms = static_cast<double>(Ns(t0, Clock::now())) / 1e6;
  static uint64_t pass = 0;
  if (!flush->empty()) FlushCaches(flush, ++pass);
  const std::span<const uint32_t> gen(generation);
  size_t i = 0;
  for (size_t s = 0; s < steps && i + 1 < gen.size(); ++s) {
    if (prewarm) propose(gen[i]);
    t0 = Clock::now();
    const rt::DraftTree& tree = propose(gen[i]);
    const auto t1 = Clock::now();
    const size_t a = rt::AcceptedLength(tree, gen.subspan(i + 1));
    const auto t2 = Clock::now();
    d.Commit(gen.subspan(i, a + 1));
    const uint64_t ns = Ns(t0, t1) + Ns(t2, Clock::now());
    r.step_ns.push_back(static_cast<uint32_t>(std::min<uint64_t>(ns, UINT32_MAX)));
    r.step_tokens.push_back(static_cast<uint32_t>(a + 1));
    r.stats.Record(tree, a);
    i += a + 1;
  }
  return r;
}

// --phases: the samples of each phase (phase_timing.h), gathered over runs.
// With --prewarm every step is proposed twice, the same draft through the
// same phases: of Propose's phases only the second (timed) proposal's
// samples are kept.
void KeepPhaseTimes(bool prewarm, std::vector<std::vector<uint32_t>>* kept) {
  for (size_t p = 0; p < rt::kNumPhases; ++p) {
    const std::vector<uint32_t>& t = rt::PhaseTimes(p);
    const size_t stride = prewarm && p < rt::kCommitAccept ? 2 : 1;
    for (size_t i = stride - 1; i < t.size(); i += stride) (*kept)[p].push_back(t[i]);
  }
}

// One line a phase that some step passed: median, p90 and mean per step
// (the mean over all `steps`, so that the means add up to a step).
void PrintPhaseTimes(const std::vector<std::vector<uint32_t>>& times, size_t steps) {
  for (size_t p = 0; p < times.size(); ++p) {
    if (times[p].empty()) continue;
    std::vector<double> t(times[p].begin(), times[p].end());
    const double sum = std::accumulate(t.begin(), t.end(), 0.0);
    std::printf("           phase %-14s median %7.0f  p90 %7.0f  mean/step %7.1f ticks (%zu steps)"
                "\n", std::string(rt::PhaseName(p)).c_str(), rt::Percentile(t, 50),
                rt::Percentile(t, 90), sum / static_cast<double>(steps ? steps : 1), t.size());
  }
}

sam::format::IndexFile OpenIndex(const std::string& path, const std::string& load) {
  sam::format::OpenOptions options;
  if (load == "mmap") return sam::format::IndexFile::Open(path, options);
  if (load == "populate") {
    options.populate = true;
    return sam::format::IndexFile::Open(path, options);
  }
  if (load == "read") return sam::format::IndexFile::Read(path, options);
  throw sam::tools::UsageError("--load must be mmap, populate or read");
}

// The flags of bench-step, in the order main binds them to CLI11.
struct BenchStepFlags {
  std::string index_path, traces_path, tokenizer_path;
  std::vector<size_t> contexts = {1024, 4096, 16384, 65536, 131072};
  std::vector<std::string> policies = {"sam", "sam-cal", "pld"};
  size_t steps = 2000, runs = 5, flush_mib = 0;
  std::vector<size_t> drafts = {40};
  uint64_t seed = 1;
  bool share_index = true, prewarm = false, memory_latency = false, phases = false;
  bool interleave = false;
  std::string load = "mmap";
  rt::StaticIndex::Options hub_options;
  std::vector<size_t> tree_width = {rt::SessionOptions{}.tree.width};
  std::vector<std::string> experimental;
};

// One bench-step run over its parsed flags: the rows (policy variants), the index and streams,
// then per context every row's cold and warm runs.
class BenchStep : private BenchStepFlags {
 public:
  BenchStepFlags& flags() { return *this; }

  int Run() {
    CheckFlags();
    ParseTuning();
    ChooseVariants();
    const double shared_ms = OpenInputs();
    flush_.resize(flush_mib << 17);  // 8-byte words
    PrintHeader(shared_ms);
    order_.resize(traces_.size());
    std::iota(order_.begin(), order_.end(), 0);
    std::shuffle(order_.begin(), order_.end(), rng_);
    // The first context runs twice: its first pass warms the mapping (page faults).
    for (size_t ci = 0, pass = 0; ci < contexts.size(); ++pass) {
      const size_t ctx = contexts[ci];
      const bool report = pass > 0;
      if (report) ++ci;
      MeasureContext(ctx, report);
    }
    return 0;
  }

 private:
  void CheckFlags() const {
    if (phases && !rt::PhaseTimingEnabled())
      throw sam::tools::UsageError(
          "--phases needs a build configured with -DSAM_PHASE_TIMING=ON (docs/runtime.md)");
    for (const std::string& name : policies) {
      if (name == "pld") continue;
      try {
        rt::FindPolicy(name);
      } catch (const sam::Error& e) {
        throw sam::tools::UsageError("--policies: " + std::string(e.what()) + " (or pld)");
      }
    }
    if (drafts.empty() || tree_width.empty())
      throw sam::tools::UsageError("--draft and --tree-width each need at least one value");
  }

  // The tuning: calibrated_width and max_static_lookups may list values (sam-cal rows);
  // every other parameter has one value, set on every session.
  void ParseTuning() {
    const rt::experimental::Tuning defaults;
    calibrated_width_ = {defaults.calibrated_width};
    max_static_lookups_ = {defaults.max_static_lookups};
    for (const std::string& assignment : experimental) {
      std::string name;
      const std::vector<std::string> values = ExperimentalValues(assignment, &name);
      if (name == "calibrated_width" || name == "max_static_lookups") {
        std::vector<size_t>& list =
            name == "calibrated_width" ? calibrated_width_ : max_static_lookups_;
        list.clear();
        for (const std::string& v : values) list.push_back(std::stoull(v));
      } else if (values.size() > 1) {
        throw sam::tools::UsageError("--experimental " + name + ": one value (lists: "
                                     "calibrated_width, max_static_lookups)");
      } else {
        rt::SetExperimentalOption(&tuned_, name, values[0]);
      }
    }
  }

  // The rows: every policy at every listed draft size, and at every listed
  // width and lookup limit where the policy uses them (sam-cal both,
  // sam-tree the width), labelled with the settings that vary (one word:
  // sam-cal/d24/w8/L1).
  void ChooseVariants() {
    for (const std::string& name : policies) {
      // (pld: neither, like the paper rule.)
      const rt::Policy policy = name == "pld" ? rt::Policy::kPaper : rt::FindPolicy(name).policy;
      const bool calibrated = policy == rt::Policy::kCalibrated;
      const bool tree = policy == rt::Policy::kTree;
      // The widths that vary this policy's drafts: sam-tree's, or sam-cal's tuning.
      const std::vector<size_t> widths =
          tree ? tree_width : calibrated ? calibrated_width_ : std::vector<size_t>{0};
      for (size_t d : drafts)
        for (size_t w : widths)
          for (size_t l : calibrated ? max_static_lookups_
                                     : std::vector<size_t>{max_static_lookups_[0]}) {
            std::string label = name;
            if (drafts.size() > 1) label += "/d" + std::to_string(d);
            if (widths.size() > 1) label += "/w" + std::to_string(w);
            if (calibrated && max_static_lookups_.size() > 1) label += "/L" + std::to_string(l);
            variants_.push_back(Variant{name, d, w, l, label});
          }
    }
    label_width_ = 11;
    for (const Variant& v : variants_)
      label_width_ = std::max(label_width_, static_cast<int>(v.label.size()));
    max_draft_ = *std::max_element(drafts.begin(), drafts.end());
  }

  // The index (or shard set), the streams' traces and the shared StaticIndex; returns the
  // milliseconds the shared StaticIndex took to build.
  double OpenInputs() {
    // A shard set (NAME.samset): sessions attach its shards as one index; the
    // first shard gives the vocabulary and the corpus streams.
    std::string first_path = index_path;
    if (sam::format::LooksLikeShardSet(index_path)) {
      shards_ = rt::OpenShardSet(index_path, {}, hub_options);
      first_path = sam::format::ShardPath(index_path,
                                          sam::format::ReadShardSetManifest(index_path).shards[0]);
    }
    file_.emplace(OpenIndex(first_path, load));
    view_ = &file_->view();
    rng_.seed(seed);

    if (!traces_path.empty()) {
      std::unique_ptr<sam::indexer::Tokenizer> tok;
      if (!tokenizer_path.empty())
        tok = std::make_unique<sam::indexer::Tokenizer>(sam::indexer::Tokenizer::Load(tokenizer_path));
      traces_ = sam::tools::ReadTraces(traces_path, tok.get(), file_->header().bos_id,
                                      file_->header().vocab_size);
    }
    const auto t_shared = Clock::now();
    if (share_index && shards_.empty()) shared_ = rt::StaticIndex::Create(view_, hub_options);
    const double shared_ms = static_cast<double>(Ns(t_shared, Clock::now())) / 1e6;
    return shared_ms;
  }

  void PrintHeader(double shared_ms) {
    std::printf("index %s (%s): %llu tokens; streams: %s; %zu steps, %s-node drafts, %zu warm runs%s\n",
                index_path.c_str(), load.c_str(), static_cast<unsigned long long>(view_->num_tokens()),
                traces_.empty() ? "corpus text" : traces_path.c_str(), steps, Join(drafts).c_str(),
                runs, interleave ? " (interleaved across the rows)" : "");
    if (memory_latency) {
      std::mt19937_64 cycle_rng(seed);  // not rng_: the streams stay those of --seed
      std::printf("memory latency (ns per dependent load):");
      for (size_t mib : {1, 4, 16, 256})
        std::printf(" %zu MiB %.1f%s", mib, DependentLoadNs(mib << 20, cycle_rng),
                    mib == 256 ? "\n" : ",");
    }
    if (prewarm)
      std::printf("prewarmed: each step is proposed once, untimed, before its timed proposal\n");
    if (flush_mib > 0)
      std::printf("caches flushed before each run's steps (%zu MiB written and read)\n", flush_mib);
    if (!shards_.empty())
      std::printf("shard set: %zu shards, each with its shared StaticIndex (the first shard "
                  "gives the corpus streams)\n", shards_.size());
    if (shared_)
      std::printf("shared StaticIndex: %.1f ms to build, %.2f MiB\n", shared_ms,
                  static_cast<double>(shared_->memory_bytes()) / (1 << 20));
    std::printf("%8s %-*s %9s %9s %10s %6s %9s %9s\n", "context", label_width_, "policy", "p50 us",
                "p99 us", "cold p99", "MAT", "ns/token", "prefill");
  }

  // Every row's drafter for one context.
  std::vector<Row> MakeRows(size_t ctx, size_t gen_tokens) const {
    std::vector<Row> rows(variants_.size());
    for (size_t v = 0; v < variants_.size(); ++v) {
      const Variant& spec = variants_[v];
      Row& row = rows[v];
      if (spec.policy == "pld") {
        row.drafter = std::make_unique<rt::PldDrafter>(3, 10);
        continue;
      }
      const rt::NamedPolicy* named = &rt::FindPolicy(spec.policy);  // checked above
      rt::SessionOptions o = tuned_;
      o.max_dynamic_bytes = rt::DynamicSam::BytesForCapacity(ctx + gen_tokens);
      o.policy = named->policy;
      if (named->recycling_fallback) {
        row.recycling = std::make_unique<rt::RecyclingDrafter>(view_->vocab_size());
        o.fallback = row.recycling.get();
      }
      o.draft_size = spec.draft;
      o.tuning.max_static_lookups = spec.max_static_lookups;
      if (named->policy == rt::Policy::kTree) o.tree.width = spec.width;
      if (named->policy == rt::Policy::kCalibrated) o.tuning.calibrated_width = spec.width;
      o.collect_timing = false;
      auto session = std::make_unique<rt::Session>(o);
      if (!shards_.empty()) session->AttachShardSet(shards_);
      else if (shared_) session->AttachIndex(shared_);
      else session->AttachIndex(view_);
      row.session = session.get();
      row.drafter = std::move(session);
    }
    return rows;
  }

  // The rows' runs at one context length (printed when `report`).
  void MeasureContext(size_t ctx, bool report) {
    std::vector<uint32_t> context, generation;
    const size_t gen_tokens = steps * max_draft_ + 1;
    if (traces_.empty()) {
      context = CorpusTokens(*view_, 1 + rng_() % view_->num_tokens(), ctx);
      generation = CorpusTokens(*view_, 1 + rng_() % view_->num_tokens(), gen_tokens);
    } else {
      context = Concatenate(order_, ctx, [&](size_t k) -> const std::vector<uint32_t>& {
        return traces_[k].prompt;
      });
      generation = Concatenate(order_, gen_tokens, [&](size_t k) -> const std::vector<uint32_t>& {
        return traces_[k].output;
      });
    }
    // Every row's drafter, then its runs: row by row, or with --interleave
    // run by run across the rows.
    std::vector<Row> rows = MakeRows(ctx, gen_tokens);
    auto run_once = [&](size_t v, size_t run) {
      Row& row = rows[v];
      auto propose = [&](uint32_t start) -> const rt::DraftTree& {
        if (row.session) return row.session->Propose(start);
        row.drafter->Propose(start, variants_[v].draft, &row.pld_tree);
        return row.pld_tree;
      };
      rt::ClearPhaseTimes();  // only the warm runs' are printed
      row.last = ::Run(*row.drafter, propose, context, generation, steps, &flush_, prewarm);
      if (run == 0) {
        row.cold_p99 = rt::Percentile(row.last.step_ns, 99) / 1000.0;
        return;
      }
      if (phases) KeepPhaseTimes(prewarm, &row.phase_times);
      row.p50.push_back(rt::Percentile(row.last.step_ns, 50) / 1000.0);
      row.p99.push_back(rt::Percentile(row.last.step_ns, 99) / 1000.0);
      row.per_token.push_back(row.last.NsPerToken());
    };
    auto print_row = [&](size_t v) {
      if (!report) return;
      const Row& row = rows[v];
      std::printf("%8zu %-*s %9.2f %9.2f %10.2f %6.2f %9.0f %7.1fms\n", ctx, label_width_,
                  variants_[v].label.c_str(), Median(row.p50), Median(row.p99), row.cold_p99,
                  row.last.stats.Mat(), Median(row.per_token), row.last.prefill_ms);
      if (phases) PrintPhaseTimes(row.phase_times, row.p50.size() * row.last.step_ns.size());
      std::fflush(stdout);
    };
    if (interleave) {
      for (size_t run = 0; run <= runs; ++run)
        for (size_t v = 0; v < rows.size(); ++v) run_once(v, run);
      for (size_t v = 0; v < rows.size(); ++v) print_row(v);
    } else {
      for (size_t v = 0; v < rows.size(); ++v) {
        for (size_t run = 0; run <= runs; ++run) run_once(v, run);
        print_row(v);
      }
    }
  }

  std::vector<Variant> variants_;
  rt::SessionOptions tuned_;  // the single-valued --experimental settings
  std::vector<size_t> calibrated_width_, max_static_lookups_;
  int label_width_ = 11;
  size_t max_draft_ = 0;
  std::vector<std::shared_ptr<const rt::StaticIndex>> shards_;
  std::optional<sam::format::IndexFile> file_;
  const sam::format::IndexView* view_ = nullptr;
  std::mt19937_64 rng_;
  std::vector<rt::ReplayTrace> traces_;
  std::shared_ptr<const rt::StaticIndex> shared_;
  std::vector<uint64_t> flush_;  // 8-byte words written and read before each run
  std::vector<size_t> order_;    // the traces' shuffled order
};

}  // namespace

int main(int argc, char** argv) {
  sam::tools::SetUpTool("bench-step");
  CLI::App app{"bench-step: per-step propose + commit time vs context length: paper rule,\n"
               "calibrated policy and PLD. Prints figures; asserts nothing.\n\n"
               "Examples:\n"
               "  bench-step --index chat.sam --traces traces.jsonl --tokenizer llama-32k.model\n"
               "  bench-step --index chat.sam --contexts 1024,4096 --steps 500 --runs 3 --load read",
               "bench-step"};
  BenchStep bench;
  auto& [index_path, traces_path, tokenizer_path, contexts, policies, steps, runs, flush_mib,
         drafts, seed, share_index, prewarm, memory_latency, phases, interleave, load,
         hub_options, tree_width, experimental] = bench.flags();
  app.add_option("--index", index_path,
                 "static index file, or shard set manifest NAME.samset (its shards as one index: "
                 "per-step cost against the number of shards)")
      ->required();
  app.add_option("--traces", traces_path,
                 "JSONL traces (sam-traces) for realistic streams");
  app.add_option("--tokenizer", tokenizer_path, "SentencePiece model (string traces)");
  app.add_option("--contexts", contexts, "context lengths in tokens")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--policies", policies,
                 "policies (" + rt::PolicyNameList() + ") and/or pld (sam-rec's Token Recycling "
                 "table gets no model feedback here)")
      ->delimiter(',')
      ->capture_default_str();
  app.add_option("--steps", steps, "steps per request")->capture_default_str();
  app.add_option("--draft", drafts,
                 "draft nodes, start token included; a list (24,16) makes one row per size "
                 "(see --interleave), all on one stream, as long as the largest size needs")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, rt::kMaxDraftSize));
  app.add_option("--runs", runs, "warm runs per context and policy (medians reported)")
      ->capture_default_str();
  app.add_option("--flush-mib", flush_mib,
                 "before each run's steps (after its prefill), write and read this many MiB so "
                 "that the steps start with cold CPU caches, as a request does in a busy server "
                 "(use more than the last-level cache). 0: each run starts with what the "
                 "previous run of the same steps left in the caches; a short context's runs "
                 "then read a warm index, a long context's prefill evicts it")
      ->capture_default_str()
      ->check(CLI::Range(size_t{0}, size_t{4096}));
  app.add_flag("--prewarm", prewarm,
               "diagnostic: propose every step once more, untimed, right before its timed "
               "proposal (the same draft), so that the timed step finds what it reads in the CPU "
               "caches: the step without its cache misses (their cost is the difference to a "
               "plain run)");
  app.add_flag("--memory-latency", memory_latency,
               "first print the time of one dependent load over 1, 4, 16 and 256 MiB (a random "
               "cycle of cache lines on 2 MiB pages where available): what a cache miss costs on "
               "this machine, to compare figures across machines");
  app.add_flag("--phases", phases,
               "diagnostic (a build configured with -DSAM_PHASE_TIMING=ON): after each row, "
               "the median, 90th percentile and mean time-stamp counter ticks per step of each "
               "phase of Propose and Commit (peek, dynamic lookup, the calibrated ranking's "
               "stages, acceptance, cursors, update) over the warm runs");
  app.add_option("--seed", seed, "random seed")->capture_default_str();
  app.add_option("--share-index", share_index,
                 "attach a shared StaticIndex (precomputed top children) instead of a bare view")
      ->capture_default_str();
  app.add_option("--tree-width", tree_width,
                 "sam-tree: nodes per depth; a list makes one row per value")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::Range(size_t{1}, rt::kMaxWidth));
  app.add_option("--experimental", experimental,
                 "set a tuning parameter, NAME=VALUE (repeatable; --help-experimental lists "
                 "them): experiments, not options; calibrated_width and max_static_lookups "
                 "take a list (NAME=V,V...) that makes one sam-cal row per value")
      ->type_name("NAME=VALUE");
  sam::tools::SessionFlags::AddExperimentalHelp(app);
  app.add_flag("--interleave", interleave,
               "alternate the rows' runs (run 1 of every policy and setting, then run 2, ...) "
               "instead of running each row's runs together: on a shared machine whose speed "
               "drifts over minutes, the rows' medians then come from the same stretch of time "
               "and compare (their absolute values do not). A warm run then follows the "
               "previous row's run of the same steps, and reads what that one left in the "
               "caches");
  app.add_option("--hub-degree", hub_options.min_degree,
                 "StaticIndex: explicit transitions that make a state a hub")
      ->capture_default_str();
  app.add_option("--record-min-count", hub_options.record_min_count,
                 "StaticIndex: child records for clone states that occur at least this many "
                 "times (0: none)")
      ->capture_default_str();
  app.add_option("--load", load,
                 "how the index is loaded: mmap (IndexFile::Open), populate (Open with "
                 "OpenOptions::populate: every page mapped up front) or read (IndexFile::Read: "
                 "a private copy on huge pages)")
      ->check(CLI::IsMember({"mmap", "populate", "read"}))
      ->capture_default_str();
  if (const auto status = sam::tools::ParseCommandLine(app, argc, argv)) return *status;
  return sam::tools::RunTool("bench-step", [&] { return bench.Run(); });
}
