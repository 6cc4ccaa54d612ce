// The tokenizer (segment cache against plain SentencePiece) and the whole
// build pipeline, on fixtures written here and on ../shared/data when present.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <new>
#include <random>
#include <thread>

#include "sam/corpora/corpora.h"
#include "sam/format/index.h"
#include "sam/format/sha256.h"
#include "sam/error.h"
#include "sam/indexer/pipeline.h"
#include "sam/indexer/tokenizer.h"
#include "sam/runtime/response_cache.h"
#include "same_automaton.h"
#include "temp_dir.h"

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
  std::string WriteFile(const std::string& name, const std::string& content) {
    const auto p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << content;
    return p;
  }
  // A tokenizer model for tests that need one but no data folder: a tiny BPE
  // model (byte fallback, 300 pieces) trained here with spm_train; the shared
  // LLaMA model when spm_train is unavailable; "" when neither is.
  std::string TinyModel() {
    std::string text;
    std::mt19937 rng(3);
    const char* words[] = {"alpha", "beta", "gamma", "delta", "the", "question", "answer",
                           "sum", "of", "two", "numbers", "is", "what", "x", "=", "1", "2"};
    for (int line = 0; line < 300; ++line) {
      for (int w = 0; w < 12; ++w) text += std::string(w ? " " : "") + words[rng() % 17];
      text += "\n";
    }
    const std::string corpus = WriteFile("spm_corpus.txt", text);
    const std::string prefix = (dir_ / "tiny").string();
    const std::string command = "spm_train --input=" + corpus + " --model_prefix=" + prefix +
                                " --vocab_size=300 --model_type=bpe --byte_fallback=true "
                                "--minloglevel=2 > /dev/null 2>&1";
    if (std::system(command.c_str()) == 0 && fs::exists(prefix + ".model"))
      return prefix + ".model";
    return fs::exists(ModelPath()) ? ModelPath().string() : "";
  }
  // `n` gsm8k records "q<i>" / "a<i>" as JSONL.
  std::string Gsm8kRecords(int n) {
    std::string jsonl;
    for (int i = 0; i < n; ++i)
      jsonl += "{\"question\":\"what is the sum of " + std::to_string(i) +
               "\",\"answer\":\"alpha beta " + std::to_string(i) + "\"}\n";
    return jsonl;
  }
  sam::testing::TempDir tmp_{"sam_pipeline_test"};
  const fs::path dir_ = tmp_.path();
};

#define REQUIRE_MODEL(model)                                                        \
  if ((model).empty()) GTEST_SKIP() << "neither spm_train nor the data folder's model is " \
                                       "available; skipping"

// Runs `build`, expects a BuildError whose message contains every one of `parts`.
void ExpectBuildError(const std::function<void()>& build,
                      std::initializer_list<std::string> parts) {
  try {
    build();
    ADD_FAILURE() << "no BuildError thrown";
  } catch (const BuildError& e) {
    for (const auto& part : parts)
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "message '" << e.what() << "' lacks '" << part << "'";
  }
}

// The token sequence of the index at `path`.
std::vector<uint32_t> IndexTokens(const std::string& path) {
  const auto f = sam::format::IndexFile::Open(path);
  std::vector<uint32_t> text;
  for (uint64_t p = 1; p <= f.view().num_tokens(); ++p) text.push_back(f.view().Token(p));
  return text;
}

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

// `cache` corpora: a response cache saved by the runtime (ResponseCache::Save)
// indexes one tenant's responses, oldest first, as an `ids` corpus of the same
// responses does (the oracle), with the tokenizer recorded; every refusal
// names the file and leaves no output.
TEST_F(PipelineTest, CacheCorpusEqualsIdsOfTheTenantsResponses) {
  const std::string model = TinyModel();
  REQUIRE_MODEL(model);
  const Tokenizer tok = Tokenizer::Load(model);
  std::mt19937 rng(11);
  sam::runtime::ResponseCache cache(size_t{64} << 20);
  std::map<std::string, std::vector<std::vector<uint32_t>>> by_tenant;
  for (int i = 0; i < 60; ++i) {
    const std::string tenant = i % 3 == 0 ? "team-b" : "team-a";
    std::vector<uint32_t> r(1 + rng() % 20);
    for (uint32_t& t : r) t = 3 + rng() % 12;  // few distinct ids: repeats, branching states
    ASSERT_TRUE(cache.Insert(tenant, r));
    by_tenant[tenant].push_back(r);
  }
  const std::string saved = (dir_ / "server.samc").string();
  cache.Save(saved, tok.sha256());

  for (const auto& [tenant, responses] : by_tenant) {
    std::string jsonl;
    for (const auto& r : responses) {
      jsonl += "[";
      for (size_t k = 0; k < r.size(); ++k) {
        if (k > 0) jsonl += ',';
        jsonl += std::to_string(r[k]);
      }
      jsonl += "]\n";
    }
    BuildConfig ids;
    ids.tokenizer_path = model;
    ids.corpora = {{"ids", WriteFile(tenant + ".jsonl", jsonl)}};
    ids.output_path = (dir_ / (tenant + "-ids.sam")).string();
    sam::indexer::BuildIndex(ids);
    BuildConfig from_cache;
    from_cache.tokenizer_path = model;
    from_cache.corpora = {{"cache", saved}};
    from_cache.cache_tenant = tenant;
    from_cache.output_path = (dir_ / (tenant + "-cache.sam")).string();
    const auto rep = sam::indexer::BuildIndex(from_cache);
    EXPECT_EQ(rep.corpora.at(0).documents, responses.size());
    ASSERT_NO_FATAL_FAILURE(sam::testing::ExpectSameAutomaton(
        sam::format::IndexFile::Open(ids.output_path).view(),
        sam::format::IndexFile::Open(from_cache.output_path).view()));
    EXPECT_EQ(sam::format::IndexFile::Open(from_cache.output_path).header().tokenizer_sha256,
              tok.sha256());
  }

  auto refused = [&](BuildConfig cfg, std::initializer_list<std::string> parts) {
    cfg.output_path = (dir_ / "refused.sam").string();
    ExpectBuildError([&] { sam::indexer::BuildIndex(cfg); }, parts);
    EXPECT_FALSE(fs::exists(cfg.output_path));
  };
  BuildConfig cfg;
  cfg.tokenizer_path = model;
  cfg.corpora = {{"cache", saved}};
  // Two tenants and none chosen; an unknown tenant: both list the tenants.
  refused(cfg, {"server.samc", "2 tenants", "--cache-tenant", "'team-a', 'team-b'"});
  cfg.cache_tenant = "team-c";
  refused(cfg, {"server.samc", "no tenant 'team-c'", "'team-a', 'team-b'"});
  // A cache saved with another tokenizer.
  cfg.cache_tenant = "team-a";
  sam::format::Sha256Digest other = tok.sha256();
  other[0] ^= 1;
  const std::string foreign = (dir_ / "foreign.samc").string();
  cache.Save(foreign, other);
  cfg.corpora = {{"cache", foreign}};
  refused(cfg, {"foreign.samc", "saved with tokenizer"});
  try {
    cfg.output_path = (dir_ / "refused.sam").string();
    sam::indexer::BuildIndex(cfg);
  } catch (const BuildError& e) {
    EXPECT_EQ(e.code(), sam::ErrorCode::kTokenizerMismatch);
  }
  // No tokenizer.
  BuildConfig no_tok;
  no_tok.vocab_size = 100;
  no_tok.corpora = {{"cache", saved}};
  refused(no_tok, {"cache corpora need --tokenizer", "server.samc"});
  // An id outside the vocabulary.
  sam::runtime::ResponseCache wide(size_t{1} << 20);
  ASSERT_TRUE(wide.Insert("t", std::vector<uint32_t>{3, 4, tok.vocab_size()}));
  const std::string big = (dir_ / "big.samc").string();
  wide.Save(big, tok.sha256());
  cfg.corpora = {{"cache", big}};
  cfg.cache_tenant = "";
  const std::string big_id = std::to_string(tok.vocab_size());
  refused(cfg, {"big.samc", std::string("response 1 holds id ").append(big_id),
                "vocabulary"});
  // A truncated file, and a file that is no cache at all.
  std::string bytes;
  {
    std::ifstream in(saved, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  cfg.corpora = {{"cache", WriteFile("cut.samc", bytes.substr(0, bytes.size() - 5))}};
  refused(cfg, {"cut.samc"});
  cfg.corpora = {{"cache", WriteFile("not.samc", "[1, 2, 3]\n")}};
  refused(cfg, {"not.samc"});
}

TEST_F(PipelineTest, MalformedRecordsFailOrAreSkipped) {
  const std::string model = TinyModel();
  REQUIRE_MODEL(model);
  const auto bad = WriteFile("bad.jsonl",
                             "{\"question\":\"q1\",\"answer\":\"a1\"}\n{\"question\":\"q2\"}\n");
  BuildConfig cfg;
  cfg.tokenizer_path = model;
  cfg.corpora = {{"gsm8k", bad}};
  cfg.output_path = (dir_ / "bad.sam").string();
  try {
    sam::indexer::BuildIndex(cfg);
    FAIL();
  } catch (const BuildError& e) {
    // The corpus error, whole: file, line 2 (1-based), field and problem.
    EXPECT_EQ(std::string(e.what()), bad + ": line 2: field 'answer': missing");
  }
  EXPECT_FALSE(fs::exists(cfg.output_path));
  cfg.skip_bad = true;
  const auto rep = sam::indexer::BuildIndex(cfg);
  ASSERT_EQ(rep.corpora.size(), 1u);
  EXPECT_EQ(rep.corpora[0].skipped, 1u);
  EXPECT_EQ(rep.corpora[0].skipped_by_reason,
            (std::vector<std::pair<std::string, uint64_t>>{{"bad record", 1}}));
  EXPECT_EQ(rep.corpora[0].skip_summary,
            "skipped 1 of 2 records (bad record: 1), e.g. " + bad +
                ": line 2: field 'answer': missing");
  EXPECT_EQ(rep.documents, 1u);
}

TEST_F(PipelineTest, SkippingEveryRecordSaysWhy) {
  // 12 records, all bad: 4 invalid JSON lines, 8 records without an answer.
  std::string jsonl;
  for (int i = 0; i < 12; ++i)
    jsonl += i % 3 == 0 ? "{oops\n" : "{\"question\":\"q" + std::to_string(i) + "\"}\n";
  const auto bad = WriteFile("allbad.jsonl", jsonl);
  const auto ids = WriteFile("allbad_ids.jsonl", "[1, 99]\n[-1]\n");
  BuildConfig cfg;
  cfg.vocab_size = 10;
  cfg.corpora = {{"ids", ids}};
  cfg.skip_bad = true;
  cfg.output_path = (dir_ / "allbad.sam").string();
  // Without a tokenizer only ids can be read: both ids lines are bad values.
  try {
    sam::indexer::BuildIndex(cfg);
    FAIL();
  } catch (const BuildError& e) {
    EXPECT_EQ(std::string(e.what()),
              "the corpora contain no documents; nothing to index:\n  ids=" + ids +
                  ": 2 records, 0 documents; skipped 2 of 2 records (bad value: 2), e.g. " + ids +
                  ": line 1: element 1: value 99 is out of range (vocab size 10); " + ids +
                  ": line 2: element 0: value -1 is negative");
  }
  const std::string model = TinyModel();
  REQUIRE_MODEL(model);
  cfg.tokenizer_path = model;
  cfg.vocab_size = 0;
  cfg.corpora = {{"gsm8k", bad}};
  try {
    sam::indexer::BuildIndex(cfg);
    FAIL();
  } catch (const BuildError& e) {
    const std::string m = e.what();
    // Counts by reason, the first five examples, and how many more.
    EXPECT_NE(m.find("gsm8k=" + bad + ": 12 records, 0 documents; skipped 12 of 12 records "
                     "(invalid JSON: 4, bad record: 8), e.g. " + bad + ": line 1: invalid JSON"),
              std::string::npos) << m;
    EXPECT_NE(m.find(bad + ": line 2: field 'answer': missing; "), std::string::npos) << m;
    EXPECT_NE(m.find(bad + ": line 5: field 'answer': missing; and 7 more"), std::string::npos)
        << m;
  }
  EXPECT_FALSE(fs::exists(cfg.output_path));
}

TEST_F(PipelineTest, BadConfigurationsAreRefused) {
  BuildConfig cfg;
  cfg.output_path = (dir_ / "x.sam").string();
  EXPECT_THROW(sam::indexer::BuildIndex(cfg), BuildError);  // no corpus
  cfg.corpora = {{"nosuchkind", "x"}};
  ExpectBuildError([&] { sam::indexer::BuildIndex(cfg); },
                   {"unknown corpus kind 'nosuchkind' (valid: alpaca, python18k, gsm8k, hagrid, "
                    "jsonl, text, ids, cache)"});
  cfg.corpora = {{"gsm8k", (dir_ / "absent.jsonl").string()}};
  cfg.tokenizer_path = (dir_ / "absent.model").string();
  try {
    sam::indexer::BuildIndex(cfg);
    FAIL();
  } catch (const BuildError& e) {
    EXPECT_NE(std::string(e.what()).find("absent"), std::string::npos) << e.what();
  }
}

TEST_F(PipelineTest, EveryAcceptedKindIsListedInTheUnknownKindMessage) {
  // The oracle is the kind table: every corpora kind, ids and cache are
  // accepted, and the message for an unknown kind names each of them.
  std::vector<std::string> expected;
  for (auto kind : sam::corpora::AllKinds()) expected.emplace_back(sam::corpora::KindName(kind));
  expected.emplace_back("ids");
  expected.emplace_back("cache");
  EXPECT_EQ(sam::indexer::CorpusKindNames(), expected);
  std::string message;
  try {
    sam::indexer::CheckCorpusKind("Alpaca");
  } catch (const BuildError& e) {
    message = e.what();
  }
  for (const auto& name : expected) {
    EXPECT_NO_THROW(sam::indexer::CheckCorpusKind(name)) << name;
    EXPECT_NE(message.find(name), std::string::npos) << message << " lacks " << name;
    // BuildIndex gets past the kind check: the error is about the missing file.
    BuildConfig cfg;
    cfg.vocab_size = 10;
    cfg.tokenizer_path = "";
    cfg.corpora = {{name, (dir_ / "absent.jsonl").string()}};
    cfg.output_path = (dir_ / "k.sam").string();
    try {
      sam::indexer::BuildIndex(cfg);
      ADD_FAILURE() << name;
    } catch (const BuildError& e) {
      EXPECT_EQ(std::string(e.what()).find("unknown corpus kind"), std::string::npos) << e.what();
    }
  }
}

TEST_F(PipelineTest, IdsFromAPipeAndAFifoEqualTheFile) {
  std::string content;
  for (int i = 0; i < 20000; ++i)  // over 64 KiB: the writer blocks until the reader reads
    content.append("[").append(std::to_string(i % 7)).append(", ").append(std::to_string(i % 5))
        .append(", 9]\n");
  const auto file = WriteFile("ids.jsonl", content);
  BuildConfig cfg;
  cfg.vocab_size = 10;
  cfg.corpora = {{"ids", file}};
  cfg.output_path = (dir_ / "file.sam").string();
  const auto want = sam::indexer::BuildIndex(cfg);
  const std::vector<uint32_t> want_tokens = IndexTokens(cfg.output_path);
  auto write_all = [&](int fd) {
    for (size_t at = 0; at < content.size();) {
      const ssize_t n = ::write(fd, content.data() + at, content.size() - at);
      if (n <= 0) break;
      at += static_cast<size_t>(n);
    }
    ::close(fd);
  };
  // An anonymous pipe, named as /dev/fd/N as `<(cat f)` names it.
  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  std::thread writer(write_all, fds[1]);
  cfg.corpora = {{"ids", "/dev/fd/" + std::to_string(fds[0])}};
  cfg.output_path = (dir_ / "pipe.sam").string();
  const auto got = sam::indexer::BuildIndex(cfg);
  writer.join();
  ::close(fds[0]);
  EXPECT_EQ(got.documents, want.documents);
  EXPECT_EQ(IndexTokens(cfg.output_path), want_tokens);
  ASSERT_EQ(got.corpora.size(), 1u);
  // The hash is of the bytes read, the same as the file's.
  EXPECT_EQ(got.corpora[0].source_sha256, want.corpora[0].source_sha256);
  // A FIFO with a writer that writes once: opened once, read once.
  const std::string fifo = (dir_ / "ids.fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::thread fifo_writer([&] {
    const int fd = ::open(fifo.c_str(), O_WRONLY);
    if (fd >= 0) write_all(fd);
  });
  cfg.corpora = {{"ids", fifo}};
  cfg.output_path = (dir_ / "fifo.sam").string();
  const auto from_fifo = sam::indexer::BuildIndex(cfg);
  fifo_writer.join();
  EXPECT_EQ(IndexTokens(cfg.output_path), want_tokens);
  EXPECT_EQ(from_fifo.corpora[0].source_sha256, want.corpora[0].source_sha256);
  // A directory is refused by name; a character device is refused, not read forever.
  cfg.corpora = {{"ids", dir_.string()}};
  ExpectBuildError([&] { sam::indexer::BuildIndex(cfg); },
                   {dir_.string() + ": is a directory, expected a file"});
  cfg.corpora = {{"ids", "/dev/zero"}};
  ExpectBuildError([&] { sam::indexer::BuildIndex(cfg); },
                   {"/dev/zero: is a character device, expected a file or a pipe"});
}

TEST_F(PipelineTest, FailureInjectedMidBuildReachesTheCallerWithCorpusAndDocument) {
  const std::string model = TinyModel();
  REQUIRE_MODEL(model);
  const auto first = WriteFile("first.jsonl", Gsm8kRecords(40));
  const auto second = WriteFile("second.jsonl", Gsm8kRecords(3000));
  BuildConfig cfg;
  cfg.tokenizer_path = model;
  cfg.corpora = {{"gsm8k", first}, {"gsm8k", second}};
  cfg.threads = 3;
  cfg.max_pending_documents = 64;  // several chunks, workers busy when the failure hits
  cfg.output_path = (dir_ / "fail.sam").string();
  // A throwing builder step (standing in for the 2^31-token limit) at document 1500.
  cfg.hooks.before_add = [](size_t corpus, uint64_t document) {
    if (corpus == 1 && document == 1499) throw std::length_error("builder limit reached");
  };
  ExpectBuildError([&] { sam::indexer::BuildIndex(cfg); },
                   {second + ": document 1500 of 3000: builder limit reached"});
  cfg.hooks.before_add = [](size_t corpus, uint64_t document) {
    if (corpus == 1 && document == 10) throw std::bad_alloc();
  };
  ExpectBuildError([&] { sam::indexer::BuildIndex(cfg); },
                   {second + ": document 11 of 3000: out of memory"});
  // A failure on a tokenizer thread.
  cfg.hooks.before_add = nullptr;
  cfg.hooks.after_tokenize = [](size_t corpus, uint64_t document) {
    if (corpus == 1 && document == 2001) throw std::runtime_error("tokenizer broke");
  };
  ExpectBuildError([&] { sam::indexer::BuildIndex(cfg); },
                   {second + ": document 2002 of 3000: tokenizer broke"});
  // A sam::Error on a tokenizer thread keeps its code.
  cfg.hooks.after_tokenize = [](size_t corpus, uint64_t document) {
    if (corpus == 1 && document == 2001)
      throw sam::Error(sam::ErrorCode::kTokenizer, "encoder failed");
  };
  try {
    sam::indexer::BuildIndex(cfg);
    ADD_FAILURE() << "no error";
  } catch (const sam::indexer::BuildError& e) {
    EXPECT_EQ(e.code(), sam::ErrorCode::kTokenizer);
    EXPECT_EQ(std::string(e.what()), second + ": document 2002 of 3000: encoder failed");
  }
  // The progress callback, mid-corpus.
  cfg.hooks.after_tokenize = nullptr;
  int calls = 0;
  auto progress = [&](const sam::indexer::Progress& p) {
    if (p.stage == "construct" && p.corpus_index == 1 && ++calls == 3)
      throw std::runtime_error("progress sink closed");
  };
  ExpectBuildError([&] { sam::indexer::BuildIndex(cfg, progress); },
                   {second + ": progress callback failed after document", "progress sink closed"});
  EXPECT_EQ(calls, 3);
  // An ids corpus (built on the calling thread).
  const auto ids = WriteFile("ids.jsonl", "[1, 2]\n[3, 4]\n[5, 6]\n");
  BuildConfig ids_cfg;
  ids_cfg.vocab_size = 10;
  ids_cfg.corpora = {{"ids", ids}};
  ids_cfg.output_path = cfg.output_path;
  ids_cfg.hooks.before_add = [](size_t, uint64_t document) {
    if (document == 2) throw std::runtime_error("injected");
  };
  ExpectBuildError([&] { sam::indexer::BuildIndex(ids_cfg); },
                   {ids + ": document 3 of 3: injected"});
  EXPECT_FALSE(fs::exists(cfg.output_path));
}

TEST_F(PipelineTest, TokenizationNeverRunsMoreThanTheBoundAhead) {
  const std::string model = TinyModel();
  REQUIRE_MODEL(model);
  const auto corpus = WriteFile("many.jsonl", Gsm8kRecords(2000));
  constexpr uint64_t kBound = 8;
  BuildConfig cfg;
  cfg.tokenizer_path = model;
  cfg.corpora = {{"gsm8k", corpus}};
  cfg.threads = 4;
  cfg.max_pending_documents = kBound;
  cfg.output_path = (dir_ / "bounded.sam").string();
  // An independent count: documents tokenized minus documents given to the
  // builder, sampled at every event. The builder waits at document 0 until the
  // bound is reached, so the workers have every chance to run further ahead.
  std::mutex mu;
  std::condition_variable cv;
  uint64_t tokenized = 0, added = 0, peak = 0;
  cfg.hooks.after_tokenize = [&](size_t, uint64_t) {
    std::lock_guard<std::mutex> lock(mu);
    ++tokenized;
    peak = std::max(peak, tokenized - added);
    cv.notify_all();
  };
  cfg.hooks.before_add = [&](size_t, uint64_t document) {
    std::unique_lock<std::mutex> lock(mu);
    if (document == 0) cv.wait(lock, [&] { return tokenized >= kBound; });
    peak = std::max(peak, tokenized - added);
    ++added;
  };
  const auto rep = sam::indexer::BuildIndex(cfg);
  EXPECT_EQ(tokenized, 2000u);
  EXPECT_EQ(added, 2000u);
  EXPECT_EQ(peak, kBound);  // reached (the wait above), never exceeded
  EXPECT_EQ(rep.max_pending_documents, kBound);
  EXPECT_LE(rep.peak_pending_documents, kBound);
  EXPECT_GE(rep.peak_pending_documents, peak);
  // The same index as an unbounded single-threaded build.
  BuildConfig plain;
  plain.tokenizer_path = model;
  plain.corpora = cfg.corpora;
  plain.threads = 1;
  plain.output_path = (dir_ / "plain.sam").string();
  const auto plain_rep = sam::indexer::BuildIndex(plain);
  EXPECT_EQ(plain_rep.max_pending_documents, sam::indexer::kDefaultMaxPendingDocuments);
  EXPECT_EQ(IndexTokens(cfg.output_path), IndexTokens(plain.output_path));
  EXPECT_EQ(rep.states, plain_rep.states);
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
