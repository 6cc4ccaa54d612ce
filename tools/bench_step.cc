// bench_step: per-step drafting cost (Propose + Commit) against context length.
//
//   bench_step --index all.sam [--contexts 1024,4096,...] [--steps 2000] [--draft 40]
//
// For each context length L, a session is prefilled with L tokens taken from
// the index's own text (documents concatenated, separators dropped), then
// generates by replaying the corpus text that follows a random other position:
// each step proposes a draft of --draft nodes (paper rule, no fallback),
// accepts the longest matching prefix and commits it with its start token.
// The same stream is replayed through the PLD baseline. Prints median and p99
// per-step time (propose + commit), MAT, time per generated token, and the
// prefill time. Since the generation is corpus text, static matches are long
// and MAT is far above real decoding: read the figures as costs.
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "sam/format/index.h"
#include "sam/runtime/pld.h"
#include "sam/runtime/replay.h"
#include "sam/runtime/session.h"

namespace {

namespace rt = sam::runtime;
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

struct Result {
  std::vector<uint32_t> step_ns;
  uint64_t steps = 0, tokens = 0;
  double prefill_ms = 0;
};

Result Run(rt::Drafter& d, const std::vector<uint32_t>& context,
           const std::vector<uint32_t>& generation, size_t steps, size_t max_nodes) {
  Result r;
  rt::DraftTree tree;
  d.Reset();
  auto t0 = Clock::now();
  d.Prefill(context);
  r.prefill_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  size_t i = 0;
  for (size_t s = 0; s < steps && i + 1 < generation.size(); ++s) {
    t0 = Clock::now();
    d.Propose(generation[i], max_nodes, &tree);
    if (tree.size() == 0) tree.Reset(generation[i], rt::DraftSource::kNone);
    const size_t a =
        rt::AcceptedLength(tree, std::span<const uint32_t>(generation).subspan(i + 1));
    d.Commit(std::span<const uint32_t>(generation).subspan(i, a + 1));
    r.step_ns.push_back(static_cast<uint32_t>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count()));
    ++r.steps;
    r.tokens += a + 1;
    i += a + 1;
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_step: per-step propose + commit time vs context length, SAM vs PLD",
               "bench_step"};
  std::string index_path;
  std::vector<size_t> contexts = {1024, 4096, 16384, 65536, 131072};
  size_t steps = 2000, draft = 40;
  uint64_t seed = 1;
  std::string policy_name = "paper";
  app.add_option("--index", index_path, "static index file")->required();
  app.add_option("--contexts", contexts, "context lengths in tokens")->delimiter(',');
  app.add_option("--steps", steps, "steps per context");
  app.add_option("--draft", draft, "draft nodes, start token included");
  app.add_option("--policy", policy_name, "paper, static, dynamic, tree, calibrated");
  app.add_option("--seed", seed, "random seed");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  try {
    const auto file = sam::format::IndexFile::Open(index_path);
    const auto& view = file.view();
    std::mt19937_64 rng(seed);
    std::printf("index %s: %llu tokens; %zu steps per context, %zu-node drafts, policy %s\n",
                index_path.c_str(), static_cast<unsigned long long>(view.num_tokens()), steps,
                draft, policy_name.c_str());
    std::printf("%9s | %10s %10s %6s %9s %10s | %10s %10s %6s %9s %10s\n", "context", "sam p50",
                "sam p99", "MAT", "us/token", "prefill", "pld p50", "pld p99", "MAT", "us/token",
                "prefill");
    // The first context runs twice: its first run warms the mapping (page faults).
    for (size_t i = 0, runs = 0; i < contexts.size(); ++runs) {
      const size_t ctx = contexts[i];
      const bool warm = runs > 0;
      if (warm) ++i;
      const auto context = CorpusTokens(view, 1 + rng() % view.num_tokens(), ctx);
      const auto generation = CorpusTokens(view, 1 + rng() % view.num_tokens(), steps * draft + 1);
      rt::SessionOptions o;
      o.max_dynamic_bytes = rt::DynamicSam::BytesForCapacity(ctx + steps * draft + 1);
      o.selection.policy = rt::ParsePolicy(policy_name);
      o.selection.draft_size = draft;
      rt::Session session(o);
      session.AttachIndex(&view);
      rt::PldDrafter pld(3, 10);
      // Warm-up pass (page cache, allocations), then the measured pass.
      Run(session, context, generation, steps / 4, draft);
      const Result s = Run(session, context, generation, steps, draft);
      Run(pld, context, generation, steps / 4, draft);
      const Result p = Run(pld, context, generation, steps, draft);
      if (!warm) continue;
      auto us = [](const std::vector<uint32_t>& v, double pct) {
        return rt::Percentile(v, pct) / 1000.0;
      };
      auto per_token = [](const Result& r) {
        uint64_t total = 0;
        for (uint32_t ns : r.step_ns) total += ns;
        return total / 1000.0 / static_cast<double>(r.tokens);
      };
      std::printf(
          "%9zu | %8.2fus %8.2fus %6.2f %9.3f %8.1fms | %8.2fus %8.2fus %6.2f %9.3f %8.1fms\n",
          ctx, us(s.step_ns, 50), us(s.step_ns, 99), static_cast<double>(s.tokens) / s.steps,
          per_token(s), s.prefill_ms, us(p.step_ns, 50), us(p.step_ns, 99),
          static_cast<double>(p.tokens) / p.steps, per_token(p), p.prefill_ms);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_step: %s\n", e.what());
    return 1;
  }
}
