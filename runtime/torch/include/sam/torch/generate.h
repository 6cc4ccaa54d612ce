// The generation loop of SAM-Decoding: draft (runtime Session), verify (one forward pass of the
// draft tree), accept (greedy or lossless sampling), compact the KV cache, repeat.
//
//   namespace tb = sam::torch_backend;
//   tb::Model model = tb::Model::Load("/models/vicuna-7b", {.device = "cuda"});
//   auto index = sam::format::IndexFile::Open("general.sam");
//   tb::Generator generator(model, {.recycling_fallback = true});   // paper rule + Token Recycling
//   generator.AttachIndex(&index.view());
//   tb::GenerateOptions options{.max_new_tokens = 256, .stop_tokens = {2}};
//   tb::GenerateResult r = generator.Generate(prompt_ids, options,
//       [](std::span<const uint32_t> tokens) { print(tokens); return true; });
//   // r.output_ids, r.steps, r.mat, r.tokens_per_s, r.by_source
//
// One request, step by step:
//   * prefill: one forward pass over the prompt (BOS included by the caller), committed to the
//     KV cache; the first new token is chosen from the last prompt position;
//   * each step: the session proposes a draft tree rooted at the last emitted token (the "start"
//     token, not yet in the cache); one forward pass scores every node (node i attends to the
//     cache and its ancestors, rotary position = cache length + depth); verification accepts a
//     root path and a bonus token; the KV cache keeps exactly the accepted path, compacted to
//     contiguous positions; the session commits start + accepted tokens;
//   * with Token Recycling, the top-8 next tokens of every evaluated position (prompt positions
//     and every tree node, accepted or not) update its table after each forward pass;
//   * stop: a stop token (emitted, then generation ends) or max_new_tokens (the last step's
//     tokens are truncated), or the callback returning false.
// Greedy (temperature 0): accepted tokens are the longest tree path agreeing with the model's
// argmax (VerifyGreedy): the output equals plain greedy decoding token for token (up to
// floating-point near-ties between the tree pass and a one-token pass).
// Sampling (temperature > 0): every position's logits go through the same ApplySampling
// (temperature, top-k, top-p) — the first token after prefill, every draft node, every bonus
// token — and VerifySampling's recursive rejection (deterministic drafts) makes the emitted
// tokens distributed exactly as plain sampling. A draft model's trees (source kModel) are verified
// with their own rule and proposal rows q(.|node): recursive rejection with residuals for RSD-C /
// RSD-S (drawn without replacement), the multi-round rule for SpecInfer and sampled chains (with
// replacement), the deterministic rule for kTree. The Rng is seeded per request by
// GenerateOptions::seed (the draft model's own Rng by a value derived from it).
// SDSAT (GeneratorOptions::sdsat_use, sam/runtime/sdsat.h): the prefill runs on [prompt, S x k]
// and, in the one-pass scheme, every pass carries a chain of the k adaptive tokens below each
// draft node (two-pass: below the start token of a step without a draft); the rows of the chain
// below the last accepted node, processed by the same ApplySampling, are the SDSAT drafter's next
// proposal. Adaptive nodes are evaluated, never committed; SDSAT's trees are verified with their
// own rule and rows under sampling (recursive rejection with q without replacement, or the
// deterministic rule for top-W trees).
// Without speculation (GenerateOptions::speculative = false) every step's tree is the start token
// alone: plain autoregressive decoding through the same code path.
//
// Errors: Error(kInvalidArgument) for an empty prompt, max_new_tokens < 1, bad sampling
// parameters, prompt ids outside the model's vocabulary or an index with a bigger vocabulary;
// model errors propagate (model.h); libtorch's own exceptions (c10::Error) come out as
// Error(kCapacity) when memory runs out, else Error(kInternal). Never prints.
// Thread safety: a Generator is used by one thread at a time; several Generators may share one
// Model and one IndexView. Lifetime: the model and attached views are borrowed and must outlive
// the Generator (an IndexFile may be moved meanwhile: its view keeps its address, format/index.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <span>
#include <string_view>
#include <vector>

#include "sam/format/index.h"
#include "sam/runtime/draft.h"
#include "sam/runtime/recycling.h"
#include "sam/runtime/sdsat.h"
#include "sam/runtime/options.h"
#include "sam/runtime/selection.h"
#include "sam/runtime/session.h"
#include "sam/runtime/statistics.h"
#include "sam/runtime/tree_draft.h"
#include "sam/runtime/verify.h"
#include "sam/torch/model.h"
#include "sam/torch/model_drafter.h"

namespace sam::torch_backend {

// How drafts are made; fixed for the Generator's lifetime.
struct GeneratorOptions {
  // The session's options (runtime/options.h): policy, draft size and shape, each policy's
  // parameters; sam-cal by default. Its fallback and max_dynamic_bytes are set by the
  // generator (the fields below).
  runtime::SessionOptions selection;
  // Token Recycling as the session's fallback drafter; its table is kept across requests.
  bool recycling_fallback = false;
  // Memory bound of the per-request dynamic suffix automaton.
  size_t max_dynamic_bytes = size_t{64} << 20;
  // A draft model (ModelDrafter, model_drafter.h): kOnly drafts every step with it (policy
  // "model"); kFallback makes it the session's fallback drafter (policy "sam-model": SAM's linear
  // draft when max(l_dyn, l_static - l_bias) >= l_threshold, else the model's tree). The model is
  // borrowed, must have the target's vocabulary size and live on the target's device.
  enum class DraftModelUse { kNone, kOnly, kFallback };
  DraftModelUse draft_model_use = DraftModelUse::kNone;
  const Model* draft_model = nullptr;
  // The model's tree shape; `greedy` is set per request from the sampling temperature. Policy
  // "model" drafts at most selection.draft_size nodes (start token included).
  runtime::TreeDraftOptions draft_tree;
  // SDSAT (sam/runtime/sdsat.h): the target model drafts its own next tokens at k adaptive
  // tokens (sdsat.adaptive_tokens, e.g. runtime::ExpandSdsatTokens({32011}, 4)). kOnly drafts
  // every step with them (policy "sdsat"); kFallback makes them the session's fallback drafter
  // (policy "sam-sdsat": SAM's linear draft when max(l_dyn, l_static - l_bias) >= l_threshold,
  // else SDSAT's; with sam-cal their trees join the calibrated merge, one-pass scheme only).
  // Schemes: kOnePass (default) puts a branch of k adaptive nodes below every draft node of the
  // verification pass, so the branch below the last accepted node drafts the next step in the
  // same pass; kTwoPass is the official scheme: a pass on [c, S x k] (the tree of the start token
  // alone plus its adaptive branch: it emits the next token and drafts) alternates with a pass
  // that verifies the drafts. Adaptive nodes are never committed to the KV cache.
  enum class SdsatUse { kNone, kOnly, kFallback };
  SdsatUse sdsat_use = SdsatUse::kNone;
  runtime::SdsatOptions sdsat;
};

// Generator options for a policy by its name: runtime::NamedPolicies() (sam/runtime/selection.h:
// sam, static, dynamic, sam-tree, sam-rec, sam-cal) and the two policies that need a draft model,
// which only this backend can run: "model" (the draft model alone) and "sam-model" (the paper
// rule with the draft model as fallback, l_bias 5, l_threshold 5), and the SDSAT policies
// "sdsat" (adaptive-token drafts alone) and "sam-sdsat" (the paper rule with SDSAT as fallback).
// The caller sets draft_model, or sdsat.adaptive_tokens.
// Throws Error(kInvalidArgument) listing the valid names.
GeneratorOptions GeneratorOptionsForPolicy(std::string_view name);
// True for the policies that need GeneratorOptions::draft_model.
bool PolicyNeedsDraftModel(std::string_view name);
// True for the policies that need SDSAT adaptive tokens ("sdsat", "sam-sdsat").
bool PolicyNeedsSdsat(std::string_view name);
// One line per policy name, for --help texts (runtime::PolicyHelp() and the two above).
std::string GeneratorPolicyHelp();

// The policy rules: which drafters a named policy combines with SAM's automata.
//   draft model: needed by "model" and "sam-model"; merged by "sam-cal" when one is given;
//                refused by every other policy.
//   SDSAT:       needed by "sdsat" and "sam-sdsat" (adaptive token ids are required); merged by
//                "sam-cal" when ids are given, with the one-pass scheme only; refused by every
//                other policy.
//   "sam-cal" merges a draft model or SDSAT, not both (a session has one fallback drafter).
// DraftModelUseFor gives the draft model's role for `policy` when the caller has one or not;
// SdsatUseFor gives SDSAT's for `policy` given adaptive ids or not, their scheme and the draft
// model's role. Both throw Error(kInvalidArgument) naming the rule a combination breaks (and
// for an unknown policy). The Generator's constructor checks the same combinations.
GeneratorOptions::DraftModelUse DraftModelUseFor(std::string_view policy, bool have_draft_model);
GeneratorOptions::SdsatUse SdsatUseFor(std::string_view policy, bool have_sdsat_tokens,
                                       runtime::SdsatScheme scheme,
                                       GeneratorOptions::DraftModelUse draft_model_use);
// True for the policies that may draft with SDSAT ("sdsat", "sam-sdsat", "sam-cal").
bool PolicyTakesSdsat(std::string_view policy);

// One request's parameters.
struct GenerateOptions {
  int64_t max_new_tokens = 256;
  // Generation ends after emitting any of these (e.g. the tokenizer's EOS).
  std::vector<uint32_t> stop_tokens{};
  // false: plain autoregressive decoding (one token per forward pass), for comparison.
  bool speculative = true;
  // temperature 0 = greedy (argmax); otherwise lossless speculative sampling.
  runtime::SamplingParams sampling{.temperature = 0.0f, .top_k = 0, .top_p = 1.0f};
  uint64_t seed = 0;
};

enum class StopReason { kMaxNewTokens, kStopToken, kCallback };
std::string_view StopReasonName(StopReason reason);  // "max_new_tokens", "stop_token", "callback"

struct GenerateResult {
  std::vector<uint32_t> output_ids;  // new tokens, a final stop token included
  int64_t prompt_tokens = 0;
  // Forward passes after the prefill (one per step).
  int64_t steps = 0;
  // Tree nodes evaluated by those passes (= steps without speculation).
  int64_t verified_tokens = 0;
  // MAT: the mean over steps of accepted draft tokens + 1 (the bonus), Total().Mat(); 1.00 for
  // plain decoding; 0 when no step ran (max_new_tokens 1 or a stop token first). Accepted tokens
  // count as verified, including any after a stop token that ended the request.
  double mat = 0.0;
  double prefill_seconds = 0.0;
  double decode_seconds = 0.0;
  // output_ids.size() / (prefill_seconds + decode_seconds).
  double tokens_per_s = 0.0;
  StopReason stop_reason = StopReason::kMaxNewTokens;
  // Forward passes of the draft model (0 without one).
  int64_t draft_forward_passes = 0;
  // SDSAT: adaptive-token nodes evaluated (never committed), and the steps that were the first
  // pass of the two-pass scheme (the start token and its adaptive branch alone).
  int64_t adaptive_tokens = 0;
  int64_t sdsat_draft_passes = 0;
  // Per draft source (runtime::DraftSource order), one record per step.
  std::array<runtime::SourceStatistics, runtime::kNumDraftSources> by_source{};
  // All sources together.
  runtime::SourceStatistics Total() const;
};

// Called with the tokens each step emits (in order, at least one); return false to stop.
using TokenCallback = std::function<bool(std::span<const uint32_t> tokens)>;

class Generator {
 public:
  // Throws Error(kInvalidArgument) for unusable selection options.
  explicit Generator(const Model& model, const GeneratorOptions& options = {});
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // Adds a static index (borrowed). The caller checks that it was built with the model's
  // tokenizer (format::OpenOptions); an index whose vocabulary is larger than the model's is
  // refused here (Error(kInvalidArgument)).
  void AttachIndex(const format::IndexView* view);
  // Adds the shards of a shard set (runtime::OpenShardSet) as one index
  // (Session::AttachShardSet); the same vocabulary check as AttachIndex.
  void AttachShardSet(std::span<const std::shared_ptr<const runtime::StaticIndex>> shards);

  // Generates up to options.max_new_tokens tokens after `prompt` (which must be non-empty and
  // start with BOS if the model expects one). See the file comment.
  GenerateResult Generate(std::span<const uint32_t> prompt, const GenerateOptions& options,
                          const TokenCallback& on_tokens = {});

  const Model& model() const { return model_; }
  const GeneratorOptions& options() const { return options_; }
  // The drafting session (cumulative statistics across requests) and the Token Recycling
  // drafter (null without recycling_fallback).
  const runtime::Session& session() const { return *session_; }
  const runtime::RecyclingDrafter* recycling() const { return recycling_.get(); }
  // The draft model's drafter (null without a draft model).
  const ModelDrafter* model_drafter() const { return model_drafter_.get(); }
  // The SDSAT drafter (null without SDSAT).
  const runtime::SdsatDrafter* sdsat() const { return sdsat_.get(); }
  // The KV cache of the last request: its committed positions are the prompt and every emitted
  // token but the last (for tests: commit against recompute).
  const KvCache& cache() const { return cache_; }

  // The most nodes a draft may have, start token included.
  size_t max_draft_nodes() const { return max_draft_nodes_; }
  // The most nodes one verification pass evaluates: the draft plus SDSAT's adaptive nodes (sizes
  // the KV cache).
  size_t max_pass_nodes() const { return max_pass_nodes_; }

 private:
  struct Scratch;
  class Request;  // one Generate call: its state and the loop (generate.cc)
  const Model& model_;
  GeneratorOptions options_;
  std::unique_ptr<runtime::RecyclingDrafter> recycling_;
  std::unique_ptr<ModelDrafter> model_drafter_;
  std::unique_ptr<runtime::SdsatDrafter> sdsat_;
  std::unique_ptr<runtime::Session> session_;
  // The drafter every step proposes with, chosen at construction: the draft model's or SDSAT's
  // alone (policies model, sdsat), else the session (which calls its fallback itself).
  runtime::Drafter* drafter_ = nullptr;
  size_t max_draft_nodes_ = 1;
  size_t max_pass_nodes_ = 1;
  KvCache cache_;  // reused across requests when large enough
  std::unique_ptr<Scratch> scratch_;
};

}  // namespace sam::torch_backend
