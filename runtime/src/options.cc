#include "sam/runtime/options.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

#include "sam/error.h"

namespace sam::runtime {

namespace {

[[noreturn]] void Invalid(std::string_view name, std::string_view value, const std::string& why) {
  throw Error(ErrorCode::kInvalidArgument,
              std::string(name) + ": '" + std::string(value) + "' " + why);
}

std::string_view Trimmed(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A range bound: whole numbers without a fraction ("4096", not "4096.000000").
std::string BoundText(double v) {
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.17g", v);
  return buffer;
}

std::string RangeText(const OptionSpec& spec) {
  std::string out = "[";
  out += BoundText(spec.min);
  out += ", ";
  out += BoundText(spec.max);
  out += "]";
  return out;
}

// The value of `text` for option `spec` (kUnsigned, kSigned, kNumber), checked against its
// range: a whole decimal number for the integer types, a finite one for kNumber.
double Number(const OptionSpec& spec, std::string_view text) {
  const std::string_view t = Trimmed(text);
  if (t.empty()) Invalid(spec.name, text, "is empty, not a number");
  double v = 0.0;
  if (spec.type == OptionType::kNumber) {
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || end != t.data() + t.size() || !std::isfinite(v))
      Invalid(spec.name, text, "is not a finite number");
  } else if (spec.type == OptionType::kUnsigned) {
    uint64_t u = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), u);
    if (ec == std::errc::result_out_of_range) Invalid(spec.name, text, "is outside " + RangeText(spec));
    if (ec != std::errc() || end != t.data() + t.size())
      Invalid(spec.name, text, "is not an unsigned integer");
    v = static_cast<double>(u);
  } else {
    int64_t i = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), i);
    if (ec == std::errc::result_out_of_range) Invalid(spec.name, text, "is outside " + RangeText(spec));
    if (ec != std::errc() || end != t.data() + t.size()) Invalid(spec.name, text, "is not an integer");
    v = static_cast<double>(i);
  }
  if (!(v >= spec.min && v <= spec.max)) Invalid(spec.name, text, "is outside " + RangeText(spec));
  return v;
}

bool Bool(std::string_view name, std::string_view text) {
  const std::string_view t = Trimmed(text);
  if (t == "1" || t == "true" || t == "True") return true;
  if (t == "0" || t == "false" || t == "False") return false;
  Invalid(name, text, "is not a bool (true, false, 1, 0)");
}

const OptionSpec& Spec(std::span<const OptionSpec> specs, std::string_view name, bool experimental) {
  if (const OptionSpec* spec = FindOptionSpec(specs, name)) return *spec;
  std::string valid;
  for (const OptionSpec& s : specs) valid += (valid.empty() ? "" : ", ") + std::string(s.name);
  throw Error(ErrorCode::kInvalidArgument,
              std::string(experimental ? "unknown experimental option '" : "unknown option '") +
                  std::string(name) + "' (valid: " + valid + ")");
}

// The value of user option `name` (a number) in its row's type and range.
double UserNumber(std::string_view name, std::string_view value) {
  return Number(*FindOptionSpec(SessionOptionSpecs(), name), value);
}

void SetPolicy(SessionOptions* o, std::string_view v) {
  try {
    o->policy = FindPolicy(Trimmed(v)).policy;
  } catch (const Error& e) {
    throw Error(ErrorCode::kInvalidArgument, std::string("policy: ") + e.what());
  }
}

void SetShape(SessionOptions* o, std::string_view v) {
  try {
    o->shape = FindDraftShape(Trimmed(v));
  } catch (const Error& e) {
    throw Error(ErrorCode::kInvalidArgument, std::string("shape: ") + e.what());
  }
}

constexpr double kMaxSize = static_cast<double>(kMaxDraftSize);
constexpr double kMaxU32 = 4294967295.0;
constexpr double kMaxU64 = 9007199254740992.0;  // 2^53: every value below is exact in a double

// Rows are found by name at run time (few options, set once a session).
const OptionSpec kUserSpecs[] = {
    {"policy", OptionType::kName, "sam-cal", 0, 0,
     "drafting policy: sam, static, dynamic, sam-tree, sam-rec or sam-cal (sam-rec needs a\n"
     "Token Recycling fallback: its vocabulary size)",
     SetPolicy},
    {"draft_size", OptionType::kUnsigned, "40", 1, kMaxSize,
     "the most nodes a draft holds, start token included (every policy but sam-tree)",
     [](SessionOptions* o, std::string_view v) {
       o->draft_size = static_cast<size_t>(UserNumber("draft_size", v));
     }},
    {"shape", OptionType::kName, "tree", 0, 0,
     "tree: each policy's drafts; chain: one path of each, the path of most expected\n"
     "accepted tokens (for verifiers that take one sequence per request)",
     SetShape},
    {"cost_curve", OptionType::kFile, "", 0, 0,
     "verification cost curve (a file of 'tokens cost' lines, budget.h): sam-cal's trees\n"
     "and chains keep only the nodes that pay for their verification (default: none)",
     [](SessionOptions* o, std::string_view v) {
       o->cost_curve = Trimmed(v).empty() ? CostCurve{} : CostCurve::Load(std::string(Trimmed(v)));
     }},
    {"max_dynamic_bytes", OptionType::kUnsigned, "67108864", 0, 1e15,
     "memory bound of the dynamic automaton in bytes (0: the default, 64 MiB)",
     [](SessionOptions* o, std::string_view v) {
       o->max_dynamic_bytes =
           static_cast<size_t>(UserNumber("max_dynamic_bytes", v));
     }},
    {"collect_timing", OptionType::kBool, "false", 0, 0,
     "measure propose/commit/prefill time into the statistics (about 50 ns a call)",
     [](SessionOptions* o, std::string_view v) { o->collect_timing = Bool("collect_timing", v); }},
    {"cache_prompts", OptionType::kBool, "false", 0, 0,
     "a cached request (response cache) holds its prompt before its output",
     [](SessionOptions* o, std::string_view v) { o->cache_prompts = Bool("cache_prompts", v); }},
    {"l_bias", OptionType::kSigned, "auto", -1, kMaxU32,
     "sam, sam-rec: the static match's handicap (auto or -1: 5 with a fallback, 0 without)",
     [](SessionOptions* o, std::string_view v) {
       if (Trimmed(v) == "auto") {
         o->paper.l_bias.reset();
         return;
       }
       const double b = UserNumber("l_bias", v);
       if (b < 0) o->paper.l_bias.reset();
       else o->paper.l_bias = static_cast<uint32_t>(b);
     }},
    {"l_threshold", OptionType::kUnsigned, "5", 0, kMaxU32,
     "sam, sam-rec: the match length that drafts (with a fallback drafter)",
     [](SessionOptions* o, std::string_view v) {
       o->paper.l_threshold =
           static_cast<uint32_t>(UserNumber("l_threshold", v));
     }},
    {"tree_nodes", OptionType::kUnsigned, "60", 0, kMaxSize,
     "sam-tree: the most nodes of its trees, start token included",
     [](SessionOptions* o, std::string_view v) {
       o->tree.nodes = static_cast<size_t>(UserNumber("tree_nodes", v));
     }},
    {"tree_width", OptionType::kUnsigned, "8", 1, static_cast<double>(kMaxWidth),
     "sam-tree: the most nodes per depth of its trees",
     [](SessionOptions* o, std::string_view v) {
       o->tree.width = static_cast<size_t>(UserNumber("tree_width", v));
     }},
};

template <typename T, T experimental::Tuning::*kField>
void SetTuning(SessionOptions* o, std::string_view name, std::string_view v) {
  const OptionSpec& spec = *FindOptionSpec(ExperimentalOptionSpecs(), name);
  if constexpr (std::is_same_v<T, bool>) o->tuning.*kField = Bool(name, v);
  else o->tuning.*kField = static_cast<T>(Number(spec, v));
}

#define SAM_TUNING(field) \
  [](SessionOptions* o, std::string_view v) { \
    SetTuning<decltype(experimental::Tuning::field), &experimental::Tuning::field>(o, #field, v); \
  }

const OptionSpec kTuningSpecs[] = {
    {"adaptive_length", OptionType::kBool, "false", 0, 0,
     "linear drafts of min(draft_size, 1 + length_per_match * match length) nodes",
     SAM_TUNING(adaptive_length)},
    {"length_per_match", OptionType::kUnsigned, "4", 0, kMaxU32,
     "nodes per matched token of adaptive linear drafts and of sam-tree's size limit",
     SAM_TUNING(length_per_match)},
    {"dynamic_link_fallback", OptionType::kBool, "true", 0, 0,
     "dynamic drafts climb suffix links while the continuation is short",
     SAM_TUNING(dynamic_link_fallback)},
    {"min_path_probability", OptionType::kNumber, "0.015", 0, 1,
     "sam-cal: nodes below this estimated path probability are not drafted",
     SAM_TUNING(min_path_probability)},
    {"max_static_lookups", OptionType::kUnsigned, "8", 0, kMaxU64,
     "sam-cal: lookups of branching states' children per step (0: no limit)",
     SAM_TUNING(max_static_lookups)},
    {"backoff_count", OptionType::kUnsigned, "8", 0, kMaxU64,
     "sam-cal: a static state that occurs fewer times also offers its shorter context's\n"
     "children (0: never)",
     SAM_TUNING(backoff_count)},
    {"calibrated_width", OptionType::kUnsigned, "8", 1, static_cast<double>(kMaxWidth),
     "sam-cal: static children offered per node",
     SAM_TUNING(calibrated_width)},
    {"chain_min_path_probability", OptionType::kNumber, "0.003", 0, 1,
     "shape chain: a chain ends before its path probability falls below this (sam-cal: drafts\n"
     "no node below it, in place of min_path_probability)",
     SAM_TUNING(chain_min_path_probability)},
    {"chain_calibrated_width", OptionType::kUnsigned, "1", 1, static_cast<double>(kMaxWidth),
     "shape chain, sam-cal: static children offered per node (in place of calibrated_width)",
     SAM_TUNING(chain_calibrated_width)},
    {"chain_max_static_lookups", OptionType::kUnsigned, "16", 0, kMaxU64,
     "shape chain, sam-cal: lookups of branching states' children per step (in place of\n"
     "max_static_lookups; 0: no limit)",
     SAM_TUNING(chain_max_static_lookups)},
};

#undef SAM_TUNING

}  // namespace

std::span<const OptionSpec> SessionOptionSpecs() { return kUserSpecs; }
std::span<const OptionSpec> ExperimentalOptionSpecs() { return kTuningSpecs; }

const OptionSpec* FindOptionSpec(std::span<const OptionSpec> specs, std::string_view name) {
  for (const OptionSpec& s : specs)
    if (s.name == name) return &s;
  return nullptr;
}

void SetSessionOption(SessionOptions* options, std::string_view name, std::string_view value) {
  Spec(kUserSpecs, name, false).set(options, value);
}

void SetExperimentalOption(SessionOptions* options, std::string_view name,
                           std::string_view value) {
  Spec(kTuningSpecs, name, true).set(options, value);
}

void SetExperimentalAssignment(SessionOptions* options, std::string_view assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string_view::npos)
    throw Error(ErrorCode::kInvalidArgument, "experimental option '" + std::string(assignment) +
                                                 "' is not NAME=VALUE");
  SetExperimentalOption(options, Trimmed(assignment.substr(0, eq)), assignment.substr(eq + 1));
}

std::string OptionHelp(std::span<const OptionSpec> specs, std::string_view prefix) {
  std::string out;
  for (const OptionSpec& s : specs) {
    out += prefix;
    out += s.name;
    switch (s.type) {
      case OptionType::kName: out += " NAME"; break;
      case OptionType::kUnsigned:
      case OptionType::kSigned: out += " INT"; break;
      case OptionType::kNumber: out += " FLOAT"; break;
      case OptionType::kBool: out += " BOOL"; break;
      case OptionType::kFile: out += " FILE"; break;
    }
    out += " (default ";
    out += s.default_text.empty() ? std::string_view("none") : s.default_text;
    if (s.type == OptionType::kUnsigned || s.type == OptionType::kSigned ||
        s.type == OptionType::kNumber)
      out += "; " + RangeText(s);
    out += "): ";
    for (char c : s.help) {
      out += c;
      if (c == '\n') out += std::string(prefix) + "    ";
    }
    out += '\n';
  }
  return out;
}

size_t LinearDraftSize(uint32_t match_len, const SessionOptions& options) {
  if (!options.tuning.adaptive_length) return options.draft_size;
  const size_t adaptive = 1 + size_t{options.tuning.length_per_match} * match_len;
  return std::min(options.draft_size, adaptive);
}

void ValidateSessionOptions(const SessionOptions& o) {
  auto refuse = [](const std::string& what) {
    throw Error(ErrorCode::kInvalidArgument, "SessionOptions: " + what);
  };
  if (o.draft_size < 1 || o.draft_size > kMaxDraftSize)
    refuse("draft_size must be in 1.." + std::to_string(kMaxDraftSize) + ", got " +
           std::to_string(o.draft_size));
  if (o.tree.nodes > kMaxDraftSize)
    refuse("tree.nodes must be at most " + std::to_string(kMaxDraftSize) + ", got " +
           std::to_string(o.tree.nodes));
  if (o.tree.width < 1 || o.tree.width > kMaxWidth)
    refuse("tree.width must be at least 1 and at most " + std::to_string(kMaxWidth) + ", got " +
           std::to_string(o.tree.width));
  if (o.tuning.calibrated_width < 1 || o.tuning.calibrated_width > kMaxWidth)
    refuse("tuning.calibrated_width must be at least 1 and at most " + std::to_string(kMaxWidth) +
           ", got " + std::to_string(o.tuning.calibrated_width));
  if (o.tuning.chain_calibrated_width < 1 || o.tuning.chain_calibrated_width > kMaxWidth)
    refuse("tuning.chain_calibrated_width must be at least 1 and at most " +
           std::to_string(kMaxWidth) + ", got " + std::to_string(o.tuning.chain_calibrated_width));
  if (!(o.tuning.chain_min_path_probability >= 0.0 && o.tuning.chain_min_path_probability <= 1.0))
    refuse("tuning.chain_min_path_probability must be in [0, 1], got " +
           std::to_string(o.tuning.chain_min_path_probability));
  if (!(o.tuning.min_path_probability >= 0.0 && o.tuning.min_path_probability <= 1.0))
    refuse("tuning.min_path_probability must be in [0, 1], got " +
           std::to_string(o.tuning.min_path_probability));
}

}  // namespace sam::runtime
