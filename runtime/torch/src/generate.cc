// The generation loop: prefill, then propose / verify / accept / compact per step (generate.h).
#include "sam/torch/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <utility>

#include <torch/torch.h>

#include "torch_errors.h"

namespace sam::torch_backend {

namespace rt = sam::runtime;

namespace {

// Top-k feedback width for Token Recycling (its table width).
constexpr int64_t kFeedbackWidth = static_cast<int64_t>(rt::RecyclingDrafter::kCandidates);

double SecondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void ValidateOptions(const GenerateOptions& options) {
  if (options.max_new_tokens < 1)
    throw Error(ErrorCode::kInvalidArgument,
                "generate: max_new_tokens must be >= 1, got " + std::to_string(options.max_new_tokens));
  const rt::SamplingParams& s = options.sampling;
  if (!std::isfinite(s.temperature) || s.temperature < 0.0f)
    throw Error(ErrorCode::kInvalidArgument,
                "generate: temperature must be finite and >= 0, got " + std::to_string(s.temperature));
  if (!(s.top_p > 0.0f && s.top_p <= 1.0f))
    throw Error(ErrorCode::kInvalidArgument,
                "generate: top_p must be in (0, 1], got " + std::to_string(s.top_p));
}

// A CPU int64 tensor's values as uint32 ids.
void CopyIds(const torch::Tensor& cpu_ids, std::vector<uint32_t>* out) {
  const torch::Tensor ids = cpu_ids.to(torch::kInt64).contiguous();
  const int64_t* data = ids.data_ptr<int64_t>();
  out->assign(data, data + ids.numel());
}

}  // namespace

namespace {
// The policies only this backend runs (they need a draft model), in the table's format.
struct ModelPolicy {
  std::string_view name;
  GeneratorOptions::DraftModelUse use;
  GeneratorOptions::SdsatUse sdsat;
  std::string_view description;
};
using DraftUse = GeneratorOptions::DraftModelUse;
using SdsatUse = GeneratorOptions::SdsatUse;
constexpr ModelPolicy kModelPolicies[] = {
    {"model", DraftUse::kOnly, SdsatUse::kNone,
     "the draft model's tree every step (--draft-model, --draft-mode)"},
    {"sam-model", DraftUse::kFallback, SdsatUse::kNone,
     "paper rule (l_bias 5, l_threshold 5) with the draft model's tree as fallback"},
    {"sdsat", DraftUse::kNone, SdsatUse::kOnly,
     "SDSAT: the model's own drafts at adaptive tokens every step (--sdsat-tokens)"},
    {"sam-sdsat", DraftUse::kNone, SdsatUse::kFallback,
     "paper rule (l_bias 5, l_threshold 5) with SDSAT's drafts as fallback"},
};
}  // namespace

std::string GeneratorPolicyHelp() {
  std::string out = rt::PolicyHelp();
  for (const ModelPolicy& p : kModelPolicies) {
    std::string name(p.name);
    name.resize(std::max<size_t>(name.size() + 1, 10), ' ');
    out += "\n" + name + std::string(p.description);
  }
  return out;
}

bool PolicyNeedsDraftModel(std::string_view name) {
  for (const ModelPolicy& p : kModelPolicies)
    if (p.name == name) return p.use != DraftUse::kNone;
  return false;
}

bool PolicyNeedsSdsat(std::string_view name) {
  for (const ModelPolicy& p : kModelPolicies)
    if (p.name == name) return p.sdsat != SdsatUse::kNone;
  return false;
}

namespace {
// "sam-cal", the policy that merges a draft model's or SDSAT's trees when given one.
constexpr std::string_view kMergingPolicy = "sam-cal";

// Throws Error(kInvalidArgument) for a name that is no policy (GeneratorOptionsForPolicy's
// message).
void CheckPolicyName(std::string_view name) { GeneratorOptionsForPolicy(name); }
}  // namespace

GeneratorOptions::DraftModelUse DraftModelUseFor(std::string_view policy, bool have_draft_model) {
  CheckPolicyName(policy);
  const std::string name(policy);
  if (PolicyNeedsDraftModel(policy)) {
    if (!have_draft_model)
      throw Error(ErrorCode::kInvalidArgument, "policy " + name + " needs a draft model");
    return GeneratorOptionsForPolicy(policy).draft_model_use;
  }
  if (!have_draft_model) return DraftUse::kNone;
  if (policy == kMergingPolicy) return DraftUse::kFallback;
  throw Error(ErrorCode::kInvalidArgument,
              "a draft model is used by the policies model, sam-model and sam-cal, not " + name);
}

bool PolicyTakesSdsat(std::string_view policy) {
  return PolicyNeedsSdsat(policy) || policy == kMergingPolicy;
}

GeneratorOptions::SdsatUse SdsatUseFor(std::string_view policy, bool have_sdsat_tokens,
                                       rt::SdsatScheme scheme, DraftUse draft_model_use) {
  CheckPolicyName(policy);
  const std::string name(policy);
  if (PolicyNeedsSdsat(policy)) {
    if (!have_sdsat_tokens)
      throw Error(ErrorCode::kInvalidArgument,
                  "policy " + name + " needs SDSAT adaptive token ids");
    return GeneratorOptionsForPolicy(policy).sdsat_use;
  }
  if (!have_sdsat_tokens) return SdsatUse::kNone;
  if (policy != kMergingPolicy)
    throw Error(ErrorCode::kInvalidArgument,
                "SDSAT is used by the policies sdsat, sam-sdsat and sam-cal, not " + name);
  if (draft_model_use != DraftUse::kNone)
    throw Error(ErrorCode::kInvalidArgument,
                "sam-cal merges either a draft model or SDSAT, not both");
  if (scheme == rt::SdsatScheme::kTwoPass)
    throw Error(ErrorCode::kInvalidArgument,
                "sam-cal merges SDSAT's drafts with the one-pass scheme only");
  return SdsatUse::kFallback;
}

GeneratorOptions GeneratorOptionsForPolicy(std::string_view name) {
  GeneratorOptions o;
  for (const ModelPolicy& p : kModelPolicies) {
    if (p.name != name) continue;
    o.selection.policy = rt::Policy::kPaper;
    o.draft_model_use = p.use;
    o.sdsat_use = p.sdsat;
    return o;
  }
  try {
    const rt::NamedPolicy& p = rt::FindPolicy(name);
    o.selection.policy = p.policy;
    o.recycling_fallback = p.recycling_fallback;
  } catch (const sam::Error& e) {
    std::string message = e.what();
    if (!message.empty() && message.back() == ')') message.insert(message.size() - 1, ", model, sam-model, sdsat, sam-sdsat");
    throw Error(ErrorCode::kInvalidArgument, message);
  }
  return o;
}

rt::SourceStatistics GenerateResult::Total() const {
  rt::SourceStatistics total;
  for (const rt::SourceStatistics& s : by_source) total.Merge(s);
  return total;
}

std::string_view StopReasonName(StopReason reason) {
  switch (reason) {
    case StopReason::kMaxNewTokens: return "max_new_tokens";
    case StopReason::kStopToken: return "stop_token";
    case StopReason::kCallback: return "callback";
  }
  return "unknown";
}

// Buffers reused across steps and requests.
struct Generator::Scratch {
  rt::DraftTree tree;
  TreeInput input;
  std::vector<uint32_t> argmax;
  std::vector<uint32_t> topk;
  rt::VerifyResult verified;
  std::vector<uint32_t> committed;  // start + accepted tokens
  std::vector<uint32_t> emitted;    // this step's new tokens
  std::vector<float> adaptive_rows; // SDSAT: the k processed rows handed to the drafter
  // Sampling: the processed distribution of each tree node, filled on demand.
  std::vector<std::vector<float>> rows;
  std::vector<uint8_t> have_row;
};

Generator::Generator(const Model& model, const GeneratorOptions& options)
    : model_(model), options_(options), scratch_(std::make_unique<Scratch>()) {
  const uint32_t vocab = static_cast<uint32_t>(model.config().vocab_size);
  rt::SessionOptions session_options = options.selection;
  session_options.max_dynamic_bytes = options.max_dynamic_bytes;
  session_options.fallback = nullptr;
  if (options.recycling_fallback) {
    recycling_ = std::make_unique<rt::RecyclingDrafter>(vocab);
    session_options.fallback = recycling_.get();
  }
  using Use = GeneratorOptions::DraftModelUse;
  if (options.draft_model_use != Use::kNone || options.draft_model != nullptr) {
    const Model* draft = options.draft_model;
    if (draft == nullptr)
      throw Error(ErrorCode::kInvalidArgument,
                  "generate: the policy drafts with a model, but no draft model was given");
    if (options.draft_model_use == Use::kNone)
      throw Error(ErrorCode::kInvalidArgument,
                  "generate: a draft model was given, but the policy does not use it (use model or "
                  "sam-model)");
    if (draft->config().vocab_size != model.config().vocab_size)
      throw Error(ErrorCode::kTokenizerMismatch,
                  "generate: the draft model has " + std::to_string(draft->config().vocab_size) +
                      " tokens, the target model " + std::to_string(model.config().vocab_size) +
                      ": a draft model must share the target's vocabulary and tokenizer");
    if (draft->device() != model.device())
      throw Error(ErrorCode::kInvalidArgument,
                  "generate: the draft model is on " + draft->device().str() + ", the target on " +
                      model.device().str() + "; load both on the same device");
    if (options.recycling_fallback && options.draft_model_use == Use::kFallback)
      throw Error(ErrorCode::kInvalidArgument,
                  "generate: a session has one fallback drafter: Token Recycling or the draft model");
    model_drafter_ = std::make_unique<ModelDrafter>(*draft, options.draft_tree);
    if (options.draft_model_use == Use::kFallback) session_options.fallback = model_drafter_.get();
  }
  if (options.sdsat_use != SdsatUse::kNone) {
    if (options.sdsat.adaptive_tokens.empty())
      throw Error(ErrorCode::kInvalidArgument,
                  "generate: the policy drafts with SDSAT, but no adaptive token ids were given "
                  "(sdsat_tokens in config.json or --sdsat-tokens)");
    if (options.sdsat_use == SdsatUse::kFallback &&
        (options.recycling_fallback || options.draft_model_use == Use::kFallback))
      throw Error(ErrorCode::kInvalidArgument,
                  "generate: a session has one fallback drafter: SDSAT, Token Recycling or the draft "
                  "model");
    if (options.draft_model_use != Use::kNone)
      throw Error(ErrorCode::kInvalidArgument,
                  "generate: a draft model and SDSAT cannot draft in the same generator (a session "
                  "has one drafter besides SAM's automata)");
    if (options.sdsat_use == SdsatUse::kFallback &&
        options.selection.policy == rt::Policy::kCalibrated &&
        options.sdsat.scheme == rt::SdsatScheme::kTwoPass)
      throw Error(ErrorCode::kInvalidArgument,
                  "generate: sam-cal merges SDSAT's drafts with the one-pass scheme only (the "
                  "two-pass scheme drafts only after a pass without a draft)");
    try {
      sdsat_ = std::make_unique<rt::SdsatDrafter>(options.sdsat, static_cast<size_t>(vocab));
    } catch (const sam::Error& e) {
      throw Error(ErrorCode::kInvalidArgument, std::string("generate: ") + e.what());
    }
    if (options.sdsat_use == SdsatUse::kFallback) session_options.fallback = sdsat_.get();
  }
  try {
    session_ = std::make_unique<rt::Session>(session_options);
  } catch (const sam::Error& e) {
    throw Error(ErrorCode::kInvalidArgument, std::string("generate: bad selection options: ") + e.what());
  }
  // The one drafter the loop proposes with: the draft model or SDSAT alone, else the session
  // (which calls its fallback drafter itself).
  drafter_ = options.draft_model_use == Use::kOnly ? static_cast<rt::Drafter*>(model_drafter_.get())
             : options.sdsat_use == SdsatUse::kOnly ? static_cast<rt::Drafter*>(sdsat_.get())
                                                    : static_cast<rt::Drafter*>(session_.get());
  // Every policy bounds its drafts by draft_size, except kTree's trees (tree.nodes); the
  // bound passed to Propose makes this a hard limit.
  max_draft_nodes_ = std::max<size_t>(
      1, options.selection.policy == rt::Policy::kTree
             ? std::max(options.selection.draft_size, options.selection.tree.nodes)
             : options.selection.draft_size);
  if (options.draft_model_use == Use::kOnly)
    max_draft_nodes_ = std::min(max_draft_nodes_, options.draft_tree.MaxNodes());
  max_pass_nodes_ = max_draft_nodes_;
  if (sdsat_) {
    const size_t k = sdsat_->k();
    if (options.sdsat_use == SdsatUse::kOnly) {
      // The widest tree the drafter makes (sampling and greedy shapes of the same width).
      const rt::SdsatOptions& so = options.sdsat;
      max_draft_nodes_ = std::min(
          max_draft_nodes_,
          std::max(rt::SdsatTreeOptions(k, so.width, true, so.without_replacement).MaxNodes(),
                   rt::SdsatTreeOptions(k, so.width, false, so.without_replacement).MaxNodes()));
    }
    max_pass_nodes_ = options.sdsat.scheme == rt::SdsatScheme::kOnePass
                          ? max_draft_nodes_ * (1 + k)
                          : std::max(max_draft_nodes_, 1 + k);
  }
}

Generator::~Generator() = default;

void Generator::AttachIndex(const format::IndexView* view) {
  if (view->vocab_size() > model_.config().vocab_size)
    throw Error(ErrorCode::kInvalidArgument,
                "generate: an index with vocabulary size " + std::to_string(view->vocab_size()) +
                    " cannot draft for a model with " + std::to_string(model_.config().vocab_size) +
                    " tokens (was it built with another tokenizer?)");
  session_->AttachIndex(view);
}

void Generator::AttachShardSet(std::span<const std::shared_ptr<const runtime::StaticIndex>> shards) {
  for (const auto& shard : shards)
    if (shard != nullptr && shard->view().vocab_size() > model_.config().vocab_size)
      throw Error(ErrorCode::kInvalidArgument,
                  "generate: a shard set with vocabulary size " +
                      std::to_string(shard->view().vocab_size()) + " cannot draft for a model with " +
                      std::to_string(model_.config().vocab_size) +
                      " tokens (was it built with another tokenizer?)");
  session_->AttachShardSet(shards);
}

// One Generate call: the request's state and the loop's parts. The loop is the same for every
// policy: it proposes with the generator's one drafter, verifies in one pass, accepts and
// compacts. SDSAT's adaptive branches ride on those passes through two helpers the loop calls
// (AppendAdaptive below the nodes of a pass, TakeAdaptiveRows for the drafter); Token Recycling
// learns from every pass (Observe).
class Generator::Request {
 public:
  Request(Generator& generator, std::span<const uint32_t> prompt, const GenerateOptions& options,
          const TokenCallback& on_tokens)
      : g_(generator),
        s_(*generator.scratch_),
        prompt_(prompt),
        options_(options),
        on_tokens_(on_tokens),
        greedy_(options.sampling.temperature == 0.0f),
        feedback_(options.speculative && generator.recycling_ != nullptr),
        vocab_(generator.model_.config().vocab_size),
        feedback_k_(std::min<int64_t>(kFeedbackWidth, vocab_)),
        sdsat_(options.speculative && generator.sdsat_ != nullptr),
        one_pass_(generator.options_.sdsat.scheme == rt::SdsatScheme::kOnePass),
        k_(generator.sdsat_ ? generator.sdsat_->k() : 0),
        rng_(options.seed) {
    result_.prompt_tokens = static_cast<int64_t>(prompt.size());
  }

  GenerateResult Run() {
    const auto start_time = std::chrono::steady_clock::now();
    PrepareDrafters();
    // ---- Prefill: one pass over the prompt; the first token comes from its last position.
    const uint32_t first = Prefill();
    result_.prefill_seconds = SecondsSince(start_time);
    Emit(std::span<const uint32_t>(&first, 1));
    // ---- Steps: propose, verify in one pass, accept, compact.
    const auto decode_start = std::chrono::steady_clock::now();
    while (!done_) Step();
    result_.decode_seconds = SecondsSince(decode_start);
    if (g_.model_drafter_)
      result_.draft_forward_passes = g_.model_drafter_->forward_passes() - draft_passes_before_;
    result_.mat = result_.Total().Mat();
    const double seconds = result_.prefill_seconds + result_.decode_seconds;
    result_.tokens_per_s =
        seconds > 0 ? static_cast<double>(result_.output_ids.size()) / seconds : 0.0;
    return std::move(result_);
  }

 private:
  // Sizes the KV cache and configures the drafters for this request.
  void PrepareDrafters() {
    // The cache holds the prompt, every emitted token but the last, and one step's draft.
    const int64_t needed = result_.prompt_tokens + options_.max_new_tokens +
                           static_cast<int64_t>(g_.max_pass_nodes_);
    if (g_.cache_.capacity() < needed) {
      g_.cache_ = KvCache();  // release the old storage before allocating the new one
      g_.cache_ = g_.model_.NewCache(needed);
    } else {
      g_.cache_.Truncate(0);
    }
    if (g_.model_drafter_) {
      draft_passes_before_ = g_.model_drafter_->forward_passes();
      g_.model_drafter_->Configure(options_.sampling, options_.seed ^ 0x5851f42d4c957f2dULL);
      g_.model_drafter_->Reserve(result_.prompt_tokens + options_.max_new_tokens);
    }
    if (g_.sdsat_) g_.sdsat_->Configure(options_.sampling, options_.seed ^ 0x2545f4914f6cdd1dULL);
  }

  // The prompt's pass (with SDSAT's first adaptive branch); returns the first new token.
  uint32_t Prefill() {
    if (options_.speculative) {
      g_.drafter_->Reset();
      g_.drafter_->Prefill(prompt_);
    }
    s_.input.tokens.assign(prompt_.begin(), prompt_.end());
    s_.input.parents.resize(prompt_.size());
    for (size_t i = 0; i < prompt_.size(); ++i) s_.input.parents[i] = static_cast<int32_t>(i) - 1;
    // SDSAT: [prompt, S x k], the first pass of both schemes (drafts for the first step).
    if (sdsat_) AppendAdaptive(static_cast<int32_t>(prompt_.size()) - 1);
    const torch::Tensor all_logits = g_.model_.Forward(g_.cache_, s_.input);
    g_.cache_.CommitPrefix(result_.prompt_tokens);
    const torch::Tensor logits =
        sdsat_ ? all_logits.narrow(0, 0, result_.prompt_tokens) : all_logits;
    if (sdsat_) {
      TakeAdaptiveRows(all_logits, result_.prompt_tokens);
      result_.adaptive_tokens += static_cast<int64_t>(k_);
    }
    Observe(logits, prompt_);
    if (greedy_)
      return static_cast<uint32_t>(logits[result_.prompt_tokens - 1].argmax().item<int64_t>());
    ResetRows(1);
    return rt::SampleToken(Distribution(logits.slice(0, result_.prompt_tokens - 1), 0), rng_);
  }

  // One step: propose, verify in one pass, accept, compact, emit.
  void Step() {
    const uint32_t start = result_.output_ids.back();
    const int64_t remaining =
        options_.max_new_tokens - static_cast<int64_t>(result_.output_ids.size());
    if (options_.speculative) {
      // No deeper than the tokens still wanted: remaining - 1 accepted plus the bonus.
      const size_t max_nodes = std::min<size_t>(g_.max_draft_nodes_, static_cast<size_t>(remaining));
      g_.drafter_->Propose(start, max_nodes, &s_.tree);
    } else {
      s_.tree.Reset(start, rt::DraftSource::kNone);
    }
    const rt::DraftTree& tree = s_.tree;
    const int64_t n = static_cast<int64_t>(tree.size());
    s_.input.tokens.assign(tree.tokens.begin(), tree.tokens.end());
    s_.input.parents.assign(tree.parents.begin(), tree.parents.end());
    // SDSAT's adaptive branches: below every node (one-pass), or below the start token of a step
    // without a draft (two-pass: the official first pass on [c, S x k]).
    const bool adaptive = sdsat_ && (one_pass_ || n == 1);
    if (adaptive)
      for (int32_t i = 0; i < static_cast<int32_t>(n); ++i) AppendAdaptive(i);
    const torch::Tensor all_logits = g_.model_.Forward(g_.cache_, s_.input);
    const torch::Tensor logits = adaptive ? all_logits.narrow(0, 0, n) : all_logits;
    Observe(logits, tree.tokens);
    Verify(logits);
    g_.cache_.Commit(s_.verified.accepted_nodes);  // adaptive nodes are never kept
    if (options_.speculative) {
      s_.committed.assign(1, start);
      s_.committed.insert(s_.committed.end(), s_.verified.accepted_tokens.begin(),
                          s_.verified.accepted_tokens.end());
      g_.drafter_->Commit(s_.committed);
    }
    if (sdsat_) {
      if (adaptive) {
        // The branch below the last accepted node drafts the tokens after this step's bonus.
        const int64_t last =
            s_.verified.accepted_nodes.empty() ? 0 : s_.verified.accepted_nodes.back();
        TakeAdaptiveRows(all_logits, n + last * static_cast<int64_t>(k_));
        result_.adaptive_tokens += n * static_cast<int64_t>(k_);
        if (!one_pass_) ++result_.sdsat_draft_passes;
      } else {
        g_.sdsat_->ClearRows();
      }
    }

    ++result_.steps;
    result_.verified_tokens += static_cast<int64_t>(tree.size());
    result_.by_source[static_cast<size_t>(tree.source)].Record(tree,
                                                               s_.verified.accepted_tokens.size());
    s_.committed.assign(s_.verified.accepted_tokens.begin(), s_.verified.accepted_tokens.end());
    s_.committed.push_back(s_.verified.bonus_token);
    Emit(s_.committed);
  }

  // Verifies this step's tree against the pass's `logits` into s_.verified.
  void Verify(const torch::Tensor& logits) {
    const rt::DraftTree& tree = s_.tree;
    if (greedy_) {
      CopyIds(logits.argmax(-1).cpu(), &s_.argmax);
      rt::VerifyGreedy(tree, s_.argmax, &s_.verified);
      return;
    }
    ResetRows(tree.size());
    auto target = [&](int32_t node) { return Distribution(logits, node); };
    // sam-cal re-ranks the model's nodes into its own tree (its node indexes are
    // not the model draft's): verified by the deterministic rule, which is
    // exact for any tree drawn independently of the verification randomness.
    if ((tree.source == rt::DraftSource::kModel || tree.source == rt::DraftSource::kSdsat) &&
        g_.options_.selection.policy != rt::Policy::kCalibrated) {
      // The draft model's (or SDSAT's) own rule, with its proposal rows q(.|node).
      const rt::TreeDraft& draft = tree.source == rt::DraftSource::kModel
                                       ? g_.model_drafter_->last_draft()
                                       : g_.sdsat_->last_draft();
      s_.verified = rt::VerifySampling(tree, target, rng_, draft.verify_mode,
                                       [&](int32_t node) { return draft.ProposalRow(node); });
    } else {
      s_.verified = rt::VerifySampling(tree, target, rng_);
    }
  }

  // SDSAT: appends a chain of the k adaptive tokens below input node `parent`.
  void AppendAdaptive(int32_t parent) {
    for (size_t j = 0; j < k_; ++j) {
      s_.input.tokens.push_back(g_.sdsat_->adaptive_tokens()[j]);
      s_.input.parents.push_back(j == 0 ? parent
                                        : static_cast<int32_t>(s_.input.tokens.size()) - 2);
    }
  }

  // SDSAT: hands the drafter the processed rows of the k adaptive positions from input row
  // `first`.
  void TakeAdaptiveRows(const torch::Tensor& logits, int64_t first) {
    const torch::Tensor cpu = logits.narrow(0, first, static_cast<int64_t>(k_))
                                  .to(torch::kCPU, torch::kFloat32)
                                  .contiguous();
    s_.adaptive_rows.assign(cpu.data_ptr<float>(), cpu.data_ptr<float>() + cpu.numel());
    const size_t v = static_cast<size_t>(vocab_);
    try {
      for (size_t j = 0; j < k_; ++j)
        rt::ApplySampling(std::span<float>(s_.adaptive_rows).subspan(j * v, v),
                          g_.sdsat_->row_params());
      g_.sdsat_->SwapRows(&s_.adaptive_rows);
    } catch (const sam::Error& e) {
      throw Error(ErrorCode::kInvalidArgument, std::string("generate: SDSAT rows: ") + e.what());
    }
  }

  // Feeds Token Recycling the top-k next tokens of every row of `logits` (evaluated `tokens`).
  void Observe(const torch::Tensor& logits, std::span<const uint32_t> tokens) {
    if (!feedback_) return;
    CopyIds(std::get<1>(logits.topk(feedback_k_, -1)).cpu(), &s_.topk);
    g_.session_->ObserveTopK(tokens, s_.topk, static_cast<size_t>(feedback_k_));
  }

  // The processed sampling distribution after row `row` of `logits` (same rule everywhere).
  std::span<const float> Distribution(const torch::Tensor& logits, int32_t row) {
    if (!s_.have_row[row]) {
      const torch::Tensor cpu = logits[row].to(torch::kCPU, torch::kFloat32).contiguous();
      s_.rows[row].assign(cpu.data_ptr<float>(), cpu.data_ptr<float>() + vocab_);
      try {
        rt::ApplySampling(s_.rows[row], options_.sampling);
      } catch (const sam::Error& e) {
        throw Error(ErrorCode::kInvalidArgument, std::string("generate: sampling: ") + e.what());
      }
      s_.have_row[row] = 1;
    }
    return s_.rows[row];
  }
  void ResetRows(size_t n) {
    if (s_.rows.size() < n) s_.rows.resize(n);
    s_.have_row.assign(n, 0);
  }

  // Emits this step's tokens: truncated after a stop token and at max_new_tokens.
  void Emit(std::span<const uint32_t> tokens) {
    s_.emitted.clear();
    for (const uint32_t t : tokens) {
      if (static_cast<int64_t>(result_.output_ids.size()) >= options_.max_new_tokens) break;
      result_.output_ids.push_back(t);
      s_.emitted.push_back(t);
      if (std::find(options_.stop_tokens.begin(), options_.stop_tokens.end(), t) !=
          options_.stop_tokens.end()) {
        result_.stop_reason = StopReason::kStopToken;
        done_ = true;
        break;
      }
    }
    if (!done_ && static_cast<int64_t>(result_.output_ids.size()) >= options_.max_new_tokens) {
      result_.stop_reason = StopReason::kMaxNewTokens;
      done_ = true;
    }
    if (on_tokens_ && !s_.emitted.empty() && !on_tokens_(s_.emitted) && !done_) {
      result_.stop_reason = StopReason::kCallback;
      done_ = true;
    }
  }

  Generator& g_;
  Scratch& s_;
  const std::span<const uint32_t> prompt_;
  const GenerateOptions& options_;
  const TokenCallback& on_tokens_;
  const bool greedy_;
  const bool feedback_;  // Token Recycling learns from the passes
  const int64_t vocab_;
  const int64_t feedback_k_;
  const bool sdsat_;     // SDSAT's adaptive branches ride on the passes
  const bool one_pass_;  // SDSAT's scheme
  const size_t k_;       // SDSAT's adaptive tokens per branch
  rt::Rng rng_;
  GenerateResult result_;
  int64_t draft_passes_before_ = 0;
  bool done_ = false;
};

GenerateResult Generator::Generate(std::span<const uint32_t> prompt, const GenerateOptions& options,
                                   const TokenCallback& on_tokens) {
  return internal::TranslateTorchErrors("generate", [&] {
    ValidateOptions(options);
    if (prompt.empty()) throw Error(ErrorCode::kInvalidArgument, "generate: the prompt is empty");
    torch::NoGradGuard no_grad;
    return Request(*this, prompt, options, on_tokens).Run();
  });
}

}  // namespace sam::torch_backend
