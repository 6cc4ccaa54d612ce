// A session's options: what a user decides, each policy's own parameters, and
// (behind an explicitly experimental name) the tuning the defaults were
// measured with.
//
//   sam::runtime::SessionOptions options;               // sam-cal, 40-node trees
//   options.draft_size = 24;
//   sam::runtime::SetSessionOption(&options, "policy", "sam-tree");  // by name (tools, Python)
//   options.tree.nodes = 30;                            // sam-tree's own size
//   sam::runtime::Session session(options);
//
// One table (SessionOptionSpecs) names every user option with its type,
// default, range and meaning; the C API's config conversion, Python's
// Session(**options) and every tool's flags are made from it, so that an
// option has one name, one default and one check everywhere. The tuning
// parameters (experimental::Tuning) have a table of their own
// (ExperimentalOptionSpecs): tools set them with --experimental NAME=VALUE,
// Python with Session(experimental={...}); the C API has none of them.
#ifndef SAM_RUNTIME_OPTIONS_H_
#define SAM_RUNTIME_OPTIONS_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "sam/export.h"
#include "sam/runtime/budget.h"
#include "sam/runtime/chain.h"
#include "sam/runtime/selection.h"

namespace sam::runtime {

class Drafter;

// The smallest dynamic window SessionOptions::max_dynamic_bytes may give.
inline constexpr size_t kMinDynamicWindowTokens = 64;

// Policy::kTree's parameters: a count-weighted static tree of at most
// min(nodes, 1 + 4 l) nodes (l: the static match length), at most `width`
// nodes per depth (1..kMaxWidth).
struct SAM_API TreeOptions {
  size_t nodes = 60;
  size_t width = 8;
};

namespace experimental {

// Tuning parameters. Their defaults were set by measurement on the dev
// traces (docs/runtime.md); they stay for research and benchmarks, are not
// part of the C API, and may change or go in any release.
struct SAM_API Tuning {
  // Linear drafts (kPaper, kStaticOnly, kDynamicOnly) of
  // min(draft_size, 1 + length_per_match * match_len) nodes; kTree's size
  // limit 1 + length_per_match * l uses length_per_match too.
  bool adaptive_length = false;
  uint32_t length_per_match = 4;
  // Dynamic drafts climb suffix links while the continuation is short (a
  // shorter suffix of at least DynamicSam::kMinClimbLength tokens, whose
  // first occurrence has more text after it: a loop's earlier rounds).
  bool dynamic_link_fallback = true;
  // kCalibrated: nodes below this estimated path probability are not
  // drafted (0.015: 23.6 tokens verified per step on the dev traces).
  double min_path_probability = 0.015;
  // kCalibrated: at most this many lookups of a branching static state's
  // children per step, in best-first order (a state that occurs once has one
  // child, read from the text, and is not counted). 0: no limit. 8 bounds the
  // step's p99 at about 3x below the unlimited ranking's, for 3% of MAT.
  size_t max_static_lookups = 8;
  // kCalibrated: a node whose static state occurs fewer than this many times
  // also offers the heaviest children of its next shorter context (its
  // suffix link) that its own do not include. 0: never. MAT 2.497 -> 2.698
  // on the dev traces, for about 2.5x the propose time at the median.
  uint64_t backoff_count = 8;
  // kCalibrated: static children offered per node; 1..kMaxWidth.
  size_t calibrated_width = 8;
  // shape kChain: a chain ends before its path probability falls below
  // this; kCalibrated drafts no node below it (in place of
  // min_path_probability). 0.003: sam-cal's chains verify about 12 tokens a
  // step on the dev traces.
  double chain_min_path_probability = 0.003;
  // shape kChain, kCalibrated: in place of calibrated_width and
  // max_static_lookups. A chain is one path: one static child per node and
  // more lookups let it reach deeper than the tree's breadth-first budget
  // (16 lookups: 0.2% of MAT below 32 on the dev traces, p99 a third lower).
  size_t chain_calibrated_width = 1;
  size_t chain_max_static_lookups = 16;
};

}  // namespace experimental

struct SAM_API SessionOptions {
  // The default everywhere (C, Python, tools, engine adapters): kCalibrated
  // drafts the most accepted tokens per token verified of all policies, as a
  // tree and as a chain (docs/performance.md).
  Policy policy = Policy::kCalibrated;
  // The most nodes a draft holds, start token included (the paper: 40; 16 for
  // code); 1..kMaxDraftSize. Every policy but kTree (TreeOptions::nodes).
  size_t draft_size = 40;
  // The drafts' shape (chain.h). kTree: the policy's tree. kChain: one path of
  // it, for verifiers that take one sequence per request: the path that
  // maximises the expected accepted tokens under the tree's accept estimates
  // (kCalibrated's calibrated estimates, kTree's count ratios; a linear draft
  // is its own chain), with at most draft_size - 1 tokens, and with a
  // cost_curve at the length that pays (ChainShaper). Statistics count the
  // chain; kCalibrated still calibrates on the whole tree.
  DraftShape shape = DraftShape::kTree;
  // kCalibrated and kChain: the verification cost curve t(n)/t(1) (budget.h);
  // empty: off. When set, each step keeps the n best-ranked nodes
  // (n <= draft_size) that maximise E(n) - rate * t(n)/t(1), with rate the
  // session's measured tokens per t(1) so far (ChooseTreeSize), so the tree
  // grows where verification is cheap (GPU) and shrinks where it is not.
  CostCurve cost_curve;
  // Memory bound of the dynamic automaton (text, states, transitions). The
  // default (64 MiB) holds a window of about 490K tokens (111-153 bytes a
  // token); when the context outgrows it, the window keeps the most recent
  // half (dynamic_sam.h). 0 means the default; a value too small for a window
  // of kMinDynamicWindowTokens tokens is refused (kInvalidArgument).
  size_t max_dynamic_bytes = size_t{64} << 20;
  // Drafter used when the policy falls back (not owned; may be null).
  Drafter* fallback = nullptr;
  // Measure drafting and update time into the statistics (two clock reads,
  // about 50 ns, per Propose and per Commit). Off by default: the per-step
  // budget is about 1-2 us.
  bool collect_timing = false;
  // CacheRequest() adds the prompt before the output (one text) when true,
  // the output alone when false.
  bool cache_prompts = false;

  // Each policy's own parameters (read only by that policy).
  PaperOptions paper;
  TreeOptions tree;

  // Tuning (see above); leave it alone unless you are measuring.
  experimental::Tuning tuning;
};

// Checks `options`; throws sam::Error (kInvalidArgument) naming the first
// unusable field and its range (draft_size outside 1..kMaxDraftSize,
// tree.nodes above kMaxDraftSize, a width outside 1..kMaxWidth, a
// probability outside [0, 1] or NaN). Session's constructor calls it.
SAM_API void ValidateSessionOptions(const SessionOptions& options);

// Linear draft size (nodes, start token included) for a match length: draft_size,
// or with tuning.adaptive_length min(draft_size, 1 + length_per_match * match_len).
SAM_API size_t LinearDraftSize(uint32_t match_len, const SessionOptions& options);

// ---- The option table ---------------------------------------------------

enum class OptionType {
  kName,      // one of a list of names (policy, shape)
  kUnsigned,  // an unsigned integer within [min, max]
  kSigned,    // a signed integer within [min, max]
  kNumber,    // a finite number within [min, max]
  kBool,      // true/false (also 1/0)
  kFile,      // a file path (cost_curve: a cost curve file, budget.h)
};

// One option: its name (the C config field, Python's keyword, the tools'
// flag --NAME with '-' for '_'), type, default and range as text, and help.
struct SAM_API OptionSpec {
  std::string_view name;
  OptionType type = OptionType::kUnsigned;
  std::string_view default_text;
  double min = 0.0, max = 0.0;  // kUnsigned, kSigned, kNumber
  std::string_view help;
  // Where it is set: `value` is the option's text (see SetSessionOption).
  void (*set)(SessionOptions* options, std::string_view value) = nullptr;
};

// The user's options, in the order of the docs: policy, draft_size, shape,
// cost_curve, max_dynamic_bytes, collect_timing, cache_prompts, l_bias,
// l_threshold, tree_nodes, tree_width.
SAM_API std::span<const OptionSpec> SessionOptionSpecs();
// experimental::Tuning's fields by name: adaptive_length, length_per_match,
// dynamic_link_fallback, min_path_probability, max_static_lookups,
// backoff_count, calibrated_width, chain_min_path_probability.
SAM_API std::span<const OptionSpec> ExperimentalOptionSpecs();

// Sets option `name` of SessionOptionSpecs() from text: a policy name
// (NamedPolicies; for "sam-rec", whose NamedPolicy asks for a Token Recycling
// fallback, the caller makes that drafter: options hold no drafter), a shape name,
// a number in decimal, true/false/1/0, or a file path; l_bias "auto" (or a
// negative number) is unset. Throws sam::Error (kInvalidArgument) naming the
// option, the value and what is expected, for an unknown name, a value that
// does not parse or is out of range.
SAM_API void SetSessionOption(SessionOptions* options, std::string_view name,
                              std::string_view value);
// The same for ExperimentalOptionSpecs() (sets options->tuning).
SAM_API void SetExperimentalOption(SessionOptions* options, std::string_view name,
                                   std::string_view value);
// "NAME=VALUE" for SetExperimentalOption (a tool's --experimental flag).
SAM_API void SetExperimentalAssignment(SessionOptions* options, std::string_view assignment);
// The option named `name` in `specs`, or null.
SAM_API const OptionSpec* FindOptionSpec(std::span<const OptionSpec> specs, std::string_view name);
// One paragraph per option: "NAME TYPE (default D; range): help", for
// --help texts and docstrings.
SAM_API std::string OptionHelp(std::span<const OptionSpec> specs, std::string_view prefix = "");

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_OPTIONS_H_
