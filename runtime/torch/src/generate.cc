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

GenerateResult Generator::Generate(std::span<const uint32_t> prompt, const GenerateOptions& options,
                                   const TokenCallback& on_tokens) {
  return internal::TranslateTorchErrors("generate",
                                        [&] { return GenerateImpl(prompt, options, on_tokens); });
}

GenerateResult Generator::GenerateImpl(std::span<const uint32_t> prompt,
                                       const GenerateOptions& options, const TokenCallback& on_tokens) {
  ValidateOptions(options);
  if (prompt.empty()) throw Error(ErrorCode::kInvalidArgument, "generate: the prompt is empty");
  torch::NoGradGuard no_grad;
  Scratch& s = *scratch_;
  const bool greedy = options.sampling.temperature == 0.0f;
  const bool feedback = options.speculative && recycling_ != nullptr;
  const int64_t vocab = model_.config().vocab_size;
  const int64_t feedback_k = std::min<int64_t>(kFeedbackWidth, vocab);
  rt::Rng rng(options.seed);

  GenerateResult result;
  result.prompt_tokens = static_cast<int64_t>(prompt.size());
  const auto start_time = std::chrono::steady_clock::now();

  // The cache holds the prompt, every emitted token but the last, and one step's draft.
  const int64_t needed = result.prompt_tokens + options.max_new_tokens +
                         static_cast<int64_t>(max_pass_nodes_);
  if (cache_.capacity() < needed) {
    cache_ = KvCache();  // release the old storage before allocating the new one
    cache_ = model_.NewCache(needed);
  } else {
    cache_.Truncate(0);
  }
  const bool model_only = options_.draft_model_use == GeneratorOptions::DraftModelUse::kOnly;
  const int64_t draft_passes_before = model_drafter_ ? model_drafter_->forward_passes() : 0;
  if (model_drafter_) {
    model_drafter_->Configure(options.sampling, options.seed ^ 0x5851f42d4c957f2dULL);
    model_drafter_->Reserve(result.prompt_tokens + options.max_new_tokens);
  }
  // SDSAT: adaptive branches ride on the passes (sdsat.h); sdsat_only drafts without the session.
  const bool sdsat = options.speculative && sdsat_ != nullptr;
  const bool sdsat_only = options_.sdsat_use == GeneratorOptions::SdsatUse::kOnly;
  const bool one_pass = options_.sdsat.scheme == rt::SdsatScheme::kOnePass;
  const size_t k = sdsat_ ? sdsat_->k() : 0;
  if (sdsat_) sdsat_->Configure(options.sampling, options.seed ^ 0x2545f4914f6cdd1dULL);
  // Appends a chain of the k adaptive tokens below input node `parent`.
  auto append_adaptive = [&](int32_t parent) {
    for (size_t j = 0; j < k; ++j) {
      s.input.tokens.push_back(sdsat_->adaptive_tokens()[j]);
      s.input.parents.push_back(j == 0 ? parent : static_cast<int32_t>(s.input.tokens.size()) - 2);
    }
  };
  // Hands the drafter the processed rows of the k adaptive positions from input row `first`.
  auto take_adaptive_rows = [&](const torch::Tensor& logits, int64_t first) {
    const torch::Tensor cpu =
        logits.narrow(0, first, static_cast<int64_t>(k)).to(torch::kCPU, torch::kFloat32).contiguous();
    s.adaptive_rows.assign(cpu.data_ptr<float>(), cpu.data_ptr<float>() + cpu.numel());
    const size_t v = static_cast<size_t>(vocab);
    try {
      for (size_t j = 0; j < k; ++j)
        rt::ApplySampling(std::span<float>(s.adaptive_rows).subspan(j * v, v), sdsat_->row_params());
      sdsat_->SwapRows(&s.adaptive_rows);
    } catch (const sam::Error& e) {
      throw Error(ErrorCode::kInvalidArgument, std::string("generate: SDSAT rows: ") + e.what());
    }
  };

  // Feeds Token Recycling the top-k next tokens of every row of `logits` (evaluated `tokens`).
  auto observe = [&](const torch::Tensor& logits, std::span<const uint32_t> tokens) {
    if (!feedback) return;
    CopyIds(std::get<1>(logits.topk(feedback_k, -1)).cpu(), &s.topk);
    session_->ObserveTopK(tokens, s.topk, static_cast<size_t>(feedback_k));
  };
  // The processed sampling distribution after row `row` of `logits` (same rule everywhere).
  auto distribution = [&](const torch::Tensor& logits, int32_t row) -> std::span<const float> {
    if (!s.have_row[row]) {
      const torch::Tensor cpu = logits[row].to(torch::kCPU, torch::kFloat32).contiguous();
      s.rows[row].assign(cpu.data_ptr<float>(), cpu.data_ptr<float>() + vocab);
      try {
        rt::ApplySampling(s.rows[row], options.sampling);
      } catch (const sam::Error& e) {
        throw Error(ErrorCode::kInvalidArgument, std::string("generate: sampling: ") + e.what());
      }
      s.have_row[row] = 1;
    }
    return s.rows[row];
  };
  auto reset_rows = [&](size_t n) {
    if (s.rows.size() < n) s.rows.resize(n);
    s.have_row.assign(n, 0);
  };

  // Emits this step's tokens: truncated after a stop token and at max_new_tokens.
  bool done = false;
  auto emit = [&](std::span<const uint32_t> tokens) {
    s.emitted.clear();
    for (const uint32_t t : tokens) {
      if (static_cast<int64_t>(result.output_ids.size()) >= options.max_new_tokens) break;
      result.output_ids.push_back(t);
      s.emitted.push_back(t);
      if (std::find(options.stop_tokens.begin(), options.stop_tokens.end(), t) !=
          options.stop_tokens.end()) {
        result.stop_reason = StopReason::kStopToken;
        done = true;
        break;
      }
    }
    if (!done && static_cast<int64_t>(result.output_ids.size()) >= options.max_new_tokens) {
      result.stop_reason = StopReason::kMaxNewTokens;
      done = true;
    }
    if (on_tokens && !s.emitted.empty() && !on_tokens(s.emitted) && !done) {
      result.stop_reason = StopReason::kCallback;
      done = true;
    }
  };

  // ---- Prefill: one pass over the prompt; the first token comes from its last position.
  if (options.speculative && model_only) {
    model_drafter_->Prefill(prompt);
  } else if (options.speculative && !sdsat_only) {
    session_->Reset();
    session_->Prefill(prompt);
  }
  {
    s.input.tokens.assign(prompt.begin(), prompt.end());
    s.input.parents.resize(prompt.size());
    for (size_t i = 0; i < prompt.size(); ++i) s.input.parents[i] = static_cast<int32_t>(i) - 1;
    // SDSAT: [prompt, S x k], the first pass of both schemes (drafts for the first step).
    if (sdsat) append_adaptive(static_cast<int32_t>(prompt.size()) - 1);
    const torch::Tensor all_logits = model_.Forward(cache_, s.input);
    cache_.CommitPrefix(result.prompt_tokens);
    const torch::Tensor logits =
        sdsat ? all_logits.narrow(0, 0, result.prompt_tokens) : all_logits;
    if (sdsat) {
      take_adaptive_rows(all_logits, result.prompt_tokens);
      result.adaptive_tokens += static_cast<int64_t>(k);
    }
    observe(logits, prompt);
    uint32_t first;
    if (greedy) {
      first = static_cast<uint32_t>(logits[result.prompt_tokens - 1].argmax().item<int64_t>());
    } else {
      reset_rows(1);
      first = rt::SampleToken(distribution(logits.slice(0, result.prompt_tokens - 1), 0), rng);
    }
    result.prefill_seconds = SecondsSince(start_time);
    emit(std::span<const uint32_t>(&first, 1));
  }

  // ---- Steps: propose, verify in one pass, accept, compact.
  const auto decode_start = std::chrono::steady_clock::now();
  while (!done) {
    const uint32_t start = result.output_ids.back();
    const int64_t remaining = options.max_new_tokens - static_cast<int64_t>(result.output_ids.size());
    if (options.speculative) {
      // No deeper than the tokens still wanted: remaining - 1 accepted plus the bonus.
      const size_t max_nodes = std::min<size_t>(max_draft_nodes_, static_cast<size_t>(remaining));
      if (model_only) {
        model_drafter_->Propose(start, max_nodes, &s.tree);
      } else if (sdsat_only) {
        sdsat_->Propose(start, max_nodes, &s.tree);
      } else {
        session_->Propose(start, max_nodes, &s.tree);
      }
    } else {
      s.tree.Reset(start, rt::DraftSource::kNone);
    }
    const rt::DraftTree& tree = s.tree;
    const int64_t n = static_cast<int64_t>(tree.size());
    s.input.tokens.assign(tree.tokens.begin(), tree.tokens.end());
    s.input.parents.assign(tree.parents.begin(), tree.parents.end());
    // SDSAT's adaptive branches: below every node (one-pass), or below the start token of a step
    // without a draft (two-pass: the official first pass on [c, S x k]).
    const bool adaptive = sdsat && (one_pass || n == 1);
    if (adaptive)
      for (int32_t i = 0; i < static_cast<int32_t>(n); ++i) append_adaptive(i);
    const torch::Tensor all_logits = model_.Forward(cache_, s.input);
    const torch::Tensor logits = adaptive ? all_logits.narrow(0, 0, n) : all_logits;
    observe(logits, tree.tokens);

    if (greedy) {
      CopyIds(logits.argmax(-1).cpu(), &s.argmax);
      rt::VerifyGreedy(tree, s.argmax, &s.verified);
    } else {
      reset_rows(tree.size());
      auto target = [&](int32_t node) { return distribution(logits, node); };
      // sam-cal re-ranks the model's nodes into its own tree (its node indexes are
      // not the model draft's): verified by the deterministic rule, which is
      // exact for any tree drawn independently of the verification randomness.
      if ((tree.source == rt::DraftSource::kModel || tree.source == rt::DraftSource::kSdsat) &&
          options_.selection.policy != rt::Policy::kCalibrated) {
        // The draft model's (or SDSAT's) own rule, with its proposal rows q(.|node).
        const rt::TreeDraft& draft = tree.source == rt::DraftSource::kModel
                                         ? model_drafter_->last_draft()
                                         : sdsat_->last_draft();
        s.verified = rt::VerifySampling(tree, target, rng, draft.verify_mode,
                                        [&](int32_t node) { return draft.ProposalRow(node); });
      } else {
        s.verified = rt::VerifySampling(tree, target, rng);
      }
    }
    cache_.Commit(s.verified.accepted_nodes);  // adaptive nodes are never kept
    if (options.speculative) {
      s.committed.assign(1, start);
      s.committed.insert(s.committed.end(), s.verified.accepted_tokens.begin(),
                         s.verified.accepted_tokens.end());
      if (model_only) {
        model_drafter_->Commit(s.committed);
      } else if (!sdsat_only) {
        session_->Commit(s.committed);
      }
    }
    if (sdsat) {
      if (adaptive) {
        // The branch below the last accepted node drafts the tokens after this step's bonus.
        const int64_t last = s.verified.accepted_nodes.empty() ? 0 : s.verified.accepted_nodes.back();
        take_adaptive_rows(all_logits, n + last * static_cast<int64_t>(k));
        result.adaptive_tokens += n * static_cast<int64_t>(k);
        if (!one_pass) ++result.sdsat_draft_passes;
      } else {
        sdsat_->ClearRows();
      }
    }

    ++result.steps;
    result.verified_tokens += static_cast<int64_t>(tree.size());
    result.by_source[static_cast<size_t>(tree.source)].Record(tree, s.verified.accepted_tokens.size());

    s.committed.assign(s.verified.accepted_tokens.begin(), s.verified.accepted_tokens.end());
    s.committed.push_back(s.verified.bonus_token);
    emit(s.committed);
  }

  result.decode_seconds = SecondsSince(decode_start);
  if (model_drafter_) result.draft_forward_passes = model_drafter_->forward_passes() - draft_passes_before;
  result.mat = result.Total().Mat();
  const double seconds = result.prefill_seconds + result.decode_seconds;
  result.tokens_per_s = seconds > 0 ? static_cast<double>(result.output_ids.size()) / seconds : 0.0;
  return result;
}

}  // namespace sam::torch_backend
