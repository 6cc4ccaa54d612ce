// A small Llama-family model as a drafter (runtime::Drafter): chains, best-first trees, RSD-C,
// RSD-S and SpecInfer-style trees (sam/runtime/tree_draft.h), one draft forward pass per tree
// level with tree attention, its own KV cache rolled back to the verified path after every step.
//
//   namespace tb = sam::torch_backend;
//   tb::Model target = tb::Model::Load("/models/llama-7b", {.device = "cuda"});
//   tb::Model draft = tb::Model::Load("/models/llama-160m", {.device = "cuda"});
//   sam::runtime::TreeDraftOptions tree{.mode = sam::runtime::TreeMode::kRsdS, .depth = 4, .width = 4};
//   tb::ModelDrafter drafter(draft, tree);
//   drafter.Configure(sampling_params, seed);   // per request: the rows' processing, the seed
//   drafter.Prefill(prompt);
//   drafter.Propose(start, 32, &tree_out);      // tree_out.source == DraftSource::kModel
//   // verify with drafter.last_draft().verify_mode and .ProposalRow(node); then
//   drafter.Commit(start + accepted tokens);
//
// The draft model must have the target's vocabulary (the Generator checks the size; sam-generate
// also the tokenizer files). Rows q(.|node) are the draft logits processed by ApplySampling with
// the request's sampling parameters (temperature, top-k, top-p), or at temperature 1 under greedy
// decoding (argmax chains, and the probabilities that rank kTree's nodes).
// KV cache: holds the verified context (prompt + committed tokens) up to what has been forwarded;
// Propose first forwards the context tokens not yet cached plus the start token, then each tree
// level (Model::Extend). Commit keeps the cached part of the accepted path (KvCache::Commit) and
// drops the rest; accepted tokens that were never forwarded (leaves) are forwarded next time.
// A drafter used as a fallback only sometimes (policy sam-model) thus catches up lazily.
// Errors: Error (model errors, kInvalidArgument for bad options); Never prints.
// Thread safety: one thread at a time; the Model is borrowed and must outlive the drafter.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "sam/runtime/drafter.h"
#include "sam/runtime/tree_draft.h"
#include "sam/runtime/verify.h"
#include "sam/torch/model.h"

namespace sam::torch_backend {

class ModelDrafter : public runtime::Drafter {
 public:
  // Throws Error(kInvalidArgument) for unusable tree options.
  ModelDrafter(const Model& draft, const runtime::TreeDraftOptions& tree);
  ~ModelDrafter() override;

  std::string_view name() const override { return "model"; }
  void Reset() override;
  void Prefill(std::span<const uint32_t> prompt) override;
  bool Propose(uint32_t start_token, size_t max_nodes, runtime::DraftTree* out) override;
  void Commit(std::span<const uint32_t> tokens) override;

  // Per request: how rows are processed (temperature 0 = greedy decoding: rows at temperature 1,
  // chains by argmax) and the drafting seed. Call before Prefill.
  void Configure(const runtime::SamplingParams& sampling, uint64_t seed);
  // Sizes the KV cache for `positions` context tokens plus one tree (grows by itself otherwise,
  // by re-forwarding the context).
  void Reserve(int64_t positions);

  const Model& model() const { return model_; }
  const runtime::TreeDraftOptions& tree_options() const { return options_; }
  // The last proposal (tree, verification mode, proposal rows); valid until the next Propose.
  const runtime::TreeDraft& last_draft() const { return draft_; }
  // Draft forward passes since construction (one for the context catch-up + root, one per
  // further level).
  int64_t forward_passes() const { return forward_passes_; }

 private:
  class Expander;
  const Model& model_;
  runtime::TreeDraftOptions options_;
  runtime::SamplingParams row_params_{.temperature = 1.0f, .top_k = 0, .top_p = 1.0f};
  runtime::Rng rng_;
  KvCache cache_;
  std::vector<uint32_t> context_;  // verified tokens; the first cache_.length() are cached
  runtime::TreeDraft draft_;
  std::vector<int32_t> slot_of_;   // per expander-tree node: its pending index, or -1
  int32_t root_slot_ = -1;         // pending index of the root (-1: nothing forwarded)
  bool proposed_ = false;
  int64_t forward_passes_ = 0;
};

}  // namespace sam::torch_backend
