// One prompt becomes the same ids in every tool: sam-traces renders it into a trace, sam-replay
// (`--print-prompt-ids` shows what the replay feeds the drafters) and sam-generate
// (`--print-prompt-ids` shows what it feeds the model), for both templates. The expected ids
// are derived independently: BOS, then SentencePiece's encoding of the text each template
// defines (sam-traces' raw traces: the prompt and a newline, as raw documents put one before
// the response; sam-generate's raw: the text exactly as written, the newline only with
// --append-newline; vicuna: FastChat's v1.1 prompt), written out here rather than taken from
// the library.
//
// SAM_REPLAY_PATH, SAM_TRACES_PATH, SAM_GENERATE_PATH (empty without torch) and SAM_SPM_TRAIN are set by CMake.
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tiny_spm.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

using sam::testing::RunCommand;
using sam::testing::ShellQuote;
using sam::testing::TempDir;

const char* kVicunaSystem =
    "A chat between a curious user and an artificial intelligence assistant. The assistant "
    "gives helpful, detailed, and polite answers to the user's questions.";

class PromptIds : public ::testing::Test {
 protected:
  void SetUp() override {
    if (sam::testing::SpmTrainPath().empty()) GTEST_SKIP() << "spm_train was not found by CMake";
    model_ = sam::testing::TrainTinySpm(dir_.path(), "m", sam::testing::kLlamaLikeFlags);
    ASSERT_TRUE(sp_.Load(model_.string()).ok());
    // A data folder laid out as sam-traces reads it: one GSM8K question, one HumanEval prompt.
    fs::create_directories(dir_.path() / "data" / "gsm8k");
    fs::create_directories(dir_.path() / "data" / "humaneval");
    std::ofstream(dir_.path() / "data" / "gsm8k" / "test.jsonl")
        << json{{"question", prompts_[0]}, {"answer", "the answer is 42"}}.dump() << "\n";
    std::ofstream(dir_.path() / "data" / "humaneval" / "HumanEval.jsonl")
        << json{{"task_id", "HumanEval/0"}, {"prompt", prompts_[1]},
                {"canonical_solution", "    return x\n"}}.dump()
        << "\n";
  }

  std::vector<uint32_t> Expected(const std::string& rendered) {
    std::vector<int> ids;
    EXPECT_TRUE(sp_.Encode(rendered, &ids).ok());
    std::vector<uint32_t> out{static_cast<uint32_t>(sp_.bos_id())};
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  }

  // trace id -> prompt ids, as sam-replay feeds them.
  std::map<std::string, std::vector<uint32_t>> ReplayIds(const std::string& templ) {
    const fs::path traces = dir_.path() / ("traces_" + templ + ".jsonl");
    const auto made = RunCommand(ShellQuote(SAM_TRACES_PATH) + " --data " +
                                 ShellQuote((dir_.path() / "data").string()) + " --out " +
                                 ShellQuote(traces.string()) + " --template " + templ + " 2>&1");
    EXPECT_EQ(made.exit_code, 0) << made.output;
    const auto printed = RunCommand(ShellQuote(SAM_REPLAY_PATH) + " --traces " +
                                    ShellQuote(traces.string()) + " --tokenizer " +
                                    ShellQuote(model_.string()) + " --print-prompt-ids");
    EXPECT_EQ(printed.exit_code, 0) << printed.output;
    std::map<std::string, std::vector<uint32_t>> ids;
    std::istringstream lines(printed.output);
    for (std::string line; std::getline(lines, line);) {
      const json j = json::parse(line);
      ids[j.at("id").get<std::string>()] = j.at("prompt_ids").get<std::vector<uint32_t>>();
    }
    return ids;
  }

  std::vector<uint32_t> GenerateIds(const std::string& prompt, const std::string& templ,
                                    const std::string& flags = "") {
    const fs::path file = dir_.path() / "prompt.txt";
    std::ofstream(file, std::ios::binary) << prompt;
    const auto printed = RunCommand(ShellQuote(SAM_GENERATE_PATH) + " --tokenizer " +
                                    ShellQuote(model_.string()) + " --prompt-file " +
                                    ShellQuote(file.string()) + " --template " + templ +
                                    " " + flags + " --print-prompt-ids");
    EXPECT_EQ(printed.exit_code, 0) << printed.output;
    return json::parse(printed.output).get<std::vector<uint32_t>>();
  }

  TempDir dir_;
  fs::path model_;
  sentencepiece::SentencePieceProcessor sp_;
  // A question with inner and trailing spaces; a code prompt that ends with a newline.
  const std::vector<std::string> prompts_ = {"What is  6 times 7? Answer briefly. ",
                                             "def f(x):\n    \"\"\"Return x.\"\"\"\n"};
  const std::vector<std::string> trace_ids_ = {"gsm8k/1", "HumanEval/0"};
};

TEST_F(PromptIds, RawTracesAddANewlineSamGenerateSendsTheTextAsWritten) {
  auto replay = ReplayIds("raw");
  ASSERT_EQ(replay.size(), 2u);
  for (size_t i = 0; i < prompts_.size(); ++i)
    EXPECT_EQ(replay[trace_ids_[i]], Expected(prompts_[i] + "\n")) << trace_ids_[i];
  if (std::string(SAM_GENERATE_PATH).empty()) GTEST_SKIP() << "sam-generate is not built (torch off)";
  for (size_t i = 0; i < prompts_.size(); ++i) {
    // sam-generate sends a raw prompt as written; the separator is asked for explicitly.
    EXPECT_EQ(GenerateIds(prompts_[i], "raw"), Expected(prompts_[i])) << trace_ids_[i];
    EXPECT_EQ(GenerateIds(prompts_[i], "raw", "--append-newline"), replay[trace_ids_[i]])
        << trace_ids_[i];
  }
  const auto refused = RunCommand(ShellQuote(SAM_GENERATE_PATH) + " --tokenizer " +
                                  ShellQuote(model_.string()) +
                                  " --prompt x --template vicuna --append-newline"
                                  " --print-prompt-ids 2>&1");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("--append-newline needs --template raw"), std::string::npos)
      << refused.output;
}

TEST_F(PromptIds, VicunaPromptIsFastChatsV11Prompt) {
  auto replay = ReplayIds("vicuna");
  ASSERT_EQ(replay.size(), 2u);
  for (size_t i = 0; i < prompts_.size(); ++i)
    EXPECT_EQ(replay[trace_ids_[i]],
              Expected(std::string(kVicunaSystem) + " USER: " + prompts_[i] + " ASSISTANT:"))
        << trace_ids_[i];
  if (std::string(SAM_GENERATE_PATH).empty()) GTEST_SKIP() << "sam-generate is not built (torch off)";
  for (size_t i = 0; i < prompts_.size(); ++i)
    EXPECT_EQ(GenerateIds(prompts_[i], "vicuna"), replay[trace_ids_[i]]) << trace_ids_[i];
}

}  // namespace
