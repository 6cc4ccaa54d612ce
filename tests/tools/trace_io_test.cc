// sam::tools::ReadTraces (sam-replay, bench_step): string fields go through the one tokenizer
// (prompts with Tokenizer::EncodePrompt, outputs with Encode), id fields are taken as given, and
// a tokenization failure names the file and line. The tokenizer is a tiny model trained here;
// SentencePiece itself is the oracle.
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "sam/format/index.h"
#include "sam/indexer/tokenizer.h"
#include "tiny_spm.h"
#include "trace_io.h"

namespace fs = std::filesystem;

namespace {

using sam::testing::TempDir;

fs::path WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string ErrorOf(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ReadTraces, TokenizationFailureNamesFileAndLine) {
  TempDir dir;
  const fs::path traces = WriteFile(dir.path() / "t.jsonl",
                                    "{\"prompt\": \"fine\", \"output\": \"fine\"}\n"
                                    "\n"
                                    "{\"prompt\": \"fine\", \"output\": \"bad text\"}\n");
  const sam::tools::FieldEncoder encode = [](std::string_view text, bool, std::vector<uint32_t>* out) {
    if (text == "bad text") throw std::runtime_error("the encoder refused it");
    out->push_back(5);
  };
  const std::string error =
      ErrorOf([&] { sam::tools::ReadTraces(traces.string(), encode, 1, 100); });
  EXPECT_NE(error.find(traces.string() + ": line 3: field 'output': tokenization failed: the encoder refused it"),
            std::string::npos)
      << error;
}

TEST(ReadTraces, StringFieldsWithoutATokenizerNameFileAndLine) {
  TempDir dir;
  const fs::path traces = WriteFile(dir.path() / "t.jsonl", "{\"prompt\": \"a\", \"output\": \"b\"}\n");
  const std::string error = ErrorOf(
      [&] { sam::tools::ReadTraces(traces.string(), static_cast<const sam::indexer::Tokenizer*>(nullptr), 1, 100); });
  EXPECT_NE(error.find(traces.string() + ": line 1: field 'prompt': string \"prompt\" needs --tokenizer"), std::string::npos)
      << error;
}

TEST(ReadTraces, TinyModelEncodesPromptsWithBosAndOutputsWithout) {
  if (sam::testing::SpmTrainPath().empty()) GTEST_SKIP() << "spm_train was not found by CMake";
  TempDir dir;
  const fs::path model = sam::testing::TrainTinySpm(dir.path(), "m", sam::testing::kLlamaLikeFlags);
  sentencepiece::SentencePieceProcessor sp;
  ASSERT_TRUE(sp.Load(model.string()).ok());
  auto oracle = [&](const std::string& text) {
    std::vector<int> ids;
    EXPECT_TRUE(sp.Encode(text, &ids).ok());
    return std::vector<uint32_t>(ids.begin(), ids.end());
  };
  const auto tok = sam::indexer::Tokenizer::Load(model.string());
  const fs::path traces = WriteFile(
      dir.path() / "t.jsonl",
      "{\"id\": \"s\", \"prompt\": \"the quick fox\\n\", \"output\": \" jumps over\"}\n"
      "{\"id\": \"i\", \"prompt_ids\": [7, 8], \"output_ids\": [9]}\n"
      "{\"id\": \"empty\", \"prompt\": \"x\", \"output\": \"\"}\n");
  const auto read = sam::tools::ReadTraces(traces.string(), &tok, tok.bos_id(), tok.vocab_size());
  ASSERT_EQ(read.size(), 2u);  // the trace with an empty output is skipped
  std::vector<uint32_t> prompt{static_cast<uint32_t>(sp.bos_id())};
  for (uint32_t id : oracle("the quick fox\n")) prompt.push_back(id);
  EXPECT_EQ(read[0].id, "s");
  EXPECT_EQ(read[0].prompt, prompt);
  EXPECT_EQ(read[0].output, oracle(" jumps over"));
  EXPECT_EQ(read[1].prompt, (std::vector<uint32_t>{static_cast<uint32_t>(sp.bos_id()), 7, 8}));
  EXPECT_EQ(read[1].output, (std::vector<uint32_t>{9}));

  // No BOS is invented when there is none.
  const auto no_bos = sam::tools::ReadTraces(traces.string(), &tok, sam::format::kNoToken,
                                             tok.vocab_size());
  EXPECT_EQ(no_bos[1].prompt, (std::vector<uint32_t>{7, 8}));
}

}  // namespace
