// bench-draft-trees: block efficiency of draft-model tree modes at a fixed target budget (the
// RSD paper's comparison, Jeon et al. 2024), with the drafter's error under control.
//
//   bench-draft-trees [--vocab 256] [--scale 3] [--steps 200] [--budgets 4,8,16,32,64]
//                     [--tv 0.1,0.2,0.4,0.6] [--temperatures 1,0.6] [--seed 1]
//
// No trained pair of models is available here, and random checkpoints cannot show real
// acceptance, so the target is synthetic: after any token path, its logits are scale * N(0,1)
// drawn from a hash of the path (a peaked next-token distribution over --vocab tokens), and the
// draft's logits are the target's plus sigma * N(0,1) from a second hash ("the target with noise
// on its logits"). sigma is calibrated so that the mean total variation TV(p, q) at temperature 1
// over random contexts hits each --tv level; the table also shows the TV at each temperature.
//
// Budget B = draft tokens the target verifies per step (tree nodes without the start token).
// For each method the best shape for B is searched (as the paper does) and its block efficiency
// (tokens emitted per target call = mean accepted + 1) is printed, with the shape:
//   chain      single-chain speculative sampling, L = B
//   specinfer  K chains sampled with replacement at the root: branching (K, 1, ..., 1), K*L = B
//   rsd-c      Gumbel-top-k trees: (K, 1, ..., 1) for K | B, and (2, 2, ...), (3, 3, ...) cut at B
//   rsd-s      stochastic beam search, width W, depth L = B / W
// Each step starts from a fresh random context; every step is verified with the mode's
// lossless rule (tree_draft.h), so the figures are acceptance mechanics, not speed.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"
#include "sam/runtime/tree_draft.h"
#include "sam/runtime/verify.h"

namespace {

namespace rt = sam::runtime;

uint64_t HashPath(std::span<const uint32_t> path, uint64_t salt) {
  uint64_t h = 1469598103934665603ULL ^ (salt * 0x9e3779b97f4a7c15ULL);
  for (const uint32_t t : path) h = (h ^ (t + 1)) * 1099511628211ULL;
  return h;
}

double Normal(rt::Rng& r) {
  const double u1 = (static_cast<double>(r.Next() >> 11) + 0.5) * 0x1.0p-53;
  return std::sqrt(-2 * std::log(u1)) * std::cos(2 * M_PI * r.Uniform());
}

struct World {
  size_t vocab = 256;
  double scale = 3.0;
  double sigma = 0.0;
  float temperature = 1.0f;

  // softmax((scale * N1 + noise * N2) / T) after `path`.
  void Row(std::span<const uint32_t> path, double noise, std::span<float> out) const {
    rt::Rng a(HashPath(path, 1)), b(HashPath(path, 2));
    for (size_t v = 0; v < vocab; ++v) out[v] = static_cast<float>(scale * Normal(a));
    if (noise > 0)
      for (size_t v = 0; v < vocab; ++v) out[v] += static_cast<float>(noise * Normal(b));
    rt::ApplySampling(out, {.temperature = temperature, .top_k = 0, .top_p = 1.0f});
  }
};

std::vector<uint32_t> PathOf(const std::vector<uint32_t>& context, const rt::DraftTree& tree,
                             int32_t node) {
  std::vector<uint32_t> tail;
  for (int32_t n = node; n >= 0; n = tree.parents[n]) tail.push_back(tree.tokens[n]);
  std::vector<uint32_t> path = context;
  path.insert(path.end(), tail.rbegin(), tail.rend());
  return path;
}

class Expander : public rt::TreeExpander {
 public:
  Expander(const World& w, const std::vector<uint32_t>& context) : w_(w), context_(context) {}
  size_t vocab_size() const override { return w_.vocab; }
  void Expand(const rt::DraftTree& tree, std::span<const int32_t> nodes, std::span<float> rows) override {
    for (size_t j = 0; j < nodes.size(); ++j)
      w_.Row(PathOf(context_, tree, nodes[j]), w_.sigma, rows.subspan(j * w_.vocab, w_.vocab));
  }

 private:
  const World& w_;
  const std::vector<uint32_t>& context_;
};

std::vector<uint32_t> RandomContext(rt::Rng& rng, size_t vocab) {
  std::vector<uint32_t> c(4);
  for (uint32_t& t : c) t = static_cast<uint32_t>(rng.Next() % vocab);
  return c;
}

// Mean TV(p, q) over `n` random contexts.
double MeanTv(const World& w, int n, uint64_t seed) {
  rt::Rng rng(seed);
  std::vector<float> p(w.vocab), q(w.vocab);
  double total = 0;
  for (int i = 0; i < n; ++i) {
    const std::vector<uint32_t> c = RandomContext(rng, w.vocab);
    w.Row(c, 0.0, p);
    w.Row(c, w.sigma, q);
    double tv = 0;
    for (size_t v = 0; v < w.vocab; ++v) tv += std::max(0.0f, p[v] - q[v]);
    total += tv;
  }
  return total / n;
}

// Mean tokens per target call for one shape.
double BlockEfficiency(const World& w, const rt::TreeDraftOptions& o, size_t budget, int steps,
                       uint64_t seed) {
  rt::Rng context_rng(seed), draft_rng(seed + 1), verify_rng(seed + 2);
  rt::TreeDraft draft;
  std::vector<float> row(w.vocab);
  std::vector<std::vector<float>> target_rows;
  double emitted = 0;
  for (int s = 0; s < steps; ++s) {
    std::vector<uint32_t> context = RandomContext(context_rng, w.vocab);
    const uint32_t start = context.back();
    context.pop_back();
    Expander expander(w, context);
    rt::BuildTreeDraft(o, start, budget + 1, expander, draft_rng, &draft);
    target_rows.assign(draft.tree.size(), {});
    const rt::SampleResult r = rt::VerifySampling(
        draft.tree,
        [&](int32_t node) -> std::span<const float> {
          std::vector<float>& t = target_rows[node];
          if (t.empty()) {
            t.resize(w.vocab);
            w.Row(PathOf(context, draft.tree, node), 0.0, t);
          }
          return t;
        },
        verify_rng, draft.verify_mode, [&](int32_t node) { return draft.ProposalRow(node); });
    emitted += static_cast<double>(r.accepted_tokens.size() + 1);
  }
  return emitted / steps;
}

std::string ShapeText(const rt::TreeDraftOptions& o) {
  if (o.mode == rt::TreeMode::kChain) return "L" + std::to_string(o.depth);
  if (o.mode == rt::TreeMode::kRsdS) return "W" + std::to_string(o.width) + "xL" + std::to_string(o.depth);
  // Runs of equal factors as "bxn": (4, 1, 1, 1) -> (4,1x3).
  std::string s;
  for (size_t i = 0; i < o.branching.size();) {
    size_t j = i;
    while (j < o.branching.size() && o.branching[j] == o.branching[i]) ++j;
    s += (s.empty() ? "" : ",") + std::to_string(o.branching[i]) +
         (j - i > 1 ? "x" + std::to_string(j - i) : "");
    i = j;
  }
  return "(" + s + ")";
}

// The shapes tried for `mode` at budget B.
std::vector<rt::TreeDraftOptions> Shapes(rt::TreeMode mode, size_t budget) {
  std::vector<rt::TreeDraftOptions> out;
  auto base = [&] {
    rt::TreeDraftOptions o;
    o.mode = mode;
    return o;
  };
  if (mode == rt::TreeMode::kChain) {
    rt::TreeDraftOptions o = base();
    o.depth = budget;
    out.push_back(o);
    return out;
  }
  for (size_t k = 1; k <= budget; ++k) {
    if (budget % k != 0 || budget / k > 64) continue;
    rt::TreeDraftOptions o = base();
    if (mode == rt::TreeMode::kRsdS) {
      o.width = k;
      o.depth = budget / k;
    } else {
      o.branching.assign(budget / k, 1);
      o.branching[0] = k;
    }
    out.push_back(o);
  }
  if (mode == rt::TreeMode::kRsdC) {
    for (size_t b : {2u, 3u}) {
      rt::TreeDraftOptions o = base();
      o.branching.clear();
      size_t nodes = 0, level = 1;
      while (nodes < budget) {
        o.branching.push_back(b);
        level *= b;
        nodes += level;
      }
      out.push_back(o);
    }
  }
  return out;
}

std::vector<double> ParseDoubles(const std::string& text, const char* flag) {
  std::vector<double> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    size_t used = 0;
    try {
      out.push_back(std::stod(item, &used));
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != item.size())  // nothing, or a number followed by more ("0.1x")
      throw sam::tools::UsageError(std::string(flag) + " '" + text + "': expected numbers separated by commas");
    start = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  sam::tools::SetUpTool("bench-draft-trees");
  CLI::App app{
      "bench-draft-trees: block efficiency (tokens per target call) of chain speculative\n"
      "sampling, SpecInfer-style trees, RSD-C and RSD-S at fixed target budgets, with a synthetic\n"
      "target and a draft = the target plus logit noise calibrated to total variations TV(p, q).\n"
      "Prints markdown tables (best shape per method and budget). Figures, not a test.\n\n"
      "Examples:\n"
      "  bench-draft-trees\n"
      "  bench-draft-trees --steps 1000 --budgets 4,8,16,32,64 --tv 0.1,0.2,0.4,0.6\n",
      "bench-draft-trees"};
  World world;
  int steps = 200;
  std::string budgets_text = "4,8,16,32,64", tv_text = "0.1,0.2,0.4,0.6", temps_text = "1,0.6";
  uint64_t seed = 1;
  app.add_option("--vocab", world.vocab, "synthetic vocabulary (default 256)")
      ->check(CLI::Range(size_t{2}, size_t{1} << 16));
  app.add_option("--scale", world.scale, "std. dev. of the target's logits (default 3)")
      ->check(CLI::Range(0.0, 100.0));
  app.add_option("--steps", steps, "steps per shape (default 200)")->check(CLI::Range(1, 1 << 24));
  app.add_option("--budgets", budgets_text, "draft tokens per step (default 4,8,16,32,64)");
  app.add_option("--tv", tv_text, "TV(p, q) levels at temperature 1 (default 0.1,0.2,0.4,0.6)");
  app.add_option("--temperatures", temps_text, "temperatures (default 1,0.6)");
  app.add_option("--seed", seed, "seed (default 1)");
  if (const auto status = sam::tools::ParseCommandLine(app, argc, argv)) return *status;

  return sam::tools::RunTool("bench-draft-trees", [&] {
    std::vector<size_t> budgets;
    for (const double b : ParseDoubles(budgets_text, "--budgets")) {
      if (!(b >= 1 && b <= 512 && b == std::floor(b)))
        throw sam::tools::UsageError("--budgets: " + std::to_string(b) + " is not an integer in 1..512");
      budgets.push_back(static_cast<size_t>(b));
    }
    const std::vector<double> tvs = ParseDoubles(tv_text, "--tv");
    for (const double tv : tvs)
      if (!(tv > 0 && tv < 1)) throw sam::tools::UsageError("--tv levels must be in (0, 1)");
    const std::vector<double> temps = ParseDoubles(temps_text, "--temperatures");
    for (const double t : temps)
      if (!(t > 0 && t <= 10)) throw sam::tools::UsageError("--temperatures must be in (0, 10]");

    // Calibrate sigma per TV level at temperature 1 (bisection; TV grows with sigma).
    std::vector<double> sigmas;
    for (const double target : tvs) {
      double lo = 0, hi = 20;
      World w = world;
      w.temperature = 1.0f;
      for (int it = 0; it < 30; ++it) {
        w.sigma = (lo + hi) / 2;
        (MeanTv(w, 300, seed + 77) < target ? lo : hi) = w.sigma;
      }
      sigmas.push_back((lo + hi) / 2);
    }

    const rt::TreeMode modes[] = {rt::TreeMode::kChain, rt::TreeMode::kSpecInfer, rt::TreeMode::kRsdC,
                                  rt::TreeMode::kRsdS};
    std::printf("vocab %zu, target logits N(0, %.1f^2), %d steps per shape, seed %llu\n\n", world.vocab,
                world.scale, steps, static_cast<unsigned long long>(seed));
    for (const double t : temps) {
      std::printf("### Temperature %.2g\n\n| TV(p,q) | method |", t);
      for (const size_t b : budgets) std::printf(" B=%zu |", b);
      std::printf("\n|---|---|");
      for (size_t i = 0; i < budgets.size(); ++i) std::printf("---|");
      std::printf("\n");
      for (size_t l = 0; l < tvs.size(); ++l) {
        World w = world;
        w.temperature = static_cast<float>(t);
        w.sigma = sigmas[l];
        const double tv_here = MeanTv(w, 300, seed + 78);
        for (const rt::TreeMode mode : modes) {
          std::printf("| %.2f (sigma %.2f) | %s |", tv_here, sigmas[l],
                      std::string(rt::TreeModeName(mode)).c_str());
          for (const size_t b : budgets) {
            double best = 0;
            std::string best_shape;
            for (const rt::TreeDraftOptions& o : Shapes(mode, b)) {
              const double e = BlockEfficiency(w, o, b, steps, seed + 1000 * l + b);
              if (e > best) {
                best = e;
                best_shape = ShapeText(o);
              }
            }
            std::printf(" %.2f %s |", best, best_shape.c_str());
          }
          std::printf("\n");
          std::fflush(stdout);
        }
      }
      std::printf("\n");
    }
    return 0;
  });
}
