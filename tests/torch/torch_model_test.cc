// Tests of the libtorch verification backend: safetensors I/O, config parsing, checkpoint
// loading and the Llama forward pass with KV cache, tree attention and KV compaction.
//
// Oracles: an independent float64 reference decoder written here from the raw weight tensors
// (plain causal attention, no cache); the model's own linear / from-scratch runs for tree and
// cache behaviour; greedy decoding by full recomputation for the generation loops.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/cuda.h>
#include <torch/types.h>

#include "temp_dir.h"
#include "sam/torch/error.h"
#include "sam/torch/llama_config.h"
#include "sam/torch/model.h"
#include "sam/torch/safetensors.h"

namespace tb = sam::torch_backend;
namespace fs = std::filesystem;

namespace {

// ---------------------------------------------------------------------------------------------
// Helpers

using sam::testing::TempDir;

void WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

// A safetensors file with an arbitrary header text and data bytes, for malformed-file tests.
void WriteRawSafetensors(const fs::path& path, const std::string& header, const std::string& data) {
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((uint64_t{header.size()} >> (8 * i)) & 0xff);
  WriteText(path, bytes + header + data);
}

tb::LlamaConfig TinyConfig(int64_t kv_heads, bool tied) {
  tb::LlamaConfig c;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = kv_heads;
  c.head_dim = 8;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.vocab_size = 64;
  c.max_position_embeddings = 256;
  c.tie_word_embeddings = tied;
  return c;
}

tb::NamedTensors ConvertAll(const tb::NamedTensors& weights, torch::ScalarType dtype) {
  tb::NamedTensors out;
  for (const auto& [name, t] : weights) out.emplace_back(name, t.is_floating_point() ? t.to(dtype) : t);
  return out;
}

// Writes config.json and the weights (converted to `dtype`), as one file or as two shards with
// an index.
void WriteModelDir(const fs::path& dir, const tb::LlamaConfig& config, const tb::NamedTensors& weights,
                   torch::ScalarType dtype, bool sharded) {
  WriteText(dir / "config.json", config.ToJsonText());
  const tb::NamedTensors converted = ConvertAll(weights, dtype);
  if (!sharded) {
    tb::WriteSafetensors(dir / "model.safetensors", converted, {{"format", "pt"}});
    return;
  }
  const std::string names[2] = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  tb::NamedTensors shards[2];
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  for (size_t i = 0; i < converted.size(); ++i) {
    const size_t shard = i < converted.size() / 2 ? 0 : 1;
    shards[shard].push_back(converted[i]);
    index["weight_map"][converted[i].first] = names[shard];
  }
  for (int s = 0; s < 2; ++s) tb::WriteSafetensors(dir / names[s], shards[s]);
  WriteText(dir / "model.safetensors.index.json", index.dump(2));
}

std::map<std::string, torch::Tensor> ToMap(const tb::NamedTensors& weights) {
  std::map<std::string, torch::Tensor> map;
  for (const auto& [name, t] : weights) map[name] = t;
  return map;
}

// ---------------------------------------------------------------------------------------------
// Independent reference decoder: float64, full causal attention over positions 0..n-1, no cache,
// GQA by repeating K/V heads, HF rotary convention written out per (pair, position).

torch::Tensor RefRmsNorm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  return x * torch::rsqrt(x.pow(2).mean(-1, true) + eps) * w;
}

// x: [heads, n, d]; rotates the pair (x[i], x[i + d/2]) at position p by p / theta^(2i/d).
torch::Tensor RefRope(const torch::Tensor& x, double theta) {
  const int64_t n = x.size(1), d = x.size(2), half = d / 2;
  torch::Tensor cos = torch::empty({n, half}, torch::kFloat64);
  torch::Tensor sin = torch::empty({n, half}, torch::kFloat64);
  for (int64_t p = 0; p < n; ++p) {
    for (int64_t i = 0; i < half; ++i) {
      const double angle = static_cast<double>(p) / std::pow(theta, 2.0 * static_cast<double>(i) / static_cast<double>(d));
      cos[p][i] = std::cos(angle);
      sin[p][i] = std::sin(angle);
    }
  }
  const torch::Tensor x1 = x.narrow(2, 0, half), x2 = x.narrow(2, half, half);
  return torch::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, 2);
}

// Logits [n, vocab] (float64) for `tokens`; `w` holds the checkpoint tensors.
torch::Tensor ReferenceLogits(const tb::LlamaConfig& c, const std::map<std::string, torch::Tensor>& raw,
                              const std::vector<int64_t>& tokens) {
  auto w = [&](const std::string& name) { return raw.at(name).to(torch::kFloat64); };
  const auto n = static_cast<int64_t>(tokens.size());
  const int64_t H = c.num_attention_heads, KVH = c.num_key_value_heads, D = c.head_dim;
  const torch::Tensor ids = torch::tensor(tokens, torch::kInt64);
  torch::Tensor x = w("model.embed_tokens.weight").index_select(0, ids);
  const torch::Tensor causal =
      torch::full({n, n}, -std::numeric_limits<double>::infinity(), torch::kFloat64).triu(1);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const torch::Tensor h = RefRmsNorm(x, w(p + "input_layernorm.weight"), c.rms_norm_eps);
    torch::Tensor q = torch::matmul(h, w(p + "self_attn.q_proj.weight").t()).view({n, H, D}).transpose(0, 1);
    torch::Tensor k = torch::matmul(h, w(p + "self_attn.k_proj.weight").t()).view({n, KVH, D}).transpose(0, 1);
    torch::Tensor v = torch::matmul(h, w(p + "self_attn.v_proj.weight").t()).view({n, KVH, D}).transpose(0, 1);
    q = RefRope(q, c.rope_theta);
    k = RefRope(k, c.rope_theta).repeat_interleave(H / KVH, 0);
    v = v.repeat_interleave(H / KVH, 0);
    const torch::Tensor scores = torch::matmul(q, k.transpose(1, 2)) / std::sqrt(static_cast<double>(D)) + causal;
    const torch::Tensor attn = torch::matmul(torch::softmax(scores, -1), v).transpose(0, 1).reshape({n, H * D});
    x = x + torch::matmul(attn, w(p + "self_attn.o_proj.weight").t());
    const torch::Tensor h2 = RefRmsNorm(x, w(p + "post_attention_layernorm.weight"), c.rms_norm_eps);
    const torch::Tensor gate = torch::matmul(h2, w(p + "mlp.gate_proj.weight").t());
    const torch::Tensor up = torch::matmul(h2, w(p + "mlp.up_proj.weight").t());
    x = x + torch::matmul(gate * torch::sigmoid(gate) * up, w(p + "mlp.down_proj.weight").t());
  }
  x = RefRmsNorm(x, w("model.norm.weight"), c.rms_norm_eps);
  const torch::Tensor head = c.tie_word_embeddings ? w("model.embed_tokens.weight") : w("lm_head.weight");
  return torch::matmul(x, head.t());
}

double MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kCPU).to(torch::kFloat64) - b.to(torch::kCPU).to(torch::kFloat64)).abs().max().item<double>();
}

std::vector<int64_t> RandomTokens(std::mt19937& rng, int64_t n, int64_t vocab) {
  std::uniform_int_distribution<int64_t> dist(0, vocab - 1);
  std::vector<int64_t> tokens(n);
  for (auto& t : tokens) t = dist(rng);
  return tokens;
}

int64_t Argmax(const torch::Tensor& row) { return row.argmax().item<int64_t>(); }

std::vector<int64_t> PathTokens(const tb::TreeInput& tree, int32_t node) {
  std::vector<int64_t> path;
  for (int32_t i = node; i >= 0; i = tree.parents[i]) path.insert(path.begin(), tree.tokens[i]);
  return path;
}

std::vector<int64_t> Concat(std::vector<int64_t> a, const std::vector<int64_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Greedy decoding by full recomputation: a fresh cache and the whole sequence every step.
std::vector<int64_t> GreedyByRecomputation(const tb::Model& model, std::vector<int64_t> seq, int64_t steps) {
  for (int64_t s = 0; s < steps; ++s) {
    tb::KvCache cache = model.NewCache(static_cast<int64_t>(seq.size()));
    const torch::Tensor logits = model.Forward(cache, seq);
    seq.push_back(Argmax(logits[logits.size(0) - 1]));
  }
  return seq;
}

constexpr double kTolerance = 2e-4;  // float32 model vs float64 reference, logits of size O(1)

// ---------------------------------------------------------------------------------------------
// Safetensors

TEST(Safetensors, RoundTripAllDtypesAndMetadata) {
  TempDir dir;
  const tb::NamedTensors tensors = {
      {"half3", torch::randn({3}).to(torch::kFloat16)},  // 6 bytes: the next tensor is misaligned
      {"f32", torch::randn({2, 5})},
      {"bf16", torch::randn({4, 1, 3}).to(torch::kBFloat16)},
      {"i64", torch::arange(7, torch::kInt64)},
      {"f64", torch::randn({2}, torch::kFloat64)},
      {"empty", torch::zeros({0, 4})},
      {"scalar", torch::tensor(3.5f).reshape({})},
  };
  const fs::path path = dir.path() / "t.safetensors";
  tb::WriteSafetensors(path, tensors, {{"format", "pt"}, {"note", "x"}});
  const auto file = tb::SafetensorsFile::Open(path);
  EXPECT_EQ(file.metadata().at("note"), "x");
  EXPECT_EQ(file.Names().size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    const torch::Tensor read = file.Get(name);
    EXPECT_EQ(read.scalar_type(), t.scalar_type()) << name;
    EXPECT_EQ(read.sizes(), t.sizes()) << name;
    EXPECT_TRUE(torch::equal(read, t)) << name;
  }
  EXPECT_EQ(file.Entry("f32").dtype, "F32");
  EXPECT_EQ(file.Entry("f32").begin, 6u);
  // Header length is padded to a multiple of 8.
  std::ifstream in(path, std::ios::binary);
  unsigned char len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  EXPECT_EQ(len[0] % 8, 0);
}

TEST(Safetensors, TensorOutlivesFileObject) {
  TempDir dir;
  const fs::path path = dir.path() / "t.safetensors";
  const torch::Tensor t = torch::randn({16, 16});
  tb::WriteSafetensors(path, {{"w", t}});
  torch::Tensor read;
  {
    const auto file = tb::SafetensorsFile::Open(path);
    read = file.Get("w");
  }
  read.add_(1.0);  // private mapping: writable, never reaches the file
  EXPECT_TRUE(torch::allclose(read, t + 1.0));
  EXPECT_TRUE(torch::equal(tb::SafetensorsFile::Open(path).Get("w"), t));
}

// Expects `fn` to throw tb::Error with `code` and a message containing every one of `parts`.
template <typename Fn>
void ExpectError(Fn&& fn, tb::ErrorCode code, const std::vector<std::string>& parts) {
  try {
    fn();
    ADD_FAILURE() << "no exception; expected " << tb::ErrorCodeName(code);
  } catch (const tb::Error& e) {
    EXPECT_EQ(e.code(), code) << "got " << tb::ErrorCodeName(e.code()) << ": " << e.what();
    for (const auto& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message lacks '" << part << "': " << e.what();
    }
  }
}

// The one error family: torch errors are sam::Errors whose context names the file.
TEST(TorchErrors, AreSamErrorsNamingTheFile) {
  static_assert(std::is_base_of_v<sam::Error, tb::Error>);
  TempDir dir;
  const fs::path path = dir.path() / "t.safetensors";
  tb::WriteSafetensors(path, {{"a", torch::randn({4})}});
  fs::resize_file(path, fs::file_size(path) - 5);
  try {
    tb::SafetensorsFile::Open(path);
    ADD_FAILURE() << "no error";
  } catch (const sam::Error& e) {
    EXPECT_EQ(e.code(), sam::ErrorCode::kBadCheckpoint) << e.what();
    EXPECT_EQ(e.context().file, path.string());
    EXPECT_EQ(std::string(e.what()).rfind(path.string() + ": ", 0), 0u) << e.what();
  }
  try {
    tb::LlamaConfig::FromJsonText("{}", "cfg.json");
    ADD_FAILURE() << "no error";
  } catch (const sam::Error& e) {
    EXPECT_EQ(e.code(), sam::ErrorCode::kBadModelConfig) << e.what();
    EXPECT_EQ(e.context().file, "cfg.json");
  }
}

TEST(SafetensorsErrors, TruncatedFile) {
  TempDir dir;
  const fs::path path = dir.path() / "t.safetensors";
  tb::WriteSafetensors(path, {{"a", torch::randn({4})}, {"b", torch::randn({8})}});
  fs::resize_file(path, fs::file_size(path) - 5);
  ExpectError([&] { tb::SafetensorsFile::Open(path); }, tb::ErrorCode::kBadCheckpoint, {"t.safetensors", "'b'", "truncated"});

  fs::resize_file(path, 5);
  ExpectError([&] { tb::SafetensorsFile::Open(path); }, tb::ErrorCode::kBadCheckpoint, {"truncated"});

  WriteRawSafetensors(path, "{\"a\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", "1234");
  fs::resize_file(path, 20);  // cut inside the header
  ExpectError([&] { tb::SafetensorsFile::Open(path); }, tb::ErrorCode::kBadCheckpoint, {"header length"});
}

TEST(SafetensorsErrors, HeaderOffsetsOutOfBounds) {
  TempDir dir;
  const fs::path path = dir.path() / "t.safetensors";
  WriteRawSafetensors(path, R"({"w": {"dtype": "F32", "shape": [250], "data_offsets": [0, 1000]}})",
                      std::string(16, '\0'));
  ExpectError([&] { tb::SafetensorsFile::Open(path); }, tb::ErrorCode::kBadCheckpoint, {"'w'", "data_offsets", "exceed"});

  WriteRawSafetensors(path, R"({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}})",
                      std::string(16, '\0'));
  ExpectError([&] { tb::SafetensorsFile::Open(path); }, tb::ErrorCode::kBadCheckpoint, {"'w'", "needs 12"});

  WriteRawSafetensors(path, R"({"w": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})",
                      std::string(16, '\0'));
  ExpectError([&] { tb::SafetensorsFile::Open(path); }, tb::ErrorCode::kBadCheckpoint, {"'w'", "begin > end"});

  WriteRawSafetensors(path, R"({"w": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})",
                      std::string(4, '\0'));
  ExpectError([&] { tb::SafetensorsFile::Open(path); }, tb::ErrorCode::kBadCheckpoint, {"'w'", "shape"});

  WriteRawSafetensors(path, R"({"w": {"dtype": "F32", "shape": [1]}})", std::string(4, '\0'));
  ExpectError([&] { tb::SafetensorsFile::Open(path); }, tb::ErrorCode::kBadCheckpoint, {"'w'", "data_offsets"});

  WriteRawSafetensors(path, R"({"w": )", "");
  ExpectError([&] { tb::SafetensorsFile::Open(path); }, tb::ErrorCode::kBadCheckpoint, {"JSON"});
}

TEST(SafetensorsErrors, UnknownDtypeAndMissingFile) {
  TempDir dir;
  const fs::path path = dir.path() / "t.safetensors";
  WriteRawSafetensors(path, R"({"w": {"dtype": "Q4_K", "shape": [2], "data_offsets": [0, 1]}})", "x");
  ExpectError([&] { tb::SafetensorsFile::Open(path); }, tb::ErrorCode::kDtype, {"'w'", "Q4_K"});
  ExpectError([&] { tb::SafetensorsFile::Open(dir.path() / "absent.safetensors"); }, tb::ErrorCode::kIo,
              {"absent.safetensors"});
  tb::WriteSafetensors(path, {{"a", torch::ones({1})}});
  ExpectError([&] { tb::SafetensorsFile::Open(path).Get("zzz"); }, tb::ErrorCode::kMissingTensor, {"'zzz'"});
}

// ---------------------------------------------------------------------------------------------
// Config

TEST(LlamaConfig, ParsesHfConfigWithDefaults) {
  const auto c = tb::LlamaConfig::FromJsonText(R"({
    "architectures": ["MistralForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 3, "num_attention_heads": 8, "vocab_size": 100, "rms_norm_eps": 1e-5,
    "hidden_act": "silu", "rope_scaling": null, "torch_dtype": "bfloat16", "sliding_window": null})");
  EXPECT_EQ(c.architecture, "MistralForCausalLM");
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  const auto round_trip = tb::LlamaConfig::FromJsonText(c.ToJsonText());
  EXPECT_EQ(round_trip.num_hidden_layers, 3);
  EXPECT_EQ(round_trip.architecture, "MistralForCausalLM");
}

// A Llama 3.1 config.json: llama3 rope scaling, rope_theta 500000, tied embeddings.
TEST(LlamaConfig, ParsesLlama3RopeScaling) {
  const auto c = tb::LlamaConfig::FromJsonText(R"({
    "architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 96,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 300,
    "rope_theta": 500000.0, "tie_word_embeddings": true, "max_position_embeddings": 131072,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"}})");
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  const auto round_trip = tb::LlamaConfig::FromJsonText(c.ToJsonText());
  EXPECT_EQ(round_trip.rope_scaling.type, "llama3");
  EXPECT_EQ(round_trip.rope_scaling.original_max_position_embeddings, 8192);

  // The frequencies against the formula of transformers' _compute_llama3_parameters, written
  // here independently in double precision, for Llama 3.1 8B's head_dim 128.
  tb::LlamaConfig big = c;
  big.head_dim = 128;
  const torch::Tensor inv_freq = tb::RopeInverseFrequencies(big);
  ASSERT_EQ(inv_freq.numel(), 64);
  int kept = 0, divided = 0, interpolated = 0;
  for (int k = 0; k < 64; ++k) {
    const double f = 1.0 / std::pow(500000.0, 2.0 * k / 128.0);
    const double wavelen = 2 * M_PI / f;
    double expected;
    if (wavelen < 8192.0 / 4.0) {
      expected = f;
      ++kept;
    } else if (wavelen > 8192.0 / 1.0) {
      expected = f / 8.0;
      ++divided;
    } else {
      const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      expected = (1 - smooth) * f / 8.0 + smooth * f;
      ++interpolated;
    }
    EXPECT_NEAR(inv_freq[k].item<float>(), expected, 1e-6 * expected) << "frequency " << k;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(interpolated, 0);
  // Without rope_scaling: plain 1 / theta^(2k/d).
  big.rope_scaling = {};
  EXPECT_NEAR(tb::RopeInverseFrequencies(big)[63].item<float>(), 1.0 / std::pow(500000.0, 126.0 / 128.0),
              1e-6 / std::pow(500000.0, 126.0 / 128.0));
}

TEST(LlamaConfig, RejectsUnsupportedModels) {
  const std::string base =
      R"("hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 1, "num_attention_heads": 4, "vocab_size": 10)";
  auto parse = [&](const std::string& extra) { tb::LlamaConfig::FromJsonText("{" + base + extra + "}", "cfg.json"); };
  ExpectError([&] { parse(R"(, "architectures": ["GPT2LMHeadModel"])"); }, tb::ErrorCode::kBadModelConfig,
              {"cfg.json", "architectures", "GPT2LMHeadModel"});
  ExpectError([&] { parse(R"(, "architectures": ["LlamaForCausalLM"], "hidden_act": "gelu")"); },
              tb::ErrorCode::kBadModelConfig, {"hidden_act", "gelu"});
  ExpectError([&] { parse(R"(, "architectures": ["LlamaForCausalLM"], "rope_scaling": {"type": "linear", "factor": 2.0})"); },
              tb::ErrorCode::kBadModelConfig, {"rope_scaling"});
  ExpectError([&] { parse(R"(, "architectures": ["LlamaForCausalLM"], "rope_scaling": {"rope_type": "llama3", "factor": 8.0})"); },
              tb::ErrorCode::kBadModelConfig, {"rope_scaling.low_freq_factor"});
  ExpectError([&] { parse(R"(, "architectures": ["LlamaForCausalLM"], "rope_scaling": {"rope_type": "yarn", "factor": 4.0})"); },
              tb::ErrorCode::kBadModelConfig, {"rope_scaling", "yarn"});
  ExpectError([&] { parse(R"(, "architectures": ["LlamaForCausalLM"], "num_key_value_heads": 3)"); },
              tb::ErrorCode::kBadModelConfig, {"num_key_value_heads"});
  ExpectError([&] { parse(R"(, "architectures": ["LlamaForCausalLM"], "attention_bias": true)"); },
              tb::ErrorCode::kBadModelConfig, {"attention_bias"});
  ExpectError([&] { parse(""); }, tb::ErrorCode::kBadModelConfig, {"architectures"});
  ExpectError([] { tb::LlamaConfig::FromJsonText(R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 32})"); },
              tb::ErrorCode::kBadModelConfig, {"intermediate_size", "missing"});
  ExpectError([] { tb::LlamaConfig::FromJsonText(R"({"model_type": "llama", "hidden_size": "32"})"); },
              tb::ErrorCode::kBadModelConfig, {"hidden_size", "not an integer"});
}

// ---------------------------------------------------------------------------------------------
// Checkpoint loading errors

class LoadErrors : public ::testing::Test {
 protected:
  void Write(const tb::NamedTensors& weights, bool sharded = false) {
    WriteModelDir(dir_.path(), config_, weights, torch::kFloat32, sharded);
  }
  void Load() { tb::Model::Load(dir_.path()); }

  TempDir dir_;
  tb::LlamaConfig config_ = TinyConfig(/*kv_heads=*/2, /*tied=*/false);
  tb::NamedTensors weights_ = tb::MakeRandomLlamaWeights(config_, 7);
};

TEST_F(LoadErrors, MissingTensor) {
  tb::NamedTensors w;
  for (const auto& e : weights_) {
    if (e.first != "model.layers.1.mlp.up_proj.weight") w.push_back(e);
  }
  Write(w);
  ExpectError([&] { Load(); }, tb::ErrorCode::kMissingTensor,
              {"model.safetensors", "'model.layers.1.mlp.up_proj.weight'", "[48, 32]"});
}

TEST_F(LoadErrors, MissingLmHeadWhenUntied) {
  tb::NamedTensors w;
  for (const auto& e : weights_) {
    if (e.first != "lm_head.weight") w.push_back(e);
  }
  Write(w);
  ExpectError([&] { Load(); }, tb::ErrorCode::kMissingTensor, {"'lm_head.weight'"});
}

TEST_F(LoadErrors, WrongShape) {
  for (auto& e : weights_) {
    if (e.first == "model.layers.0.self_attn.k_proj.weight") e.second = torch::randn({32, 32});
  }
  Write(weights_);
  ExpectError([&] { Load(); }, tb::ErrorCode::kShapeMismatch,
              {"'model.layers.0.self_attn.k_proj.weight'", "[32, 32]", "expected [16, 32]"});
}

TEST_F(LoadErrors, BadDtype) {
  for (auto& e : weights_) {
    if (e.first == "model.norm.weight") e.second = torch::ones({32}, torch::kInt64);
  }
  Write(weights_);
  ExpectError([&] { Load(); }, tb::ErrorCode::kDtype, {"'model.norm.weight'", "I64"});
  ExpectError([&] { tb::Model::FromTensors(config_, tb::MakeRandomLlamaWeights(config_, 1), {.device = "cpu", .dtype = "int8"}); },
              tb::ErrorCode::kDtype, {"int8"});
  ExpectError([&] { tb::Model::FromTensors(config_, tb::MakeRandomLlamaWeights(config_, 1), {.device = "cpu", .dtype = "fp16"}); },
              tb::ErrorCode::kDtype, {"fp16", "cpu"});
}

TEST_F(LoadErrors, BadDeviceOption) {
  const auto weights = tb::MakeRandomLlamaWeights(config_, 1);
  ExpectError([&] { tb::Model::FromTensors(config_, weights, {.device = "tpu:0", .dtype = ""}); },
              tb::ErrorCode::kInvalidArgument, {"device", "tpu:0"});
  if (!torch::cuda::is_available()) {
    ExpectError([&] { tb::Model::FromTensors(config_, weights, {.device = "cuda", .dtype = ""}); },
                tb::ErrorCode::kInvalidArgument, {"CUDA is not available"});
  }
  EXPECT_EQ(tb::Model::FromTensors(config_, weights, {.device = "cpu", .dtype = "bf16"}).dtype(), torch::kBFloat16);
}

TEST_F(LoadErrors, UnsupportedArchitectureInDirectory) {
  Write(weights_);
  std::string text = config_.ToJsonText();
  text.replace(text.find("LlamaForCausalLM"), 16, "FalconForCausalLM");
  WriteText(dir_.path() / "config.json", text);
  ExpectError([&] { Load(); }, tb::ErrorCode::kBadModelConfig, {"config.json", "FalconForCausalLM"});
}

TEST_F(LoadErrors, TruncatedCheckpoint) {
  Write(weights_);
  const fs::path file = dir_.path() / "model.safetensors";
  fs::resize_file(file, fs::file_size(file) - 100);
  ExpectError([&] { Load(); }, tb::ErrorCode::kBadCheckpoint, {"model.safetensors", "truncated"});
}

TEST_F(LoadErrors, ShardedIndexProblems) {
  Write(weights_, /*sharded=*/true);
  const fs::path index_path = dir_.path() / "model.safetensors.index.json";
  std::ifstream in(index_path);
  nlohmann::json index = nlohmann::json::parse(in);
  in.close();

  nlohmann::json missing = index;
  missing["weight_map"].erase("model.norm.weight");
  WriteText(index_path, missing.dump());
  ExpectError([&] { Load(); }, tb::ErrorCode::kMissingTensor, {"'model.norm.weight'", "index.json"});

  nlohmann::json wrong_shard = index;
  wrong_shard["weight_map"]["model.norm.weight"] = "model-00001-of-00002.safetensors";
  wrong_shard["weight_map"]["model.embed_tokens.weight"] = "model-00002-of-00002.safetensors";
  WriteText(index_path, wrong_shard.dump());
  ExpectError([&] { Load(); }, tb::ErrorCode::kMissingTensor, {"'model.", "model-0000"});

  nlohmann::json escape = index;
  escape["weight_map"]["model.norm.weight"] = "../outside.safetensors";
  WriteText(index_path, escape.dump());
  ExpectError([&] { Load(); }, tb::ErrorCode::kBadCheckpoint, {"'model.norm.weight'", "../outside.safetensors"});

  fs::remove(index_path);
  ExpectError([&] { Load(); }, tb::ErrorCode::kIo, {"model.safetensors.index.json"});
}

// ---------------------------------------------------------------------------------------------
// Model oracles, over checkpoint variants

struct Variant {
  const char* name;
  int64_t kv_heads;
  bool tied;
  torch::ScalarType file_dtype;
  bool sharded;
};

void PrintTo(const Variant& v, std::ostream* os) { *os << v.name; }

class ModelOracle : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    const Variant& v = GetParam();
    config_ = TinyConfig(v.kv_heads, v.tied);
    // The reference sees exactly the (rounded) values stored in the file.
    const tb::NamedTensors weights = ConvertAll(tb::MakeRandomLlamaWeights(config_, 42), v.file_dtype);
    WriteModelDir(dir_.path(), config_, weights, v.file_dtype, v.sharded);
    raw_ = ToMap(weights);
    model_ = std::make_unique<tb::Model>(tb::Model::Load(dir_.path()));
    ASSERT_EQ(model_->dtype(), torch::kFloat32);
    ASSERT_TRUE(model_->device().is_cpu());
  }

  torch::Tensor Reference(const std::vector<int64_t>& tokens) const {
    return ReferenceLogits(config_, raw_, tokens);
  }

  TempDir dir_;
  tb::LlamaConfig config_;
  std::map<std::string, torch::Tensor> raw_;
  std::unique_ptr<tb::Model> model_;
  std::mt19937 rng_{1234};
};

// (a) whole-sequence logits equal the independent reference.
TEST_P(ModelOracle, FullSequenceMatchesReference) {
  const auto tokens = RandomTokens(rng_, 13, config_.vocab_size);
  tb::KvCache cache = model_->NewCache(32);
  const torch::Tensor logits = model_->Forward(cache, tokens);
  ASSERT_EQ(logits.sizes(), torch::IntArrayRef({13, config_.vocab_size}));
  EXPECT_EQ(logits.scalar_type(), torch::kFloat32);
  EXPECT_LT(MaxAbsDiff(logits, Reference(tokens)), kTolerance);
  EXPECT_GT(logits.abs().max().item<double>(), 0.5);  // not trivially small
}

// (b) prefill then one token at a time with the cache equals the full-sequence logits.
TEST_P(ModelOracle, IncrementalDecodingMatchesFullSequence) {
  const auto tokens = RandomTokens(rng_, 12, config_.vocab_size);
  tb::KvCache full_cache = model_->NewCache(16);
  const torch::Tensor full = model_->Forward(full_cache, tokens);

  tb::KvCache cache = model_->NewCache(16);
  std::vector<torch::Tensor> rows;
  const std::vector<int64_t> prompt(tokens.begin(), tokens.begin() + 5);
  rows.push_back(model_->Forward(cache, prompt));
  cache.CommitPrefix(5);
  for (size_t i = 5; i < tokens.size(); ++i) {
    rows.push_back(model_->Forward(cache, std::vector<int64_t>{tokens[i]}));
    cache.CommitPrefix(1);
  }
  EXPECT_EQ(cache.length(), 12);
  EXPECT_LT(MaxAbsDiff(torch::cat(rows, 0), full), kTolerance);
}

// A tree with branching at several depths: 12 nodes, roots 0 and 5.
tb::TreeInput SampleTree(std::mt19937& rng, int64_t vocab) {
  tb::TreeInput tree;
  tree.parents = {-1, 0, 0, 1, 3, -1, 5, 2, 3, 6, 4, 1};
  tree.tokens = RandomTokens(rng, static_cast<int64_t>(tree.parents.size()), vocab);
  return tree;
}

// (c) every tree node's logits equal a linear run of its root-to-node path after the prefix.
TEST_P(ModelOracle, TreeForwardMatchesLinearPaths) {
  const auto prefix = RandomTokens(rng_, 6, config_.vocab_size);
  const tb::TreeInput tree = SampleTree(rng_, config_.vocab_size);
  tb::KvCache cache = model_->NewCache(32);
  model_->Forward(cache, prefix);
  cache.CommitPrefix(6);
  const torch::Tensor tree_logits = model_->Forward(cache, tree);
  ASSERT_EQ(tree_logits.size(0), static_cast<int64_t>(tree.tokens.size()));
  EXPECT_EQ(cache.pending(), static_cast<int64_t>(tree.tokens.size()));
  for (int32_t node = 0; node < static_cast<int32_t>(tree.tokens.size()); ++node) {
    const auto path = PathTokens(tree, node);
    cache.Truncate(6);  // drop the pending tree, keep the prefix
    const torch::Tensor linear = model_->Forward(cache, path);
    EXPECT_LT(MaxAbsDiff(tree_logits[node], linear[linear.size(0) - 1]), kTolerance) << "node " << node;
    const torch::Tensor ref = Reference(Concat(prefix, path));
    EXPECT_LT(MaxAbsDiff(tree_logits[node], ref[ref.size(0) - 1]), kTolerance) << "node " << node;
  }
}

// (d) after Commit of an accepted path, the next Forward equals recomputation from scratch.
TEST_P(ModelOracle, CommitCompactsAcceptedPath) {
  const auto prefix = RandomTokens(rng_, 7, config_.vocab_size);
  const tb::TreeInput tree = SampleTree(rng_, config_.vocab_size);
  for (const std::vector<int32_t>& accepted :
       {std::vector<int32_t>{0, 1, 3, 4, 10}, std::vector<int32_t>{5, 6, 9}, std::vector<int32_t>{0, 2, 7},
        std::vector<int32_t>{0}, std::vector<int32_t>{}}) {
    tb::KvCache cache = model_->NewCache(40);
    model_->Forward(cache, prefix);
    cache.CommitPrefix(7);
    model_->Forward(cache, tree);
    cache.Commit(accepted);
    EXPECT_EQ(cache.length(), 7 + static_cast<int64_t>(accepted.size()));
    EXPECT_EQ(cache.pending(), 0);
    std::vector<int64_t> sequence = prefix;
    for (int32_t node : accepted) sequence.push_back(tree.tokens[node]);
    const auto next = RandomTokens(rng_, 3, config_.vocab_size);
    const torch::Tensor logits = model_->Forward(cache, next);

    tb::KvCache fresh = model_->NewCache(40);
    const torch::Tensor scratch = model_->Forward(fresh, Concat(sequence, next));
    EXPECT_LT(MaxAbsDiff(logits, scratch.narrow(0, scratch.size(0) - 3, 3)), kTolerance)
        << "accepted path of length " << accepted.size();
    const torch::Tensor ref = ReferenceLogits(config_, raw_, Concat(sequence, next));
    EXPECT_LT(MaxAbsDiff(logits, ref.narrow(0, ref.size(0) - 3, 3)), kTolerance);
  }
}

// (f) greedy generation with the cache equals greedy decoding by full recomputation; so does a
// speculative loop that verifies draft trees (one correct branch, wrong siblings) and compacts.
TEST_P(ModelOracle, GreedyGenerationMatchesRecomputation) {
  const auto prompt = RandomTokens(rng_, 5, config_.vocab_size);
  const int64_t steps = 24;
  const std::vector<int64_t> expected = GreedyByRecomputation(*model_, prompt, steps);

  // Plain decoding with the cache.
  {
    tb::KvCache cache = model_->NewCache(64);
    std::vector<int64_t> seq = prompt;
    torch::Tensor logits = model_->Forward(cache, prompt);
    cache.CommitPrefix(static_cast<int64_t>(prompt.size()));
    for (int64_t s = 0; s < steps; ++s) {
      seq.push_back(Argmax(logits[logits.size(0) - 1]));
      if (s + 1 < steps) {
        logits = model_->Forward(cache, std::vector<int64_t>{seq.back()});
        cache.CommitPrefix(1);
      }
    }
    EXPECT_EQ(seq, expected);
  }

  // Speculative decoding with tree drafts: the root is the last generated token (not yet in
  // the cache); below it a branch that follows the true continuation for a random number of
  // tokens, then diverges, plus wrong siblings.
  {
    tb::KvCache cache = model_->NewCache(96);
    std::vector<int64_t> seq = prompt;
    const torch::Tensor prefill = model_->Forward(cache, std::vector<int64_t>(prompt.begin(), prompt.end() - 1));
    cache.CommitPrefix(static_cast<int64_t>(prompt.size()) - 1);
    (void)prefill;
    int64_t forwards = 0;
    std::uniform_int_distribution<int> depth_dist(0, 4);
    while (static_cast<int64_t>(seq.size()) < static_cast<int64_t>(expected.size())) {
      tb::TreeInput tree;
      tree.tokens.push_back(seq.back());
      tree.parents.push_back(-1);
      const int correct = depth_dist(rng_);
      int32_t parent = 0;
      for (int d = 0; d < 5; ++d) {
        const size_t at = seq.size() + d;
        const int64_t truth = at < expected.size() ? expected[at] : 0;
        const int64_t wrong = (truth + 1 + d) % config_.vocab_size;
        // A wrong sibling first, then the node we continue from (correct up to depth `correct`).
        tree.tokens.push_back(wrong);
        tree.parents.push_back(parent);
        tree.tokens.push_back(d < correct ? truth : (truth + 7) % config_.vocab_size);
        tree.parents.push_back(parent);
        parent = static_cast<int32_t>(tree.tokens.size()) - 1;
      }
      const torch::Tensor logits = model_->Forward(cache, tree);
      ++forwards;
      // Greedy verification: follow the child equal to the argmax at its parent.
      std::vector<int32_t> accepted = {0};
      int32_t current = 0;
      for (;;) {
        const int64_t predicted = Argmax(logits[current]);
        int32_t next = -1;
        for (int32_t i = current + 1; i < static_cast<int32_t>(tree.tokens.size()); ++i) {
          if (tree.parents[i] == current && tree.tokens[i] == predicted) next = i;
        }
        if (next < 0) {
          // Commit the accepted nodes; the bonus token is the root of the next tree.
          cache.Commit(accepted);
          for (size_t j = 1; j < accepted.size(); ++j) seq.push_back(tree.tokens[accepted[j]]);
          seq.push_back(predicted);
          break;
        }
        accepted.push_back(next);
        current = next;
      }
    }
    seq.resize(expected.size());
    EXPECT_EQ(seq, expected);
    EXPECT_LT(forwards, steps);  // drafts were accepted at least sometimes
  }
}

INSTANTIATE_TEST_SUITE_P(
    Checkpoints, ModelOracle,
    ::testing::Values(Variant{"PlainUntiedF32", 4, false, torch::kFloat32, false},
                      Variant{"GqaTiedF32", 2, true, torch::kFloat32, false},
                      Variant{"GqaUntiedF16", 2, false, torch::kFloat16, false},
                      Variant{"MqaTiedBF16", 1, true, torch::kBFloat16, false},
                      Variant{"PlainTiedShardedF32", 4, true, torch::kFloat32, true},
                      Variant{"GqaUntiedShardedBF16", 2, false, torch::kBFloat16, true}),
    [](const ::testing::TestParamInfo<Variant>& info) { return std::string(info.param.name); });

// ---------------------------------------------------------------------------------------------
// Forward / Commit argument errors

class ForwardErrors : public ::testing::Test {
 protected:
  tb::LlamaConfig config_ = TinyConfig(2, false);
  tb::Model model_ = tb::Model::FromTensors(config_, tb::MakeRandomLlamaWeights(config_, 3));
};

TEST_F(ForwardErrors, RejectsBadInputs) {
  tb::KvCache cache = model_.NewCache(8);
  ExpectError([&] { model_.Forward(cache, std::vector<int64_t>{}); }, tb::ErrorCode::kInvalidArgument, {"empty"});
  ExpectError([&] { model_.Forward(cache, std::vector<int64_t>{1, 64}); }, tb::ErrorCode::kInvalidArgument, {"tokens[1]", "64"});
  ExpectError([&] { model_.Forward(cache, tb::TreeInput{{1, 2}, {-1, 1}}); }, tb::ErrorCode::kInvalidArgument,
              {"parents[1]"});
  ExpectError([&] { model_.Forward(cache, tb::TreeInput{{1, 2}, {-1}}); }, tb::ErrorCode::kInvalidArgument,
              {"parents"});
  ExpectError([&] { model_.Forward(cache, std::vector<int64_t>(9, 1)); }, tb::ErrorCode::kCapacity, {"capacity 8"});
  ExpectError([&] { model_.NewCache(0); }, tb::ErrorCode::kCapacity, {"capacity"});
  tb::KvCache other = tb::Model::FromTensors(TinyConfig(4, false), tb::MakeRandomLlamaWeights(TinyConfig(4, false), 3))
                          .NewCache(8);
  ExpectError([&] { model_.Forward(other, std::vector<int64_t>{1}); }, tb::ErrorCode::kInvalidArgument, {"KV cache"});
}

TEST_F(ForwardErrors, LibtorchFailuresComeOutAsSamErrors) {
  // A cache of 2^40 positions cannot be allocated: libtorch throws c10::Error, the caller gets
  // the one error family (kCapacity, naming the call).
  try {
    model_.NewCache(int64_t{1} << 40);
    ADD_FAILURE() << "a 2^40-position cache was allocated";
  } catch (const tb::Error& e) {
    EXPECT_EQ(e.code(), tb::ErrorCode::kCapacity) << e.what();
    EXPECT_NE(std::string(e.what()).find("NewCache"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("memory"), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a sam::Error: " << e.what();
  }
}

TEST_F(ForwardErrors, CommitRejectsNonPaths) {
  tb::KvCache cache = model_.NewCache(16);
  model_.Forward(cache, tb::TreeInput{{1, 2, 3, 4}, {-1, 0, 0, 1}});
  ExpectError([&] { cache.Commit({0, 2, 3}); }, tb::ErrorCode::kInvalidArgument, {"accepted[2]", "parent 1"});
  ExpectError([&] { cache.Commit({1}); }, tb::ErrorCode::kInvalidArgument, {"accepted[0]"});
  ExpectError([&] { cache.Commit({0, 7}); }, tb::ErrorCode::kInvalidArgument, {"accepted[1]", "7"});
  ExpectError([&] { cache.CommitPrefix(3); }, tb::ErrorCode::kInvalidArgument, {"accepted[2]"});
  EXPECT_EQ(cache.length(), 0);  // failed commits change nothing
  cache.Commit({0, 1, 3});
  EXPECT_EQ(cache.length(), 3);
  ExpectError([&] { cache.Commit({0}); }, tb::ErrorCode::kInvalidArgument, {"0 nodes pending"});
}

// The reduced-precision path (casts around RmsNorm, float32 softmax, cache in the model dtype)
// runs on CPU with bf16; it must stay close to fp32 through prefill, a tree and a commit.
TEST(ReducedPrecision, Bf16OnCpuCloseToFp32) {
  const tb::LlamaConfig config = TinyConfig(2, false);
  const tb::NamedTensors weights = tb::MakeRandomLlamaWeights(config, 11);
  const tb::Model fp32 = tb::Model::FromTensors(config, weights);
  const tb::Model bf16 = tb::Model::FromTensors(config, weights, {.device = "cpu", .dtype = "bf16"});
  std::mt19937 rng(5);
  const auto prefix = RandomTokens(rng, 9, config.vocab_size);
  const tb::TreeInput tree = SampleTree(rng, config.vocab_size);
  const auto next = RandomTokens(rng, 2, config.vocab_size);
  std::vector<torch::Tensor> outputs[2];
  for (int m = 0; m < 2; ++m) {
    const tb::Model& model = m == 0 ? fp32 : bf16;
    tb::KvCache cache = model.NewCache(32);
    EXPECT_EQ(cache.Keys(0).scalar_type(), model.dtype());
    outputs[m].push_back(model.Forward(cache, prefix));
    cache.CommitPrefix(static_cast<int64_t>(prefix.size()));
    outputs[m].push_back(model.Forward(cache, tree));
    cache.Commit({5, 6, 9});
    outputs[m].push_back(model.Forward(cache, next));
  }
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(outputs[1][i].scalar_type(), torch::kFloat32);
    EXPECT_LT(MaxAbsDiff(outputs[0][i], outputs[1][i]), 0.15) << "output " << i;
  }
}

TEST(SlidingWindow, CacheLargerThanWindowIsRefused) {
  tb::LlamaConfig config = TinyConfig(2, false);
  config.sliding_window = 16;
  const tb::Model model = tb::Model::FromTensors(config, tb::MakeRandomLlamaWeights(config, 3));
  EXPECT_EQ(model.NewCache(16).capacity(), 16);
  ExpectError([&] { model.NewCache(17); }, tb::ErrorCode::kCapacity, {"sliding_window"});
}

// ---------------------------------------------------------------------------------------------
// GPU (label gpu; skipped without CUDA)

TEST(Gpu, CudaHalfAndBfloatMatchCpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "CUDA not available";
  TempDir dir;
  const tb::LlamaConfig config = TinyConfig(2, false);
  const tb::NamedTensors weights = tb::MakeRandomLlamaWeights(config, 5);
  WriteModelDir(dir.path(), config, weights, torch::kFloat32, false);
  const tb::Model cpu = tb::Model::Load(dir.path());
  std::mt19937 rng(9);
  const auto prefix = RandomTokens(rng, 9, config.vocab_size);
  const tb::TreeInput tree = SampleTree(rng, config.vocab_size);
  const std::vector<int32_t> accepted = {0, 1, 3};
  const auto next = RandomTokens(rng, 2, config.vocab_size);

  auto run = [&](const tb::Model& model) {
    tb::KvCache cache = model.NewCache(32);
    model.Forward(cache, prefix);
    cache.CommitPrefix(static_cast<int64_t>(prefix.size()));
    const torch::Tensor tree_logits = model.Forward(cache, tree);
    cache.Commit(accepted);
    return std::make_pair(tree_logits.cpu(), model.Forward(cache, next).cpu());
  };
  const auto expected = run(cpu);
  for (const auto& [dtype, tolerance] : {std::pair<std::string, double>{"fp32", 1e-3},
                                         {"fp16", 5e-2}, {"bf16", 2.5e-1}}) {
    const tb::Model gpu = tb::Model::Load(dir.path(), {.device = "cuda", .dtype = dtype});
    EXPECT_TRUE(gpu.device().is_cuda());
    EXPECT_TRUE(gpu.device().has_index());  // as its tensors report it ("cuda:0")
    const auto got = run(gpu);
    EXPECT_EQ(got.first.scalar_type(), torch::kFloat32);
    EXPECT_LT(MaxAbsDiff(got.first, expected.first), tolerance) << dtype;
    EXPECT_LT(MaxAbsDiff(got.second, expected.second), tolerance) << dtype;
  }
  EXPECT_EQ(tb::Model::Load(dir.path(), {.device = "cuda", .dtype = ""}).dtype(), torch::kFloat16);
}

}  // namespace
