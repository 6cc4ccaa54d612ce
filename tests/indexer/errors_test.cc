// The indexer's errors are sam::Errors: the builder names the document, the pipeline keeps the code
// and context of the error that stopped the build and adds the corpus file. No data folder needed.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <type_traits>
#include <vector>

#include "sam/error.h"
#include "sam/automaton/builder.h"
#include "sam/indexer/pipeline.h"
#include "sam/indexer/tokenizer.h"
#include "temp_dir.h"
#include "thrown.h"

namespace {

namespace fs = std::filesystem;
using sam::ErrorCode;
using sam::testing::Thrown;

class IndexerErrorsTest : public ::testing::Test {
 protected:
  std::string WriteFile(const std::string& name, const std::string& content) {
    const fs::path p = dir_ / name;
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }

  sam::testing::TempDir tmp_{"sam_indexer_errors"};
  const fs::path dir_ = tmp_.path();
};

TEST_F(IndexerErrorsTest, ErrorTypesAreTheOneFamily) {
  static_assert(std::is_base_of_v<sam::Error, sam::indexer::BuildError>);
  static_assert(std::is_base_of_v<sam::Error, sam::indexer::TokenizerError>);
  EXPECT_EQ(sam::indexer::BuildError("bad flag").code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(sam::indexer::TokenizerError("bad model").code(), ErrorCode::kTokenizer);
}

TEST_F(IndexerErrorsTest, BuilderNamesTheDocument) {
  sam::automaton::SuffixAutomatonBuilder builder(10);
  builder.AddDocument(std::vector<uint32_t>{1, 2, 3});
  builder.AddDocument(std::vector<uint32_t>{4});
  const sam::Error e =
      Thrown([&] { builder.AddDocument(std::vector<uint32_t>{1, 2, 10, 3}); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(e.context().record, "document 2");  // 0-based: the third document added
  EXPECT_EQ(e.problem(), "token id 10 at position 2 is not below the vocab size 10");
  EXPECT_STREQ(e.what(), "document 2: token id 10 at position 2 is not below the vocab size 10");
}

TEST_F(IndexerErrorsTest, BuilderWriteWithoutDocumentsNamesTheOutput) {
  const std::string out = (dir_ / "empty.sam").string();
  sam::automaton::SuffixAutomatonBuilder builder(10);
  const sam::Error e = Thrown([&] { builder.Write(out, {}); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(e.context().file, out);
  EXPECT_FALSE(fs::exists(out));
}

TEST_F(IndexerErrorsTest, TokenizerLoadErrorsHaveCodeAndFile) {
  const std::string missing = (dir_ / "missing.model").string();
  const sam::Error absent = Thrown([&] { sam::indexer::Tokenizer::Load(missing); });
  EXPECT_EQ(absent.code(), ErrorCode::kIo);
  EXPECT_EQ(absent.context().file, missing);
  const std::string junk = WriteFile("junk.model", "this is not a model");
  const sam::Error bad = Thrown([&] { sam::indexer::Tokenizer::Load(junk); });
  EXPECT_EQ(bad.code(), ErrorCode::kTokenizer);
  EXPECT_EQ(bad.context().file, junk);
}

TEST_F(IndexerErrorsTest, BuildIndexKeepsTheCauseCodeAndContext) {
  sam::indexer::BuildConfig cfg;
  cfg.output_path = (dir_ / "out.sam").string();
  // No corpus: a configuration error.
  EXPECT_EQ(Thrown([&] { sam::indexer::BuildIndex(cfg); }).code(), ErrorCode::kInvalidArgument);

  // A token id outside the vocabulary on line 2 of an ids corpus: the corpus error's code, file,
  // line, not a generic build error.
  const std::string ids = WriteFile("ids.jsonl", "[1, 5, 7]\n[5, 7, 9]\n");
  cfg.corpora = {{"ids", ids}};
  cfg.vocab_size = 8;
  const sam::Error bad_id = Thrown([&] { sam::indexer::BuildIndex(cfg); });
  EXPECT_EQ(bad_id.code(), ErrorCode::kBadValue) << bad_id.what();
  EXPECT_EQ(bad_id.context().file, ids);
  EXPECT_EQ(bad_id.context().record, "line 2");
  EXPECT_FALSE(fs::exists(cfg.output_path));
  try {
    sam::indexer::BuildIndex(cfg);
  } catch (const sam::indexer::BuildError& e) {  // still a BuildError, as documented
    EXPECT_EQ(e.code(), ErrorCode::kBadValue);
  }

  // An output path that is a directory: an I/O error naming it.
  cfg.vocab_size = 10;
  cfg.output_path = dir_.string();
  const sam::Error directory = Thrown([&] { sam::indexer::BuildIndex(cfg); });
  EXPECT_EQ(directory.code(), ErrorCode::kIo) << directory.what();
  EXPECT_EQ(directory.context().file, dir_.string());
  cfg.output_path = (dir_ / "out.sam").string();

  // A tokenizer that cannot be read: its code and file.
  cfg.tokenizer_path = (dir_ / "absent.model").string();
  cfg.vocab_size = 0;
  cfg.corpora = {{"gsm8k", WriteFile("g.jsonl", "{\"question\": \"q\", \"answer\": \"a\"}\n")}};
  const sam::Error no_tokenizer = Thrown([&] { sam::indexer::BuildIndex(cfg); });
  EXPECT_EQ(no_tokenizer.code(), ErrorCode::kIo);
  EXPECT_EQ(no_tokenizer.context().file, cfg.tokenizer_path);
}

}  // namespace
