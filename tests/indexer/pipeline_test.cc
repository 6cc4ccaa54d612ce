// The tokenizer (segment cache against plain SentencePiece) and the whole
// build pipeline, on fixtures written here and on ../shared/data when present.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

#include "sam/corpora/corpora.h"
#include "sam/format/index.h"
#include "sam/format/sha256.h"
#include "sam/indexer/pipeline.h"
#include "sam/indexer/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using sam::indexer::BuildConfig;
using sam::indexer::BuildError;
using sam::indexer::Tokenizer;

fs::path DataDir() {
  const char* env = std::getenv("SAM_DATA_DIR");
  return env ? fs::path(env) : fs::path(SAM_DEFAULT_DATA_DIR);
}
fs::path ModelPath() { return DataDir() / "tokenizer/llama-32k.model"; }

#define REQUIRE_DATA()                                                                 \
  if (!fs::exists(ModelPath()))                                                        \
  GTEST_SKIP() << "data folder " << DataDir()                                          \
               << " not present (set SAM_DATA_DIR); skipping the real-data test"

class PipelineTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("sam-pipeline-test-" + std::to_string(::getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string WriteFile(const std::string& name, const std::string& content) {
    const auto p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  fs::path dir_;
};

TEST_F(PipelineTest, SegmentCacheEqualsPlainSentencePiece) {
  REQUIRE_DATA();
  const Tokenizer tok = Tokenizer::Load(ModelPath().string());
  ASSERT_TRUE(tok.segment_cache_exact()) << "the LLaMA model should allow segment caching";
  EXPECT_EQ(tok.vocab_size(), 32000u);
  EXPECT_EQ(tok.bos_id(), 1u);
  EXPECT_EQ(tok.eos_id(), 2u);
  std::vector<std::string> texts = {
      "", " ", "  ", "a", " a", "a ", "a  ", "  a  b  ", "hello world", "\thello\n  world\n",
      "    return x  # comment", "12345 abc 3.14159", "emoji \xF0\x9F\x98\x80 and CJK \xE4\xB8\xAD\xE6\x96\x87",
      "trailing spaces   ", "x\xC2\xA0y", "def f():\n    if a:\n        return [1, 2]\n", "a\r\nb"};
  // Real documents: every GSM8K test question and answer, HumanEval code, Alpaca.
  auto add = [&](const char* kind, const fs::path& p, size_t limit) {
    if (!fs::exists(p)) return;
    size_t n = 0;
    sam::corpora::ReadCorpus(sam::corpora::ParseKind(kind), p.string(), {},
                             [&](std::string&& d) {
                               if (n++ < limit) texts.push_back(std::move(d));
                             });
  };
  add("gsm8k", DataDir() / "gsm8k/test.jsonl", 100000);
  add("alpaca", DataDir() / "alpaca/alpaca_data.json", 3000);
  add("alpaca", DataDir() / "code_alpaca/code_alpaca_2k.json", 100000);
  if (fs::exists(DataDir() / "humaneval/HumanEval.jsonl")) {
    sam::corpora::ReadOptions o;
    o.text_field = "canonical_solution";
    sam::corpora::ReadCorpus(sam::corpora::Kind::kJsonl, (DataDir() / "humaneval/HumanEval.jsonl").string(), o,
                             [&](std::string&& d) { texts.push_back(std::move(d)); });
  }
  ASSERT_GT(texts.size(), 4000u);
  Tokenizer::Cache cache;
  for (int pass = 0; pass < 2; ++pass)  // the second pass is served from the cache
    for (const auto& t : texts) {
      std::vector<uint32_t> fast, plain;
      tok.Encode(t, &fast, &cache);
      tok.Encode(t, &plain, nullptr);
      ASSERT_EQ(fast, plain) << "text: [" << t << "]";
    }
  EXPECT_GT(cache.hits, cache.misses);
}

TEST_F(PipelineTest, TokenizerLoadErrorsNameTheFile) {
  try {
    Tokenizer::Load((dir_ / "missing.model").string());
    FAIL();
  } catch (const sam::indexer::TokenizerError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.model"), std::string::npos);
  }
  const auto junk = WriteFile("junk.model", "this is not a model");
  EXPECT_THROW(Tokenizer::Load(junk), sam::indexer::TokenizerError);
}

TEST_F(PipelineTest, BuildsFromFixtureWithRealTokenizer) {
  REQUIRE_DATA();
  const auto alpaca = WriteFile(
      "alpaca.json",
      R"([{"instruction":"Add two numbers.","input":"2 and 3","output":"2 + 3 = 5"},
          {"instruction":"Say hi.","input":"","output":"Hi there!"}])");
  const auto gsm = WriteFile("gsm.jsonl",
                             "{\"question\":\"What is 1+1?\",\"answer\":\"1+1 = 2\\n#### 2\"}\n");
  BuildConfig cfg;
  cfg.tokenizer_path = ModelPath().string();
  cfg.corpora = {{"alpaca", alpaca}, {"gsm8k", gsm}};
  cfg.output_path = (dir_ / "out.sam").string();
  cfg.tool_version = "test";
  const auto rep = sam::indexer::BuildIndex(cfg);
  EXPECT_EQ(rep.documents, 3u);
  sam::format::OpenOptions o;
  o.verify = true;
  o.expected_tokenizer_sha256 = sam::format::Sha256File(ModelPath().string());
  const auto f = sam::format::IndexFile::Open(cfg.output_path, o);
  const auto& v = f.view();
  EXPECT_EQ(v.num_tokens(), rep.tokens);
  EXPECT_EQ(f.header().num_documents, 3u);
  // The text is BOS + the tokenized rendering of each record + separator.
  const Tokenizer tok = Tokenizer::Load(ModelPath().string());
  std::vector<uint32_t> expect;
  for (const char* doc : {"Add two numbers.\n2 and 3\n2 + 3 = 5", "Say hi.\nHi there!",
                          "What is 1+1?\n1+1 = 2\n#### 2"}) {
    expect.push_back(1);
    tok.Encode(doc, &expect);
    expect.push_back(v.separator());
  }
  ASSERT_EQ(expect.size(), v.num_tokens());
  for (uint64_t p = 1; p <= v.num_tokens(); ++p) ASSERT_EQ(v.Token(p), expect[p - 1]);
  const auto meta = f.ReadMetadata();
  ASSERT_EQ(meta.corpora.size(), 2u);
  EXPECT_EQ(meta.corpora[0].kind, "alpaca");
  EXPECT_EQ(meta.corpora[0].records, 2u);
  EXPECT_EQ(meta.corpora[0].source_sha256, sam::format::DigestToHex(sam::format::Sha256File(alpaca)));
  EXPECT_EQ(meta.corpora[1].documents, 1u);
  EXPECT_EQ(f.ReadVocabulary().size(), 32000u);
}

TEST_F(PipelineTest, IdsCorpusWithoutTokenizer) {
  const auto ids = WriteFile("ids.jsonl", "[1, 5, 7]\n[5, 7, 9]\n");
  BuildConfig cfg;
  cfg.corpora = {{"ids", ids}};
  cfg.output_path = (dir_ / "ids.sam").string();
  EXPECT_THROW(sam::indexer::BuildIndex(cfg), BuildError);  // no vocab size
  cfg.vocab_size = 10;
  const auto rep = sam::indexer::BuildIndex(cfg);
  EXPECT_EQ(rep.tokens, 8u);
  const auto f = sam::format::IndexFile::Open(cfg.output_path);
  const auto& v = f.view();
  const uint64_t s = v.Next(v.Next(sam::format::kRoot, 5), 7);
  EXPECT_EQ(v.Count(s), 2u);
  EXPECT_FALSE(f.header().has_tokenizer());
  cfg.vocab_size = 8;  // id 9 is out of range
  cfg.output_path = (dir_ / "bad.sam").string();
  try {
    sam::indexer::BuildIndex(cfg);
    FAIL();
  } catch (const BuildError& e) {
    EXPECT_NE(std::string(e.what()).find("ids.jsonl"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(cfg.output_path));
}

TEST_F(PipelineTest, MalformedRecordsFailOrAreSkipped) {
  REQUIRE_DATA();
  const auto bad = WriteFile("bad.jsonl",
                             "{\"question\":\"q1\",\"answer\":\"a1\"}\n{\"question\":\"q2\"}\n");
  BuildConfig cfg;
  cfg.tokenizer_path = ModelPath().string();
  cfg.corpora = {{"gsm8k", bad}};
  cfg.output_path = (dir_ / "bad.sam").string();
  try {
    sam::indexer::BuildIndex(cfg);
    FAIL();
  } catch (const BuildError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("bad.jsonl"), std::string::npos) << m;
    EXPECT_NE(m.find("2"), std::string::npos) << m;  // the line
  }
  EXPECT_FALSE(fs::exists(cfg.output_path));
  cfg.skip_bad = true;
  const auto rep = sam::indexer::BuildIndex(cfg);
  ASSERT_EQ(rep.corpora.size(), 1u);
  EXPECT_EQ(rep.corpora[0].skipped, 1u);
  EXPECT_EQ(rep.documents, 1u);
}

TEST_F(PipelineTest, BadConfigurationsAreRefused) {
  BuildConfig cfg;
  cfg.output_path = (dir_ / "x.sam").string();
  EXPECT_THROW(sam::indexer::BuildIndex(cfg), BuildError);  // no corpus
  cfg.corpora = {{"nosuchkind", "x"}};
  EXPECT_ANY_THROW(sam::indexer::BuildIndex(cfg));
  cfg.corpora = {{"gsm8k", (dir_ / "absent.jsonl").string()}};
  cfg.tokenizer_path = (dir_ / "absent.model").string();
  try {
    sam::indexer::BuildIndex(cfg);
    FAIL();
  } catch (const BuildError& e) {
    EXPECT_NE(std::string(e.what()).find("absent"), std::string::npos) << e.what();
  }
}

TEST_F(PipelineTest, RealCorpusIndexAnswersLikeBruteForce) {
  REQUIRE_DATA();
  // GSM8K train with the real tokenizer; then spot-check random substrings of
  // the tokenized documents against a brute-force count over the same ids.
  BuildConfig cfg;
  cfg.tokenizer_path = ModelPath().string();
  cfg.corpora = {{"gsm8k", (DataDir() / "gsm8k/test.jsonl").string()}};
  cfg.output_path = (dir_ / "gsm.sam").string();
  const auto rep = sam::indexer::BuildIndex(cfg);
  sam::format::OpenOptions o;
  o.verify = true;
  const auto f = sam::format::IndexFile::Open(cfg.output_path, o);
  const auto& v = f.view();
  EXPECT_EQ(f.header().num_documents, 1319u);
  std::vector<uint32_t> text(v.num_tokens());
  for (uint64_t p = 1; p <= v.num_tokens(); ++p) text[p - 1] = v.Token(p);
  std::mt19937 rng(9);
  for (int q = 0; q < 200; ++q) {
    const uint64_t start = rng() % text.size();
    size_t len = 1 + rng() % 8;
    std::vector<uint32_t> pat;
    for (size_t k = 0; k < len && start + k < text.size() && text[start + k] != v.separator(); ++k)
      pat.push_back(text[start + k]);
    if (pat.empty()) continue;
    uint64_t count = 0, first = 0;
    for (size_t i = 0; i + pat.size() <= text.size(); ++i)
      if (std::equal(pat.begin(), pat.end(), text.begin() + i)) {
        ++count;
        if (!first) first = i + pat.size();
      }
    uint64_t s = sam::format::kRoot;
    for (uint32_t t : pat) s = v.Next(s, t);
    ASSERT_NE(s, sam::format::kNoState);
    ASSERT_EQ(v.Count(s), count);
    ASSERT_EQ(v.MinEndpos(s), first);
  }
  EXPECT_LT(static_cast<double>(rep.file_bytes) / rep.tokens, 16.0);
}

}  // namespace
