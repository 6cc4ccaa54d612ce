// sam::Error, the one exception family: stable code names, how the context is rendered, and the
// format library's errors caught as sam::Error with their code and file.
#include "sam/error.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "sam/format/error.h"
#include "sam/format/file_checks.h"
#include "sam/format/index.h"
#include "sam/format/writer.h"
#include "temp_dir.h"
#include "thrown.h"

namespace {

namespace fs = std::filesystem;
using sam::ErrorCode;
using sam::testing::Thrown;
using sam::ErrorContext;

// The published value -> name table. A code's value and name never change: programs and scripts
// compare them. Append rows for new codes; never edit one.
const std::vector<std::pair<int, std::string>> kStableNames = {
    {0, "ok"},
    {1, "io"},
    {2, "truncated"},
    {3, "bad-magic"},
    {4, "bad-byte-order"},
    {5, "unsupported-version"},
    {6, "unknown-required-feature"},
    {7, "bad-header"},
    {8, "bad-section-table"},
    {9, "overlapping-sections"},
    {10, "checksum-mismatch"},
    {11, "self-test-failed"},
    {12, "corrupt-structure"},
    {13, "tokenizer-mismatch"},
    {14, "invalid-argument"},
    {15, "compression"},
    {16, "invalid-json"},
    {17, "bad-record"},
    {18, "bad-value"},
    {19, "tokenizer"},
    {20, "capacity"},
    {21, "bad-checkpoint"},
    {22, "bad-model-config"},
    {23, "missing-tensor"},
    {24, "shape-mismatch"},
    {25, "dtype"},
    {26, "usage"},
    {27, "internal"},
};

TEST(ErrorCodeTest, NamesAreStable) {
  for (const auto& [value, name] : kStableNames)
    EXPECT_EQ(sam::ErrorCodeName(static_cast<ErrorCode>(value)), name) << "code " << value;
  // The table covers every code, and nothing past the last is a code.
  EXPECT_EQ(static_cast<int>(kStableNames.size()), static_cast<int>(sam::kLastErrorCode) + 1);
  EXPECT_EQ(sam::ErrorCodeName(static_cast<ErrorCode>(static_cast<int>(sam::kLastErrorCode) + 1)),
            "unknown");
  EXPECT_EQ(sam::ErrorCodeName(static_cast<ErrorCode>(-1)), "unknown");
}

TEST(ErrorCodeTest, NamesAreDistinct) {
  std::set<std::string> names;
  for (const auto& [value, name] : kStableNames) EXPECT_TRUE(names.insert(name).second) << name;
}

TEST(ErrorCodeTest, FormerEnumsAreTheOneEnum) {
  static_assert(std::is_same_v<sam::format::ErrorCode, sam::ErrorCode>);
  // Values of the former format::ErrorCode keep their meaning.
  EXPECT_EQ(static_cast<int>(sam::format::ErrorCode::kTokenizerMismatch), 13);
  EXPECT_EQ(static_cast<int>(sam::format::ErrorCode::kCompression), 15);
}

TEST(ErrorTest, RendersTheContextInOrder) {
  const sam::Error full(ErrorCode::kBadRecord,
                        {.file = "data/a.json", .section = "META", .record = "record 3",
                         .field = "output"},
                        "missing");
  EXPECT_STREQ(full.what(), "data/a.json: section META: record 3: field 'output': missing");
  EXPECT_EQ(full.code(), ErrorCode::kBadRecord);
  EXPECT_EQ(full.context().file, "data/a.json");
  EXPECT_EQ(full.context().section, "META");
  EXPECT_EQ(full.context().record, "record 3");
  EXPECT_EQ(full.context().field, "output");
  EXPECT_EQ(full.problem(), "missing");

  const sam::Error partial(ErrorCode::kBadValue, {.file = "t.jsonl", .record = "line 7"}, "bad");
  EXPECT_STREQ(partial.what(), "t.jsonl: line 7: bad");
  const sam::Error field_only(ErrorCode::kBadValue, {.field = "top_k"}, "must be positive");
  EXPECT_STREQ(field_only.what(), "field 'top_k': must be positive");
  const sam::Error none(ErrorCode::kInvalidArgument, ErrorContext{}, "no corpus given");
  EXPECT_STREQ(none.what(), "no corpus given");
}

TEST(ErrorTest, PlainMessageHasNoContext) {
  const sam::Error e(ErrorCode::kInvalidArgument, "x.sam: already says where");
  EXPECT_STREQ(e.what(), "x.sam: already says where");
  EXPECT_TRUE(e.context().empty());
  EXPECT_EQ(e.problem(), "x.sam: already says where");
}

TEST(ErrorTest, WithContextFillsOnlyTheEmptyParts) {
  const sam::Error inner(ErrorCode::kCapacity, {.record = "document 4"}, "too long");
  const sam::Error outer = inner.WithContext({.file = "c.jsonl", .record = "document 9"});
  EXPECT_EQ(outer.code(), ErrorCode::kCapacity);
  EXPECT_STREQ(outer.what(), "c.jsonl: document 4: too long");
  EXPECT_STREQ(inner.what(), "document 4: too long");  // the original is unchanged
}

TEST(ErrorTest, CopiesDoNotThrowAndKeepEverything) {
  static_assert(std::is_nothrow_copy_constructible_v<sam::Error>);
  static_assert(std::is_base_of_v<std::runtime_error, sam::Error>);
  const sam::Error e(ErrorCode::kIo, {.file = "f"}, "cannot open");
  const sam::Error copy = e;
  EXPECT_STREQ(copy.what(), e.what());
  EXPECT_EQ(copy.code(), ErrorCode::kIo);
  EXPECT_EQ(copy.context().file, "f");
}

TEST(ErrorTest, SubclassesAreCaughtAsTheBase) {
  static_assert(std::is_base_of_v<sam::Error, sam::format::FormatError>);
  try {
    throw sam::format::FormatError(ErrorCode::kBadHeader, {.file = "h.sam"}, "bad");
  } catch (const sam::Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kBadHeader);
    EXPECT_STREQ(e.what(), "h.sam: bad");
  }
}

class FormatErrorContextTest : public ::testing::Test {
 protected:
  sam::testing::TempDir tmp_{"sam_error_test"};
  const fs::path dir_ = tmp_.path();
};

TEST_F(FormatErrorContextTest, OpenNamesTheFile) {
  const std::string missing = (dir_ / "missing.sam").string();
  const sam::Error absent = Thrown([&] { sam::format::IndexFile::Open(missing); });
  EXPECT_EQ(absent.code(), ErrorCode::kIo);
  EXPECT_EQ(absent.context().file, missing);
  EXPECT_EQ(std::string(absent.what()).rfind(missing + ": ", 0), 0u) << absent.what();

  const std::string short_file = (dir_ / "short.sam").string();
  std::ofstream(short_file, std::ios::binary) << "\x89SAM..";  // the magic's start, then nothing
  const sam::Error truncated = Thrown([&] { sam::format::IndexFile::Open(short_file); });
  EXPECT_EQ(truncated.code(), ErrorCode::kTruncated);
  EXPECT_EQ(truncated.context().file, short_file);
  EXPECT_NE(std::string(truncated.what()).find("short.sam: "), std::string::npos);
}

TEST_F(FormatErrorContextTest, WriterNamesTheFile) {
  const std::string path = (dir_ / "no-such-dir" / "out.sam").string();
  const sam::Error e = Thrown([&] { sam::format::IndexWriter writer(path); });
  EXPECT_EQ(e.code(), ErrorCode::kIo);
  EXPECT_EQ(e.context().file, path);
}

// The opener of every file a tool reads whole (sam-generate's config.json and
// safetensors shards, cache files, cost curves): a directory at the path is
// said to be one, under the file's name and label, never parsed or mapped.
TEST_F(FormatErrorContextTest, OpeningADirectorySaysIsADirectory) {
  for (const std::string name : {"config.json", "model.safetensors"}) {
    const std::string path = (dir_ / name).string();
    fs::create_directory(path);
    const sam::Error e = Thrown([&] { sam::format::OpenRegularFile(path, "model config"); });
    EXPECT_EQ(e.code(), ErrorCode::kIo);
    EXPECT_EQ(e.context().file, path);
    EXPECT_NE(std::string(e.what()).find(path + ": model config is a directory, not a file"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
