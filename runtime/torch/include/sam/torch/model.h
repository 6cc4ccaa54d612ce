// Llama-family decoder (Llama, Mistral) on libtorch with a preallocated KV cache, tree attention
// and KV compaction, for speculative verification: a draft tree is scored in one forward pass.
//
//   namespace tb = sam::torch_backend;
//   tb::Model model = tb::Model::Load("/models/llama", {.device = "cuda"});
//   tb::KvCache cache = model.NewCache(/*capacity=*/4096);
//   torch::Tensor logits = model.Forward(cache, prompt_ids);      // prefill: [n, vocab]
//   cache.CommitPrefix(prompt_ids.size());
//   // Draft tree: node i hangs off parents[i] (-1 = off the committed prefix).
//   logits = model.Forward(cache, tb::TreeInput{{a, b, c}, {-1, 0, 0}});
//   cache.Commit({0, 2});                                          // accepted path a -> c
//
// Semantics of Forward(cache, input) with n = input.tokens.size() and L = cache.length():
//   * node i attends to the committed positions [0, L), to its ancestors within the input and to
//     itself; its rotary position is L + depth(i) (a root-level node has depth 0);
//   * the nodes' keys/values are written to cache slots [L, L + n) but not committed: the next
//     Forward overwrites them unless Commit() keeps some;
//   * returns logits [n, vocab] as float32 ON THE MODEL'S DEVICE (call .cpu() if needed), row i
//     being the next-token logits after node i.
// Attention uses an additive 0 / -inf mask over [n, L + n] (the prefix columns are all zero, so
// only the [n, n] in-input block is materialised) and a float32 softmax.
//
// Errors: Error with a code (see error.h); messages name the file / tensor / field. libtorch's
// own exceptions (c10::Error) are translated: Error(kCapacity) when memory runs out (NewCache,
// Forward), else Error(kInternal).
// Thread safety: a Model is immutable after construction; Forward() may run concurrently on
// different caches. A KvCache must not be used by two threads at once.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "sam/torch/error.h"
#include "sam/torch/llama_config.h"
#include "sam/torch/safetensors.h"

namespace sam::torch_backend {

struct ModelOptions {
  // "cpu", "cuda" or "cuda:N".
  std::string device = "cpu";
  // Compute / storage dtype: "fp32", "fp16" or "bf16" (also "float32", "float16", "bfloat16").
  // Empty = automatic: fp32 on cpu; on cuda bf16 if config.json's torch_dtype is bfloat16, else
  // fp16. fp16 on cpu is refused (Error(kDtype)): libtorch's CPU kernels lack half matmuls.
  std::string dtype;
};

// One forward pass worth of draft nodes. parents[i] is the index of node i's parent in this
// input, or -1 for a node hanging directly off the committed prefix; parents[i] < i.
struct TreeInput {
  std::vector<int64_t> tokens;
  std::vector<int32_t> parents;

  // A linear chain: parents = {-1, 0, 1, ..., n-2}.
  static TreeInput Linear(std::vector<int64_t> tokens);
};

// Per-session key/value cache, preallocated for `capacity` positions: for every layer, keys and
// values of shape [1, kv_heads, capacity, head_dim] in the model's dtype and device.
// Move-only: a copy would silently alias the same storage.
class KvCache {
 public:
  KvCache() = default;
  KvCache(KvCache&&) = default;
  KvCache& operator=(KvCache&&) = default;
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  int64_t length() const { return length_; }      // committed positions
  int64_t capacity() const { return capacity_; }
  int64_t pending() const { return static_cast<int64_t>(pending_parents_.size()); }
  int64_t num_layers() const { return storage_.defined() ? storage_.size(0) : 0; }
  // Views [1, kv_heads, capacity, head_dim]; slots >= length() + pending() are garbage.
  torch::Tensor Keys(int64_t layer) const;
  torch::Tensor Values(int64_t layer) const;

  // Keeps the nodes `accepted` of the last Forward's input (a path from a root-level node down,
  // in order: parents[accepted[0]] == -1, parents[accepted[j]] == accepted[j-1]), moves their
  // K/V to slots [length, length + k) and sets length += k. Everything else written by the last
  // Forward is dropped. An empty `accepted` drops all. Throws Error(kInvalidArgument) if the path
  // is not a valid chain of the last input (the cache is then unchanged).
  void Commit(const std::vector<int32_t>& accepted);
  // Commit({0, 1, ..., k-1}); the first k nodes of the last input must form a chain.
  void CommitPrefix(int64_t k);
  // Forgets committed positions >= new_length (and anything pending). O(1).
  void Truncate(int64_t new_length);

 private:
  friend class Model;
  // [layers, 2 (keys, values), 1, kv_heads, capacity, head_dim]: one tensor, so that Commit
  // moves the accepted slots of every layer in one gather.
  torch::Tensor storage_;
  int64_t capacity_ = 0;
  int64_t length_ = 0;
  std::vector<int32_t> pending_parents_;  // parents of the last Forward's input
};

// Name and expected shape of every tensor a checkpoint for `config` must hold, in HF naming
// (lm_head.weight is omitted when the embeddings are tied).
std::vector<std::pair<std::string, std::vector<int64_t>>> LlamaTensorShapes(const LlamaConfig& config);

// Random float32 CPU weights for `config` (deterministic in `seed`), scaled so that activations
// and logits are O(1); for tests and benchmarks.
NamedTensors MakeRandomLlamaWeights(const LlamaConfig& config, uint64_t seed);

// The rotary inverse frequencies of a config, [head_dim / 2] float32 on the CPU: transformers'
// default rope parameters, with Llama 3.1's scaling when config.rope_scaling.type is "llama3".
torch::Tensor RopeInverseFrequencies(const LlamaConfig& config);

class Model {
 public:
  // Loads `dir`/config.json and either `dir`/model.safetensors or the shards listed in
  // `dir`/model.safetensors.index.json ({"weight_map": {tensor: file}}). Checkpoint tensors may
  // be F32, F16 or BF16; they are converted to the option's dtype. Throws Error: kIo (missing
  // files), kFormat, kConfig, kMissingTensor, kShapeMismatch, kDtype.
  static Model Load(const std::filesystem::path& dir, const ModelOptions& options = {});
  // Builds a model from in-memory tensors (HF names; extra tensors are ignored). `source` names
  // the origin in error messages.
  static Model FromTensors(const LlamaConfig& config, const NamedTensors& weights,
                           const ModelOptions& options = {}, const std::string& source = "weights");

  const LlamaConfig& config() const { return config_; }
  // The device the model's tensors are on, with its index ("cuda:0" for "cuda").
  torch::Device device() const { return device_; }
  torch::ScalarType dtype() const { return dtype_; }

  // A zeroed cache for up to `capacity` positions (prefix + one forward's input). Throws
  // Error(kCapacity) if capacity <= 0 or exceeds the config's sliding_window.
  KvCache NewCache(int64_t capacity) const;

  // Scores all nodes of `input` in one forward pass; see the file comment. Throws
  // Error(kInvalidArgument) on an empty input, mismatched sizes, bad parents, token ids outside
  // [0, vocab) or a cache from another model shape; Error(kCapacity) if length + n > capacity.
  torch::Tensor Forward(KvCache& cache, const TreeInput& input) const;
  // Linear chain convenience: Forward(cache, TreeInput::Linear(tokens)).
  torch::Tensor Forward(KvCache& cache, const std::vector<int64_t>& tokens) const;
  // Like Forward, but the nodes pending from the previous Forward/Extend stay: with m nodes
  // pending, input node i becomes pending node m + i, and input.parents[i] is -1 or an index
  // into the whole pending list (< m + i). Returns the logits of the new nodes only. A draft
  // model grows its tree one level per call this way; Commit() then takes a path of the whole
  // pending list. Same errors as Forward (capacity counts every pending node).
  torch::Tensor Extend(KvCache& cache, const TreeInput& input) const;

 private:
  struct Layer {
    torch::Tensor input_norm, q_proj, k_proj, v_proj, o_proj;
    torch::Tensor post_attention_norm, gate_proj, up_proj, down_proj;
  };
  template <typename Lookup>
  static Model Build(const LlamaConfig& config, Lookup&& lookup, const ModelOptions& options);
  torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight) const;
  torch::Tensor ForwardImpl(KvCache& cache, const TreeInput& input, bool extend) const;

  LlamaConfig config_;
  torch::Device device_ = torch::kCPU;
  torch::ScalarType dtype_ = torch::kFloat32;
  torch::Tensor embed_tokens_, final_norm_, lm_head_;
  torch::Tensor inv_freq_;  // [head_dim / 2] float32, rotary inverse frequencies
  std::vector<Layer> layers_;
};

}  // namespace sam::torch_backend
