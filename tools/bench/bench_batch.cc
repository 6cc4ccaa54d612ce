// bench-batch: the cost of drafting for many concurrent requests in one call
// (DraftPool::Propose) against the cost of one request alone.
//
//   bench-batch --index all.sam --traces traces.jsonl --tokenizer llama-32k.model
//               [--sessions 1,8,64,256] [--threads 0] [--steps 200] [--runs 5]
//
// Streams as in bench-step (realistic acceptance): the traces (sam-traces)
// are shuffled; session k's context is the concatenation of
// their prompts from the k-th one on, cut to --context tokens, and its
// generation the concatenation of their outputs from the k-th one on. Each
// step drafts for every session in one DraftPool::Propose call (timed), then
// commits each session's start token plus the accepted prefix of its draft
// (not timed: in a server, verification sits between the two).
//
// Per N: the median over --runs runs of the mean time per call; the time per
// session (call / N); the core time per session (call * cores busy / N, with
// cores busy = min(threads, N)); and that against the single-session call
// time ("x one"). The target: x one <= 1.2 at N = 256. "seq" is
// the same steps proposed in a plain loop on one thread (per session), which
// separates the cache cost of many sessions from the pool's overhead.
// "RSS MiB/sess" is the growth of the process's resident memory over N's
// runs (sessions, their streams, and index pages first touched then) per
// session: with --dynamic-mib 64 (a server's default capacity) it shows what
// a session keeps resident for a request of --context tokens, not what its
// capacity reserves.

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cli.h"
#include "sam/format/index.h"
#include "sam/indexer/pipeline.h"
#include "sam/runtime/batch.h"
#include "sam/runtime/percentile.h"
#include "sam/runtime/replay.h"
#include "sam/runtime/session.h"
#include "trace_io.h"

namespace {

namespace rt = sam::runtime;
using Clock = std::chrono::steady_clock;

double NsSince(Clock::time_point t0) {
  return static_cast<double>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count());
}

// Concatenation of part(order[first]), part(order[first + 1]), ... (cycling)
// cut to n tokens.
template <typename Part>
std::vector<uint32_t> Concatenate(const std::vector<size_t>& order, size_t first, size_t n,
                                  Part part) {
  std::vector<uint32_t> out;
  out.reserve(n);
  for (size_t k = first % order.size(); out.size() < n; k = (k + 1) % order.size()) {
    const std::vector<uint32_t>& p = part(order[k]);
    out.insert(out.end(), p.begin(), p.begin() + std::min(p.size(), n - out.size()));
  }
  return out;
}

struct Request {
  std::unique_ptr<rt::Session> session;
  std::vector<uint32_t> context, generation;
  size_t at = 0;
};


// N sessions over one shared StaticIndex, each with its own context and generation: trace k's
// prompts from the k-th (shuffled) one on, and their outputs from the (7k+3)-th.
std::vector<Request> MakeRequests(size_t n, const std::vector<size_t>& order,
                                  const std::vector<rt::ReplayTrace>& traces,
                                  size_t context_tokens, size_t gen_tokens, size_t dynamic_mib,
                                  rt::Policy policy, size_t draft,
                                  const std::shared_ptr<const rt::StaticIndex>& shared) {
  std::vector<Request> requests(n);
  for (size_t k = 0; k < n; ++k) {
    Request& r = requests[k];
    r.context = Concatenate(order, k, context_tokens,
                            [&](size_t i) -> const auto& { return traces[i].prompt; });
    r.generation = Concatenate(order, k * 7 + 3, gen_tokens,
                               [&](size_t i) -> const auto& { return traces[i].output; });
    rt::SessionOptions o;
    o.max_dynamic_bytes = dynamic_mib ? dynamic_mib << 20
                                      : rt::DynamicSam::BytesForCapacity(context_tokens +
                                                                         gen_tokens);
    o.policy = policy;
    o.draft_size = draft;
    r.session = std::make_unique<rt::Session>(o);
    r.session->AttachIndex(shared);
  }
  return requests;
}

// Per reported run: the pool's ns per call, the sequential ns per session and step, the MAT.
struct Timings {
  std::vector<double> call_ns, seq_ns, mat;
};

// Run 0 warms the mapping and the sessions; runs 1..R are reported. Each run replays the steps
// once through the pool and once session by session.
Timings Measure(rt::DraftPool& pool, std::vector<Request>& requests, size_t steps, size_t runs) {
  const size_t n = requests.size();
  std::vector<rt::Session*> sessions(n);
  std::vector<uint32_t> starts(n);
  std::vector<rt::BatchDraft> drafts(n);
  for (size_t k = 0; k < n; ++k) sessions[k] = requests[k].session.get();
  auto restart = [&] {
    for (Request& r : requests) {
      r.session->Reset();
      r.session->Prefill(r.context);
      r.at = 0;
    }
  };
  auto commit = [&](size_t k, const rt::DraftTree& tree) {
    Request& r = requests[k];
    const std::span<const uint32_t> gen(r.generation);
    const size_t a = rt::AcceptedLength(tree, gen.subspan(r.at + 1));
    r.session->Commit(gen.subspan(r.at, a + 1));
    r.at += a + 1;
  };
  Timings t;
  for (size_t run = 0; run <= runs; ++run) {
    restart();
    double total = 0, committed = 0;
    for (size_t s = 0; s < steps; ++s) {
      for (size_t k = 0; k < n; ++k) starts[k] = requests[k].generation[requests[k].at];
      const auto t0 = Clock::now();
      pool.Propose(sessions, starts, drafts);
      total += NsSince(t0);
      for (size_t k = 0; k < n; ++k) {
        if (drafts[k].error) std::rethrow_exception(drafts[k].error);
        const size_t before = requests[k].at;
        commit(k, *drafts[k].tree);
        committed += static_cast<double>(requests[k].at - before);
      }
    }
    restart();
    double seq = 0;
    for (size_t s = 0; s < steps; ++s) {
      for (size_t k = 0; k < n; ++k) {
        const auto t0 = Clock::now();
        const uint32_t start = requests[k].generation[requests[k].at];
        const rt::DraftTree& tree = sessions[k]->Propose(start);
        seq += NsSince(t0);
        commit(k, tree);
      }
    }
    if (run == 0) continue;
    t.call_ns.push_back(total / static_cast<double>(steps));
    t.seq_ns.push_back(seq / static_cast<double>(steps * n));
    t.mat.push_back(committed / static_cast<double>(steps * n));
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  sam::tools::SetUpTool("bench-batch");
  CLI::App app{"bench-batch: time of one DraftPool::Propose call over N sessions, and the\n"
               "per-session core time against one session alone. Prints figures; asserts "
               "nothing.\n\n"
               "Examples:\n"
               "  bench-batch --index chat.sam --traces traces.jsonl --tokenizer llama-32k.model\n"
               "  bench-batch --index chat.sam --traces ids.jsonl --sessions 1,64 --threads 4",
               "bench-batch"};
  std::string index_path, traces_path, tokenizer_path, policy_name = "sam-cal";
  std::vector<size_t> counts = {1, 8, 64, 256};
  size_t threads = 0, steps = 200, runs = 5, context_tokens = 1024, draft = 40, dynamic_mib = 0;
  uint64_t seed = 1;
  app.add_option("--index", index_path, "static index file")->required();
  app.add_option("--traces", traces_path, "JSONL traces (sam-traces)")->required();
  app.add_option("--tokenizer", tokenizer_path, "SentencePiece model (string traces)");
  app.add_option("--sessions", counts, "session counts N")->delimiter(',')->capture_default_str();
  app.add_option("--threads", threads, "pool threads, the caller's included (0: all cores)")
      ->capture_default_str();
  app.add_option("--policy", policy_name, "policy (" + rt::PolicyNameList() + ")")
      ->capture_default_str();
  app.add_option("--steps", steps, "calls per run")->capture_default_str();
  app.add_option("--runs", runs, "runs per N (medians reported)")->capture_default_str();
  app.add_option("--context", context_tokens, "prompt tokens per session")->capture_default_str();
  app.add_option("--draft", draft, "draft nodes, start token included")->capture_default_str();
  app.add_option("--dynamic-mib", dynamic_mib,
                 "each session's dynamic automaton bytes in MiB (0: sized to its stream)")
      ->capture_default_str()
      ->check(CLI::Range(size_t{0}, size_t{1} << 20));
  app.add_option("--seed", seed, "random seed")->capture_default_str();
  if (const auto status = sam::tools::ParseCommandLine(app, argc, argv)) return *status;
  return sam::tools::RunTool("bench-batch", [&] {
    const rt::NamedPolicy* named = nullptr;
    try {
      named = &rt::FindPolicy(policy_name);
    } catch (const sam::Error& e) {
      throw sam::tools::UsageError("--policy: " + std::string(e.what()));
    }
    if (named->recycling_fallback)
      throw sam::tools::UsageError("--policy: " + policy_name +
                                   " needs model feedback; not supported here");
    if (runs == 0 || steps == 0) throw sam::tools::UsageError("--runs and --steps must be > 0");
    const auto file = sam::format::IndexFile::Open(index_path);
    std::unique_ptr<sam::indexer::Tokenizer> tok;
    if (!tokenizer_path.empty())
      tok = std::make_unique<sam::indexer::Tokenizer>(
          sam::indexer::Tokenizer::Load(tokenizer_path));
    const std::vector<rt::ReplayTrace> traces = sam::tools::ReadTraces(
        traces_path, tok.get(), file.header().bos_id, file.header().vocab_size);
    if (traces.empty()) throw sam::tools::UsageError("--traces: no traces");
    const auto shared = rt::StaticIndex::Create(&file.view(), {});
    rt::DraftPool pool(threads);
    std::mt19937_64 rng(seed);
    std::vector<size_t> order(traces.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);

    std::printf("index %s: %llu tokens; policy %s; %zu pool threads (%u cores); %zu calls, "
                "%zu runs, %zu-token contexts, %zu-node drafts\n",
                index_path.c_str(), static_cast<unsigned long long>(file.view().num_tokens()),
                policy_name.c_str(), pool.num_threads(), std::thread::hardware_concurrency(),
                steps, runs, context_tokens, draft);
    std::printf("%6s %12s %12s %14s %8s %14s %8s %6s %13s\n", "N", "call us", "us/session",
                "core us/sess", "x one", "seq us/sess", "x one", "MAT", "RSS MiB/sess");
    double one_core_ns = 0, one_seq_ns = 0;
    for (size_t n : counts) {
      if (n == 0) continue;
      const size_t gen_tokens = steps * draft + 1;
      const uint64_t rss_before = sam::indexer::CurrentRssBytes();
      std::vector<Request> requests =
          MakeRequests(n, order, traces, context_tokens, gen_tokens, dynamic_mib, named->policy,
                       draft, shared);
      const Timings t = Measure(pool, requests, steps, runs);
      const uint64_t rss_after = sam::indexer::CurrentRssBytes();
      const double rss_mib =
          rss_before && rss_after > rss_before
              ? static_cast<double>(rss_after - rss_before) / static_cast<double>(n) / (1 << 20)
              : 0.0;
      const double call = rt::Median(t.call_ns);
      const double busy = static_cast<double>(std::min(pool.num_threads(), n));
      const double core_per_session = call * busy / static_cast<double>(n);
      const double seq = rt::Median(t.seq_ns);
      if (one_core_ns == 0) one_core_ns = core_per_session, one_seq_ns = seq;
      std::printf("%6zu %12.2f %12.3f %14.3f %8.2f %14.3f %8.2f %6.2f %13.2f\n", n, call / 1e3,
                  call / 1e3 / static_cast<double>(n), core_per_session / 1e3,
                  core_per_session / one_core_ns, seq / 1e3, seq / one_seq_ns, rt::Median(t.mat),
                  rss_mib);
      std::fflush(stdout);
    }
    return 0;
  });
}
