// sam::tools::ReadTraces (tools/trace_io.h; sam-replay, bench_step): id fields are taken as given;
// string fields go through the one tokenizer (prompts with Tokenizer::EncodePrompt, outputs with
// Encode); a bad trace throws sam::Error naming the file, the line and the field, and a
// tokenization failure names the file and line. Traces of ids need no tokenizer; the tokenizer
// tests use a tiny model trained here, with SentencePiece itself as the oracle.
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "sam/error.h"
#include "sam/format/index.h"
#include "sam/indexer/tokenizer.h"
#include "thrown.h"
#include "tiny_spm.h"
#include "trace_io.h"

namespace fs = std::filesystem;

namespace {

using sam::ErrorCode;
using sam::testing::Thrown;
using sam::testing::TempDir;

fs::path WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

class TraceIoTest : public ::testing::Test {
 protected:
  std::string Write(const std::string& name, const std::string& content) {
    return WriteFile(dir_ / name, content).string();
  }

  // Reads `path` (vocab 100, BOS 1, no tokenizer); it must throw a sam::Error, returned.
  static sam::Error ReadError(const std::string& path) {
    return Thrown([&] { sam::tools::ReadTraces(path, nullptr, 1, 100); });
  }

  TempDir tmp_{"sam_trace_io_test"};
  const fs::path dir_ = tmp_.path();
};

constexpr char kGood[] = R"({"prompt_ids": [1, 5], "output_ids": [6, 7]})";

TEST_F(TraceIoTest, GoodTracesRead) {
  const auto traces = sam::tools::ReadTraces(Write("ok.jsonl", std::string(kGood) + "\n"), nullptr,
                                             1, 100);
  ASSERT_EQ(traces.size(), 1u);
  EXPECT_EQ(traces[0].output, (std::vector<uint32_t>{6, 7}));
}

TEST_F(TraceIoTest, TenantFieldIsReadAsGivenOrAsJson) {
  const std::string path = Write(
      "t.jsonl", R"({"prompt_ids": [1], "output_ids": [6], "category": "code", "team": 7})"
                 "\n"
                 R"({"prompt_ids": [1], "output_ids": [6], "category": "chat"})"
                 "\n");
  const auto traces = sam::tools::ReadTraces(path, nullptr, 1, 100, "category");
  ASSERT_EQ(traces.size(), 2u);
  EXPECT_EQ(traces[0].tenant, "code");
  EXPECT_EQ(traces[1].tenant, "chat");
  EXPECT_EQ(sam::tools::ReadTraces(path, nullptr, 1, 100)[0].tenant, "");
  const sam::Error missing = Thrown([&] { sam::tools::ReadTraces(path, nullptr, 1, 100, "team"); });
  EXPECT_EQ(missing.code(), ErrorCode::kBadRecord);
  EXPECT_EQ(missing.context().record, "line 2");
  EXPECT_EQ(missing.context().field, "team");
  const std::string first = Write("one.jsonl", R"({"prompt_ids": [1], "output_ids": [6], "team": 7})");
  EXPECT_EQ(sam::tools::ReadTraces(first, nullptr, 1, 100, "team")[0].tenant, "7");
}

TEST_F(TraceIoTest, ErrorsNameFileLineAndField) {
  const std::string path =
      Write("bad.jsonl", std::string(kGood) + "\n\n" + R"({"prompt_ids": [1], "output_ids": "x"})");
  const sam::Error mistyped = ReadError(path);
  EXPECT_EQ(mistyped.code(), ErrorCode::kBadRecord);
  EXPECT_EQ(mistyped.context().file, path);
  EXPECT_EQ(mistyped.context().record, "line 3");
  EXPECT_EQ(mistyped.context().field, "output_ids");
  EXPECT_EQ(std::string(mistyped.what()),
            path + ": line 3: field 'output_ids': must be an array of ids");

  const std::string text = Write("text.jsonl", R"({"prompt": "hi", "output": "there"})");
  const sam::Error needs_tokenizer = ReadError(text);
  EXPECT_EQ(needs_tokenizer.context().record, "line 1");
  EXPECT_EQ(needs_tokenizer.context().field, "prompt");

  const std::string broken = Write("broken.jsonl", std::string(kGood) + "\n{\"prompt_ids\": [1,\n");
  const sam::Error invalid = ReadError(broken);
  EXPECT_EQ(invalid.code(), ErrorCode::kInvalidJson);
  EXPECT_EQ(invalid.context().record, "line 2");

  const std::string range = Write("range.jsonl", R"({"prompt_ids": [1], "output_ids": [100]})");
  const sam::Error out_of_range = ReadError(range);
  EXPECT_EQ(out_of_range.code(), ErrorCode::kBadValue);
  EXPECT_NE(std::string(out_of_range.what()).find("range.jsonl: line 1: token id 100"),
            std::string::npos)
      << out_of_range.what();

  const std::string missing = (dir_ / "missing.jsonl").string();
  const sam::Error absent = ReadError(missing);
  EXPECT_EQ(absent.code(), ErrorCode::kIo);
  EXPECT_EQ(absent.context().file, missing);
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
