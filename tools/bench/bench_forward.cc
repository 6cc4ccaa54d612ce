// bench-forward: time of one verification forward pass of a random Llama after a cached prefix,
// for 1..64 input tokens (--sizes) laid out as a linear chain and as a tree (binary heap: parent
// (i-1)/2).
//
//   bench-forward --layers 8 --hidden 1024 --heads 16 --kv-heads 16 --intermediate 2816
//                 --vocab 32000 --prefix 512 --device cpu --dtype fp32 --repeats 10
//
// Prints a table (median and p90 milliseconds over repeats, after one warm-up) and one JSON line
// per measurement starting with "JSON ".
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/types.h>

#include "cli.h"
#include "sam/runtime/percentile.h"
#include "sam/torch/model.h"

namespace tb = sam::torch_backend;
using sam::runtime::Percentile;

namespace {

const char* DtypeName(torch::ScalarType dtype) {
  return dtype == torch::kFloat16 ? "fp16" : dtype == torch::kBFloat16 ? "bf16" : "fp32";
}

}  // namespace

int main(int argc, char** argv) {
  sam::tools::SetUpTool("bench-forward");
  CLI::App app{"bench-forward: time of one verification forward pass of a random Llama after a\n"
               "cached prefix, for 1..64 input tokens (--sizes) as a chain and as a tree. Prints a\n"
               "table and one JSON line per measurement; asserts nothing.\n\n"
               "Examples:\n"
               "  bench-forward\n"
               "  bench-forward --layers 4 --hidden 512 --heads 8 --kv-heads 8 --intermediate 1408 \\\n"
               "                --prefix 256 --repeats 5\n"
               "  bench-forward --device cuda --dtype bf16 --sizes 1,2,4,8,16,32,64,96,128",
               "bench-forward"};
  struct {
    int64_t layers = 8, hidden = 1024, heads = 16, kv_heads = 16, intermediate = 2816;
    int64_t vocab = 32000, prefix = 512, repeats = 10;
    std::string device = "cpu", dtype;
    std::vector<int64_t> sizes = {1, 2, 4, 8, 16, 32, 64};
  } flags;
  const auto positive = CLI::Range(int64_t{1}, int64_t{1} << 20);
  app.add_option("--layers", flags.layers, "decoder layers")->check(positive)->capture_default_str();
  app.add_option("--hidden", flags.hidden, "hidden size")->check(positive)->capture_default_str();
  app.add_option("--heads", flags.heads, "attention heads")->check(positive)->capture_default_str();
  app.add_option("--kv-heads", flags.kv_heads, "key/value heads")->check(positive)->capture_default_str();
  app.add_option("--intermediate", flags.intermediate, "MLP size")->check(positive)->capture_default_str();
  app.add_option("--vocab", flags.vocab, "vocabulary size")->check(positive)->capture_default_str();
  app.add_option("--prefix", flags.prefix, "cached prefix tokens")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_option("--repeats", flags.repeats, "timed repeats per point (after one warm-up)")
      ->check(positive)
      ->capture_default_str();
  app.add_option("--device", flags.device, "cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--dtype", flags.dtype, "fp32, fp16 or bf16 (default: fp32 on cpu, fp16 on cuda)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16", "float32", "float16", "bfloat16"}));
  app.add_option("--sizes", flags.sizes, "input token counts to time (comma-separated, 1..4096)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  if (const auto status = sam::tools::ParseCommandLine(app, argc, argv)) return *status;
  return sam::tools::RunTool("bench-forward", [&] {
    const int64_t max_size = *std::max_element(flags.sizes.begin(), flags.sizes.end());
    at::NoGradGuard no_grad;
    tb::LlamaConfig config;
    config.hidden_size = flags.hidden;
    config.intermediate_size = flags.intermediate;
    config.num_hidden_layers = flags.layers;
    config.num_attention_heads = flags.heads;
    config.num_key_value_heads = flags.kv_heads;
    config.head_dim = flags.hidden / flags.heads;
    config.vocab_size = flags.vocab;
    config.max_position_embeddings = flags.prefix + std::max<int64_t>(max_size, 128);
    config.Validate("flags");
    const tb::Model model = tb::Model::FromTensors(config, tb::MakeRandomLlamaWeights(config, 1),
                                                   {.device = flags.device, .dtype = flags.dtype});
    auto sync = [&] {
      if (model.device().is_cuda()) torch::cuda::synchronize();
    };

    const std::vector<int64_t>& sizes = flags.sizes;
    tb::KvCache cache = model.NewCache(flags.prefix + max_size);
    if (flags.prefix > 0) {
      std::vector<int64_t> prompt(flags.prefix);
      for (int64_t i = 0; i < flags.prefix; ++i) prompt[i] = (i * 7919 + 13) % flags.vocab;
      model.Forward(cache, prompt);
      cache.CommitPrefix(flags.prefix);
    }
    std::printf("bench-forward: layers=%lld hidden=%lld heads=%lld kv_heads=%lld intermediate=%lld "
                "vocab=%lld prefix=%lld device=%s dtype=%s repeats=%lld threads=%d\n",
                (long long)flags.layers, (long long)flags.hidden, (long long)flags.heads,
                (long long)flags.kv_heads, (long long)flags.intermediate, (long long)flags.vocab,
                (long long)flags.prefix, flags.device.c_str(), DtypeName(model.dtype()),
                (long long)flags.repeats, at::get_num_threads());
    std::printf("%-6s %6s %12s %12s\n", "shape", "tokens", "median_ms", "p90_ms");
    for (const char* shape : {"chain", "tree"}) {
      for (const int64_t n : sizes) {
        tb::TreeInput input;
        for (int64_t i = 0; i < n; ++i) {
          input.tokens.push_back((i * 31 + 5) % flags.vocab);
          input.parents.push_back(std::string(shape) == "chain" ? static_cast<int32_t>(i - 1)
                                                                : static_cast<int32_t>((i - 1) / 2));
        }
        input.parents[0] = -1;
        // Nothing is committed: every Forward rewrites the same pending slots after the prefix.
        model.Forward(cache, input);  // warm-up
        sync();
        std::vector<double> ms;
        for (int64_t r = 0; r < flags.repeats; ++r) {
          const auto start = std::chrono::steady_clock::now();
          model.Forward(cache, input);
          sync();
          ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
        }
        const double median = Percentile(ms, 50), p90 = Percentile(ms, 90);
        std::printf("%-6s %6lld %12.3f %12.3f\n", shape, (long long)n, median, p90);
        std::printf("JSON {\"bench\":\"forward\",\"shape\":\"%s\",\"tokens\":%lld,\"prefix\":%lld,"
                    "\"layers\":%lld,\"hidden\":%lld,\"heads\":%lld,\"kv_heads\":%lld,"
                    "\"intermediate\":%lld,\"vocab\":%lld,\"device\":\"%s\",\"dtype\":\"%s\","
                    "\"repeats\":%lld,\"median_ms\":%.4f,\"p90_ms\":%.4f}\n",
                    shape, (long long)n, (long long)flags.prefix, (long long)flags.layers,
                    (long long)flags.hidden, (long long)flags.heads, (long long)flags.kv_heads,
                    (long long)flags.intermediate, (long long)flags.vocab, flags.device.c_str(),
                    DtypeName(model.dtype()), (long long)flags.repeats, median, p90);
        std::fflush(stdout);
      }
    }
    return 0;
  });
}
