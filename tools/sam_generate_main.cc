// sam-generate: generate text with a Llama-family checkpoint, SAM-Decoding drafts and
// speculative verification (greedy or lossless sampling).
//
//   sam-generate --model /models/vicuna-7b --tokenizer llama-32k.model --index all.sam
//                --template vicuna --prompt "Name three colours." --max-new-tokens 128
//   sam-generate ... --temperature 0.7 --top-p 0.9 --seed 1 --json
//   sam-generate ... --draft-model /models/llama-68m --policy model --draft-mode rsd-s
//
// Exit codes: 0 success, 1 runtime error (unreadable model, tokenizer/index mismatch, a prompt
// longer than the model's positions, ...), 2 usage error (bad flags or flag values).
//
// The tokenizer (SentencePiece or tokenizer.json) is loaded from a module isolated from
// libtorch's protobuf (the sam::tokenizer_isolated backend of sam/indexer/tokenizer.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <torch/cuda.h>

#include "cli.h"
#include "session_flags.h"
#include "sam/corpora/templates.h"
#include "sam/error.h"
#include "sam/format/index.h"
#include "sam/format/shard_set.h"
#include "sam/runtime/shard_set.h"
#include "sam/indexer/tokenizer.h"
#include "sam/torch/error.h"
#include "sam/torch/generate.h"
#include "sam/torch/llama_config.h"
#include "sam/torch/model.h"

namespace {

namespace fs = std::filesystem;
namespace rt = sam::runtime;
namespace tb = sam::torch_backend;
using nlohmann::json;
using sam::indexer::Tokenizer;

using sam::tools::UsageError;

// More bytes than any model's context holds as text (a million tokens of 64 bytes).
constexpr size_t kMaxPromptFileBytes = size_t{64} << 20;

// The prompt text of --prompt-file: a regular file or a stream (FIFO, pipe, /dev/stdin), read
// once to its end; a directory is refused by name.
std::string ReadPromptFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw sam::Error(sam::ErrorCode::kIo,
                     "cannot open prompt file " + path + ": " + std::strerror(errno));
  struct stat st = {};
  if (::fstat(fd, &st) == 0 && S_ISDIR(st.st_mode)) {
    ::close(fd);
    throw UsageError("--prompt-file " + path + " is a directory, not a file");
  }
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ::close(fd);
      throw sam::Error(sam::ErrorCode::kIo,
                       "cannot read prompt file " + path + ": " + std::strerror(error));
    }
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > kMaxPromptFileBytes) {  // an endless stream such as /dev/zero
      ::close(fd);
      throw UsageError("--prompt-file " + path + ": prompt too long (more than " +
                       std::to_string(kMaxPromptFileBytes >> 20) +
                       " MiB; a prompt must fit the model's context, max_position_embeddings "
                       "tokens)");
    }
  }
  ::close(fd);
  return text;
}

// "cpu", "cuda" or "cuda:N": the devices Model::Load accepts (whether CUDA is present is checked
// later, as a runtime error).
std::string CheckDevice(const std::string& device) {
  if (device == "cpu" || device == "cuda") return "";
  if (device.rfind("cuda:", 0) == 0 && device.size() > 5 &&
      device.find_first_not_of("0123456789", 5) == std::string::npos)
    return "";
  return "unsupported device '" + device + "' (use cpu, cuda or cuda:N)";
}

// Prints the text of `ids` incrementally: each call prints what decoding all ids so far adds.
class TextStreamer {
 public:
  explicit TextStreamer(const Tokenizer& tokenizer) : tokenizer_(tokenizer) {}
  void Add(std::span<const uint32_t> tokens) {
    ids_.insert(ids_.end(), tokens.begin(), tokens.end());
    const std::string text = tokenizer_.Decode(ids_);
    // A piece can change how earlier bytes decode (byte fallback); print only a stable suffix.
    if (text.compare(0, printed_.size(), printed_) == 0) {
      std::fwrite(text.data() + printed_.size(), 1, text.size() - printed_.size(), stdout);
      std::fflush(stdout);
      printed_ = text;
    }
  }

 private:
  const Tokenizer& tokenizer_;
  std::vector<uint32_t> ids_;
  std::string printed_;
};

// "4,2,2,1" -> {4, 2, 2, 1}.
std::vector<size_t> ParseBranching(const std::string& text) {
  std::vector<size_t> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item = text.substr(start, comma - start);
    if (item.empty() || item.size() > 4 || item.find_first_not_of("0123456789") != std::string::npos ||
        std::stoul(item) == 0)
      throw UsageError("--draft-branching '" + text +
                       "': expected positive integers separated by commas, e.g. 4,2,2,1");
    out.push_back(std::stoul(item));
    start = comma + 1;
  }
  return out;
}

// --prompt-ids: "[1, 2, 3]" or "1,2,3" (read as the JSON array it is the inside of).
std::vector<uint32_t> ParsePromptIds(const std::string& text) {
  const std::string bad = "--prompt-ids '" + text +
                          "': expected token ids separated by commas or a JSON array, e.g. "
                          "1,415,29871";
  const size_t first = text.find_first_not_of(" \t\n");
  const bool array = first != std::string::npos && text[first] == '[';
  json j;
  try {
    j = json::parse(array ? text : "[" + text + "]");
  } catch (const json::exception&) {
    throw UsageError(bad);
  }
  if (!j.is_array()) throw UsageError(bad);
  std::vector<uint32_t> ids;
  for (const auto& v : j) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > UINT32_MAX)
      throw UsageError("--prompt-ids: " + v.dump() + " is not a token id");
    ids.push_back(static_cast<uint32_t>(v.get<int64_t>()));
  }
  if (ids.empty()) throw UsageError("--prompt-ids: the prompt is empty");
  return ids;
}

// The bytes of a file, or nullopt when it does not exist.
std::optional<std::string> ReadIfExists(const fs::path& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) throw sam::Error(sam::ErrorCode::kIo, "cannot read " + path.string());
  std::ostringstream bytes;
  bytes << in.rdbuf();
  return bytes.str();
}

// A checkpoint folder's tokenizer.json must have the fingerprint of --tokenizer (the ids the
// model was trained on are the ids the tokenizer gives): refuses a different one, naming both.
void CheckFolderTokenizer(const std::string& dir, const char* role, const Tokenizer& tokenizer) {
  const fs::path json_path = fs::path(dir) / "tokenizer.json";
  std::error_code ec;
  if (!fs::is_regular_file(json_path, ec)) return;
  if (Tokenizer::Load(json_path.string()).sha256() != tokenizer.sha256())
    throw sam::Error(sam::ErrorCode::kTokenizerMismatch,
                     std::string("the ") + role + "'s tokenizer " + json_path.string() +
                         " differs from the tokenizer " + tokenizer.path() +
                         " (fingerprints differ): give --tokenizer " + dir);
}

// A draft model must share the target's vocabulary and tokenizer: refuses a different
// vocabulary size (config.json) or a tokenizer.model beside it that differs from --tokenizer
// (a tokenizer.json beside it is checked by CheckFolderTokenizer).
void CheckDraftModel(const std::string& draft_dir, const tb::LlamaConfig& draft,
                     const std::string& model_dir, const tb::LlamaConfig& target,
                     const std::string& tokenizer_path) {
  if (draft.vocab_size != target.vocab_size)
    throw sam::Error(sam::ErrorCode::kTokenizerMismatch,
                     "the draft model " + draft_dir + " has " + std::to_string(draft.vocab_size) +
                         " tokens, the model " + model_dir + " has " +
                         std::to_string(target.vocab_size) +
                         " (vocab_size in config.json): a draft model must share the target's "
                         "vocabulary and tokenizer");
  const std::optional<std::string> draft_tokenizer = ReadIfExists(fs::path(draft_dir) / "tokenizer.model");
  if (!draft_tokenizer) return;
  const std::optional<std::string> target_tokenizer = ReadIfExists(tokenizer_path);
  if (target_tokenizer && *draft_tokenizer != *target_tokenizer)
    throw sam::Error(sam::ErrorCode::kTokenizerMismatch,
                     "the draft model's tokenizer " + (fs::path(draft_dir) / "tokenizer.model").string() +
                         " differs from the tokenizer " + tokenizer_path +
                         " of the model " + model_dir +
                         ": a draft model must share the target's tokenizer");
}

json BySourceJson(const tb::GenerateResult& r) {
  json sources = json::object();
  for (size_t i = 0; i < r.by_source.size(); ++i) {
    const rt::SourceStatistics& c = r.by_source[i];
    if (c.steps == 0) continue;
    sources[std::string(rt::DraftSourceName(static_cast<rt::DraftSource>(i)))] = {
        {"steps", c.steps}, {"draft_tokens", c.draft_tokens},
        {"accepted_tokens", c.accepted_tokens}, {"mat", c.Mat()}};
  }
  return sources;
}

// The flags of sam-generate, in the order main binds them to CLI11.
struct GenerateFlags {
  std::string model_dir, tokenizer_path, prompt, prompt_file, template_name = "raw";
  std::string policy = "sam-cal", device = "cpu", dtype;
  std::vector<std::string> index_paths;
  sam::tools::SessionFlags session_flags;
  int64_t max_new_tokens = 128;
  float temperature = 0.0f, top_p = 1.0f;
  int top_k = 0;
  uint64_t seed = 0;
  bool no_spec = false, as_json = false;
  std::string cost_curve_path;
  std::string draft_model_dir, draft_mode, draft_branching = "4,2,2,1";
  size_t draft_depth = 4, draft_width = 4;
  std::vector<uint32_t> sdsat_ids;
  size_t sdsat_k = 0, sdsat_width = 1;
  std::string sdsat_scheme = "one-pass", sdsat_sampling = "without-replacement";
  std::string prompt_ids_text;
  bool print_prompt_ids = false;
  bool append_newline = false;
};

// One run of sam-generate over its parsed flags: checks the flags, chooses the drafters, checks
// the cheap inputs (config, prompt, tokenizer, indexes) before loading a model, generates and
// prints.
class GenerateCommand : private GenerateFlags {
 public:
  GenerateFlags& flags() { return *this; }
  // Which flags were given (set by main after parsing).
  bool prompt_given = false, file_given = false, ids_given = false;
  bool sdsat_tokens_given = false, sdsat_flags_given = false;

  int Run() {
    if (print_prompt_ids) {
      if (tokenizer_path.empty()) throw UsageError("--print-prompt-ids needs --tokenizer");
      if (!prompt_given && !file_given)
        throw UsageError("one of --prompt or --prompt-file is required");
      std::cout << json(PromptIdsOfFlags()).dump() << "\n";
      return 0;
    }
    CheckFlags();
    ChooseDrafters();
    CheckModelFolder();
    // Config, prompt, tokenizer and indexes first: cheap, and a mistake should fail before
    // loading a large model.
    const tb::LlamaConfig config = tb::LlamaConfig::Load(fs::path(model_dir) / "config.json");
    const std::vector<uint32_t> prompt_ids = PromptIds(config);
    ConfigureSdsat(config);
    FitPositions(config, prompt_ids.size());
    OpenIndexes();
    const std::optional<tb::LlamaConfig> draft_config = LoadDraftConfig(config);
    const tb::Model model = tb::Model::Load(model_dir, {.device = device, .dtype = dtype});
    if (tokenizer_ && model.config().vocab_size != static_cast<int64_t>(tokenizer_->vocab_size()))
      throw sam::Error(sam::ErrorCode::kTokenizerMismatch,
                       "vocabulary size mismatch: the model " + model_dir + " has " +
                           std::to_string(model.config().vocab_size) + " tokens, the tokenizer " +
                           tokenizer_path + " has " + std::to_string(tokenizer_->vocab_size()) +
                           "; use the checkpoint's own tokenizer");
    if (draft_config) {
      draft_model_.emplace(tb::Model::Load(draft_model_dir, {.device = device, .dtype = dtype}));
      options_.draft_model = &*draft_model_;
    }
    Print(Generate(model, prompt_ids));
    return 0;
  }

 private:
  // Loaded once, when first needed (after the cheap checks of the flags).
  const Tokenizer& LoadTokenizer() {
    if (!tokenizer_) tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::Load(tokenizer_path));
    return *tokenizer_;
  }

  std::vector<uint32_t> PromptIdsOfFlags() {
    const std::string text = prompt_given ? prompt : ReadPromptFile(prompt_file);
    const sam::corpora::Template templ = sam::corpora::ParseTemplate(template_name);
    if (append_newline && templ != sam::corpora::Template::kRaw)
      throw UsageError("--append-newline needs --template raw");
    // raw: the text as written, or with the documents' separator when asked for.
    const std::string rendered = templ == sam::corpora::Template::kRaw
                                     ? (append_newline ? text + "\n" : text)
                                     : sam::corpora::RenderPrompt(templ, text);
    std::vector<uint32_t> ids;
    LoadTokenizer().EncodePrompt(rendered, &ids);
    return ids;
  }

  // The checks that need no file.
  void CheckFlags() {
    if (model_dir.empty()) throw UsageError("--model is required");
    std::error_code folder_error;
    if (tokenizer_path.empty() &&
        fs::is_regular_file(fs::path(model_dir) / "tokenizer.json", folder_error))
      tokenizer_path = model_dir;
    if (!(top_p > 0.0f)) throw UsageError("--top-p must be in (0, 1]");
    if (tokenizer_path.empty() && !ids_given)
      throw UsageError("--tokenizer is required (optional only with --prompt-ids)");
    if (tokenizer_path.empty() && !index_paths.empty())
      throw UsageError("--index needs --tokenizer (indexes are checked against it)");
    if (!prompt_given && !file_given && !ids_given)
      throw UsageError("one of --prompt, --prompt-file or --prompt-ids is required");
    if (tokenizer_path.empty()) as_json = true;  // no text without a tokenizer
    if ((dtype == "fp16" || dtype == "float16") && device == "cpu")
      throw UsageError("--dtype " + dtype + " is not supported on cpu; use fp32 or bf16");
  }

  // The policy and the drafters it combines (a draft model, SDSAT's adaptive tokens).
  void ChooseDrafters() {
    try {
      options_ = tb::GeneratorOptionsForPolicy(policy);
    } catch (const tb::Error& e) {
      throw UsageError(e.what());
    }
    session_flags.Apply(&options_.selection);
    if (!cost_curve_path.empty()) {
      if (options_.selection.policy != rt::Policy::kCalibrated || no_spec)
        throw UsageError("--cost-curve sizes sam-cal's drafts; use it with --policy sam-cal");
      options_.selection.cost_curve = rt::CostCurve::Load(cost_curve_path);
    }
    // SDSAT: configured by --sdsat-tokens or config.json's sdsat_tokens (read below).
    needs_sdsat_ = tb::PolicyNeedsSdsat(policy);
    if (sdsat_flags_given && !tb::PolicyTakesSdsat(policy))
      throw UsageError("the --sdsat-* flags are used by the policies sdsat, sam-sdsat and sam-cal, not " +
                       policy);
    if (sdsat_flags_given && no_spec) throw UsageError("the --sdsat-* flags draft; --no-spec does not");
    // The policy rules (tb::DraftModelUseFor): model and sam-model need a draft model, sam-cal
    // merges one when given (cells by depth and the draft's probability).
    try {
      options_.draft_model_use = tb::DraftModelUseFor(policy, !draft_model_dir.empty());
    } catch (const tb::Error& e) {
      throw UsageError(std::string("--draft-model: ") + e.what());
    }
    if (options_.draft_model_use != tb::GeneratorOptions::DraftModelUse::kNone) {
      rt::TreeDraftOptions& tree = options_.draft_tree;
      const std::string mode = !draft_mode.empty() ? draft_mode : temperature == 0.0f ? "chain" : "rsd-s";
      tree.mode = *rt::TreeModeFromName(mode);
      tree.depth = draft_depth;
      tree.width = draft_width;
      tree.branching = ParseBranching(draft_branching);
      draft_mode = mode;
    }
  }

  void CheckModelFolder() const {
    std::error_code ec;
    if (!fs::exists(model_dir, ec))
      throw sam::Error(sam::ErrorCode::kIo, "model directory " + model_dir + " does not exist");
    if (!fs::is_directory(model_dir, ec))
      throw sam::Error(sam::ErrorCode::kIo,
                       "--model " + model_dir +
                           " is not a directory (give the checkpoint directory holding "
                           "config.json and *.safetensors)");
    if (!fs::exists(fs::path(model_dir) / "config.json"))
      throw sam::Error(sam::ErrorCode::kIo,
                       "model directory " + model_dir +
                           " has no config.json (expected a Hugging Face checkpoint)");
    if (device.rfind("cuda", 0) == 0 && !torch::cuda::is_available())
      throw sam::Error(sam::ErrorCode::kInvalidArgument,
                       "--device " + device + ": this libtorch has no usable CUDA device");
  }

  std::vector<uint32_t> PromptIds(const tb::LlamaConfig& config) {
    if (!ids_given) return PromptIdsOfFlags();
    const std::vector<uint32_t> prompt_ids = ParsePromptIds(prompt_ids_text);
    for (const uint32_t id : prompt_ids)
      if (static_cast<int64_t>(id) >= config.vocab_size)
        throw UsageError("--prompt-ids: id " + std::to_string(id) + " is outside the vocabulary of " +
                         model_dir + " (" + std::to_string(config.vocab_size) + " tokens)");
    return prompt_ids;
  }

  // SDSAT's adaptive ids: the flags override config.json's sdsat_tokens.
  void ConfigureSdsat(const tb::LlamaConfig& config) {
    const std::vector<uint32_t> sdsat_given = sdsat_tokens_given ? sdsat_ids : config.sdsat_tokens;
    use_sdsat_ =
        !no_spec && (needs_sdsat_ || (tb::PolicyTakesSdsat(policy) && !sdsat_given.empty()));
    if (!use_sdsat_) return;
    // The policy rules (tb::SdsatUseFor): sdsat and sam-sdsat need the ids; sam-cal merges
    // SDSAT's drafts with the one-pass scheme, and not beside a draft model.
    rt::SdsatOptions& so = options_.sdsat;
    so.scheme = sdsat_scheme == "two-pass" ? rt::SdsatScheme::kTwoPass : rt::SdsatScheme::kOnePass;
    try {
      options_.sdsat_use =
          tb::SdsatUseFor(policy, !sdsat_given.empty(), so.scheme, options_.draft_model_use);
    } catch (const tb::Error& e) {
      throw UsageError(std::string("--sdsat-tokens ID[,ID...]: ") + e.what() +
                       (sdsat_given.empty() ? " (the checkpoint's config.json lists no sdsat_tokens)"
                                            : ""));
    }
    for (const uint32_t id : sdsat_given)
      if (static_cast<int64_t>(id) >= config.vocab_size)
        throw UsageError("--sdsat-tokens: id " + std::to_string(id) +
                         " is outside the vocabulary of " + model_dir + " (" +
                         std::to_string(config.vocab_size) + " tokens)");
    const size_t k = sdsat_k != 0 ? sdsat_k : sdsat_given.size() > 1 ? sdsat_given.size() : 4;
    try {
      so.adaptive_tokens = rt::ExpandSdsatTokens(sdsat_given, k);
    } catch (const sam::Error& e) {
      throw UsageError(std::string("--sdsat-tokens / --sdsat-k: ") + e.what());
    }
    so.width = sdsat_width;
    so.without_replacement = sdsat_sampling == "without-replacement";
  }

  // A prompt must fit the model's positions; --max-new-tokens is lowered to what still fits.
  void FitPositions(const tb::LlamaConfig& config, size_t prompt_size) {
    const int64_t positions = config.max_position_embeddings;
    const int64_t prompt_tokens = static_cast<int64_t>(prompt_size);
    if (prompt_tokens >= positions)
      throw sam::Error(
          sam::ErrorCode::kCapacity,
          "the prompt is " + std::to_string(prompt_tokens) + " tokens long, but the model " +
              model_dir + " handles at most " + std::to_string(positions) +
              " positions (max_position_embeddings in config.json; the prompt and at least one "
              "new token must fit)");
    if (prompt_tokens + max_new_tokens > positions) {
      std::fprintf(stderr,
                   "sam-generate: --max-new-tokens lowered from %lld to %lld: the prompt has %lld "
                   "tokens and the model at most %lld positions (max_position_embeddings)\n",
                   static_cast<long long>(max_new_tokens),
                   static_cast<long long>(positions - prompt_tokens),
                   static_cast<long long>(prompt_tokens), static_cast<long long>(positions));
      max_new_tokens = positions - prompt_tokens;
    }
  }

  // The indexes, checked against the tokenizer.
  void OpenIndexes() {
    sam::format::OpenOptions open;
    if (!tokenizer_path.empty()) {
      LoadTokenizer();
      open.expected_tokenizer_sha256 = tokenizer_->sha256();
      open.expected_vocab_size = tokenizer_->vocab_size();
    }
    for (const auto& p : index_paths) {
      if (sam::format::LooksLikeShardSet(p)) {
        shard_sets_.push_back(sam::runtime::OpenShardSet(p, open));
        bool all = true;
        for (const auto& shard : shard_sets_.back()) all &= shard->view().hubs().present();
        sam::tools::NoteWithoutAccelerators("sam-generate", p, all);
      } else {
        indexes_.push_back(sam::format::IndexFile::Open(p, open));
        sam::tools::NoteWithoutAccelerators("sam-generate", p,
                                            indexes_.back().view().hubs().present());
      }
    }
  }

  // The draft model's config, checked against the model's; the folders' tokenizers.
  std::optional<tb::LlamaConfig> LoadDraftConfig(const tb::LlamaConfig& config) {
    std::error_code ec;
    std::optional<tb::LlamaConfig> draft_config;
    if (!draft_model_dir.empty()) {
      if (!fs::is_directory(draft_model_dir, ec) || !fs::exists(fs::path(draft_model_dir) / "config.json"))
        throw sam::Error(sam::ErrorCode::kIo, "--draft-model " + draft_model_dir +
                                                  " is not a checkpoint directory with a config.json");
      draft_config = tb::LlamaConfig::Load(fs::path(draft_model_dir) / "config.json");
      CheckDraftModel(draft_model_dir, *draft_config, model_dir, config, tokenizer_path);
    }
    if (!tokenizer_path.empty()) {
      CheckFolderTokenizer(model_dir, "model", LoadTokenizer());
      if (!draft_model_dir.empty()) CheckFolderTokenizer(draft_model_dir, "draft model", LoadTokenizer());
    }
    return draft_config;
  }

  tb::GenerateResult Generate(const tb::Model& model, const std::vector<uint32_t>& prompt_ids) {
    tb::Generator generator(model, options_);
    for (const auto& f : indexes_) generator.AttachIndex(&f.view());
    for (const auto& set : shard_sets_) generator.AttachShardSet(set);
    tb::GenerateOptions options;
    options.max_new_tokens = max_new_tokens;
    if (tokenizer_ && tokenizer_->eos_id() != sam::format::kNoToken) options.stop_tokens = {tokenizer_->eos_id()};
    options.speculative = !no_spec;
    options.sampling = {.temperature = temperature, .top_k = top_k, .top_p = top_p};
    options.seed = seed;

    std::optional<TextStreamer> streamer;
    tb::TokenCallback stream;
    if (!as_json) {
      streamer.emplace(*tokenizer_);
      stream = [&](std::span<const uint32_t> tokens) { streamer->Add(tokens); return true; };
    }
    const tb::GenerateResult r = generator.Generate(prompt_ids, options, stream);
    return r;
  }

  void Print(const tb::GenerateResult& r) const {
    if (as_json) {
      json out;
      out["output_ids"] = r.output_ids;
      if (tokenizer_) out["text"] = tokenizer_->Decode(r.output_ids);
      out["prompt_tokens"] = r.prompt_tokens;
      out["new_tokens"] = r.output_ids.size();
      out["steps"] = r.steps;
      out["verified_tokens"] = r.verified_tokens;
      out["mat"] = r.mat;
      out["tokens_per_s"] = r.tokens_per_s;
      out["prefill_seconds"] = r.prefill_seconds;
      out["decode_seconds"] = r.decode_seconds;
      // Every target forward pass, the prefill included.
      out["forward_passes"] = r.steps + 1;
      out["tokens_per_pass"] = static_cast<double>(r.output_ids.size()) / static_cast<double>(r.steps + 1);
      out["stop_reason"] = std::string(tb::StopReasonName(r.stop_reason));
      out["policy"] = no_spec ? "none" : policy;
      if (draft_model_) {
        out["draft_model"] = draft_model_dir;
        out["draft_mode"] = draft_mode;
        out["draft_forward_passes"] = r.draft_forward_passes;
      }
      if (use_sdsat_) {
        const rt::SdsatOptions& so = options_.sdsat;
        out["sdsat"] = {{"tokens", so.adaptive_tokens},
                        {"k", so.adaptive_tokens.size()},
                        {"scheme", std::string(rt::SdsatSchemeName(so.scheme))},
                        {"width", so.width},
                        {"sampling", sdsat_sampling},
                        {"adaptive_tokens_evaluated", r.adaptive_tokens},
                        {"draft_passes", r.sdsat_draft_passes}};
      }
      out["by_source"] = BySourceJson(r);
      std::cout << out.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
    } else {
      std::printf("\n");
      std::fprintf(stderr,
                   "sam-generate: [%zu tokens, %lld steps, MAT %.2f, %.2f tokens/pass, %.1f "
                   "tokens/s, %s]\n",
                   r.output_ids.size(), static_cast<long long>(r.steps), r.mat,
                   static_cast<double>(r.output_ids.size()) / static_cast<double>(r.steps + 1),
                   r.tokens_per_s,
                   std::string(tb::StopReasonName(r.stop_reason)).c_str());
    }
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  tb::GeneratorOptions options_;
  bool needs_sdsat_ = false;  // the policy drafts with SDSAT (sdsat, sam-sdsat)
  bool use_sdsat_ = false;    // SDSAT drafts in this run (those policies, or sam-cal merging it)
  std::vector<sam::format::IndexFile> indexes_;
  std::vector<std::vector<std::shared_ptr<const sam::runtime::StaticIndex>>> shard_sets_;
  std::optional<tb::Model> draft_model_;
};

std::string Help() {
  return
      "sam-generate: generate text with a Llama-family checkpoint (HF config.json +\n"
      "safetensors), SAM-Decoding drafts (static indexes, dynamic SAM, Token Recycling) and\n"
      "speculative verification in one forward pass per step. Greedy output equals plain greedy\n"
      "decoding; sampling (--temperature > 0) is lossless. A prompt must fit the model's\n"
      "max_position_embeddings (config.json); --max-new-tokens is lowered to what still fits.\n"
      "Exit status: 0 success, 1 runtime error, 2 usage error.\n\n"
      "Examples:\n"
      "  sam-generate --model /models/vicuna-7b --tokenizer llama-32k.model --index chat.sam \\\n"
      "               --template vicuna --prompt 'Name three colours.' --max-new-tokens 128\n"
      "  sam-generate --model /models/vicuna-7b --tokenizer llama-32k.model --prompt-file q.txt \\\n"
      "               --temperature 0.7 --top-p 0.9 --seed 1 --json\n"
      "  sam-generate --model /models/vicuna-7b --tokenizer llama-32k.model --index chat.sam \\\n"
      "               --policy sam-cal --cost-curve gpu.csv --prompt 'Name three colours.'\n"
      "  sam-generate --model /models/llama-7b --tokenizer llama-32k.model --prompt-file q.txt \\\n"
      "               --draft-model /models/llama-68m --policy model --temperature 1   # RSD-S\n"
      "  sam-generate --model /models/codellama-7b-sdsat --tokenizer llama-32k.model \\\n"
      "               --policy sdsat --sdsat-tokens 32011 --sdsat-k 4 --prompt-file q.txt\n"
      "\nDraft-model tree modes (--draft-mode; verified losslessly under sampling):\n"
      "  chain      L tokens (--draft-depth): the draft's argmax (greedy) or sampled from it\n"
      "  tree       best-first top-W tree by draft path probability (--draft-width W, depth L)\n"
      "  rsd-c      RSD with branching factors b_1..b_L (--draft-branching), Gumbel-top-k\n"
      "  rsd-s      RSD stochastic beam search, width W, depth L (at most 1 + W*L nodes)\n"
      "  specinfer  b_l independent samples per node (with replacement), SpecInfer-style\n"
      "  Defaults: chain under greedy decoding, rsd-s under sampling; L 4, W 4, b 4,2,2,1.\n"
      "\nPolicies:\n" +
          std::string(tb::GeneratorPolicyHelp());
}

}  // namespace

int main(int argc, char** argv) {
  sam::tools::SetUpTool("sam-generate");
  CLI::App app{Help(), "sam-generate"};
  GenerateCommand command;
  auto& [model_dir, tokenizer_path, prompt, prompt_file, template_name,
         policy, device, dtype, index_paths, session_flags, max_new_tokens, temperature, top_p, top_k,
         seed, no_spec, as_json, cost_curve_path, draft_model_dir, draft_mode, draft_branching,
         draft_depth, draft_width, sdsat_ids, sdsat_k, sdsat_width, sdsat_scheme, sdsat_sampling,
         prompt_ids_text, print_prompt_ids, append_newline] = command.flags();

  app.add_option("--model", model_dir, "checkpoint directory (config.json + *.safetensors)");
  app.add_option("--tokenizer", tokenizer_path,
                 "the checkpoint's tokenizer: a SentencePiece .model, a tokenizer.json or a "
                 "folder holding one (default: --model's tokenizer.json when it has one)");
  app.add_option("--index", index_paths,
                 "static index file, or shard set manifest NAME.samset (sam-build --max-memory), "
                 "drafted from as one index (repeatable; checked against the tokenizer)");
  auto* prompt_opt = app.add_option("--prompt", prompt, "prompt text");
  auto* file_opt = app.add_option("--prompt-file", prompt_file,
                                  "file holding the prompt text (a FIFO or /dev/stdin is read as a stream)");
  prompt_opt->excludes(file_opt);
  app.add_option("--template", template_name,
                 "prompt template: raw (the text as written, nothing added) or vicuna "
                 "(default raw)")
      ->check(CLI::IsMember({"raw", "vicuna"}));
  app.add_flag("--append-newline", append_newline,
               "with --template raw: send the prompt followed by a newline, the separator raw "
               "documents (sam-build --template raw) and sam-traces' raw traces put between a "
               "prompt and its response");
  app.add_option("--max-new-tokens", max_new_tokens, "most tokens to generate (default 128)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  app.add_option("--temperature", temperature, "0 = greedy (default); > 0 samples")
      ->check(CLI::Range(0.0f, 100.0f));
  app.add_option("--top-k", top_k, "keep the k most probable tokens (0 = off)")->check(CLI::NonNegativeNumber);
  app.add_option("--top-p", top_p, "nucleus sampling mass in (0, 1] (1 = off)")
      ->check(CLI::Range(0.0f, 1.0f));
  app.add_option("--seed", seed, "sampling seed (default 0)");
  app.add_flag("--no-spec", no_spec, "plain autoregressive decoding (no drafts), for comparison");
  app.add_option("--policy", policy, "draft policy (default sam-cal; see above)");
  session_flags.Add(app, {"draft_size", "shape", "l_bias", "l_threshold", "tree_nodes", "tree_width"});
  app.add_option("--cost-curve", cost_curve_path,
                 "sam-cal: verification cost curve (CSV 'tokens,cost' rows, as bench-generate "
                 "--cost-curve-out writes); each step drafts as many nodes as pay for their "
                 "verification (default: none, --draft-size nodes at most)")
      ->type_name("FILE");
  app.add_option("--device", device, "cpu, cuda or cuda:N (default cpu)")
      ->check(CLI::Validator(CheckDevice, "DEVICE"));
  app.add_option("--dtype", dtype, "fp32, fp16 or bf16 (default: fp32 on cpu, fp16/bf16 on cuda; "
                 "fp16 needs cuda)")
      ->check(CLI::IsMember({"fp32", "fp16", "bf16", "float32", "float16", "bfloat16"}));
  app.add_flag("--json", as_json, "print one JSON object instead of streaming the text");
  app.add_option("--draft-model", draft_model_dir,
                 "draft checkpoint directory (the target's vocabulary and tokenizer) for the "
                 "policies model and sam-model (required) and sam-cal (optional: its trees join "
                 "the calibrated merge); loaded on --device with --dtype");
  app.add_option("--draft-mode", draft_mode,
                 "draft model tree mode: chain, tree, rsd-c, rsd-s, specinfer (default: chain "
                 "for greedy, rsd-s for sampling)")
      ->check(CLI::IsMember({"chain", "tree", "rsd-c", "rsd-s", "specinfer"}));
  app.add_option("--draft-depth", draft_depth, "draft tree depth L (chain, tree, rsd-s; default 4)")
      ->check(CLI::Range(size_t{1}, size_t{64}));
  app.add_option("--draft-width", draft_width, "beam width W (rsd-s) / top-W (tree); default 4")
      ->check(CLI::Range(size_t{1}, size_t{64}));
  app.add_option("--draft-branching", draft_branching,
                 "branching factors b_1,...,b_L (rsd-c, specinfer; default 4,2,2,1)");
  auto* sdsat_tokens_opt =
      app.add_option("--sdsat-tokens", sdsat_ids,
                     "SDSAT adaptive token ids, one (repeated --sdsat-k times, as the released "
                     "CodeLlama checkpoints' 32011) or k of them in order; default: the checkpoint's "
                     "config.json 'sdsat_tokens'. Used by the policies sdsat and sam-sdsat, and "
                     "merged by sam-cal")
          ->delimiter(',')
          ->type_name("UINT[,UINT...]");
  auto* sdsat_k_opt = app.add_option("--sdsat-k", sdsat_k,
                                     "SDSAT: adaptive tokens (draft depth) per step (default: the "
                                     "number of ids when several are given, else 4)")
                          ->check(CLI::Range(size_t{1}, rt::kMaxSdsatTokens));
  auto* sdsat_scheme_opt =
      app.add_option("--sdsat-scheme", sdsat_scheme,
                     "SDSAT: one-pass (default: the next step's drafts ride on the verification "
                     "pass) or two-pass (the official scheme: a pass on [c, S x k], then one "
                     "verifying the drafts)")
          ->check(CLI::IsMember({"one-pass", "two-pass"}));
  auto* sdsat_width_opt =
      app.add_option("--sdsat-width", sdsat_width,
                     "SDSAT: draft tree width W (1 = a chain, default; W > 1: top-W tree, or W "
                     "beams drawn without replacement under sampling)")
          ->check(CLI::Range(size_t{1}, size_t{16}));
  auto* sdsat_sampling_opt =
      app.add_option("--sdsat-sampling", sdsat_sampling,
                     "SDSAT under sampling: without-replacement (default: drafts drawn from the "
                     "adaptive positions' q, verified by recursive rejection with q) or top-k "
                     "(deterministic top-W drafts, deterministic rule)")
          ->check(CLI::IsMember({"without-replacement", "top-k"}));
  auto* prompt_ids_opt = app.add_option(
      "--prompt-ids", prompt_ids_text,
      "the prompt as token ids (a JSON array or comma-separated ids, BOS included if the model "
      "expects one) instead of --prompt; --tokenizer is then optional (without it: no --index, "
      "no text, --json output)");
  prompt_ids_opt->excludes(prompt_opt);
  prompt_ids_opt->excludes(file_opt);
  app.add_flag("--print-prompt-ids", print_prompt_ids,
               "print the prompt's ids (BOS first, after --template) as a JSON array and exit; "
               "needs --tokenizer and --prompt or --prompt-file, no --model");

  if (const auto status = sam::tools::ParseCommandLine(app, argc, argv)) return *status;
  // Which of the flags were given (after parsing).
  command.prompt_given = prompt_opt->count() > 0;
  command.file_given = file_opt->count() > 0;
  command.ids_given = prompt_ids_opt->count() > 0;
  command.sdsat_tokens_given = sdsat_tokens_opt->count() > 0;
  command.sdsat_flags_given = sdsat_tokens_opt->count() || sdsat_k_opt->count() ||
                              sdsat_scheme_opt->count() || sdsat_width_opt->count() ||
                              sdsat_sampling_opt->count();
  return sam::tools::RunTool("sam-generate", [&] { return command.Run(); });
}
