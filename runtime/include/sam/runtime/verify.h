// Verification bookkeeping for speculative decoding: given a draft tree and
// the model's outputs at every node, decide which draft tokens are accepted
// and which token follows them. Plain arrays in, plain arrays out: nothing
// here knows about models, tensors or devices.
//
// Greedy:
//
//   // argmax[i] = the model's most likely token after node i (after the
//   // context plus node i's ancestors and node i itself).
//   sam::runtime::GreedyResult r = sam::runtime::VerifyGreedy(tree, argmax);
//   emit(r.accepted_tokens); emit(r.bonus_token);  // == plain greedy decoding
//   // keep the KV entries of r.accepted_nodes, drop the others
//
// Sampling (lossless: the emitted tokens are distributed exactly as plain
// sampling from the processed model distribution):
//
//   sam::runtime::SamplingParams params{.temperature = 0.7f, .top_k = 50, .top_p = 0.9f};
//   for (size_t i = 0; i < tree.size(); ++i)         // identical at every node
//     sam::runtime::ApplySampling(logits_row(i), params);
//   sam::runtime::Rng rng(seed);
//   sam::runtime::SampleResult r = sam::runtime::VerifySampling(
//       tree, [&](int32_t node) { return probs_row(node); }, rng);
//
// The first token after prefill is sampled with SampleToken() from a row
// processed by the same ApplySampling() call, so every emitted token comes
// from the same distribution.
//
// Errors: malformed trees, rows of the wrong size, negative / NaN
// probabilities, tokens outside the vocabulary and invalid parameters throw
// sam::Error (kInvalidArgument) with a message naming the value. Nothing prints or
// aborts.
// Thread safety: every function is reentrant; an Rng must not be shared
// between threads without synchronisation.
#ifndef SAM_RUNTIME_VERIFY_H_
#define SAM_RUNTIME_VERIFY_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "sam/export.h"
#include "sam/runtime/draft.h"

namespace sam::runtime {

// What one verification step accepted.
struct SAM_API VerifyResult {
  // Indices of the accepted tree nodes, root-first: {0, a1, a2, ...}, each the
  // child of the previous one. The KV entries of exactly these nodes are kept.
  std::vector<int32_t> accepted_nodes;
  // Tokens of accepted_nodes[1..] (the start token at node 0 is excluded: it
  // was emitted by the previous step).
  std::vector<uint32_t> accepted_tokens;
  // The token the model produces after the last accepted node; it is emitted
  // too and becomes the start token of the next step.
  uint32_t bonus_token = 0;
};
using GreedyResult = VerifyResult;
using SampleResult = VerifyResult;

// ---------------------------------------------------------------------------
// Greedy verification.

// argmax.size() must equal tree.size(); argmax[i] is the model's argmax after
// node i. Accepts the longest root-to-leaf path whose every non-root node's
// token equals the argmax at its parent; among paths of equal length, the one
// ending at the lowest node index (with distinct sibling tokens, which all
// built-in drafters produce, the path is unique). accepted_tokens followed by
// bonus_token are exactly what plain greedy decoding emits.
// O(tree.size()). Throws sam::Error (kInvalidArgument) on a malformed tree or a size
// mismatch.
SAM_API GreedyResult VerifyGreedy(const DraftTree& tree, std::span<const uint32_t> argmax);
// Same, reusing *out's buffers (no allocation once they are large enough).
SAM_API void VerifyGreedy(const DraftTree& tree, std::span<const uint32_t> argmax,
                          GreedyResult* out);

// ---------------------------------------------------------------------------
// Sampling parameters and token sampling.

// Applied in this order: temperature, then top-k, then top-p, then
// renormalisation (the HF transformers warper order).
//   temperature  > 0: p ~ exp(logit / temperature). 0: greedy: a one-hot
//                distribution on the argmax (lowest index among ties); top_k
//                and top_p are then irrelevant. Must be finite and >= 0.
//   top_k        <= 0: off. Otherwise keep the top_k most probable tokens;
//                ties at the boundary are broken by lower token id, so
//                exactly min(top_k, #tokens with p > 0) tokens survive.
//   top_p        in (0, 1]; 1: off. Otherwise keep the smallest set of most
//                probable tokens (after top-k, renormalised) whose total
//                probability is >= top_p: a token survives iff the
//                probability of the tokens ranked above it is < top_p.
struct SAM_API SamplingParams {
  float temperature = 1.0f;
  int top_k = 0;
  float top_p = 1.0f;
};

// What ApplySampling receives.
enum class ScoreKind {
  kLogits,         // unnormalised log-probabilities; -inf masks a token
  kProbabilities,  // non-negative weights (need not sum to 1); temperature
                   // then means p^(1/temperature)
};

// Turns one position's scores into the sampling distribution, in place: on
// return `scores` holds probabilities summing to 1 (within float rounding).
// Throws sam::Error (kInvalidArgument) on an empty span, NaN / +inf logits, all
// logits -inf, negative / non-finite / all-zero probabilities, or parameters
// outside the ranges above. O(V) for temperature and top-k, O(V log V) with
// top-p (O(V + k log k) with both). Allocates an index buffer of V entries
// when top-k or top-p is on.
SAM_API void ApplySampling(std::span<float> scores, const SamplingParams& params,
                           ScoreKind kind = ScoreKind::kLogits);

// A small seedable PRNG (xoshiro256**, state seeded by splitmix64). The same
// seed gives the same sequence on every platform. Not cryptographic.
class SAM_API Rng {
 public:
  explicit Rng(uint64_t seed = 0) { Seed(seed); }
  void Seed(uint64_t seed);
  uint64_t Next();
  // Uniform in [0, 1), 53 random bits.
  double Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t s_[4];
};

// Draws index i with probability weights[i] / sum(weights). Weights must be
// non-negative and finite with a positive sum (sam::Error kInvalidArgument
// otherwise). O(V).
SAM_API uint32_t SampleToken(std::span<const float> weights, Rng& rng);

// ---------------------------------------------------------------------------
// Sampling verification.

// Returns the model's processed next-token distribution after a node (a row
// of V probabilities, see ApplySampling). The span must stay valid until
// VerifySampling returns; rows are requested only for nodes on the accepted
// path. All rows must have the same size V.
using NodeDistribution = std::function<std::span<const float>(int32_t node)>;

// How the draft tokens were chosen; decides the acceptance rule.
enum class DraftMode {
  // The draft does not depend on the verification randomness (suffix
  // automata, Token Recycling, PLD, any deterministic drafter). Recursive
  // rejection: at the current node, with p its distribution, try the
  // children in node order: accept child x with probability p(x) / sum(p);
  // otherwise set p(x) = 0 and try the next sibling. When every child is
  // rejected, the bonus token is sampled from what is left of p. Equivalent
  // to sampling a token from p and descending if some child carries it.
  kDeterministic,
  // Siblings were drawn without replacement from a proposal q (Gumbel-top-k,
  // stochastic beam search), in node order: child k was drawn from q_k = q
  // renormalised without the earlier siblings. Recursive Speculative Decoding
  // (Jeon et al. 2024): accept x_k with probability min(1, p_k(x_k) /
  // q_k(x_k)); on rejection p_{k+1} = norm(max(p_k - q_k, 0)), q_{k+1} = q_k
  // without x_k. When every child is rejected the bonus token is sampled
  // from the last residual. Needs the full proposal distribution q(.|node)
  // of every parent node (proposal below); DraftTree::draft_probs alone (q at
  // the drafted tokens) cannot form the residual. A child whose token has
  // zero proposal probability left (it cannot have been drawn from q_k, e.g.
  // a repeated sibling) is verified as a deterministic draft, which keeps the
  // step lossless.
  kWithoutReplacement,
  // Siblings were drawn independently, with replacement, from one proposal q
  // (SpecInfer-style multi-draft sampling; a single-child chain drawn from q is
  // the classic speculative sampling rule). Multi-round rejection: accept x_k
  // with probability min(1, p_k(x_k) / q(x_k)); on rejection p_{k+1} =
  // norm(max(p_k - q, 0)) with q unchanged (a repeated sibling token is tried
  // again against the new residual). Needs the proposal rows like
  // kWithoutReplacement.
  kWithReplacement,
};

// Verifies a draft tree against the model's processed distributions.
//   target(i)   the model's distribution after node i (already processed by
//               ApplySampling with the step's parameters).
//   proposal(i) kWithoutReplacement / kWithReplacement: the distribution q
//               from which node i's children were drawn (same size V).
//               Ignored (may be empty) for kDeterministic.
// The emitted tokens (accepted_tokens, then bonus_token) are distributed
// exactly as tokens sampled one at a time from target. Consumes one
// Uniform() per tried child and one for the bonus token.
// O(accepted depth * (V + tree.size())) plus O(V) per rejected
// kWithoutReplacement child; allocates O(V) scratch.
// Throws sam::Error (kInvalidArgument) on a malformed tree, a missing proposal in
// kWithoutReplacement or kWithReplacement, rows of different sizes or with invalid entries, or a
// draft token >= V.
SAM_API SampleResult VerifySampling(const DraftTree& tree, const NodeDistribution& target,
                                    Rng& rng, DraftMode mode = DraftMode::kDeterministic,
                                    const NodeDistribution& proposal = {});

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_VERIFY_H_
