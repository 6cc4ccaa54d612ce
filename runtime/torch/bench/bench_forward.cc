// bench_forward: time of one verification forward pass of a random Llama after a cached prefix,
// for 1..64 input tokens laid out as a linear chain and as a tree (binary heap: parent (i-1)/2).
//
//   bench_forward --layers 8 --hidden 1024 --heads 16 --kv-heads 16 --intermediate 2816
//                 --vocab 32000 --prefix 512 --device cpu --dtype fp32 --repeats 10
//
// Prints a table (median and p90 milliseconds over repeats, after one warm-up) and one JSON line
// per measurement starting with "JSON ".
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/types.h>

#include "sam/error.h"
#include "sam/torch/model.h"

namespace tb = sam::torch_backend;

namespace {

struct Flags {
  int64_t layers = 8, hidden = 1024, heads = 16, kv_heads = 16, intermediate = 2816;
  int64_t vocab = 32000, prefix = 512, repeats = 10;
  std::string device = "cpu", dtype;
};

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  std::map<std::string, int64_t*> ints = {
      {"--layers", &f.layers}, {"--hidden", &f.hidden}, {"--heads", &f.heads},
      {"--kv-heads", &f.kv_heads}, {"--intermediate", &f.intermediate}, {"--vocab", &f.vocab},
      {"--prefix", &f.prefix}, {"--repeats", &f.repeats}};
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << "usage: bench_forward [--layers N] [--hidden N] [--heads N] [--kv-heads N]\n"
                   "  [--intermediate N] [--vocab N] [--prefix N] [--device cpu|cuda]\n"
                   "  [--dtype fp32|fp16|bf16] [--repeats N]\n";
      std::exit(0);
    }
    if (i + 1 >= argc) throw sam::Error(sam::ErrorCode::kUsage, "flag " + flag + " needs a value");
    const std::string value = argv[++i];
    if (auto it = ints.find(flag); it != ints.end()) {
      *it->second = std::stoll(value);
      if (*it->second < (flag == "--prefix" ? 0 : 1)) throw sam::Error(sam::ErrorCode::kUsage, "bad value for " + flag);
    } else if (flag == "--device") {
      f.device = value;
    } else if (flag == "--dtype") {
      f.dtype = value;
    } else {
      throw sam::Error(sam::ErrorCode::kUsage, "unknown flag " + flag);
    }
  }
  return f;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t index = std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5));
  return v[index];
}

const char* DtypeName(torch::ScalarType dtype) {
  return dtype == torch::kFloat16 ? "fp16" : dtype == torch::kBFloat16 ? "bf16" : "fp32";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Flags flags = ParseFlags(argc, argv);
    at::NoGradGuard no_grad;
    tb::LlamaConfig config;
    config.hidden_size = flags.hidden;
    config.intermediate_size = flags.intermediate;
    config.num_hidden_layers = flags.layers;
    config.num_attention_heads = flags.heads;
    config.num_key_value_heads = flags.kv_heads;
    config.head_dim = flags.hidden / flags.heads;
    config.vocab_size = flags.vocab;
    config.max_position_embeddings = flags.prefix + 128;
    config.Validate("flags");
    const tb::Model model = tb::Model::FromTensors(config, tb::MakeRandomLlamaWeights(config, 1),
                                                   {.device = flags.device, .dtype = flags.dtype});
    auto sync = [&] {
      if (model.device().is_cuda()) torch::cuda::synchronize();
    };

    const std::vector<int64_t> sizes = {1, 2, 4, 8, 16, 32, 64};
    tb::KvCache cache = model.NewCache(flags.prefix + sizes.back());
    if (flags.prefix > 0) {
      std::vector<int64_t> prompt(flags.prefix);
      for (int64_t i = 0; i < flags.prefix; ++i) prompt[i] = (i * 7919 + 13) % flags.vocab;
      model.Forward(cache, prompt);
      cache.CommitPrefix(flags.prefix);
    }
    std::printf("bench_forward: layers=%lld hidden=%lld heads=%lld kv_heads=%lld intermediate=%lld "
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
        const double median = Percentile(ms, 0.5), p90 = Percentile(ms, 0.9);
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
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_forward: %s\n", e.what());
    return 1;
  }
}
