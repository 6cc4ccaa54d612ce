#include "sam/torch/model.h"

#include "torch_errors.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

namespace sam::torch_backend {
namespace {

std::string ShapeString(torch::IntArrayRef shape) {
  std::ostringstream out;
  out << '[';
  for (size_t i = 0; i < shape.size(); ++i) out << (i ? ", " : "") << shape[i];
  out << ']';
  return out.str();
}

[[noreturn]] void InvalidArgument(const std::string& what) {
  throw Error(ErrorCode::kInvalidArgument, what);
}

torch::ScalarType ParseDtypeOption(const std::string& text, const torch::Device& device,
                                   const LlamaConfig& config) {
  if (text.empty()) {
    if (device.is_cpu()) return torch::kFloat32;
    return config.torch_dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat16;
  }
  torch::ScalarType dtype;
  if (text == "fp32" || text == "float32") {
    dtype = torch::kFloat32;
  } else if (text == "fp16" || text == "float16") {
    dtype = torch::kFloat16;
  } else if (text == "bf16" || text == "bfloat16") {
    dtype = torch::kBFloat16;
  } else {
    throw Error(ErrorCode::kDtype, "option dtype: unsupported value '" + text +
                                       "' (supported: fp32, fp16, bf16)");
  }
  if (device.is_cpu() && dtype == torch::kFloat16) {
    throw Error(ErrorCode::kDtype, "option dtype: fp16 is not supported on cpu; use fp32 or bf16");
  }
  return dtype;
}

torch::Device ParseDevice(const std::string& text) {
  try {
    torch::Device device(text);
    if (!device.is_cpu() && !device.is_cuda()) {
      throw Error(ErrorCode::kInvalidArgument,
                  "option device: unsupported device '" + text + "' (supported: cpu, cuda, cuda:N)");
    }
    return device;
  } catch (const c10::Error&) {
    throw Error(ErrorCode::kInvalidArgument,
                "option device: cannot parse '" + text + "' (supported: cpu, cuda, cuda:N)");
  }
}

// A named checkpoint tensor and where it came from (for error messages).
struct Found {
  torch::Tensor tensor;  // undefined when missing
  std::string where;
};

// HF rotate_half: the two halves of the head dimension, (x1, x2) -> (-x2, x1).
torch::Tensor RotateHalf(const torch::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// TreeInput

TreeInput TreeInput::Linear(std::vector<int64_t> tokens) {
  TreeInput input;
  input.parents.resize(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) input.parents[i] = static_cast<int32_t>(i) - 1;
  input.tokens = std::move(tokens);
  return input;
}

// ---------------------------------------------------------------------------------------------
// KvCache

torch::Tensor KvCache::Keys(int64_t layer) const {
  if (layer < 0 || layer >= num_layers()) {
    InvalidArgument("KvCache::Keys: layer " + std::to_string(layer) + " out of range");
  }
  return storage_.select(0, layer).select(0, 0);
}

torch::Tensor KvCache::Values(int64_t layer) const {
  if (layer < 0 || layer >= num_layers()) {
    InvalidArgument("KvCache::Values: layer " + std::to_string(layer) + " out of range");
  }
  return storage_.select(0, layer).select(0, 1);
}

void KvCache::Commit(const std::vector<int32_t>& accepted) {
  const auto n = static_cast<int32_t>(pending_parents_.size());
  int32_t previous = -1;
  bool identity = true;  // accepted == {0, 1, ..., k-1}: slots are already in place
  for (size_t j = 0; j < accepted.size(); ++j) {
    const int32_t node = accepted[j];
    if (node < 0 || node >= n) {
      InvalidArgument("KvCache::Commit: accepted[" + std::to_string(j) + "] = " +
                      std::to_string(node) + " is not a node of the last input (" +
                      std::to_string(n) + " nodes pending)");
    }
    if (pending_parents_[node] != previous) {
      InvalidArgument("KvCache::Commit: accepted[" + std::to_string(j) + "] = " +
                      std::to_string(node) + " has parent " + std::to_string(pending_parents_[node]) +
                      ", expected " + std::to_string(previous) + " (not a root-down path)");
    }
    identity = identity && node == static_cast<int32_t>(j);
    previous = node;
  }
  const auto k = static_cast<int64_t>(accepted.size());
  if (k > 0 && !identity) {
    // Source slots are >= destination slots (parents[i] < i makes a path's indices increasing),
    // so gather first, then write: an in-place scatter could read an overwritten slot.
    std::vector<int64_t> source(accepted.size());
    for (size_t j = 0; j < accepted.size(); ++j) source[j] = length_ + accepted[j];
    const torch::Tensor index =
        torch::tensor(source, torch::TensorOptions().dtype(torch::kInt64)).to(storage_.device());
    storage_.narrow(4, length_, k).copy_(storage_.index_select(4, index));
  }
  length_ += k;
  pending_parents_.clear();
}

void KvCache::CommitPrefix(int64_t k) {
  if (k < 0 || k > pending()) {
    InvalidArgument("KvCache::CommitPrefix: k = " + std::to_string(k) + " but " +
                    std::to_string(pending()) + " nodes are pending");
  }
  std::vector<int32_t> accepted(static_cast<size_t>(k));
  for (int64_t j = 0; j < k; ++j) accepted[j] = static_cast<int32_t>(j);
  Commit(accepted);
}

void KvCache::Truncate(int64_t new_length) {
  if (new_length < 0 || new_length > length_) {
    InvalidArgument("KvCache::Truncate: new length " + std::to_string(new_length) +
                    " outside [0, " + std::to_string(length_) + "]");
  }
  length_ = new_length;
  pending_parents_.clear();
}

// ---------------------------------------------------------------------------------------------
// Weights

std::vector<std::pair<std::string, std::vector<int64_t>>> LlamaTensorShapes(const LlamaConfig& c) {
  const int64_t q_dim = c.num_attention_heads * c.head_dim;
  const int64_t kv_dim = c.num_key_value_heads * c.head_dim;
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  shapes.push_back({"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}});
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    shapes.push_back({p + "input_layernorm.weight", {c.hidden_size}});
    shapes.push_back({p + "self_attn.q_proj.weight", {q_dim, c.hidden_size}});
    shapes.push_back({p + "self_attn.k_proj.weight", {kv_dim, c.hidden_size}});
    shapes.push_back({p + "self_attn.v_proj.weight", {kv_dim, c.hidden_size}});
    shapes.push_back({p + "self_attn.o_proj.weight", {c.hidden_size, q_dim}});
    shapes.push_back({p + "post_attention_layernorm.weight", {c.hidden_size}});
    shapes.push_back({p + "mlp.gate_proj.weight", {c.intermediate_size, c.hidden_size}});
    shapes.push_back({p + "mlp.up_proj.weight", {c.intermediate_size, c.hidden_size}});
    shapes.push_back({p + "mlp.down_proj.weight", {c.hidden_size, c.intermediate_size}});
  }
  shapes.push_back({"model.norm.weight", {c.hidden_size}});
  if (!c.tie_word_embeddings) shapes.push_back({"lm_head.weight", {c.vocab_size, c.hidden_size}});
  return shapes;
}

NamedTensors MakeRandomLlamaWeights(const LlamaConfig& config, uint64_t seed) {
  config.Validate("MakeRandomLlamaWeights");
  at::NoGradGuard no_grad;
  torch::Generator generator = at::detail::createCPUGenerator(seed);
  const auto options = torch::TensorOptions().dtype(torch::kFloat32);
  NamedTensors weights;
  for (const auto& [name, shape] : LlamaTensorShapes(config)) {
    torch::Tensor t = torch::randn(shape, generator, options);
    if (shape.size() == 1) {
      t = 1.0 + 0.1 * t;  // norm gains near one
    } else if (name != "model.embed_tokens.weight") {
      t /= std::sqrt(static_cast<double>(shape[1]));  // unit-variance outputs for unit inputs
      if (name == "lm_head.weight") t *= 2.0;         // spread logits: no near-ties in argmax
    }
    weights.emplace_back(name, std::move(t));
  }
  return weights;
}

// ---------------------------------------------------------------------------------------------
// Model construction

template <typename Lookup>
Model Model::Build(const LlamaConfig& config, Lookup&& lookup, const ModelOptions& options) {
  config.Validate();
  at::NoGradGuard no_grad;
  Model model;
  model.config_ = config;
  model.device_ = ParseDevice(options.device);
  if (model.device_.is_cuda() && !torch::cuda::is_available()) {
    throw Error(ErrorCode::kInvalidArgument, "option device: '" + options.device +
                                                 "' requested but CUDA is not available");
  }
  // "cuda" names the current CUDA device; the tensors made there carry its index ("cuda:0"),
  // and torch::Device compares the index: the model keeps the device its tensors report.
  if (model.device_.is_cuda() && !model.device_.has_index())
    model.device_ = torch::empty({0}, torch::TensorOptions().device(model.device_)).device();
  model.dtype_ = ParseDtypeOption(options.dtype, model.device_, config);
  const auto target = torch::TensorOptions().dtype(model.dtype_).device(model.device_);

  // The checkpoint must hold config.json's last layer before anything is sized by the layer
  // count (a wrong num_hidden_layers would otherwise cost memory and time per layer first).
  {
    const std::string last = "model.layers." + std::to_string(config.num_hidden_layers - 1) +
                             ".input_layernorm.weight";
    const Found found = lookup(last);
    if (!found.tensor.defined())
      throw Error(ErrorCode::kMissingTensor,
                  found.where + ": tensor '" + last + "' is missing (config.json says " +
                      std::to_string(config.num_hidden_layers) + " layers)");
  }
  std::map<std::string, torch::Tensor> loaded;
  for (const auto& [name, shape] : LlamaTensorShapes(config)) {
    Found found = lookup(name);
    if (!found.tensor.defined()) {
      throw Error(ErrorCode::kMissingTensor,
                  found.where + ": tensor '" + name + "' is missing (expected shape " +
                      ShapeString(shape) + ")");
    }
    const auto type = found.tensor.scalar_type();
    if (type != torch::kFloat32 && type != torch::kFloat16 && type != torch::kBFloat16) {
      throw Error(ErrorCode::kDtype, found.where + ": tensor '" + name + "' has dtype " +
                                         SafetensorsDtypeName(type) +
                                         ", expected F32, F16 or BF16");
    }
    if (found.tensor.sizes() != torch::IntArrayRef(shape)) {
      throw Error(ErrorCode::kShapeMismatch,
                  found.where + ": tensor '" + name + "' has shape " +
                      ShapeString(found.tensor.sizes()) + ", expected " + ShapeString(shape));
    }
    // copy=true: the model owns its weights (never a view of a file mapping or a caller tensor).
    loaded[name] = found.tensor.to(target, /*non_blocking=*/false, /*copy=*/true).contiguous();
  }

  model.embed_tokens_ = loaded.at("model.embed_tokens.weight");
  model.final_norm_ = loaded.at("model.norm.weight");
  model.lm_head_ = config.tie_word_embeddings ? model.embed_tokens_ : loaded.at("lm_head.weight");
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string p = "model.layers." + std::to_string(i) + ".";
    Layer layer;
    layer.input_norm = loaded.at(p + "input_layernorm.weight");
    layer.q_proj = loaded.at(p + "self_attn.q_proj.weight");
    layer.k_proj = loaded.at(p + "self_attn.k_proj.weight");
    layer.v_proj = loaded.at(p + "self_attn.v_proj.weight");
    layer.o_proj = loaded.at(p + "self_attn.o_proj.weight");
    layer.post_attention_norm = loaded.at(p + "post_attention_layernorm.weight");
    layer.gate_proj = loaded.at(p + "mlp.gate_proj.weight");
    layer.up_proj = loaded.at(p + "mlp.up_proj.weight");
    layer.down_proj = loaded.at(p + "mlp.down_proj.weight");
    model.layers_.push_back(std::move(layer));
  }
  model.inv_freq_ = RopeInverseFrequencies(config).to(model.device_);
  return model;
}

torch::Tensor RopeInverseFrequencies(const LlamaConfig& config) {
  // HF: inv_freq = 1 / theta^(arange(0, d, 2) / d), in float32.
  const int64_t d = config.head_dim;
  torch::Tensor inv_freq =
      (1.0 / torch::pow(config.rope_theta,
                        torch::arange(0, d, 2, torch::TensorOptions().dtype(torch::kInt64))
                                .to(torch::kFloat32) /
                            static_cast<double>(d)))
          .to(torch::kFloat32);
  if (config.rope_scaling.type != "llama3") return inv_freq;
  // Llama 3.1's scaling, as transformers' _compute_llama3_parameters
  // (src/transformers/modeling_rope_utils.py, commit ef46806472a64b0013ed413781e3afed82bfa047):
  // wavelengths longer than original_max_position_embeddings / low_freq_factor are divided by
  // `factor`, those shorter than original / high_freq_factor are kept, and the ones between are
  // interpolated linearly in original / wavelength. Float32 tensors throughout, as there.
  const auto& s = config.rope_scaling;
  const double old_context = static_cast<double>(s.original_max_position_embeddings);
  const double low_freq_wavelen = old_context / s.low_freq_factor;
  const double high_freq_wavelen = old_context / s.high_freq_factor;
  const torch::Tensor wavelen = 2 * M_PI / inv_freq;
  torch::Tensor scaled = torch::where(wavelen > low_freq_wavelen, inv_freq / s.factor, inv_freq);
  const torch::Tensor smooth =
      (old_context / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  const torch::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
  const torch::Tensor medium =
      torch::logical_not(wavelen < high_freq_wavelen) * torch::logical_not(wavelen > low_freq_wavelen);
  return torch::where(medium, smoothed, scaled);
}

Model Model::FromTensors(const LlamaConfig& config, const NamedTensors& weights,
                         const ModelOptions& options, const std::string& source) {
  std::map<std::string, const torch::Tensor*> by_name;
  for (const auto& [name, tensor] : weights) by_name[name] = &tensor;
  auto lookup = [&](const std::string& name) {
    auto it = by_name.find(name);
    return Found{it == by_name.end() ? torch::Tensor() : *it->second, source};
  };
  return internal::TranslateTorchErrors("building the model from " + source,
                                        [&] { return Build(config, lookup, options); });
}

Model Model::Load(const std::filesystem::path& dir, const ModelOptions& options) {
  const LlamaConfig config = LlamaConfig::Load(dir / "config.json");
  const std::filesystem::path single = dir / "model.safetensors";
  const std::filesystem::path index_path = dir / "model.safetensors.index.json";
  if (std::filesystem::exists(single)) {
    const SafetensorsFile file = SafetensorsFile::Open(single);
    auto lookup = [&](const std::string& name) {
      return Found{file.Contains(name) ? file.Get(name) : torch::Tensor(), single.string()};
    };
    return internal::TranslateTorchErrors("loading the model " + dir.string(),
                                          [&] { return Build(config, lookup, options); });
  }
  if (!std::filesystem::exists(index_path)) {
    throw Error(ErrorCode::kIo, "model directory '" + dir.string() +
                                    "' has neither model.safetensors nor model.safetensors.index.json");
  }
  nlohmann::json index;
  {
    std::ifstream in(index_path, std::ios::binary);
    if (!in) throw Error(ErrorCode::kIo, "cannot open '" + index_path.string() + "'");
    try {
      index = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      throw Error(ErrorCode::kBadCheckpoint, index_path.string() + ": not valid JSON: " + e.what());
    }
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object()) {
    throw Error(ErrorCode::kBadCheckpoint, index_path.string() + ": field 'weight_map' is missing or not an object");
  }
  std::map<std::string, std::string> weight_map;  // tensor -> shard file name
  std::map<std::string, std::unique_ptr<SafetensorsFile>> shards;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string()) {
      throw Error(ErrorCode::kBadCheckpoint, index_path.string() + ": weight_map entry '" + name +
                                          "' is not a file name string");
    }
    const std::string shard = file.get<std::string>();
    const std::filesystem::path shard_path(shard);
    if (shard.empty() || shard_path.is_absolute() || shard_path.has_parent_path() || shard == "." ||
        shard == "..") {
      throw Error(ErrorCode::kBadCheckpoint, index_path.string() + ": weight_map entry '" + name +
                                          "' names '" + shard + "', not a file in the model directory");
    }
    weight_map[name] = shard;
    shards.emplace(shard, nullptr);
  }
  for (auto& [shard, file] : shards) {
    file = std::make_unique<SafetensorsFile>(SafetensorsFile::Open(dir / shard));
  }
  auto lookup = [&](const std::string& name) {
    auto it = weight_map.find(name);
    if (it == weight_map.end()) return Found{torch::Tensor(), index_path.string()};
    const SafetensorsFile& file = *shards.at(it->second);
    if (!file.Contains(name)) {
      return Found{torch::Tensor(), file.path().string() + " (listed for it in " +
                                        index_path.filename().string() + ")"};
    }
    return Found{file.Get(name), file.path().string()};
  };
  return internal::TranslateTorchErrors("loading the model " + dir.string(),
                                        [&] { return Build(config, lookup, options); });
}

KvCache Model::NewCache(int64_t capacity) const {
  if (capacity <= 0) {
    throw Error(ErrorCode::kCapacity, "NewCache: capacity must be positive, got " + std::to_string(capacity));
  }
  if (config_.sliding_window > 0 && capacity > config_.sliding_window) {
    throw Error(ErrorCode::kCapacity,
                "NewCache: capacity " + std::to_string(capacity) + " exceeds the model's sliding_window " +
                    std::to_string(config_.sliding_window) + " (sliding-window attention is not implemented)");
  }
  KvCache cache;
  cache.storage_ = internal::TranslateTorchErrors("NewCache(" + std::to_string(capacity) + ")", [&] {
    return torch::zeros(
        {config_.num_hidden_layers, 2, 1, config_.num_key_value_heads, capacity, config_.head_dim},
        torch::TensorOptions().dtype(dtype_).device(device_));
  });
  cache.capacity_ = capacity;
  return cache;
}

// ---------------------------------------------------------------------------------------------
// Forward

torch::Tensor Model::RmsNorm(const torch::Tensor& x, const torch::Tensor& weight) const {
  // As HF LlamaRMSNorm: normalise in float32, cast back, then scale.
  const torch::Tensor x32 = x.to(torch::kFloat32);
  const torch::Tensor normed = x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + config_.rms_norm_eps);
  return weight * normed.to(x.scalar_type());
}

torch::Tensor Model::Forward(KvCache& cache, const std::vector<int64_t>& tokens) const {
  return Forward(cache, TreeInput::Linear(tokens));
}

torch::Tensor Model::Forward(KvCache& cache, const TreeInput& input) const {
  return internal::TranslateTorchErrors("Forward", [&] { return ForwardImpl(cache, input, /*extend=*/false); });
}

torch::Tensor Model::Extend(KvCache& cache, const TreeInput& input) const {
  return internal::TranslateTorchErrors("Extend", [&] { return ForwardImpl(cache, input, /*extend=*/true); });
}

torch::Tensor Model::ForwardImpl(KvCache& cache, const TreeInput& input, bool extend) const {
  at::NoGradGuard no_grad;
  const auto n = static_cast<int64_t>(input.tokens.size());
  if (n == 0) InvalidArgument("Forward: empty input");
  if (input.parents.size() != input.tokens.size()) {
    InvalidArgument("Forward: " + std::to_string(input.tokens.size()) + " tokens but " +
                    std::to_string(input.parents.size()) + " parents");
  }
  if (!cache.storage_.defined() || cache.storage_.size(0) != config_.num_hidden_layers ||
      cache.storage_.size(3) != config_.num_key_value_heads ||
      cache.storage_.size(5) != config_.head_dim || cache.storage_.scalar_type() != dtype_ ||
      cache.storage_.device() != device_) {
    InvalidArgument("Forward: the KV cache was not made by this model's NewCache");
  }
  const int64_t past = cache.length_;
  // Extend: the pending nodes of the previous pass stay (slots [past, past + old)) and the new
  // nodes follow them; parents index the whole pending list.
  const int64_t old = extend ? static_cast<int64_t>(cache.pending_parents_.size()) : 0;
  const int64_t span = old + n;  // pending nodes after this pass
  if (past + span > cache.capacity_) {
    throw Error(ErrorCode::kCapacity, "Forward: " + std::to_string(past) + " cached + " +
                                          std::to_string(span) + " new positions exceed the KV cache capacity " +
                                          std::to_string(cache.capacity_));
  }

  std::vector<int32_t> parents(cache.pending_parents_.begin(), cache.pending_parents_.begin() + old);
  cache.pending_parents_.clear();  // if anything below throws, nothing is left to commit

  // Depths, linear-chain detection and token validation, on the host.
  std::vector<int64_t> depth(span);
  std::vector<float> positions(n);
  for (int64_t j = 0; j < old; ++j) depth[j] = parents[j] < 0 ? 0 : depth[parents[j]] + 1;
  bool linear = old == 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t parent = input.parents[i];
    if (parent < -1 || parent >= old + i) {
      InvalidArgument("Forward: parents[" + std::to_string(i) + "] = " + std::to_string(parent) +
                      " (must be -1 or an earlier node index)");
    }
    const int64_t token = input.tokens[i];
    if (token < 0 || token >= config_.vocab_size) {
      InvalidArgument("Forward: tokens[" + std::to_string(i) + "] = " + std::to_string(token) +
                      " outside the vocabulary [0, " + std::to_string(config_.vocab_size) + ")");
    }
    depth[old + i] = parent < 0 ? 0 : depth[parent] + 1;
    positions[i] = static_cast<float>(past + depth[old + i]);
    linear = linear && parent == i - 1;
    parents.push_back(parent);
  }

  // Additive mask over the pending block [n, old + n]: node i sees its ancestors and itself. The
  // prefix columns [0, past) are visible to every node, so that part of the mask is all zeros.
  torch::Tensor mask;
  const float kNegInf = -std::numeric_limits<float>::infinity();
  if (span > 1) {
    if (linear) {
      mask = torch::full({n, n}, kNegInf, torch::kFloat32).triu_(1);
    } else {
      // Visibility rows of every pending node (a row is its parent's plus itself).
      torch::Tensor all = torch::full({span, span}, kNegInf, torch::kFloat32);
      float* m = all.data_ptr<float>();
      for (int64_t i = 0; i < span; ++i) {
        const int32_t parent = parents[i];
        if (parent >= 0) std::copy(m + parent * span, m + parent * span + parent + 1, m + i * span);
        m[i * span + i] = 0.0f;
      }
      mask = all.narrow(0, old, n).contiguous();
    }
    mask = mask.to(device_);
  }
  const auto host_long = torch::TensorOptions().dtype(torch::kInt64);
  const torch::Tensor token_ids =
      torch::from_blob(const_cast<int64_t*>(input.tokens.data()), {n}, host_long).to(device_);
  const torch::Tensor position_ids =
      torch::from_blob(positions.data(), {n}, torch::TensorOptions().dtype(torch::kFloat32)).to(device_);
  // Rotary tables [n, 1, head_dim], computed in float32 and cast to the model dtype (as HF).
  const torch::Tensor freqs = position_ids.unsqueeze(1) * inv_freq_.unsqueeze(0);
  const torch::Tensor angles = torch::cat({freqs, freqs}, -1).unsqueeze(1);
  const torch::Tensor cos = angles.cos().to(dtype_);
  const torch::Tensor sin = angles.sin().to(dtype_);

  const int64_t heads = config_.num_attention_heads;
  const int64_t kv_heads = config_.num_key_value_heads;
  const int64_t group = heads / kv_heads;
  const int64_t head_dim = config_.head_dim;
  const int64_t total = past + span;
  const double scale = 1.0 / std::sqrt(static_cast<double>(head_dim));

  torch::Tensor x = embed_tokens_.index_select(0, token_ids);  // [n, hidden]
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    const torch::Tensor h = RmsNorm(x, layer.input_norm);
    torch::Tensor q = torch::linear(h, layer.q_proj).view({n, heads, head_dim});
    torch::Tensor k = torch::linear(h, layer.k_proj).view({n, kv_heads, head_dim});
    const torch::Tensor v = torch::linear(h, layer.v_proj).view({n, kv_heads, head_dim});
    q = q * cos + RotateHalf(q) * sin;
    k = k * cos + RotateHalf(k) * sin;

    // Append this input's K/V at slots [past, past + n); attend over [0, past + n).
    const torch::Tensor layer_cache = cache.storage_.select(0, static_cast<int64_t>(l));  // [2,1,kvh,cap,d]
    const torch::Tensor keys = layer_cache.select(0, 0).select(0, 0);    // [kvh, cap, d]
    const torch::Tensor values = layer_cache.select(0, 1).select(0, 0);  // [kvh, cap, d]
    keys.narrow(1, past + old, n).copy_(k.transpose(0, 1));
    values.narrow(1, past + old, n).copy_(v.transpose(0, 1));
    const torch::Tensor all_keys = keys.narrow(1, 0, total);
    const torch::Tensor all_values = values.narrow(1, 0, total);

    // Grouped-query attention without repeating K/V: query head h = j * group + g uses kv head
    // j (HF repeat_kv), so queries are laid out [kv_heads, group * n, d].
    const torch::Tensor grouped_q =
        q.view({n, kv_heads, group, head_dim}).permute({1, 2, 0, 3}).reshape({kv_heads, group * n, head_dim});
    torch::Tensor scores = torch::matmul(grouped_q, all_keys.transpose(1, 2))
                               .to(torch::kFloat32)
                               .mul_(scale)
                               .view({kv_heads, group, n, total});
    if (mask.defined()) scores.narrow(3, past, span).add_(mask);
    const torch::Tensor probs = torch::softmax(scores, -1).to(dtype_).view({kv_heads, group * n, total});
    const torch::Tensor attended = torch::matmul(probs, all_values)  // [kvh, group * n, d]
                                       .view({kv_heads, group, n, head_dim})
                                       .permute({2, 0, 1, 3})
                                       .reshape({n, heads * head_dim});
    x = x + torch::linear(attended, layer.o_proj);

    const torch::Tensor h2 = RmsNorm(x, layer.post_attention_norm);
    x = x + torch::linear(torch::silu(torch::linear(h2, layer.gate_proj)) * torch::linear(h2, layer.up_proj),
                          layer.down_proj);
  }
  cache.pending_parents_ = std::move(parents);
  return torch::linear(RmsNorm(x, final_norm_), lm_head_).to(torch::kFloat32);
}

}  // namespace sam::torch_backend
