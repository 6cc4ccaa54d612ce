// A draft model as a runtime::Drafter (model_drafter.h).
#include "sam/torch/model_drafter.h"

#include <algorithm>
#include <string>

#include <torch/torch.h>

namespace sam::torch_backend {

namespace rt = sam::runtime;

// Answers the tree builder's level requests with one draft forward pass each.
class ModelDrafter::Expander : public rt::TreeExpander {
 public:
  explicit Expander(ModelDrafter& d) : d_(d) {}
  size_t vocab_size() const override { return static_cast<size_t>(d_.model_.config().vocab_size); }

  void Expand(const rt::DraftTree& tree, std::span<const int32_t> nodes,
              std::span<float> rows) override {
    TreeInput input;
    torch::Tensor logits;
    if (nodes.size() == 1 && nodes[0] == 0) {
      // The context not yet cached, then the root (the start token), as one chain.
      const int64_t cached = d_.cache_.length();
      input.tokens.assign(d_.context_.begin() + cached, d_.context_.end());
      input.tokens.push_back(tree.tokens[0]);
      input.parents.resize(input.tokens.size());
      for (size_t i = 0; i < input.parents.size(); ++i) input.parents[i] = static_cast<int32_t>(i) - 1;
      logits = d_.model_.Forward(d_.cache_, input).narrow(0, static_cast<int64_t>(input.tokens.size()) - 1, 1);
      d_.root_slot_ = static_cast<int32_t>(input.tokens.size()) - 1;
      d_.slot_of_.assign(1, d_.root_slot_);
      next_slot_ = d_.root_slot_ + 1;
    } else {
      d_.slot_of_.resize(tree.size(), -1);
      for (const int32_t node : nodes) {
        input.tokens.push_back(tree.tokens[node]);
        input.parents.push_back(d_.slot_of_[tree.parents[node]]);
        d_.slot_of_[node] = next_slot_++;
      }
      logits = d_.model_.Extend(d_.cache_, input);
    }
    ++d_.forward_passes_;
    const torch::Tensor cpu = logits.to(torch::kCPU, torch::kFloat32).contiguous();
    const size_t vocab = vocab_size();
    const float* data = cpu.data_ptr<float>();
    std::copy(data, data + nodes.size() * vocab, rows.begin());
    for (size_t j = 0; j < nodes.size(); ++j) {
      try {
        rt::ApplySampling(rows.subspan(j * vocab, vocab), d_.row_params_);
      } catch (const sam::Error& e) {
        throw Error(ErrorCode::kInvalidArgument, std::string("draft model: ") + e.what());
      }
    }
  }

 private:
  ModelDrafter& d_;
  int32_t next_slot_ = 0;
};

ModelDrafter::ModelDrafter(const Model& draft, const rt::TreeDraftOptions& tree)
    : model_(draft), options_(tree) {
  try {
    options_.Validate();
  } catch (const sam::Error& e) {
    throw Error(ErrorCode::kInvalidArgument, std::string("draft model: ") + e.what());
  }
}

ModelDrafter::~ModelDrafter() = default;

void ModelDrafter::Configure(const rt::SamplingParams& sampling, uint64_t seed) {
  options_.greedy = sampling.temperature == 0.0f;
  row_params_ = options_.greedy ? rt::SamplingParams{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f}
                                : sampling;
  rng_.Seed(seed);
}

void ModelDrafter::Reserve(int64_t positions) {
  const int64_t needed = positions + static_cast<int64_t>(options_.MaxNodes()) + 1;
  if (cache_.capacity() >= needed) return;
  cache_ = KvCache();
  cache_ = model_.NewCache(std::min<int64_t>(needed, model_.config().max_position_embeddings +
                                                         static_cast<int64_t>(options_.MaxNodes()) + 1));
}

void ModelDrafter::Reset() {
  context_.clear();
  if (cache_.capacity() > 0) cache_.Truncate(0);
  proposed_ = false;
  root_slot_ = -1;
}

void ModelDrafter::Prefill(std::span<const uint32_t> prompt) {
  Reset();
  context_.assign(prompt.begin(), prompt.end());
}

bool ModelDrafter::Propose(uint32_t start_token, size_t max_nodes, rt::DraftTree* out) {
  torch::NoGradGuard no_grad;
  proposed_ = false;
  root_slot_ = -1;
  slot_of_.clear();
  if (max_nodes < 2) {
    out->Reset(start_token, rt::DraftSource::kNone);
    return false;
  }
  // Room for the uncached context, the root and every node the builder may forward.
  const int64_t needed = static_cast<int64_t>(context_.size()) + 1 +
                         static_cast<int64_t>(options_.MaxNodes());
  if (cache_.capacity() < needed) {
    const int64_t capacity = std::max<int64_t>(needed, 2 * cache_.capacity()) + 64;
    cache_ = KvCache();  // the context is forwarded again into the new cache
    cache_ = model_.NewCache(capacity);
  } else if (cache_.pending() > 0) {
    cache_.Truncate(cache_.length());
  }
  Expander expander(*this);
  rt::BuildTreeDraft(options_, start_token, max_nodes, expander, rng_, &draft_);
  proposed_ = true;
  *out = draft_.tree;
  return out->size() > 1;
}

void ModelDrafter::Commit(std::span<const uint32_t> tokens) {
  if (tokens.empty()) return;
  if (proposed_ && root_slot_ >= 0 && draft_.tree.tokens[0] == tokens[0]) {
    // The cached context tail, the root, then the accepted nodes that were forwarded.
    std::vector<int32_t> path(static_cast<size_t>(root_slot_) + 1);
    for (int32_t i = 0; i <= root_slot_; ++i) path[i] = i;
    int32_t node = 0;
    for (size_t k = 1; k < tokens.size(); ++k) {
      const int32_t child = draft_.tree.Child(node, tokens[k]);
      if (child < 0) break;
      const int32_t build_id = draft_.build_ids[child];
      const int32_t slot = build_id < static_cast<int32_t>(slot_of_.size()) ? slot_of_[build_id] : -1;
      if (slot < 0) break;
      path.push_back(slot);
      node = child;
    }
    cache_.Commit(path);
  } else if (cache_.pending() > 0) {
    cache_.Truncate(cache_.length());
  }
  proposed_ = false;
  root_slot_ = -1;
  context_.insert(context_.end(), tokens.begin(), tokens.end());
}

}  // namespace sam::torch_backend
