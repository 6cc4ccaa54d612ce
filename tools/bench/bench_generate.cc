// bench-generate: what speculative decoding buys on this machine, measured and projected.
//
//   bench-generate --tokenizer llama-32k.model --data-dir ../shared/data --index all.sam
//                  [--replay replay.json] [--layers 8 --hidden 1024 --prefix 512 --prompts 6]
//
// 1. Cost curve: the time of one forward pass for 1, 2, 4, ..., 128 chained tokens after a
//    cached prefix (random Llama of the given shape, vocabulary = the tokenizer's);
//    --cost-curve-out writes it as a cost curve file (sam/runtime/budget.h) for
//    sam-replay/sam-generate --cost-curve, and --curve-only stops there.
// 2. End to end: greedy generation on GSM8K test questions (Vicuna template), plain decoding
//    vs speculation (each --policy), in the same run, prompts interleaved; tokens/s and ratio.
//    A random model's outputs are not the corpus, so acceptance from the index is near zero:
//    this measures the overhead side of the trade.
// 3. Projection: for each policy of a sam-replay --json report (MAT and tokens verified per step
//    on recorded outputs of a real model), speedup = MAT * t(1) / t(tokens per step), with t
//    interpolated on the measured curve. A projection, not a measurement.
//
// Prints a table and one "JSON {...}" line per figure.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/types.h>

#include "cli.h"
#include "session_flags.h"
#include "sam/corpora/templates.h"
#include "sam/error.h"
#include "sam/format/index.h"
#include "sam/runtime/budget.h"
#include "sam/runtime/percentile.h"
#include "sam/torch/error.h"
#include "sam/torch/generate.h"
#include "sam/torch/model.h"
#include "sam/indexer/tokenizer.h"

namespace {

namespace tb = sam::torch_backend;
using nlohmann::json;

using sam::runtime::Median;

// t(n) by linear interpolation between measured sizes (clamped at the ends).
double Interpolate(const std::vector<std::pair<double, double>>& curve, double n) {
  if (n <= curve.front().first) return curve.front().second;
  for (size_t i = 1; i < curve.size(); ++i) {
    if (n <= curve[i].first) {
      const auto [x0, y0] = curve[i - 1];
      const auto [x1, y1] = curve[i];
      return y0 + (y1 - y0) * (n - x0) / (x1 - x0);
    }
  }
  return curve.back().second;
}


using Curve = std::vector<std::pair<double, double>>;  // (tokens, ms)

// ---- 1. Cost curve: one forward pass over n chained tokens after a cached prefix, median ms.
Curve MeasureCostCurve(const tb::Model& model, int64_t prefix,
                       const std::vector<int64_t>& curve_tokens, int64_t repeats) {
  const int64_t vocab = model.config().vocab_size;
  auto sync = [&] {
    if (model.device().is_cuda()) torch::cuda::synchronize();
  };
  Curve curve;
  {
    tb::KvCache cache = model.NewCache(prefix + curve_tokens.back());
    std::vector<int64_t> text(prefix);
    for (int64_t i = 0; i < prefix; ++i) text[i] = (i * 7919 + 13) % vocab;
    if (prefix > 0) {
      model.Forward(cache, text);
      cache.CommitPrefix(prefix);
    }
    std::printf("\ncost curve (chain after a %lld-token prefix):\n%8s %10s %10s\n", (long long)prefix,
                "tokens", "median_ms", "vs t(1)");
    for (const int64_t n : curve_tokens) {
      std::vector<int64_t> input(n);
      for (int64_t i = 0; i < n; ++i) input[i] = (i * 31 + 5) % vocab;
      model.Forward(cache, input);  // warm-up; nothing is committed
      sync();
      std::vector<double> ms;
      for (int64_t r = 0; r < repeats; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        model.Forward(cache, input);
        sync();
        ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
      }
      curve.emplace_back(static_cast<double>(n), Median(ms));
      std::printf("%8lld %10.2f %10.2f\n", (long long)n, curve.back().second,
                  curve.back().second / curve.front().second);
      std::printf("JSON {\"bench\":\"cost_curve\",\"tokens\":%lld,\"prefix\":%lld,\"median_ms\":%.3f}\n",
                  (long long)n, (long long)prefix, curve.back().second);
      std::fflush(stdout);
    }
  }
  return curve;
}

// --cost-curve-out: the curve as the CSV that CostCurve::Load reads, written atomically.
void WriteCostCurve(const Curve& curve, const std::string& curve_out, const char* comment) {
  std::vector<sam::runtime::CostPoint> points;
  for (const auto& [n, ms] : curve) points.push_back({static_cast<size_t>(n), ms});
  sam::runtime::CostCurve::FromPoints(points, curve_out);  // the rules the readers apply
  sam::tools::AtomicOutputFile file(curve_out);
  file.stream() << sam::runtime::CostCurve::ToCsv(points, comment);
  file.Commit();
  std::printf("wrote the cost curve to %s\n", curve_out.c_str());
}

// The first `prompts` GSM8K test questions in the Vicuna template, as ids.
std::vector<std::vector<uint32_t>> GsmPrompts(const std::string& data_dir, int64_t prompts,
                                              const sam::indexer::Tokenizer& tokenizer) {
  std::vector<std::vector<uint32_t>> prompt_ids;
  const std::string path = data_dir + "/gsm8k/test.jsonl";
  std::ifstream in(path);
  if (!in) throw sam::Error(sam::ErrorCode::kIo, {.file = path}, "cannot open");
  std::string line;
  while (static_cast<int64_t>(prompt_ids.size()) < prompts && std::getline(in, line)) {
    if (line.empty()) continue;
    std::vector<uint32_t> ids;
    tokenizer.EncodePrompt(sam::corpora::RenderPrompt(sam::corpora::Template::kVicuna,
                                                      json::parse(line).at("question").get<std::string>()),
                           &ids);
    prompt_ids.push_back(std::move(ids));
  }
  return prompt_ids;
}

// ---- 2. End to end: plain decoding and every policy, interleaved prompt by prompt.
void EndToEnd(const tb::Model& model, const std::vector<std::string>& policies,
              const std::vector<sam::format::IndexFile>& indexes,
              const std::vector<std::vector<uint32_t>>& prompt_ids, int64_t max_new_tokens,
              const sam::tools::SessionFlags& session_flags) {
  struct Run {
    std::string name;
    std::unique_ptr<tb::Generator> generator;
    bool speculative;
    double seconds = 0;
    int64_t tokens = 0;
    sam::runtime::SourceStatistics stats;  // every step of every prompt
  };
  std::vector<Run> runs;
  runs.push_back({"plain", std::make_unique<tb::Generator>(model), false, 0, 0, {}});
  for (const auto& p : policies) {
    tb::GeneratorOptions options = tb::GeneratorOptionsForPolicy(p);
    session_flags.Apply(&options.selection);
    runs.push_back({p, std::make_unique<tb::Generator>(model, options), true, 0, 0, {}});
    for (const auto& f : indexes) runs.back().generator->AttachIndex(&f.view());
  }
  const tb::GenerateOptions base{.max_new_tokens = max_new_tokens, .stop_tokens = {}};
  for (const auto& ids : prompt_ids) {
    for (Run& run : runs) {  // interleaved: machine load affects every mode alike
      tb::GenerateOptions options = base;
      options.speculative = run.speculative;
      const tb::GenerateResult r = run.generator->Generate(ids, options);
      run.seconds += r.prefill_seconds + r.decode_seconds;
      run.tokens += static_cast<int64_t>(r.output_ids.size());
      run.stats.Merge(r.Total());
    }
  }
  std::printf("\nend to end: %zu GSM8K test prompts, %lld new tokens each, greedy, no stop token\n"
              "%-10s %10s %8s %10s %10s\n",
              prompt_ids.size(), (long long)max_new_tokens, "mode", "tokens/s", "MAT", "tok/step", "vs plain");
  const double plain_rate = runs[0].tokens / runs[0].seconds;
  for (const Run& run : runs) {
    const double rate = run.tokens / run.seconds;
    const double mat = run.stats.Mat();
    const double verified = run.stats.TokensPerStep();
    std::printf("%-10s %10.2f %8.2f %10.2f %10.3f\n", run.name.c_str(), rate, mat, verified, rate / plain_rate);
    std::printf("JSON {\"bench\":\"end_to_end\",\"mode\":\"%s\",\"tokens_per_s\":%.3f,\"mat\":%.3f,"
                "\"tokens_per_step\":%.2f,\"ratio_vs_plain\":%.3f,\"prompts\":%zu,\"max_new_tokens\":%lld}\n",
                run.name.c_str(), rate, mat, verified, rate / plain_rate, prompt_ids.size(),
                (long long)max_new_tokens);
  }
}

// ---- 3. Projection from replay MAT (sam-replay --json) and this cost curve.
void PrintProjection(const std::string& replay_path, const Curve& curve) {
  if (!replay_path.empty()) {
    std::ifstream in(replay_path);
    if (!in) throw sam::Error(sam::ErrorCode::kIo, {.file = replay_path}, "cannot open");
    const json replay = json::parse(in);
    std::printf("\nprojection (replay MAT on a real model's outputs x this cost curve):\n"
                "%-10s %8s %10s %12s %10s\n", "policy", "MAT", "tok/step", "t(step)/t(1)", "speedup");
    for (const json& p : replay.at("policies")) {
      const double mat = p.at("mat").get<double>();
      const double per_step = p.at("tokens_per_step").get<double>();
      const double cost = Interpolate(curve, per_step) / curve.front().second;
      std::printf("%-10s %8.2f %10.2f %12.2f %10.2f\n", p.at("name").get<std::string>().c_str(), mat,
                  per_step, cost, mat / cost);
      std::printf("JSON {\"bench\":\"projection\",\"policy\":\"%s\",\"mat\":%.3f,\"tokens_per_step\":%.2f,"
                  "\"relative_step_cost\":%.3f,\"projected_speedup\":%.3f}\n",
                  p.at("name").get<std::string>().c_str(), mat, per_step, cost, mat / cost);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  sam::tools::SetUpTool("bench-generate");
  CLI::App app{"bench-generate: forward cost curve of a random Llama, plain vs speculative\n"
               "tokens/s on GSM8K test questions, and a speedup projection from a sam-replay\n"
               "--json report. Prints figures; asserts nothing.\n\n"
               "Examples:\n"
               "  bench-generate --tokenizer llama-32k.model --data-dir ../shared/data --index chat.sam\n"
               "  bench-generate --tokenizer llama-32k.model --data-dir ../shared/data --index chat.sam \\\n"
               "                 --replay replay.json --layers 4 --hidden 512 --heads 8 --intermediate 1408\n"
               "  bench-generate --tokenizer llama-32k.model --curve-only --cost-curve-out cpu.csv",
               "bench-generate"};
  std::string tokenizer_path, data_dir, replay_path, device = "cpu", dtype;
  std::vector<std::string> index_paths, policies = {"sam-cal"};
  int64_t layers = 8, hidden = 1024, heads = 16, intermediate = 2816, prefix = 512, repeats = 5;
  int64_t prompts = 6, max_new_tokens = 64;
  app.add_option("--tokenizer", tokenizer_path,
                 "SentencePiece model (vocabulary of the model; required)")->required();
  app.add_option("--data-dir", data_dir,
                 "data folder with gsm8k/test.jsonl (required unless --curve-only)");
  app.add_option("--index", index_paths, "static index (repeatable; default: none)");
  app.add_option("--policy", policies, "speculative policies to compare")->capture_default_str();
  sam::tools::SessionFlags session_flags;
  session_flags.Add(app, {"draft_size", "shape", "l_bias", "l_threshold", "tree_nodes", "tree_width"});
  app.add_option("--replay", replay_path,
                 "sam-replay --json report for the projection (default: no projection)");
  const auto positive = CLI::Range(int64_t{1}, int64_t{1} << 20);
  app.add_option("--layers", layers, "decoder layers")->check(positive)->capture_default_str();
  app.add_option("--hidden", hidden, "hidden size")->check(positive)->capture_default_str();
  app.add_option("--heads", heads, "attention heads")->check(positive)->capture_default_str();
  app.add_option("--intermediate", intermediate, "MLP size")->check(positive)->capture_default_str();
  app.add_option("--prefix", prefix, "cached prefix of the cost curve")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--repeats", repeats, "timed repeats per cost-curve point")
      ->check(positive)
      ->capture_default_str();
  app.add_option("--prompts", prompts, "GSM8K test questions generated from")
      ->check(positive)
      ->capture_default_str();
  app.add_option("--max-new-tokens", max_new_tokens, "tokens generated per prompt")
      ->check(positive)
      ->capture_default_str();
  app.add_option("--device", device, "cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--dtype", dtype, "fp32, fp16 or bf16 (default: fp32 on cpu, fp16/bf16 on cuda)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16", "float32", "float16", "bfloat16"}));
  std::vector<int64_t> curve_tokens = {1, 2, 4, 8, 16, 32, 64, 128};
  std::string curve_out;
  bool curve_only = false;
  app.add_option("--curve-tokens", curve_tokens,
                 "token counts of the cost curve (comma-separated, increasing, the first 1)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, static_cast<int64_t>(sam::runtime::kMaxDraftSize)))
      ->capture_default_str();
  app.add_option("--cost-curve-out", curve_out,
                 "write the cost curve (CSV 'tokens,cost', ms) for --cost-curve of sam-replay and "
                 "sam-generate (default: not written)");
  app.add_flag("--curve-only", curve_only, "measure the cost curve only (no generation)");
  if (const auto status = sam::tools::ParseCommandLine(app, argc, argv)) return *status;

  return sam::tools::RunTool("bench-generate", [&] {
    if (!curve_only && data_dir.empty()) throw sam::tools::UsageError("--data-dir is required");
    for (size_t i = 0; i < curve_tokens.size(); ++i)
      if ((i == 0 && curve_tokens[0] != 1) || (i > 0 && curve_tokens[i] <= curve_tokens[i - 1]))
        throw sam::tools::UsageError("--curve-tokens must start at 1 and increase");
    if (!curve_out.empty()) {
      std::vector<std::string> inputs = sam::tools::IndexInputs(index_paths);
      inputs.insert(inputs.end(), {tokenizer_path, replay_path});
      sam::tools::CheckOutputPath("--cost-curve-out", curve_out, inputs);
    }
    for (const auto& p : policies) {
      try {
        tb::GeneratorOptionsForPolicy(p);
      } catch (const tb::Error& e) {
        throw sam::tools::UsageError(std::string("--policy: ") + e.what());
      }
    }
    {
      sam::runtime::SessionOptions check;  // bad values are usage errors before any work
      session_flags.Apply(&check);
    }
    torch::NoGradGuard no_grad;
    const auto tokenizer = sam::indexer::Tokenizer::Load(tokenizer_path);
    tb::LlamaConfig config;
    config.hidden_size = hidden;
    config.intermediate_size = intermediate;
    config.num_hidden_layers = layers;
    config.num_attention_heads = heads;
    config.num_key_value_heads = heads;
    config.head_dim = hidden / heads;
    config.vocab_size = tokenizer.vocab_size();
    config.max_position_embeddings = 4096;
    config.Validate("flags");
    const tb::Model model = tb::Model::FromTensors(config, tb::MakeRandomLlamaWeights(config, 1),
                                                   {.device = device, .dtype = dtype});
    std::printf("bench-generate: random Llama layers=%lld hidden=%lld heads=%lld intermediate=%lld "
                "vocab=%lld device=%s threads=%d\n",
                (long long)layers, (long long)hidden, (long long)heads, (long long)intermediate,
                (long long)config.vocab_size, device.c_str(), at::get_num_threads());

    // ---- 1. Cost curve.
    const Curve curve = MeasureCostCurve(model, prefix, curve_tokens, repeats);
    if (!curve_out.empty()) {
      char comment[512];
      std::snprintf(comment, sizeof comment,
                    "bench-generate: one forward pass over n chained tokens after a %lld-token "
                    "cached prefix, ms (median of %lld)\nrandom Llama layers=%lld hidden=%lld "
                    "heads=%lld intermediate=%lld vocab=%lld device=%s threads=%d",
                    (long long)prefix, (long long)repeats, (long long)layers, (long long)hidden,
                    (long long)heads, (long long)intermediate, (long long)config.vocab_size,
                    device.c_str(), at::get_num_threads());
      WriteCostCurve(curve, curve_out, comment);
    }
    if (curve_only) return 0;

    // ---- 2. End to end on GSM8K test questions.
    sam::format::OpenOptions open;
    open.expected_tokenizer_sha256 = tokenizer.sha256();
    open.expected_vocab_size = tokenizer.vocab_size();
    std::vector<sam::format::IndexFile> indexes;
    for (const auto& p : index_paths) indexes.push_back(sam::format::IndexFile::Open(p, open));
    EndToEnd(model, policies, indexes, GsmPrompts(data_dir, prompts, tokenizer), max_new_tokens,
             session_flags);
    PrintProjection(replay_path, curve);
    return 0;
  });
}
