#include "sam/torch/llama_config.h"

#include <unistd.h>
#include <cerrno>
#include <cstdint>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "sam/format/file_checks.h"
#include "torch_errors.h"

namespace sam::torch_backend {
namespace {

[[noreturn]] void ConfigError(const std::string& source, const std::string& what) {
  throw Error(ErrorCode::kBadModelConfig, {.file = source}, what);
}

int64_t RequiredInt(const nlohmann::json& j, const char* field, const std::string& source) {
  if (!j.contains(field)) ConfigError(source, std::string("field '") + field + "' is missing");
  if (!j[field].is_number_integer()) {
    ConfigError(source, std::string("field '") + field + "' is not an integer: " + j[field].dump());
  }
  return j[field].get<int64_t>();
}

// Optional fields may be absent or null; both mean "use the default".
bool Present(const nlohmann::json& j, const char* field) {
  return j.contains(field) && !j[field].is_null();
}

int64_t OptionalInt(const nlohmann::json& j, const char* field, int64_t fallback,
                    const std::string& source) {
  return Present(j, field) ? RequiredInt(j, field, source) : fallback;
}

double OptionalNumber(const nlohmann::json& j, const char* field, double fallback,
                      const std::string& source) {
  if (!Present(j, field)) return fallback;
  if (!j[field].is_number()) {
    ConfigError(source, std::string("field '") + field + "' is not a number: " + j[field].dump());
  }
  return j[field].get<double>();
}

bool OptionalBool(const nlohmann::json& j, const char* field, bool fallback, const std::string& source) {
  if (!Present(j, field)) return fallback;
  if (!j[field].is_boolean()) {
    ConfigError(source, std::string("field '") + field + "' is not a boolean: " + j[field].dump());
  }
  return j[field].get<bool>();
}

}  // namespace

LlamaConfig LlamaConfig::FromJsonText(std::string_view text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    ConfigError(source, std::string("not valid JSON: ") + e.what());
  }
  if (!j.is_object()) ConfigError(source, "not a JSON object");

  LlamaConfig c;
  if (Present(j, "architectures")) {
    const auto& archs = j["architectures"];
    if (!archs.is_array() || archs.size() != 1 || !archs[0].is_string()) {
      ConfigError(source, "field 'architectures' must be a list of one string, found " + archs.dump());
    }
    c.architecture = archs[0].get<std::string>();
    if (c.architecture != "LlamaForCausalLM" && c.architecture != "MistralForCausalLM") {
      ConfigError(source, "field 'architectures': unsupported architecture '" + c.architecture +
                              "' (supported: LlamaForCausalLM, MistralForCausalLM)");
    }
  } else {
    const std::string model_type =
        Present(j, "model_type") && j["model_type"].is_string() ? j["model_type"].get<std::string>() : "";
    if (model_type == "llama") {
      c.architecture = "LlamaForCausalLM";
    } else if (model_type == "mistral") {
      c.architecture = "MistralForCausalLM";
    } else {
      ConfigError(source, "field 'architectures' is missing and 'model_type' is '" + model_type +
                              "' (supported: llama, mistral)");
    }
  }
  if (Present(j, "hidden_act")) {
    if (!j["hidden_act"].is_string() || j["hidden_act"].get<std::string>() != "silu") {
      ConfigError(source, "field 'hidden_act': unsupported activation " + j["hidden_act"].dump() +
                              " (supported: \"silu\")");
    }
  }
  if (Present(j, "rope_scaling")) {
    const nlohmann::json& r = j["rope_scaling"];
    const std::string type = !r.is_object()                                ? ""
                             : r.contains("rope_type") && r["rope_type"].is_string() ? r["rope_type"].get<std::string>()
                             : r.contains("type") && r["type"].is_string() ? r["type"].get<std::string>()
                                                                           : "";
    if (type == "default") {
      // Plain rotary embeddings, as without rope_scaling.
    } else if (type == "llama3") {
      c.rope_scaling.type = type;
      for (const char* field : {"factor", "low_freq_factor", "high_freq_factor"})
        if (!r.contains(field) || !r[field].is_number())
          ConfigError(source, std::string("field 'rope_scaling.") + field +
                                  "' is missing or not a number (rope_type llama3)");
      c.rope_scaling.factor = r["factor"].get<double>();
      c.rope_scaling.low_freq_factor = r["low_freq_factor"].get<double>();
      c.rope_scaling.high_freq_factor = r["high_freq_factor"].get<double>();
      c.rope_scaling.original_max_position_embeddings =
          RequiredInt(r, "original_max_position_embeddings", source);
    } else {
      ConfigError(source, "field 'rope_scaling' is set (" + r.dump() +
                              "); only rope_type \"llama3\" scaling is supported");
    }
  }
  for (const char* bias : {"attention_bias", "mlp_bias"}) {
    if (OptionalBool(j, bias, false, source)) {
      ConfigError(source, std::string("field '") + bias + "' is true; biases are not supported");
    }
  }
  c.hidden_size = RequiredInt(j, "hidden_size", source);
  c.intermediate_size = RequiredInt(j, "intermediate_size", source);
  c.num_hidden_layers = RequiredInt(j, "num_hidden_layers", source);
  c.num_attention_heads = RequiredInt(j, "num_attention_heads", source);
  c.num_key_value_heads = OptionalInt(j, "num_key_value_heads", c.num_attention_heads, source);
  c.vocab_size = RequiredInt(j, "vocab_size", source);
  if (!Present(j, "head_dim") && c.num_attention_heads > 0 &&
      c.hidden_size % c.num_attention_heads != 0) {
    ConfigError(source, "hidden_size (" + std::to_string(c.hidden_size) +
                            ") is not a multiple of num_attention_heads (" +
                            std::to_string(c.num_attention_heads) + ") and 'head_dim' is not given");
  }
  c.head_dim = OptionalInt(j, "head_dim",
                           c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0, source);
  c.rms_norm_eps = OptionalNumber(j, "rms_norm_eps", c.rms_norm_eps, source);
  c.rope_theta = OptionalNumber(j, "rope_theta", c.rope_theta, source);
  c.max_position_embeddings = OptionalInt(j, "max_position_embeddings", c.max_position_embeddings, source);
  c.tie_word_embeddings = OptionalBool(j, "tie_word_embeddings", false, source);
  c.sliding_window = OptionalInt(j, "sliding_window", 0, source);
  if (Present(j, "torch_dtype")) {
    if (!j["torch_dtype"].is_string()) ConfigError(source, "field 'torch_dtype' is not a string");
    c.torch_dtype = j["torch_dtype"].get<std::string>();
  }
  if (Present(j, "sdsat_tokens")) {
    const auto& ids = j["sdsat_tokens"];
    if (!ids.is_array() || ids.empty())
      ConfigError(source, "field 'sdsat_tokens' must be a non-empty list of token ids, found " +
                              ids.dump());
    for (const auto& id : ids) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > UINT32_MAX)
        ConfigError(source, "field 'sdsat_tokens' holds " + id.dump() + ", not a token id");
      c.sdsat_tokens.push_back(static_cast<uint32_t>(id.get<int64_t>()));
    }
  }
  c.Validate(source);
  return c;
}

LlamaConfig LlamaConfig::Load(const std::filesystem::path& config_json) {
  // Never blocks (a FIFO is refused); a directory is named as one.
  const int fd = internal::OpenRegularFile(config_json.string(), "model config");
  std::string text;
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > (size_t{64} << 20)) {
      ::close(fd);
      throw Error(ErrorCode::kBadModelConfig,
                  config_json.string() + ": more than 64 MiB, not a model's config.json");
    }
  }
  ::close(fd);
  return FromJsonText(text, config_json.string());
}

void LlamaConfig::Validate(const std::string& source) const {
  auto positive = [&](int64_t value, const char* field) {
    if (value <= 0) {
      ConfigError(source, std::string("field '") + field + "' must be positive, found " +
                              std::to_string(value));
    }
  };
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(num_key_value_heads, "num_key_value_heads");
  positive(head_dim, "head_dim");
  positive(vocab_size, "vocab_size");
  positive(max_position_embeddings, "max_position_embeddings");
  if (num_attention_heads % num_key_value_heads != 0) {
    ConfigError(source, "num_attention_heads (" + std::to_string(num_attention_heads) +
                            ") is not a multiple of num_key_value_heads (" +
                            std::to_string(num_key_value_heads) + ")");
  }
  if (head_dim % 2 != 0) {
    ConfigError(source, "head_dim " + std::to_string(head_dim) + " is odd; rotary embeddings need it even");
  }
  if (!(rms_norm_eps > 0.0)) ConfigError(source, "field 'rms_norm_eps' must be positive");
  if (!(rope_theta > 0.0)) ConfigError(source, "field 'rope_theta' must be positive");
  if (rope_scaling.type == "llama3") {
    if (!(rope_scaling.factor > 0.0) || !(rope_scaling.low_freq_factor > 0.0) ||
        !(rope_scaling.high_freq_factor > rope_scaling.low_freq_factor) ||
        rope_scaling.original_max_position_embeddings <= 0)
      ConfigError(source, "field 'rope_scaling': llama3 needs factor > 0, 0 < low_freq_factor < "
                          "high_freq_factor and original_max_position_embeddings > 0");
  }
  if (sliding_window < 0) ConfigError(source, "field 'sliding_window' must be non-negative");
  for (const uint32_t id : sdsat_tokens)
    if (static_cast<int64_t>(id) >= vocab_size)
      ConfigError(source, "field 'sdsat_tokens': id " + std::to_string(id) +
                              " is outside the vocabulary (" + std::to_string(vocab_size) + " tokens)");
  if (!torch_dtype.empty() && torch_dtype != "float32" && torch_dtype != "float16" &&
      torch_dtype != "bfloat16") {
    ConfigError(source, "field 'torch_dtype': unsupported value '" + torch_dtype +
                            "' (supported: float32, float16, bfloat16)");
  }
}

std::string LlamaConfig::ToJsonText() const {
  nlohmann::json j = {
      {"architectures", {architecture}},
      {"model_type", architecture == "MistralForCausalLM" ? "mistral" : "llama"},
      {"hidden_act", "silu"},
      {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size},
      {"num_hidden_layers", num_hidden_layers},
      {"num_attention_heads", num_attention_heads},
      {"num_key_value_heads", num_key_value_heads},
      {"head_dim", head_dim},
      {"rms_norm_eps", rms_norm_eps},
      {"rope_theta", rope_theta},
      {"vocab_size", vocab_size},
      {"max_position_embeddings", max_position_embeddings},
      {"tie_word_embeddings", tie_word_embeddings},
  };
  if (sliding_window > 0) j["sliding_window"] = sliding_window;
  if (!rope_scaling.type.empty())
    j["rope_scaling"] = {{"rope_type", rope_scaling.type},
                         {"factor", rope_scaling.factor},
                         {"low_freq_factor", rope_scaling.low_freq_factor},
                         {"high_freq_factor", rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings",
                          rope_scaling.original_max_position_embeddings}};
  if (!torch_dtype.empty()) j["torch_dtype"] = torch_dtype;
  if (!sdsat_tokens.empty()) j["sdsat_tokens"] = sdsat_tokens;
  return j.dump(2);
}

}  // namespace sam::torch_backend
