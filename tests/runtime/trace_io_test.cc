// The tools' trace reader (tools/trace_io.h) throws sam::Error naming the file, the line and the
// field of a bad trace. Traces of ids need no tokenizer, so no data folder is needed.
#include "trace_io.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "sam/error.h"

namespace {

namespace fs = std::filesystem;
using sam::ErrorCode;

class TraceIoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("sam-trace-io-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& content) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }

  // Reads `path` (vocab 100, BOS 1, no tokenizer); it must throw a sam::Error, returned.
  static sam::Error ReadError(const std::string& path) {
    try {
      sam::tools::ReadTraces(path, nullptr, 1, 100);
    } catch (const sam::Error& e) {
      return e;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "not a sam::Error: " << e.what();
      return sam::Error(ErrorCode::kOk, "");
    }
    ADD_FAILURE() << "nothing thrown";
    return sam::Error(ErrorCode::kOk, "");
  }

  fs::path dir_;
};

constexpr char kGood[] = R"({"prompt_ids": [1, 5], "output_ids": [6, 7]})";

TEST_F(TraceIoTest, GoodTracesRead) {
  const auto traces = sam::tools::ReadTraces(Write("ok.jsonl", std::string(kGood) + "\n"), nullptr,
                                             1, 100);
  ASSERT_EQ(traces.size(), 1u);
  EXPECT_EQ(traces[0].output, (std::vector<uint32_t>{6, 7}));
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

}  // namespace
