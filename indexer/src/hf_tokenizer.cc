#include "hf_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <unicode/errorcode.h>
#include <unicode/normalizer2.h>
#include <unicode/bytestream.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <array>
#include <cstring>
#include <functional>
#include <future>
#include <nlohmann/json.hpp>
#include <optional>
#include <queue>
#include <unordered_map>

#include "sam/format/sha256.h"

namespace sam::indexer::internal {
namespace {

using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// UTF-8

// Length of the valid UTF-8 sequence at s[i] (1..4), or 0 with *consumed set to the length of
// the maximal valid prefix (at least 1) when the sequence there is invalid or truncated.
size_t Utf8SequenceAt(std::string_view s, size_t i, size_t* consumed) {
  const auto b = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t c = b(i);
  if (c < 0x80) return 1;
  size_t need;
  uint8_t lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    *consumed = 1;
    return 0;
  }
  size_t k = 1;
  for (; k <= need; ++k) {
    if (i + k >= s.size()) break;
    const uint8_t x = b(i + k);
    const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (x < l || x > h) break;
  }
  if (k == need + 1) return need + 1;
  *consumed = k;
  return 0;
}

size_t Utf8Length(uint8_t lead) {
  return lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
}

uint32_t DecodeChar(std::string_view s, size_t i, size_t n) {
  const auto b = [&](size_t k) { return static_cast<uint32_t>(static_cast<uint8_t>(s[i + k])); };
  switch (n) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";

// Unicode White_Space (what Rust's char::is_whitespace and str::trim use).
bool IsWhiteSpace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// Bytes of the white space that ends s[0, end) (s valid UTF-8).
size_t TrailingWhiteSpace(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<uint8_t>(s[start]) & 0xC0) == 0x80) --start;
    if (!IsWhiteSpace(DecodeChar(s, start, end - start))) break;
    end = start;
  }
  return s.size() - end;
}

size_t LeadingWhiteSpace(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t n = Utf8Length(static_cast<uint8_t>(s[i]));
    if (!IsWhiteSpace(DecodeChar(s, i, n))) break;
    i += n;
  }
  return i;
}

// GPT-2's reversible byte -> printable character map (the byte-level alphabet).
std::array<uint32_t, 256> ByteLevelAlphabet() {
  std::array<uint32_t, 256> map{};
  std::array<bool, 256> printable{};
  for (int b = '!'; b <= '~'; ++b) printable[b] = true;
  for (int b = 0xA1; b <= 0xAC; ++b) printable[b] = true;
  for (int b = 0xAE; b <= 0xFF; ++b) printable[b] = true;
  uint32_t next = 256;
  for (int b = 0; b < 256; ++b) map[b] = printable[b] ? static_cast<uint32_t>(b) : next++;
  return map;
}

// ---------------------------------------------------------------------------------------------
// Errors

[[noreturn]] void Refuse(const std::string& path, const std::string& what) {
  throw TokenizerError(ErrorCode::kTokenizer, {.file = path}, what);
}

// `where` is a plain string, not a std::string: a reference bound to the
// result of a call that took a class temporary is what GCC 13's
// -Wdangling-reference warns of, though this result lives in `object`.
const json& Field(const std::string& path, const json& object, const char* key,
                  const char* where) {
  if (!object.is_object() || !object.contains(key))
    Refuse(path, std::string(where) + " lacks \"" + key + "\"");
  return object.at(key);
}

std::string StringField(const std::string& path, const json& object, const char* key,
                        const char* where) {
  const json& v = Field(path, object, key, where);
  if (!v.is_string()) Refuse(path, std::string(where) + "." + key + " is not a string");
  return v.get<std::string>();
}

bool BoolField(const json& object, const char* key, bool fallback) {
  if (!object.is_object() || !object.contains(key) || !object.at(key).is_boolean()) return fallback;
  return object.at(key).get<bool>();
}

// A piece of the text: a byte range, or an added token's id.
struct Piece {
  std::string_view text;
  uint32_t token = format::kNoToken;
};

// ---------------------------------------------------------------------------------------------
// Regex (PCRE2). Oniguruma's `\s` (Hugging Face's regex engine) is tab..CR, space, U+0085 and
// the separators (Z); PCRE2's \s with UCP adds \h and \v characters such as U+180E, so patterns
// are rewritten to Oniguruma's class before compiling.

constexpr std::string_view kOnigSpaceItems = "\\t-\\r\\x{20}\\x{85}\\p{Z}";

std::string OnigToPcre(const std::string& path, const std::string& pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char n = pattern[i + 1];
      if (n == 's') {
        out += in_class ? std::string(kOnigSpaceItems) : "[" + std::string(kOnigSpaceItems) + "]";
      } else if (n == 'S') {
        if (in_class)
          Refuse(path, "pre_tokenizer regex uses \\S inside a character class, which is not "
                       "supported: " + pattern);
        out += "[^" + std::string(kOnigSpaceItems) + "]";
      } else {
        out += c;
        out += n;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == '[' && in_class)
      Refuse(path, "pre_tokenizer regex has a nested character class, which is not supported: " +
                       pattern);
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

struct Pcre2CodeDeleter {
  void operator()(pcre2_code* c) const { pcre2_code_free(c); }
};

class Regex {
 public:
  Regex(const std::string& path, const std::string& pattern) {
    const std::string translated = OnigToPcre(path, pattern);
    int error = 0;
    PCRE2_SIZE offset = 0;
    code_.reset(pcre2_compile(reinterpret_cast<PCRE2_SPTR>(translated.data()), translated.size(),
                              PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &offset,
                              nullptr));
    if (!code_) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      Refuse(path, "pre_tokenizer regex does not compile (" +
                       std::string(reinterpret_cast<char*>(message)) + " at offset " +
                       std::to_string(offset) + "): " + pattern);
    }
    jit_ = pcre2_jit_compile(code_.get(), PCRE2_JIT_COMPLETE) == 0;
  }

  // Calls f(start, end) for every non-overlapping match in text, left to right.
  template <typename F>
  void ForEachMatch(std::string_view text, F&& f) const {
    thread_local MatchScratch scratch;
    scratch.Ensure();
    size_t at = 0;
    while (at <= text.size()) {
      const int rc =
          jit_ ? pcre2_jit_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(text.data()),
                                 text.size(), at, PCRE2_NO_UTF_CHECK, scratch.data,
                                 scratch.context)
               : pcre2_match(code_.get(), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                             at, PCRE2_NO_UTF_CHECK, scratch.data, scratch.context);
      if (rc == PCRE2_ERROR_NOMATCH) return;
      if (rc < 0) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(rc, message, sizeof(message));
        throw TokenizerError(std::string("pre_tokenizer regex failed: ") +
                             reinterpret_cast<char*>(message));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(scratch.data);
      const size_t start = ov[0], end = ov[1];
      if (end > start) {
        f(start, end);
        at = end;
      } else {
        // An empty match: Oniguruma's iterator moves on by one character.
        if (start >= text.size()) return;
        at = start + Utf8Length(static_cast<uint8_t>(text[start]));
      }
    }
  }

 private:
  // Per-thread match data and JIT stack (neither may be shared between threads).
  struct MatchScratch {
    pcre2_match_data* data = nullptr;
    pcre2_match_context* context = nullptr;
    pcre2_jit_stack* stack = nullptr;
    void Ensure() {
      if (data) return;
      data = pcre2_match_data_create(16, nullptr);
      context = pcre2_match_context_create(nullptr);
      stack = pcre2_jit_stack_create(32 * 1024, 64 * 1024 * 1024, nullptr);
      if (!data || !context || !stack) throw std::bad_alloc();
      pcre2_jit_stack_assign(context, nullptr, stack);
    }
    ~MatchScratch() {
      if (data) pcre2_match_data_free(data);
      if (context) pcre2_match_context_free(context);
      if (stack) pcre2_jit_stack_free(stack);
    }
  };
  std::unique_ptr<pcre2_code, Pcre2CodeDeleter> code_;
  bool jit_ = false;
};

// ---------------------------------------------------------------------------------------------
// Splitting (pre-tokenizer Split behaviours, as tokenizers' SplitDelimiterBehavior).

enum class Behavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

Behavior ParseBehavior(const std::string& path, const std::string& name) {
  if (name == "Removed") return Behavior::kRemoved;
  if (name == "Isolated") return Behavior::kIsolated;
  if (name == "MergedWithPrevious") return Behavior::kMergedWithPrevious;
  if (name == "MergedWithNext") return Behavior::kMergedWithNext;
  if (name == "Contiguous") return Behavior::kContiguous;
  Refuse(path, "pre_tokenizer Split behavior \"" + name + "\" is not supported");
}

struct Span {
  size_t start, end;
  bool match;
};

// Applies a behaviour to the ordered match/gap spans of one piece, appending the pieces.
void ApplyBehavior(std::string_view text, std::vector<Span>& spans, Behavior behavior,
                   std::vector<std::string_view>* out) {
  std::vector<Span> result;
  switch (behavior) {
    case Behavior::kIsolated:
      result = spans;
      break;
    case Behavior::kRemoved:
      for (const Span& s : spans)
        if (!s.match) result.push_back(s);
      break;
    case Behavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.match && !previous_match && !result.empty()) result.back().end = s.end;
        else result.push_back({s.start, s.end, false});
        previous_match = s.match;
      }
      break;
    }
    case Behavior::kMergedWithNext: {
      bool previous_match = false;
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& s = spans[k];
        if (s.match && !previous_match && !result.empty()) result.back().start = s.start;
        else result.push_back({s.start, s.end, false});
        previous_match = s.match;
      }
      std::reverse(result.begin(), result.end());
      break;
    }
    case Behavior::kContiguous: {
      bool previous_match = false;
      for (const Span& s : spans) {
        if (s.match == previous_match && !result.empty()) result.back().end = s.end;
        else result.push_back(s);
        previous_match = s.match;
      }
      break;
    }
  }
  for (const Span& s : result)
    if (s.end > s.start) out->push_back(text.substr(s.start, s.end - s.start));
}

// ---------------------------------------------------------------------------------------------
// Normalizers

struct Normalizer {
  enum Kind { kUnicode, kReplace, kPrepend } kind;
  const icu::Normalizer2* unicode = nullptr;  // kUnicode
  std::string pattern, content;               // kReplace: pattern -> content; kPrepend: content

  void Apply(std::string* s) const {
    switch (kind) {
      case kUnicode: {
        bool ascii = true;
        for (const char c : *s) ascii &= static_cast<uint8_t>(c) < 0x80;
        if (ascii) return;
        UErrorCode status = U_ZERO_ERROR;
        if (unicode->isNormalizedUTF8(*s, status) && U_SUCCESS(status)) return;
        std::string result;
        icu::StringByteSink<std::string> sink(&result);
        status = U_ZERO_ERROR;
        unicode->normalizeUTF8(0, *s, sink, nullptr, status);
        if (U_FAILURE(status))
          throw TokenizerError(std::string("normalizer failed: ") + u_errorName(status));
        *s = std::move(result);
        return;
      }
      case kReplace: {
        if (pattern.empty() || s->find(pattern) == std::string::npos) return;
        std::string result;
        size_t at = 0;
        for (size_t k; (k = s->find(pattern, at)) != std::string::npos; at = k + pattern.size())
          result.append(*s, at, k - at).append(content);
        result.append(*s, at);
        *s = std::move(result);
        return;
      }
      case kPrepend:
        if (!s->empty()) s->insert(0, content);
        return;
    }
  }
};

void ParseNormalizer(const std::string& path, const json& n, std::vector<Normalizer>* out) {
  if (n.is_null()) return;
  const std::string type = StringField(path, n, "type", "normalizer");
  if (type == "Sequence") {
    const json& list = Field(path, n, "normalizers", "normalizer Sequence");
    if (!list.is_array()) Refuse(path, "normalizer Sequence.normalizers is not an array");
    for (const json& item : list) ParseNormalizer(path, item, out);
    return;
  }
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* unicode =
        type == "NFC"    ? icu::Normalizer2::getNFCInstance(status)
        : type == "NFD"  ? icu::Normalizer2::getNFDInstance(status)
        : type == "NFKC" ? icu::Normalizer2::getNFKCInstance(status)
                         : icu::Normalizer2::getNFKDInstance(status);
    if (U_FAILURE(status)) Refuse(path, "normalizer " + type + ": ICU " + u_errorName(status));
    out->push_back({Normalizer::kUnicode, unicode, "", ""});
    return;
  }
  if (type == "Replace") {
    const json& pattern = Field(path, n, "pattern", "normalizer Replace");
    if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string())
      Refuse(path, "normalizer Replace with a regex pattern is not supported");
    out->push_back({Normalizer::kReplace, nullptr, pattern["String"].get<std::string>(),
                    StringField(path, n, "content", "normalizer Replace")});
    return;
  }
  if (type == "Prepend") {
    out->push_back({Normalizer::kPrepend, nullptr, "",
                    StringField(path, n, "prepend", "normalizer Prepend")});
    return;
  }
  Refuse(path, "normalizer \"" + type +
                   "\" is not supported (supported: NFC, NFD, NFKC, NFKD, Replace, Prepend, "
                   "Sequence)");
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers

constexpr const char* kGpt2Pattern =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

struct PreTokenizer {
  enum Kind { kSplitRegex, kSplitString, kPrefixSpace } kind;
  std::shared_ptr<Regex> regex;  // kSplitRegex
  std::string literal;           // kSplitString
  Behavior behavior = Behavior::kIsolated;
  bool invert = false;
};

struct PreTokenizerChain {
  std::vector<PreTokenizer> steps;
  bool byte_level = false;  // pieces are mapped to the byte-level alphabet before the model
};

void ParsePreTokenizer(const std::string& path, const json& p, PreTokenizerChain* chain) {
  if (p.is_null()) return;
  const std::string type = StringField(path, p, "type", "pre_tokenizer");
  if (type == "Sequence") {
    const json& list = Field(path, p, "pretokenizers", "pre_tokenizer Sequence");
    if (!list.is_array()) Refuse(path, "pre_tokenizer Sequence.pretokenizers is not an array");
    for (const json& item : list) ParsePreTokenizer(path, item, chain);
    return;
  }
  if (chain->byte_level)
    Refuse(path, "pre_tokenizer \"" + type +
                     "\" after ByteLevel is not supported (it would see the byte alphabet)");
  if (type == "Split") {
    PreTokenizer step;
    const json& pattern = Field(path, p, "pattern", "pre_tokenizer Split");
    step.behavior = ParseBehavior(path, StringField(path, p, "behavior", "pre_tokenizer Split"));
    step.invert = BoolField(p, "invert", false);
    if (pattern.is_object() && pattern.contains("Regex") && pattern["Regex"].is_string()) {
      step.kind = PreTokenizer::kSplitRegex;
      step.regex = std::make_shared<Regex>(path, pattern["Regex"].get<std::string>());
    } else if (pattern.is_object() && pattern.contains("String") && pattern["String"].is_string()) {
      step.kind = PreTokenizer::kSplitString;
      step.literal = pattern["String"].get<std::string>();
      if (step.literal.empty()) Refuse(path, "pre_tokenizer Split has an empty string pattern");
    } else {
      Refuse(path, "pre_tokenizer Split.pattern is neither {\"Regex\": ...} nor {\"String\": ...}");
    }
    chain->steps.push_back(std::move(step));
    return;
  }
  if (type == "ByteLevel") {
    if (BoolField(p, "add_prefix_space", false)) {
      PreTokenizer step;
      step.kind = PreTokenizer::kPrefixSpace;
      chain->steps.push_back(std::move(step));
    }
    if (BoolField(p, "use_regex", true)) {
      PreTokenizer step;
      step.kind = PreTokenizer::kSplitRegex;
      step.regex = std::make_shared<Regex>(path, kGpt2Pattern);
      chain->steps.push_back(std::move(step));
    }
    chain->byte_level = true;
    return;
  }
  Refuse(path, "pre_tokenizer \"" + type +
                   "\" is not supported (supported: Split, ByteLevel, Sequence)");
}

// ---------------------------------------------------------------------------------------------
// Added tokens: a byte trie matched leftmost-longest (aho-corasick's LeftmostLongest).

struct AddedToken {
  std::string content;
  uint32_t id;
  bool special, lstrip, rstrip, normalized;
};

class AddedTokenMatcher {
 public:
  void Add(const std::string& content, uint32_t index) {
    if (content.empty()) return;
    uint32_t node = 0;
    for (const char c : content) {
      const uint8_t b = static_cast<uint8_t>(c);
      uint32_t child = Child(node, b);
      if (child == 0) {
        child = static_cast<uint32_t>(nodes_.size());
        nodes_.emplace_back();
        nodes_[node].children.emplace_back(b, child);
        std::sort(nodes_[node].children.begin(), nodes_[node].children.end());
      }
      node = child;
    }
    nodes_[node].token = index;
    first_[static_cast<uint8_t>(content[0])] = true;
  }
  bool empty() const { return nodes_.size() == 1; }

  // The longest token starting at text[at], as (token index, length); length 0 if none.
  std::pair<uint32_t, size_t> LongestAt(std::string_view text, size_t at) const {
    std::pair<uint32_t, size_t> best{0, 0};
    if (!first_[static_cast<uint8_t>(text[at])]) return best;
    uint32_t node = 0;
    for (size_t i = at; i < text.size(); ++i) {
      node = Child(node, static_cast<uint8_t>(text[i]));
      if (node == 0) break;
      if (nodes_[node].token != kNone) best = {nodes_[node].token, i + 1 - at};
    }
    return best;
  }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Node {
    std::vector<std::pair<uint8_t, uint32_t>> children;
    uint32_t token = kNone;
  };
  uint32_t Child(uint32_t node, uint8_t b) const {
    const auto& c = nodes_[node].children;
    auto it = std::lower_bound(c.begin(), c.end(), std::make_pair(b, uint32_t{0}));
    return it != c.end() && it->first == b ? it->second : 0;
  }
  std::vector<Node> nodes_{1};
  std::array<bool, 256> first_{};
};

// ---------------------------------------------------------------------------------------------
// BPE

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using Vocab = std::unordered_map<std::string, uint32_t, StringHash, std::equal_to<>>;

struct Merge {
  uint32_t rank, new_id;
};

struct Decoder {
  enum Kind { kByteLevel, kReplace, kByteFallback, kFuse, kStrip } kind = kByteLevel;
  std::string pattern, content;
  size_t strip_start = 0, strip_stop = 0;
  char strip_char = ' ';
};

}  // namespace

struct HfTokenizer::State {
  std::string path;
  format::Sha256Digest fingerprint{};
  uint32_t vocab_size = 0, bos = format::kNoToken, eos = format::kNoToken;
  std::vector<std::string> id_to_token;
  std::vector<bool> is_added;

  std::vector<Normalizer> normalizers;
  PreTokenizerChain pre;

  std::vector<AddedToken> added;
  AddedTokenMatcher raw_matcher, normalized_matcher;

  // The model.
  Vocab vocab;
  std::unordered_map<uint64_t, Merge> merges;
  bool ignore_merges = false, byte_fallback = false, fuse_unk = false;
  uint32_t unk = format::kNoToken;
  std::array<uint32_t, 256> byte_token{};         // byte-level: id of each byte's character
  std::array<std::string, 256> byte_char{};       // byte-level: the character of each byte
  std::array<uint32_t, 256> fallback_token{};     // byte fallback: id of <0xXX>
  bool have_fallback_tokens = false;
  std::unordered_map<uint32_t, uint8_t> char_byte;  // byte-level decoding

  std::vector<Decoder> decoders;

  void SplitAdded(std::string_view text, const AddedTokenMatcher& matcher,
                  std::vector<Piece>* out) const;
  void EncodePlain(std::string_view text, std::vector<uint32_t>* out,
                   Tokenizer::Cache* cache) const;
  void Model(std::string_view word, std::vector<uint32_t>* out) const;
  void MergeWord(std::vector<uint32_t>& symbols, std::vector<uint32_t>* out) const;
};

namespace {

void ParseDecoder(const std::string& path, const json& d, std::vector<Decoder>* out) {
  if (d.is_null()) return;
  const std::string type = StringField(path, d, "type", "decoder");
  if (type == "Sequence") {
    const json& list = Field(path, d, "decoders", "decoder Sequence");
    if (!list.is_array()) Refuse(path, "decoder Sequence.decoders is not an array");
    for (const json& item : list) ParseDecoder(path, item, out);
    return;
  }
  Decoder decoder;
  if (type == "ByteLevel") {
    decoder.kind = Decoder::kByteLevel;
    return out->push_back(decoder);
  }
  if (type == "ByteFallback") {
    decoder.kind = Decoder::kByteFallback;
    return out->push_back(decoder);
  }
  if (type == "Fuse") {
    decoder.kind = Decoder::kFuse;
    return out->push_back(decoder);
  }
  if (type == "Replace") {
    const json& pattern = Field(path, d, "pattern", "decoder Replace");
    if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string())
      Refuse(path, "decoder Replace with a regex pattern is not supported");
    Decoder r;
    r.kind = Decoder::kReplace;
    r.pattern = pattern["String"].get<std::string>();
    r.content = StringField(path, d, "content", "decoder Replace");
    return out->push_back(std::move(r));
  }
  if (type == "Strip") {
    Decoder s;
    s.kind = Decoder::kStrip;
    const std::string content = StringField(path, d, "content", "decoder Strip");
    if (content.size() != 1) Refuse(path, "decoder Strip with a non-ASCII content");
    s.strip_char = content[0];
    s.strip_start = Field(path, d, "start", "decoder Strip").get<size_t>();
    s.strip_stop = Field(path, d, "stop", "decoder Strip").get<size_t>();
    return out->push_back(std::move(s));
  }
  Refuse(path, "decoder \"" + type +
                   "\" is not supported (supported: ByteLevel, Replace, ByteFallback, Fuse, "
                   "Strip, Sequence)");
}

// A token's id from tokenizer_config.json's bos_token/eos_token (a string or {"content": ...}).
uint32_t ConfigToken(const json& config, const char* key, const HfTokenizer::State& s) {
  if (!config.is_object() || !config.contains(key)) return format::kNoToken;
  const json& v = config[key];
  std::string content;
  if (v.is_string()) content = v.get<std::string>();
  else if (v.is_object() && v.contains("content") && v["content"].is_string())
    content = v["content"].get<std::string>();
  else return format::kNoToken;
  for (const AddedToken& t : s.added)
    if (t.content == content) return t.id;
  auto it = s.vocab.find(content);
  return it == s.vocab.end() ? format::kNoToken : it->second;
}

}  // namespace

HfTokenizer::HfTokenizer() : s_(std::make_unique<State>()) {}
HfTokenizer::~HfTokenizer() = default;

namespace {

using State = HfTokenizer::State;

// model: its type and options, then the vocabulary.
void ParseModelVocab(const std::string& path, const json& model, State& s) {
  // Files written by older versions of tokenizers may omit model.type for BPE.
  const std::string type = model.contains("type") ? StringField(path, model, "type", "model")
                                                  : std::string("BPE");
  if (type != "BPE") Refuse(path, "model type \"" + type + "\" is not supported (supported: BPE)");
  if (model.contains("dropout") && !model["dropout"].is_null() &&
      model["dropout"].get<double>() != 0.0)
    Refuse(path, "BPE dropout is not supported (it makes encoding random)");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (model.contains(key) && model[key].is_string() && !model[key].get<std::string>().empty())
      Refuse(path, std::string("BPE ") + key + " is not supported");
  s.ignore_merges = BoolField(model, "ignore_merges", false);
  s.byte_fallback = BoolField(model, "byte_fallback", false);
  s.fuse_unk = BoolField(model, "fuse_unk", false);

  const json& vocab = Field(path, model, "vocab", "model");
  if (!vocab.is_object()) Refuse(path, "model.vocab is not an object");
  s.vocab.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_unsigned() || it.value().get<uint64_t>() >= (uint64_t{1} << 31))
      Refuse(path, "model.vocab[\"" + it.key() + "\"] is not a token id");
    const uint32_t id = it.value().get<uint32_t>();
    s.vocab.emplace(it.key(), id);
    s.vocab_size = std::max(s.vocab_size, id + 1);
  }
}

// added_tokens, then the id -> piece table and the added tokens' matchers.
void ParseAddedTokens(const std::string& path, const json& added, State& s) {
  if (!added.is_array()) Refuse(path, "added_tokens is not an array");
  for (const json& a : added) {
    AddedToken t;
    t.content = StringField(path, a, "content", "added token");
    const std::string where = "added token \"" + t.content + "\"";
    const json& id = Field(path, a, "id", where.c_str());
    if (!id.is_number_unsigned() || id.get<uint64_t>() >= (uint64_t{1} << 31))
      Refuse(path, where + " has no valid id");
    t.id = id.get<uint32_t>();
    t.special = BoolField(a, "special", false);
    t.lstrip = BoolField(a, "lstrip", false);
    t.rstrip = BoolField(a, "rstrip", false);
    t.normalized = BoolField(a, "normalized", !t.special);
    if (BoolField(a, "single_word", false))
      Refuse(path, "added token \"" + t.content + "\" has single_word, which is not supported");
    s.vocab_size = std::max(s.vocab_size, t.id + 1);
    s.added.push_back(std::move(t));
  }
  s.id_to_token.assign(s.vocab_size, std::string());
  s.is_added.assign(s.vocab_size, false);
  for (const auto& [token, id] : s.vocab) s.id_to_token[id] = token;
  for (uint32_t k = 0; k < s.added.size(); ++k) {
    const AddedToken& t = s.added[k];
    s.id_to_token[t.id] = t.content;
    s.is_added[t.id] = true;
    (t.normalized ? s.normalized_matcher : s.raw_matcher).Add(t.content, k);
  }
}

// model.merges ("a b" strings or ["a", "b"] pairs) by rank, and unk_token.
void ParseMerges(const std::string& path, const json& model, State& s) {
  const json& merges = Field(path, model, "merges", "model");
  if (!merges.is_array()) Refuse(path, "model.merges is not an array");
  s.merges.reserve(merges.size());
  std::string merged;
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const json& m = merges[rank];
    std::string_view a, b;
    if (m.is_string()) {
      const std::string& line = m.get_ref<const std::string&>();
      const size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos)
        Refuse(path, "model.merges[" + std::to_string(rank) + "] is not two tokens: \"" + line +
                         "\"");
      a = std::string_view(line).substr(0, space);
      b = std::string_view(line).substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get_ref<const std::string&>();
      b = m[1].get_ref<const std::string&>();
    } else {
      Refuse(path, "model.merges[" + std::to_string(rank) + "] is not a pair of tokens");
    }
    merged.assign(a).append(b);
    const auto ia = s.vocab.find(a), ib = s.vocab.find(b), im = s.vocab.find(merged);
    if (ia == s.vocab.end() || ib == s.vocab.end() || im == s.vocab.end())
      Refuse(path, "model.merges[" + std::to_string(rank) + "] (\"" + std::string(a) + "\", \"" +
                       std::string(b) + "\") names a token missing from model.vocab");
    s.merges.emplace((uint64_t{ia->second} << 32) | ib->second,
                     Merge{static_cast<uint32_t>(rank), im->second});
  }
  if (model.contains("unk_token") && model["unk_token"].is_string()) {
    const auto it = s.vocab.find(model["unk_token"].get<std::string>());
    if (it == s.vocab.end())
      Refuse(path, "model.unk_token \"" + model["unk_token"].get<std::string>() +
                       "\" is not in model.vocab");
    s.unk = it->second;
  }
}

// The byte-level alphabet (encoding and decoding) and the byte-fallback tokens.
void SetUpBytes(const std::string& path, State& s) {
  const std::array<uint32_t, 256> alphabet = ByteLevelAlphabet();
  // The decoder may be ByteLevel even when the pre-tokenizer is not.
  for (int b = 0; b < 256; ++b) s.char_byte[alphabet[b]] = static_cast<uint8_t>(b);
  if (s.pre.byte_level) {
    for (int b = 0; b < 256; ++b) {
      AppendUtf8(alphabet[b], &s.byte_char[b]);
      const auto it = s.vocab.find(s.byte_char[b]);
      if (it == s.vocab.end())
        Refuse(path, "pre_tokenizer is ByteLevel but model.vocab lacks the byte-level "
                     "character of byte " + std::to_string(b));
      s.byte_token[b] = it->second;
    }
  }
  if (s.byte_fallback) {
    s.have_fallback_tokens = true;
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof(name), "<0x%02X>", b);
      const auto it = s.vocab.find(std::string_view(name));
      if (it == s.vocab.end()) {
        s.have_fallback_tokens = false;
        break;
      }
      s.fallback_token[b] = it->second;
    }
  }
}

// Fingerprint: the canonical serialisation (std::map keys are sorted) of what decides ids.
format::Sha256Digest Fingerprint(const json& root, const json& model, const json& added) {
  std::string canonical = "sam-tokenizer-json-1\n";
  canonical += model.dump() + "\n";
  canonical += root.value("normalizer", json()).dump() + "\n";
  canonical += root.value("pre_tokenizer", json()).dump() + "\n";
  canonical += added.dump() + "\n";
  return format::Sha256(canonical.data(), canonical.size());
}

// BOS and EOS: tokenizer_config.json's when given, else the BOS a TemplateProcessing
// post-processor puts first.
void ParseSpecialIds(const std::string& path, const json& root, std::string_view config_text,
                     State& s) {
  if (!config_text.empty()) {
    json config;
    try {
      config = json::parse(config_text);
    } catch (const json::exception& e) {
      Refuse(path, std::string("its tokenizer_config.json is not valid JSON (") + e.what() + ")");
    }
    if (BoolField(config, "add_bos_token", true)) s.bos = ConfigToken(config, "bos_token", s);
    s.eos = ConfigToken(config, "eos_token", s);
    return;
  }
  const json pp = root.value("post_processor", json());
  if (pp.is_object() && pp.value("type", "") == "TemplateProcessing" && pp.contains("single") &&
      pp["single"].is_array() && !pp["single"].empty() && pp["single"][0].is_object() &&
      pp["single"][0].contains("SpecialToken")) {
    const json& special = pp["single"][0]["SpecialToken"];
    if (special.is_object() && special.contains("id") && special["id"].is_string()) {
      json holder{{"bos_token", special["id"]}};
      s.bos = ConfigToken(holder, "bos_token", s);
    }
  }
}

}  // namespace

std::unique_ptr<HfTokenizer> HfTokenizer::Parse(const std::string& path, std::string_view text,
                                                std::string_view config_text,
                                                bool named_json) {
  json parsed;
  try {
    parsed = json::parse(text);
  } catch (const json::exception& e) {
    Refuse(path, std::string(named_json ? "not a valid tokenizer.json ("
                                        : "not a SentencePiece model, nor a tokenizer.json (") +
                     e.what() + ")");
  }
  const json& j = parsed;  // read only from here: the fingerprint's thread reads it too
  if (!j.is_object()) Refuse(path, "not a tokenizer.json (the top level is not an object)");
  std::unique_ptr<HfTokenizer> tok(new HfTokenizer());
  State& s = *tok->s_;
  s.path = path;
  try {
    const json& model = Field(path, j, "model", "tokenizer.json");
    const json no_added = json::array();
    const json& added = j.contains("added_tokens") ? j["added_tokens"] : no_added;
    // The fingerprint serialises the whole model (most of the file) while the
    // tables are built from it.
    std::future<format::Sha256Digest> fingerprint = std::async(
        std::launch::async, [&] { return Fingerprint(j, model, added); });
    ParseModelVocab(path, model, s);
    ParseAddedTokens(path, added, s);
    ParseMerges(path, model, s);
    ParseNormalizer(path, j.value("normalizer", json()), &s.normalizers);
    ParsePreTokenizer(path, j.value("pre_tokenizer", json()), &s.pre);
    ParseDecoder(path, j.value("decoder", json()), &s.decoders);
    SetUpBytes(path, s);
    s.fingerprint = fingerprint.get();
  } catch (const json::exception& e) {
    Refuse(path, std::string("malformed tokenizer.json (") + e.what() + ")");
  }
  ParseSpecialIds(path, j, config_text, s);
  return tok;
}

uint32_t HfTokenizer::vocab_size() const { return s_->vocab_size; }
uint32_t HfTokenizer::bos_id() const { return s_->bos; }
uint32_t HfTokenizer::eos_id() const { return s_->eos; }
const format::Sha256Digest& HfTokenizer::fingerprint() const { return s_->fingerprint; }
std::vector<std::string> HfTokenizer::Pieces() const { return s_->id_to_token; }

bool RepairUtf8(std::string_view text, std::string* out) {
  size_t i = 0;
  while (i < text.size() && static_cast<uint8_t>(text[i]) < 0x80) ++i;
  bool repaired = false;
  std::string result;
  size_t copied = 0;
  while (i < text.size()) {
    size_t consumed = 0;
    const size_t n = Utf8SequenceAt(text, i, &consumed);
    if (n > 0) {
      i += n;
      continue;
    }
    if (!repaired) {
      result.reserve(text.size() + 8);
      repaired = true;
    }
    result.append(text.substr(copied, i - copied)).append(kReplacementChar);
    i += consumed;
    copied = i;
  }
  if (!repaired) return false;
  result.append(text.substr(copied));
  *out = std::move(result);
  return true;
}

// Cuts text at the added tokens of `matcher`: leftmost-longest matches, widened by lstrip/rstrip
// (as tokenizers' AddedVocabulary::find_matches).
void HfTokenizer::State::SplitAdded(std::string_view text, const AddedTokenMatcher& matcher,
                                    std::vector<Piece>* out) const {
  if (matcher.empty()) {
    if (!text.empty()) out->push_back({text});
    return;
  }
  size_t start_offset = 0, i = 0;
  while (i < text.size()) {
    const auto [index, length] = matcher.LongestAt(text, i);
    if (length == 0) {
      ++i;
      continue;
    }
    const AddedToken& t = added[index];
    size_t start = i, stop = i + length;
    if (t.lstrip) start = std::max(start_offset, start - TrailingWhiteSpace(text.substr(0, start)));
    if (t.rstrip) stop += LeadingWhiteSpace(text.substr(stop));
    if (start_offset < start) out->push_back({text.substr(start_offset, start - start_offset)});
    out->push_back({text.substr(start, stop - start), t.id});
    start_offset = stop;
    i = stop;
  }
  if (start_offset < text.size()) out->push_back({text.substr(start_offset)});
}

void HfTokenizer::Encode(std::string_view text, std::vector<uint32_t>* out,
                         Tokenizer::Cache* cache) const {
  std::string repaired;
  if (RepairUtf8(text, &repaired)) text = repaired;
  std::vector<Piece> raw;
  s_->SplitAdded(text, s_->raw_matcher, &raw);
  std::vector<Piece> pieces;
  std::string normalized;
  for (const Piece& p : raw) {
    if (p.token != format::kNoToken) {
      out->push_back(p.token);
      continue;
    }
    std::string_view segment = p.text;
    if (!s_->normalizers.empty()) {
      normalized.assign(segment);
      for (const Normalizer& n : s_->normalizers) n.Apply(&normalized);
      segment = normalized;
    }
    pieces.clear();
    s_->SplitAdded(segment, s_->normalized_matcher, &pieces);
    for (const Piece& q : pieces) {
      if (q.token != format::kNoToken) out->push_back(q.token);
      else s_->EncodePlain(q.text, out, cache);
    }
  }
}

// Pre-tokenizes one normalized segment (no added tokens in it) and runs the model on each piece.
void HfTokenizer::State::EncodePlain(std::string_view text, std::vector<uint32_t>* out,
                                     Tokenizer::Cache* cache) const {
  std::vector<std::string_view> pieces{text}, next;
  std::vector<std::unique_ptr<std::string>> owned;  // pieces made by add_prefix_space
  std::vector<Span> spans;
  for (const PreTokenizer& step : pre.steps) {
    next.clear();
    for (const std::string_view piece : pieces) {
      if (step.kind == PreTokenizer::kPrefixSpace) {
        if (!piece.empty() && piece[0] != ' ') {
          auto prefixed = std::make_unique<std::string>(1, ' ');
          prefixed->append(piece);
          owned.push_back(std::move(prefixed));
          next.push_back(*owned.back());
        } else {
          next.push_back(piece);
        }
        continue;
      }
      spans.clear();
      size_t previous = 0;
      const auto on_match = [&](size_t start, size_t end) {
        if (previous < start) spans.push_back({previous, start, step.invert});
        spans.push_back({start, end, !step.invert});
        previous = end;
      };
      if (step.kind == PreTokenizer::kSplitRegex) {
        step.regex->ForEachMatch(piece, on_match);
      } else {
        for (size_t k = piece.find(step.literal); k != std::string_view::npos;
             k = piece.find(step.literal, k + step.literal.size()))
          on_match(k, k + step.literal.size());
      }
      if (previous < piece.size()) spans.push_back({previous, piece.size(), step.invert});
      ApplyBehavior(piece, spans, step.behavior, &next);
    }
    pieces.swap(next);
  }

  // Pieces longer than this are encoded without the cache (a Gemma-style file, whose
  // pre-tokenizer keeps whole texts together, would fill it with documents).
  constexpr size_t kMaxCachedPiece = 256;
  constexpr size_t kMaxCachedIds = size_t{1} << 26;
  for (const std::string_view piece : pieces) {
    if (cache == nullptr || piece.size() > kMaxCachedPiece) {
      Model(piece, out);
      continue;
    }
    const auto it = cache->index.find(piece);
    if (it != cache->index.end()) {
      ++cache->hits;
      out->insert(out->end(), cache->ids.begin() + it->second.first,
                  cache->ids.begin() + it->second.first + it->second.second);
      continue;
    }
    ++cache->misses;
    const size_t before = out->size();
    Model(piece, out);
    if (cache->ids.size() + (out->size() - before) > kMaxCachedIds) {
      cache->index.clear();
      cache->ids.clear();
    }
    cache->index.emplace(std::string(piece),
                         std::make_pair(static_cast<uint32_t>(cache->ids.size()),
                                        static_cast<uint32_t>(out->size() - before)));
    cache->ids.insert(cache->ids.end(), out->begin() + before, out->end());
  }
}

// The BPE model on one pre-token (raw bytes; mapped to the byte-level alphabet when the
// pre-tokenizer is ByteLevel), as tokenizers' BPE::tokenize / merge_word.
void HfTokenizer::State::Model(std::string_view word, std::vector<uint32_t>* out) const {
  if (word.empty()) return;
  std::vector<uint32_t> symbols;
  symbols.reserve(word.size());
  if (pre.byte_level) {
    if (ignore_merges) {
      std::string mapped;
      for (const char c : word) mapped += byte_char[static_cast<uint8_t>(c)];
      const auto it = vocab.find(mapped);
      if (it != vocab.end()) return out->push_back(it->second);
    }
    for (const char c : word) symbols.push_back(byte_token[static_cast<uint8_t>(c)]);
    return MergeWord(symbols, out);
  }
  if (ignore_merges) {
    const auto it = vocab.find(word);
    if (it != vocab.end()) return out->push_back(it->second);
  }
  // Characters missing from the vocabulary become <0xXX> tokens (byte fallback) or the unknown
  // token; a pending unknown is written when the next known character comes (fuse_unk joins
  // consecutive ones), exactly in tokenizers' order.
  bool pending_unk = false;
  for (size_t i = 0; i < word.size();) {
    const size_t n = std::min(Utf8Length(static_cast<uint8_t>(word[i])), word.size() - i);
    const std::string_view ch = word.substr(i, n);
    i += n;
    const auto it = vocab.find(ch);
    if (it != vocab.end()) {
      if (pending_unk) symbols.push_back(unk);
      pending_unk = false;
      symbols.push_back(it->second);
      continue;
    }
    if (byte_fallback && have_fallback_tokens) {
      for (const char c : ch) symbols.push_back(fallback_token[static_cast<uint8_t>(c)]);
      continue;
    }
    if (unk == format::kNoToken) continue;  // tokenizers drops the character
    if (pending_unk && !fuse_unk) symbols.push_back(unk);
    pending_unk = true;
  }
  if (pending_unk) symbols.push_back(unk);
  MergeWord(symbols, out);
}

// Applies merges lowest rank first, leftmost first among equal ranks (tokenizers' Word::merge_all).
void HfTokenizer::State::MergeWord(std::vector<uint32_t>& symbols,
                                   std::vector<uint32_t>* out) const {
  const size_t n = symbols.size();
  if (n < 2) {
    out->insert(out->end(), symbols.begin(), symbols.end());
    return;
  }
  const auto find = [&](uint32_t a, uint32_t b) -> const Merge* {
    const auto it = merges.find((uint64_t{a} << 32) | b);
    return it == merges.end() ? nullptr : &it->second;
  };
  if (n == 2) {
    if (const Merge* m = find(symbols[0], symbols[1])) return out->push_back(m->new_id);
    out->insert(out->end(), symbols.begin(), symbols.end());
    return;
  }
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (size_t k = 0; k < n; ++k) {
    prev[k] = static_cast<int32_t>(k) - 1;
    next[k] = k + 1 < n ? static_cast<int32_t>(k + 1) : -1;
  }
  struct Candidate {
    uint32_t rank;
    uint32_t pos;
    uint32_t new_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  for (size_t k = 0; k + 1 < n; ++k)
    if (const Merge* m = find(symbols[k], symbols[k + 1]))
      queue.push({m->rank, static_cast<uint32_t>(k), m->new_id});
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    if (!alive[top.pos] || next[top.pos] < 0) continue;
    const uint32_t right = static_cast<uint32_t>(next[top.pos]);
    const Merge* m = find(symbols[top.pos], symbols[right]);
    if (m == nullptr || m->new_id != top.new_id) continue;
    symbols[top.pos] = top.new_id;
    alive[right] = false;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = static_cast<int32_t>(top.pos);
    if (prev[top.pos] >= 0) {
      const uint32_t left = static_cast<uint32_t>(prev[top.pos]);
      if (const Merge* lm = find(symbols[left], symbols[top.pos]))
        queue.push({lm->rank, left, lm->new_id});
    }
    if (next[top.pos] >= 0) {
      if (const Merge* rm = find(symbols[top.pos], symbols[next[top.pos]]))
        queue.push({rm->rank, top.pos, rm->new_id});
    }
  }
  for (int32_t k = 0; k >= 0; k = next[k]) out->push_back(symbols[k]);
}

std::string HfTokenizer::Decode(std::span<const uint32_t> ids) const {
  const State& s = *s_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const uint32_t id : ids) {
    if (id >= s.vocab_size)
      throw TokenizerError(ErrorCode::kTokenizer, {.file = s.path},
                           "cannot decode id " + std::to_string(id) + ": the vocabulary has " +
                               std::to_string(s.vocab_size) + " ids");
    tokens.push_back(s.id_to_token[id]);
  }
  for (const Decoder& d : s.decoders) {
    switch (d.kind) {
      case Decoder::kByteLevel: {
        std::string bytes;
        for (const std::string& t : tokens) {
          std::string mapped;
          bool ok = true;
          for (size_t i = 0; i < t.size() && ok;) {
            const size_t n = std::min(Utf8Length(static_cast<uint8_t>(t[i])), t.size() - i);
            const auto it = s.char_byte.find(DecodeChar(t, i, n));
            if (it == s.char_byte.end()) ok = false;
            else mapped.push_back(static_cast<char>(it->second));
            i += n;
          }
          bytes += ok ? mapped : t;
        }
        std::string lossy;
        tokens.assign(1, RepairUtf8(bytes, &lossy) ? lossy : bytes);
        break;
      }
      case Decoder::kReplace:
        for (std::string& t : tokens) {
          Normalizer r{Normalizer::kReplace, nullptr, d.pattern, d.content};
          r.Apply(&t);
        }
        break;
      case Decoder::kByteFallback: {
        std::vector<std::string> result;
        std::string pending;
        size_t pending_count = 0;
        const auto flush = [&] {
          if (pending_count == 0) return;
          std::string lossy;
          if (RepairUtf8(pending, &lossy)) {
            // tokenizers writes one U+FFFD per byte when the bytes are not valid UTF-8.
            std::string r;
            for (size_t k = 0; k < pending_count; ++k) r += kReplacementChar;
            result.push_back(std::move(r));
          } else {
            result.push_back(pending);
          }
          pending.clear();
          pending_count = 0;
        };
        for (const std::string& t : tokens) {
          unsigned value = 0;
          if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
              std::sscanf(t.c_str() + 3, "%2X", &value) == 1 && std::isxdigit(t[3]) &&
              std::isxdigit(t[4])) {
            pending.push_back(static_cast<char>(value));
            ++pending_count;
          } else {
            flush();
            result.push_back(t);
          }
        }
        flush();
        tokens.swap(result);
        break;
      }
      case Decoder::kFuse: {
        std::string all;
        for (const std::string& t : tokens) all += t;
        tokens.assign(1, all);
        break;
      }
      case Decoder::kStrip:
        for (std::string& t : tokens) {
          size_t a = 0, b = t.size();
          for (size_t k = 0; k < d.strip_start && a < b && t[a] == d.strip_char; ++k) ++a;
          for (size_t k = 0; k < d.strip_stop && b > a && t[b - 1] == d.strip_char; ++k) --b;
          t = t.substr(a, b - a);
        }
        break;
    }
  }
  std::string text;
  for (const std::string& t : tokens) text += t;
  return text;
}

}  // namespace sam::indexer::internal
