// Runs the sam-generate binary, which uses libtorch and SentencePiece in one process. Their
// protobuf copies clash (a crash at start-up, or a fatal protobuf version check when the
// tokenizer model is parsed) unless SentencePiece is isolated (sam::tokenizer_isolated): --help
// proves the program starts; with the data folder present, the tests load the real tokenizer
// next to a random checkpoint of its vocabulary, generate, and check the errors for mismatched
// indexes, vocabularies and bad flags.
//
// SAM_GENERATE_PATH, SAM_RANDOM_MODEL_PATH (bench-random-model) and SAM_TEST_DATA_DIR are set by
// CMake.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "run_command.h"
#include "sam/format/sha256.h"
#include "sam/format/shard_set.h"
#include "sam/automaton/builder.h"
#include "sam/indexer/tokenizer.h"
#include "temp_dir.h"

namespace fs = std::filesystem;

namespace {

using ProcessResult = sam::testing::CommandResult;  // stdout (and stderr when merged)

// Runs sam-generate with `args` (shell-quoted by the caller); stderr goes to stdout when
// `merge_stderr`, else to /dev/null.
ProcessResult RunGenerate(const std::string& args, bool merge_stderr = true) {
  return sam::testing::RunCommand(std::string("'") + SAM_GENERATE_PATH + "' " + args +
                                  (merge_stderr ? " 2>&1" : " 2>/dev/null"));
}

// Runs bench-random-model (random checkpoints for the tests) with `args`; stderr merged.
ProcessResult RunRandomModel(const std::string& args) {
  return sam::testing::RunCommand(std::string("'") + SAM_RANDOM_MODEL_PATH + "' " + args + " 2>&1");
}

std::string Quote(const fs::path& p) { return std::string("'").append(p.string()).append("'"); }

using sam::testing::TempDir;

TEST(SamGenerateCli, HelpRunsWithTorchAndSentencePieceLinked) {
  const ProcessResult run = RunGenerate("--help");
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("sam-generate"), std::string::npos) << run.output;
  // Random checkpoints come from bench-random-model, not from the user's tool.
  EXPECT_EQ(run.output.find("--make-random-model"), std::string::npos);
}

TEST(SamGenerateCli, BadFlagsExitWithUsageError) {
  EXPECT_EQ(RunGenerate("--no-such-flag").exit_code, 2);
  EXPECT_EQ(RunGenerate("--temperature -1 --model x --tokenizer y --prompt hi").exit_code, 2);
  EXPECT_EQ(RunGenerate("--prompt a --prompt-file b").exit_code, 2);
  const ProcessResult no_model = RunGenerate("--prompt hi");
  EXPECT_EQ(no_model.exit_code, 2);
  EXPECT_NE(no_model.output.find("--model"), std::string::npos) << no_model.output;
}

// SDSAT through the command line, on a random checkpoint and --prompt-ids (no tokenizer needed):
// both schemes give plain greedy decoding's output; config.json's sdsat_tokens is read; bad ids,
// k and combinations are refused.
TEST(SamGenerateCli, SdsatWithPromptIdsNeedsNoTokenizer) {
  TempDir dir;
  const fs::path model = dir.path() / "model";
  ASSERT_EQ(RunRandomModel("--out " + Quote(model) + " --vocab 64").exit_code, 0);
  const std::string base = "--model " + Quote(model) + " --prompt-ids 1,5,9,12,7 --max-new-tokens 20";
  auto run_json = [&](const std::string& flags) {
    const ProcessResult run = RunGenerate(base + flags, /*merge_stderr=*/false);
    EXPECT_EQ(run.exit_code, 0) << flags << ": " << run.output;
    return run.exit_code == 0 ? nlohmann::json::parse(run.output) : nlohmann::json::object();
  };
  const nlohmann::json plain = run_json(" --no-spec");
  ASSERT_EQ(plain["output_ids"].size(), 20u);
  EXPECT_FALSE(plain.contains("text"));
  for (const std::string flags :
       {" --policy sdsat --sdsat-tokens 63 --sdsat-k 3",
        " --policy sdsat --sdsat-tokens 63 --sdsat-k 3 --sdsat-scheme two-pass",
        " --policy sdsat --sdsat-tokens 60,61 --sdsat-width 2",
        " --policy sam-sdsat --sdsat-tokens 63 --sdsat-scheme two-pass",
        " --policy sam-cal --sdsat-tokens 63 --sdsat-k 2"}) {
    const nlohmann::json j = run_json(flags);
    EXPECT_EQ(j["output_ids"], plain["output_ids"]) << flags;
    ASSERT_TRUE(j.contains("sdsat")) << flags;
    EXPECT_EQ(j["sdsat"]["scheme"].get<std::string>(),
              flags.find("two-pass") != std::string::npos ? "two-pass" : "one-pass");
    EXPECT_EQ(j["forward_passes"].get<int64_t>(), j["steps"].get<int64_t>() + 1) << flags;
    if (flags.find("sdsat --") != std::string::npos) {
      EXPECT_TRUE(j["by_source"].contains("sdsat")) << flags << ": " << j["by_source"].dump();
    }
  }
  EXPECT_EQ(run_json(" --policy sdsat --sdsat-tokens 60,61")["sdsat"]["k"].get<size_t>(), 2u);
  // config.json's sdsat_tokens, and the flags overriding it.
  const fs::path tuned = dir.path() / "tuned";
  fs::create_directories(tuned);
  fs::copy_file(model / "model.safetensors", tuned / "model.safetensors");
  nlohmann::json config = nlohmann::json::parse(std::ifstream(model / "config.json"));
  config["sdsat_tokens"] = {62};
  std::ofstream(tuned / "config.json") << config.dump();
  const std::string tuned_base = "--model " + Quote(tuned) + " --prompt-ids 1,5,9,12,7 --max-new-tokens 20";
  const ProcessResult from_config = RunGenerate(tuned_base + " --policy sdsat", false);
  ASSERT_EQ(from_config.exit_code, 0) << from_config.output;
  const nlohmann::json fc = nlohmann::json::parse(from_config.output);
  EXPECT_EQ(fc["sdsat"]["tokens"], nlohmann::json({62, 62, 62, 62}));
  EXPECT_EQ(fc["output_ids"], plain["output_ids"]);
  const ProcessResult overridden = RunGenerate(tuned_base + " --policy sdsat --sdsat-tokens 5 --sdsat-k 2", false);
  ASSERT_EQ(overridden.exit_code, 0) << overridden.output;
  EXPECT_EQ(nlohmann::json::parse(overridden.output)["sdsat"]["tokens"], nlohmann::json({5, 5}));
  config["sdsat_tokens"] = {64};
  std::ofstream(tuned / "config.json") << config.dump();
  const ProcessResult bad_config = RunGenerate(tuned_base + " --policy sdsat");
  EXPECT_EQ(bad_config.exit_code, 1) << bad_config.output;
  EXPECT_NE(bad_config.output.find("sdsat_tokens"), std::string::npos) << bad_config.output;
  EXPECT_NE(bad_config.output.find("config.json"), std::string::npos) << bad_config.output;
  // Usage errors, each naming what is wrong.
  const std::pair<std::string, std::string> usage[] = {
      {" --policy sdsat --sdsat-tokens 64", "64"},
      {" --policy sdsat --sdsat-tokens 3 --sdsat-k 0", "--sdsat-k"},
      {" --policy sdsat", "--sdsat-tokens"},
      {" --policy sam --sdsat-tokens 3", "sdsat"},
      {" --policy sam-cal --sdsat-tokens 3 --sdsat-scheme two-pass", "one-pass"},
      {" --policy sdsat --sdsat-tokens 1,2 --sdsat-k 3", "k = 3"},
      {" --policy sdsat --sdsat-tokens 3 --sdsat-scheme three-pass", "--sdsat-scheme"},
  };
  for (const auto& [flags, needle] : usage) {
    const ProcessResult run = RunGenerate(base + flags);
    EXPECT_EQ(run.exit_code, 2) << flags << ": " << run.output;
    EXPECT_NE(run.output.find(needle), std::string::npos) << flags << ": " << run.output;
  }
  for (const std::string ids : {"1,,2", "'[1, -1]'", "1,64", "x"}) {
    const ProcessResult run = RunGenerate("--model " + Quote(model) + " --prompt-ids " + ids);
    EXPECT_EQ(run.exit_code, 2) << ids << ": " << run.output;
    EXPECT_NE(run.output.find("--prompt-ids"), std::string::npos) << ids << ": " << run.output;
  }
  const ProcessResult no_tokenizer = RunGenerate(base + " --index x.sam");
  EXPECT_EQ(no_tokenizer.exit_code, 2) << no_tokenizer.output;
  EXPECT_NE(no_tokenizer.output.find("--tokenizer"), std::string::npos) << no_tokenizer.output;
}

class WithTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_path_ = fs::path(SAM_TEST_DATA_DIR) / "tokenizer" / "llama-32k.model";
    if (!fs::exists(tokenizer_path_)) GTEST_SKIP() << "no tokenizer at " << tokenizer_path_;
    model_dir_ = dir_.path() / "model";
    const ProcessResult made = RunRandomModel("--out " + Quote(model_dir_) + " --tokenizer " +
                                 Quote(tokenizer_path_) + " --layers 1 --hidden 32");
    ASSERT_EQ(made.exit_code, 0) << made.output;
    ASSERT_TRUE(fs::exists(model_dir_ / "config.json"));
    ASSERT_TRUE(fs::exists(model_dir_ / "model.safetensors"));
  }

  std::string Base() const {
    return "--model " + Quote(model_dir_) + " --tokenizer " + Quote(tokenizer_path_);
  }

  TempDir dir_;
  fs::path tokenizer_path_, model_dir_;
};

TEST_F(WithTokenizer, GeneratesJsonWithAnIndex) {
  // A small index built with the same tokenizer (fingerprint recorded).
  const auto tokenizer = sam::indexer::Tokenizer::Load(tokenizer_path_.string());
  std::vector<uint32_t> doc{tokenizer.bos_id()};
  tokenizer.Encode("The quick brown fox jumps over the lazy dog. The quick brown fox.", &doc);
  sam::automaton::IndexInfo info;
  info.tokenizer_sha256 = tokenizer.sha256();
  info.bos_id = tokenizer.bos_id();
  info.eos_id = tokenizer.eos_id();
  const fs::path index = dir_.path() / "small.sam";
  sam::automaton::BuildIndexFile({doc}, tokenizer.vocab_size(), index.string(), info);

  for (const std::string mode : {"", " --no-spec", " --temperature 0.8 --top-k 40 --top-p 0.9 --seed 3",
                                 " --policy sam-tree --template vicuna"}) {
    const ProcessResult run = RunGenerate(Base() + " --index " + Quote(index) +
                                    " --prompt 'The quick brown fox' --max-new-tokens 12 --json" + mode,
                                /*merge_stderr=*/false);
    ASSERT_EQ(run.exit_code, 0) << mode << ": " << run.output;
    const nlohmann::json j = nlohmann::json::parse(run.output);
    const size_t n = j["new_tokens"].get<size_t>();
    EXPECT_GE(n, 1u);
    EXPECT_LE(n, 12u);
    EXPECT_EQ(j["output_ids"].size(), n);
    EXPECT_TRUE(j["text"].is_string());
    EXPECT_TRUE(j["by_source"].is_object());
    // The first token comes from the prefill; each step then emits at least one token. So the
    // n - 1 later tokens took between 1 and n - 1 steps, MAT is their mean per step, every step
    // verified at least its start token, and the per-source steps add up to the steps.
    const int64_t steps = j["steps"].get<int64_t>();
    const int64_t later = static_cast<int64_t>(n) - 1;
    EXPECT_LE(steps, later) << mode;
    if (later > 0) {
      EXPECT_GE(steps, 1) << mode;
      EXPECT_DOUBLE_EQ(j["mat"].get<double>(), static_cast<double>(later) / steps) << mode;
    }
    EXPECT_GE(j["verified_tokens"].get<int64_t>(), steps) << mode;
    int64_t source_steps = 0;
    for (const auto& [name, source] : j["by_source"].items()) source_steps += source["steps"].get<int64_t>();
    EXPECT_EQ(source_steps, steps) << mode;
    EXPECT_GT(j["tokens_per_s"].get<double>(), 0.0);
    if (mode == " --no-spec") {
      EXPECT_EQ(steps, later);  // one token per step
      EXPECT_EQ(j["verified_tokens"].get<int64_t>(), steps);
    }
  }
  // Streaming text mode.
  const ProcessResult text = RunGenerate(Base() + " --prompt hello --max-new-tokens 4");
  EXPECT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("tokens/s"), std::string::npos) << text.output;
}

TEST_F(WithTokenizer, DraftModelPoliciesAndTheirChecks) {
  // The checkpoint drafts for itself: greedy chains are accepted whole (up to near-ties).
  const std::string prompt = " --prompt 'The quick brown fox' --max-new-tokens 13 --json";
  for (const std::string flags :
       {" --policy model", " --policy model --draft-mode tree --draft-width 2",
        " --policy model --temperature 1 --seed 4", " --policy model --temperature 0.7 --draft-mode rsd-c",
        " --policy model --temperature 1 --draft-mode specinfer --draft-branching 2,1,1",
        " --policy sam-model"}) {
    const ProcessResult run = RunGenerate(Base() + " --draft-model " + Quote(model_dir_) + prompt + flags,
                                          /*merge_stderr=*/false);
    ASSERT_EQ(run.exit_code, 0) << flags << ": " << run.output;
    const nlohmann::json j = nlohmann::json::parse(run.output);
    EXPECT_EQ(j["new_tokens"].get<size_t>(), 13u) << flags;
    EXPECT_GT(j["draft_forward_passes"].get<int64_t>(), 0) << flags;
    EXPECT_TRUE(j["by_source"].contains("model")) << flags << ": " << j["by_source"].dump();
    EXPECT_EQ(j["draft_mode"].get<std::string>(),
              flags.find("tree") != std::string::npos        ? "tree"
              : flags.find("rsd-c") != std::string::npos     ? "rsd-c"
              : flags.find("specinfer") != std::string::npos ? "specinfer"
              : flags.find("temperature") != std::string::npos ? "rsd-s"
                                                               : "chain");
    if (flags == " --policy model") {
      EXPECT_GT(j["mat"].get<double>(), 3.0) << "draft = target";
    }
  }
  // Usage errors: a model policy without --draft-model, --draft-model with another policy, a bad
  // mode or branching list.
  EXPECT_EQ(RunGenerate(Base() + " --policy model --prompt hi").exit_code, 2);
  EXPECT_EQ(RunGenerate(Base() + " --draft-model " + Quote(model_dir_) + " --policy sam --prompt hi").exit_code, 2);
  EXPECT_EQ(RunGenerate(Base() + " --draft-model " + Quote(model_dir_) + " --policy model --draft-mode beam --prompt hi").exit_code, 2);
  EXPECT_EQ(RunGenerate(Base() + " --draft-model " + Quote(model_dir_) + " --policy model --draft-branching 2,,1 --prompt hi").exit_code, 2);
  // A draft model with another vocabulary: refused, naming both checkpoints.
  const fs::path small = dir_.path() / "small_draft";
  ASSERT_EQ(RunRandomModel("--out " + Quote(small) + " --vocab 100").exit_code, 0);
  const ProcessResult run = RunGenerate(Base() + " --draft-model " + Quote(small) + " --policy model --prompt hi");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find(small.string()), std::string::npos) << run.output;
  EXPECT_NE(run.output.find(model_dir_.string()), std::string::npos) << run.output;
  // A draft checkpoint whose tokenizer.model differs from --tokenizer.
  const fs::path other = dir_.path() / "other_tokenizer_draft";
  fs::create_directories(other);
  fs::copy_file(model_dir_ / "config.json", other / "config.json");
  fs::copy_file(model_dir_ / "model.safetensors", other / "model.safetensors");
  std::ofstream(other / "tokenizer.model") << "not the same tokenizer";
  const ProcessResult tok = RunGenerate(Base() + " --draft-model " + Quote(other) + " --policy model --prompt hi");
  EXPECT_EQ(tok.exit_code, 1) << tok.output;
  EXPECT_NE(tok.output.find("tokenizer"), std::string::npos) << tok.output;
}

// The same documents as one index and as a shard set of two shards: greedy
// generation drafts identically (same steps and verified tokens, same output).
TEST_F(WithTokenizer, AShardSetDraftsAsTheSingleIndex) {
  const auto tokenizer = sam::indexer::Tokenizer::Load(tokenizer_path_.string());
  std::vector<std::vector<uint32_t>> docs;
  for (const char* text : {"The quick brown fox jumps over the lazy dog.",
                           "A quick brown fox jumps over the lazy cat. The quick brown fox.",
                           "The lazy dog sleeps; the quick brown fox jumps again and again."}) {
    docs.push_back({tokenizer.bos_id()});
    tokenizer.Encode(text, &docs.back());
  }
  sam::automaton::IndexInfo info;
  info.tokenizer_sha256 = tokenizer.sha256();
  info.bos_id = tokenizer.bos_id();
  info.eos_id = tokenizer.eos_id();
  const fs::path single = dir_.path() / "single.sam";
  sam::automaton::BuildIndexFile(docs, tokenizer.vocab_size(), single.string(), info);
  sam::format::ShardSetManifest manifest;
  manifest.tokenizer_sha256 = tokenizer.sha256();
  manifest.vocab_size = tokenizer.vocab_size();
  for (const auto& [begin, end] : {std::pair<size_t, size_t>{0, 1}, {1, 3}}) {
    const fs::path shard = dir_.path() / ("set." + std::to_string(begin) + ".sam");
    const auto w = sam::automaton::BuildIndexFile(
        std::vector<std::vector<uint32_t>>(docs.begin() + begin, docs.begin() + end),
        tokenizer.vocab_size(), shard.string(), info);
    manifest.shards.push_back({shard.filename().string(), w.file_bytes,
                               sam::format::Sha256File(shard.string()), w.tokens, w.documents,
                               w.states});
  }
  const fs::path set = dir_.path() / "set.samset";
  sam::format::WriteShardSetManifest(set.string(), manifest);
  for (const std::string policy : {"sam", "sam-tree"}) {
    nlohmann::json out[2];
    for (int k = 0; k < 2; ++k) {
      const ProcessResult run = RunGenerate(
          Base() + " --index " + Quote(k ? set : single) + " --policy " + policy +
              " --prompt 'The quick brown fox' --max-new-tokens 16 --json",
          /*merge_stderr=*/false);
      ASSERT_EQ(run.exit_code, 0) << policy << ": " << run.output;
      out[k] = nlohmann::json::parse(run.output);
    }
    EXPECT_EQ(out[1]["output_ids"], out[0]["output_ids"]) << policy;
    EXPECT_EQ(out[1]["steps"], out[0]["steps"]) << policy;
    EXPECT_EQ(out[1]["verified_tokens"], out[0]["verified_tokens"]) << policy;
  }
  fs::remove(dir_.path() / "set.1.sam");
  const ProcessResult missing = RunGenerate(Base() + " --index " + Quote(set) + " --prompt hi");
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_NE(missing.output.find("set.1.sam"), std::string::npos) << missing.output;
}

TEST_F(WithTokenizer, RefusesAnIndexOfAnotherTokenizer) {
  const fs::path index = dir_.path() / "raw.sam";  // built from raw ids: no fingerprint
  sam::automaton::BuildIndexFile({{1, 5, 6, 7}}, 32000, index.string());
  const ProcessResult run = RunGenerate(Base() + " --index " + Quote(index) + " --prompt hi");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("tokenizer"), std::string::npos) << run.output;
}

TEST_F(WithTokenizer, RefusesAVocabularyMismatch) {
  const fs::path small = dir_.path() / "small_model";
  ASSERT_EQ(RunRandomModel("--out " + Quote(small) + " --vocab 100").exit_code, 0);
  const ProcessResult run = RunGenerate("--model " + Quote(small) + " --tokenizer " + Quote(tokenizer_path_) +
                              " --prompt hi");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("vocabulary size mismatch"), std::string::npos) << run.output;
}

// A copy of the model whose config.json allows only `positions` positions.
fs::path ModelWithPositions(const fs::path& model, const fs::path& dir, int64_t positions) {
  fs::create_directories(dir);
  fs::copy_file(model / "model.safetensors", dir / "model.safetensors");
  std::ifstream in(model / "config.json");
  nlohmann::json config = nlohmann::json::parse(in);
  config["max_position_embeddings"] = positions;
  std::ofstream(dir / "config.json") << config.dump();
  return dir;
}

TEST_F(WithTokenizer, RefusesAPromptLongerThanTheModelsPositions) {
  const fs::path short_model = ModelWithPositions(model_dir_, dir_.path() / "short", 8);
  const std::string prompt = "one two three four five six seven eight nine ten";
  const auto tokenizer = sam::indexer::Tokenizer::Load(tokenizer_path_.string());
  std::vector<uint32_t> ids{tokenizer.bos_id()};
  tokenizer.Encode(prompt, &ids);  // the raw template: the prompt as written
  ASSERT_GT(ids.size(), 8u);
  const std::string args = "--model " + Quote(short_model) + " --tokenizer " + Quote(tokenizer_path_);
  const ProcessResult run = RunGenerate(args + " --prompt '" + prompt + "'");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(run.output.rfind("sam-generate: ", 0), 0u) << run.output;
  EXPECT_NE(run.output.find("is " + std::to_string(ids.size()) + " tokens long"), std::string::npos)
      << run.output;
  EXPECT_NE(run.output.find("at most 8 positions (max_position_embeddings"), std::string::npos)
      << run.output;

  // A prompt that fits: the new tokens are capped at what is left, with a note.
  std::vector<uint32_t> short_ids{tokenizer.bos_id()};
  tokenizer.Encode("one two", &short_ids);
  ASSERT_LT(short_ids.size(), 8u);
  const ProcessResult fits = RunGenerate(args + " --prompt 'one two' --max-new-tokens 100 --json");
  ASSERT_EQ(fits.exit_code, 0) << fits.output;
  EXPECT_NE(fits.output.find("--max-new-tokens lowered from 100 to " +
                             std::to_string(8 - short_ids.size())),
            std::string::npos)
      << fits.output;
  const nlohmann::json j = nlohmann::json::parse(fits.output.substr(fits.output.find('{')));
  EXPECT_EQ(j["prompt_tokens"].get<size_t>(), short_ids.size());
  EXPECT_LE(j["new_tokens"].get<size_t>(), 8 - short_ids.size());
}

TEST_F(WithTokenizer, ReadsAFifoPromptFileAsAStream) {
  const fs::path fifo = dir_.path() / "prompt.fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string prompt = "The quick brown fox";
  std::thread writer([&] {
    const int fd = ::open(fifo.c_str(), O_WRONLY);  // waits for sam-generate to open it
    if (fd < 0) return;
    for (const char c : prompt) ASSERT_EQ(::write(fd, &c, 1), 1);  // in pieces, like a pipe
    ::close(fd);
  });
  const ProcessResult run = RunGenerate(Base() + " --prompt-file " + Quote(fifo) +
                                            " --max-new-tokens 2 --json",
                                        /*merge_stderr=*/false);
  // Should sam-generate have failed before opening the FIFO, this open releases the writer.
  const int unblock = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  writer.join();
  if (unblock >= 0) ::close(unblock);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const auto tokenizer = sam::indexer::Tokenizer::Load(tokenizer_path_.string());
  std::vector<uint32_t> ids{tokenizer.bos_id()};
  tokenizer.Encode(prompt, &ids);  // the raw template: the prompt as written
  EXPECT_EQ(nlohmann::json::parse(run.output)["prompt_tokens"].get<size_t>(), ids.size());
}

TEST_F(WithTokenizer, RefusesADirectoryAsPromptFileAndAFileAsModel) {
  const ProcessResult dir = RunGenerate(Base() + " --prompt-file " + Quote(dir_.path()));
  EXPECT_EQ(dir.exit_code, 2) << dir.output;
  EXPECT_NE(dir.output.find("sam-generate: --prompt-file " + dir_.path().string() + " is a directory"),
            std::string::npos)
      << dir.output;
  const ProcessResult file = RunGenerate("--model " + Quote(model_dir_ / "config.json") +
                                         " --tokenizer " + Quote(tokenizer_path_) + " --prompt hi");
  EXPECT_EQ(file.exit_code, 1) << file.output;
  EXPECT_NE(file.output.find("config.json is not a directory"), std::string::npos) << file.output;
}

TEST_F(WithTokenizer, RefusesAMissingModelDirectory) {
  const ProcessResult run = RunGenerate("--model " + Quote(dir_.path() / "nowhere") + " --tokenizer " +
                              Quote(tokenizer_path_) + " --prompt hi");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_NE(run.output.find("does not exist"), std::string::npos) << run.output;
  const ProcessResult bad_policy = RunGenerate(Base() + " --prompt hi --policy bogus");
  EXPECT_EQ(bad_policy.exit_code, 2) << bad_policy.output;
}

}  // namespace

namespace {

// A tiny byte-level tokenizer.json (the 256 byte characters, merges "t h" and "th e", BOS and
// EOS as added tokens); `extra_merge` adds "a n", which changes the fingerprint, not the size.
std::string TinyTokenizerJson(bool extra_merge) {
  nlohmann::json vocab = nlohmann::json::object();
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    const uint32_t cp = printable ? b : next++;
    std::string utf8;
    if (cp < 0x80) {
      utf8.push_back(static_cast<char>(cp));
    } else {
      utf8.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      utf8.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    vocab[utf8] = b;
  }
  vocab["th"] = 256;
  vocab["the"] = 257;
  vocab["an"] = 258;
  nlohmann::json merges = {"t h", "th e"};
  if (extra_merge) merges.push_back("a n");
  const auto added = [](uint32_t id, const char* content) {
    return nlohmann::json{{"id", id}, {"content", content}, {"special", true}, {"lstrip", false},
                          {"rstrip", false}, {"normalized", false}, {"single_word", false}};
  };
  return nlohmann::json{
      {"version", "1.0"},
      {"added_tokens", {added(259, "<s>"), added(260, "</s>")}},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"post_processor",
       {{"type", "TemplateProcessing"},
        {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}}}}},
      {"decoder", {{"type", "ByteLevel"}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}}}}
      .dump();
}

void WriteText(const fs::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

}  // namespace

// sam-generate with a Hugging Face tokenizer.json: taken from the model folder when --tokenizer
// is absent, checked against an index's fingerprint, and refused when the folder's differs.
TEST(SamGenerateCli, TokenizerJsonFromTheModelFolder) {
  TempDir dir;
  const fs::path tokenizer = dir.path() / "tiny.json", other = dir.path() / "other.json";
  WriteText(tokenizer, TinyTokenizerJson(false));
  WriteText(other, TinyTokenizerJson(true));
  const fs::path model = dir.path() / "model";
  const ProcessResult made = RunRandomModel("--out " + Quote(model) + " --tokenizer " +
                                         Quote(tokenizer) + " --layers 1 --hidden 32");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  EXPECT_NE(made.output.find("vocab 261"), std::string::npos) << made.output;
  fs::copy_file(tokenizer, model / "tokenizer.json");

  const auto tok = sam::indexer::Tokenizer::Load(tokenizer.string());
  std::vector<uint32_t> doc{tok.bos_id()};
  ASSERT_EQ(tok.bos_id(), 259u);
  tok.Encode("the cat and the dog, the end", &doc);
  sam::automaton::IndexInfo info;
  info.tokenizer_sha256 = tok.sha256();
  info.bos_id = tok.bos_id();
  const fs::path index = dir.path() / "tiny.sam";
  sam::automaton::BuildIndexFile({doc}, tok.vocab_size(), index.string(), info);

  const ProcessResult run = RunGenerate("--model " + Quote(model) + " --index " + Quote(index) +
                                            " --prompt 'the cat' --max-new-tokens 6 --json",
                                        /*merge_stderr=*/false);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json j = nlohmann::json::parse(run.output);
  EXPECT_TRUE(j["text"].is_string());
  EXPECT_EQ(j["text"].get<std::string>(), tok.Decode(j["output_ids"].get<std::vector<uint32_t>>()));

  const ProcessResult mismatch = RunGenerate("--model " + Quote(model) + " --tokenizer " +
                                             Quote(other) + " --prompt 'the cat' --max-new-tokens 2");
  EXPECT_EQ(mismatch.exit_code, 1) << mismatch.output;
  EXPECT_NE(mismatch.output.find("tokenizer.json differs from the tokenizer"), std::string::npos)
      << mismatch.output;
  WriteText(model / "tokenizer.json", TinyTokenizerJson(true));
  const ProcessResult wrong_index = RunGenerate("--model " + Quote(model) + " --index " +
                                                Quote(index) + " --prompt 'the cat' --max-new-tokens 2");
  EXPECT_EQ(wrong_index.exit_code, 1) << wrong_index.output;
  EXPECT_NE(wrong_index.output.find("tokenizer"), std::string::npos) << wrong_index.output;
}
