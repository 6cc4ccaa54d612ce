// Hyper-parameters of a Llama-family decoder, parsed from a Hugging Face config.json.
//
//   auto config = sam::torch_backend::LlamaConfig::Load("/models/llama/config.json");
//   int64_t head_dim = config.head_dim;
//
// Supported: architectures LlamaForCausalLM and MistralForCausalLM (or, without "architectures",
// model_type "llama" / "mistral"), hidden_act "silu", rope_scaling absent or of type "llama3"
// (Llama 3.1+ checkpoints), no attention/mlp biases.
// Anything else throws Error(kConfig) naming the field and the value found.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>
#include <string_view>

#include "sam/torch/error.h"

namespace sam::torch_backend {

struct LlamaConfig {
  std::string architecture = "LlamaForCausalLM";
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;   // grouped-query attention; defaults to num_attention_heads
  int64_t head_dim = 0;              // defaults to hidden_size / num_attention_heads
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 2048;
  bool tie_word_embeddings = false;
  // rope_scaling {"rope_type" (or "type"): "llama3", "factor", "low_freq_factor",
  // "high_freq_factor", "original_max_position_embeddings"}: Llama 3.1's frequency-dependent
  // scaling of the rotary frequencies. `type` is empty when the config has no rope_scaling.
  struct RopeScaling {
    std::string type;
    double factor = 1.0;
    double low_freq_factor = 1.0;
    double high_freq_factor = 4.0;
    int64_t original_max_position_embeddings = 8192;
  } rope_scaling;
  int64_t sliding_window = 0;        // Mistral; 0 = none. A KV cache may not exceed it.
  std::string torch_dtype;           // "float32", "float16", "bfloat16" or empty
  // SDSAT checkpoints (tools/sdsat/finetune.py): the adaptive token ids, one (repeated k times)
  // or k of them; empty when absent. Each must be < vocab_size.
  std::vector<uint32_t> sdsat_tokens;

  // Parses config.json text; `source` names the file in error messages. Validates the result.
  static LlamaConfig FromJsonText(std::string_view text, const std::string& source = "config.json");
  // Reads and parses a config.json file. Throws Error(kIo) if unreadable.
  static LlamaConfig Load(const std::filesystem::path& config_json);
  // HF-style config.json text for this config (round-trips through FromJsonText).
  std::string ToJsonText() const;
  // Checks the invariants (positive sizes, heads divisible, ...). Throws Error(kConfig).
  void Validate(const std::string& source = "config") const;
};

}  // namespace sam::torch_backend
