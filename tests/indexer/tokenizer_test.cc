// sam::indexer::Tokenizer on tiny SentencePiece models trained here with spm_train (no data
// folder). The same file is built twice: against the direct backend (tokenizer_test) and
// against the isolated backend that forwards to libsam_tokenizer_shim.so
// (tokenizer_isolated_test). The oracle is SentencePiece itself (SentencePieceProcessor,
// linked here for that purpose only), sha256sum, and the flags each model was trained with.
//
// Covered: the ModelProto reader that decides whether segment caching is exact (one model per
// field that forbids it), the segment cache against whole-text encoding, prompts (BOS), model
// files that are directories, devices, FIFOs without a writer (never block) and pipes.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sentencepiece_processor.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "sam/format/index.h"
#include "sam/format/sha256.h"
#include "sam/indexer/tokenizer.h"
#include "tiny_spm.h"

namespace fs = std::filesystem;

namespace {

using sam::indexer::Tokenizer;
using sam::indexer::TokenizerError;
using sam::testing::TempDir;
using sam::testing::TrainTinySpm;

class TinyModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (sam::testing::SpmTrainPath().empty()) return;
    dir_ = new TempDir();
    llama_like_ = TrainTinySpm(dir_->path(), "llama_like", sam::testing::kLlamaLikeFlags);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  void SetUp() override {
    if (sam::testing::SpmTrainPath().empty()) GTEST_SKIP() << "spm_train was not found by CMake";
  }

  static std::unique_ptr<sentencepiece::SentencePieceProcessor> OracleOf(const fs::path& model) {
    auto sp = std::make_unique<sentencepiece::SentencePieceProcessor>();
    const auto status = sp->Load(model.string());
    EXPECT_TRUE(status.ok()) << status.ToString();
    return sp;
  }
  static std::vector<uint32_t> OracleIds(const sentencepiece::SentencePieceProcessor& sp,
                                         const std::string& text) {
    std::vector<int> ids;
    EXPECT_TRUE(sp.Encode(text, &ids).ok());
    return std::vector<uint32_t>(ids.begin(), ids.end());
  }

  // Texts built like the training corpus but from another seed, plus the edge cases of
  // segmenting: empty, spaces only, leading and trailing spaces, several lines.
  static std::vector<std::string> Texts() {
    std::vector<std::string> texts = {"", " ", "   ", "a", " a", "a ", "a  ", "  a  b  ",
                                      "the the the", "x\ny\n", "\t tab", "ünïcödé ☃ 𝄞 emoji 🙂"};
    std::mt19937 rng(7);
    for (int i = 0; i < 400; ++i) {
      std::string text = sam::testing::TinyCorpusLine(rng);
      const int lines = static_cast<int>(rng() % 3);
      for (int l = 0; l < lines; ++l) text.append("\n").append(sam::testing::TinyCorpusLine(rng));
      texts.push_back(text);
    }
    return texts;
  }

  static TempDir* dir_;
  static fs::path llama_like_;
};

TempDir* TinyModel::dir_ = nullptr;
fs::path TinyModel::llama_like_;

TEST_F(TinyModel, ReaderFindsCachingExactForALlamaLikeModel) {
  const Tokenizer tok = Tokenizer::Load(llama_like_.string());
  const auto sp_owned = OracleOf(llama_like_);
  const auto& sp = *sp_owned;
  EXPECT_TRUE(tok.segment_cache_exact());
  EXPECT_EQ(tok.vocab_size(), static_cast<uint32_t>(sp.GetPieceSize()));
  EXPECT_EQ(tok.bos_id(), static_cast<uint32_t>(sp.bos_id()));
  EXPECT_EQ(tok.eos_id(), static_cast<uint32_t>(sp.eos_id()));
  EXPECT_EQ(tok.path(), llama_like_.string());
  const std::vector<std::string> pieces = tok.Pieces();
  ASSERT_EQ(pieces.size(), static_cast<size_t>(sp.GetPieceSize()));
  for (int i = 0; i < sp.GetPieceSize(); ++i) EXPECT_EQ(pieces[i], sp.IdToPiece(i)) << i;
}

TEST_F(TinyModel, CachedEncodingEqualsSentencePiece) {
  const Tokenizer tok = Tokenizer::Load(llama_like_.string());
  ASSERT_TRUE(tok.segment_cache_exact());
  const auto sp_owned = OracleOf(llama_like_);
  const auto& sp = *sp_owned;
  Tokenizer::Cache cache;
  for (int round = 0; round < 2; ++round) {  // the second round hits the cache everywhere
    for (const std::string& text : Texts()) {
      const std::vector<uint32_t> expected = OracleIds(sp, text);
      std::vector<uint32_t> cached{99}, whole{99};  // Encode appends
      tok.Encode(text, &cached, &cache);
      tok.Encode(text, &whole);
      cached.erase(cached.begin());
      whole.erase(whole.begin());
      EXPECT_EQ(cached, expected) << "'" << text << "'";
      EXPECT_EQ(whole, expected) << "'" << text << "'";
    }
  }
  EXPECT_GT(cache.hits, 0u);
  EXPECT_GT(cache.misses, 0u);
}

TEST_F(TinyModel, EncodePromptPutsBosFirstWhenTheModelHasOne) {
  const auto sp_owned = OracleOf(llama_like_);
  const auto& sp = *sp_owned;
  const Tokenizer tok = Tokenizer::Load(llama_like_.string());
  std::vector<uint32_t> ids;
  tok.EncodePrompt("the quick fox\n", &ids);
  std::vector<uint32_t> expected{static_cast<uint32_t>(sp.bos_id())};
  for (uint32_t id : OracleIds(sp, "the quick fox\n")) expected.push_back(id);
  EXPECT_EQ(ids, expected);

  const fs::path no_bos = TrainTinySpm(dir_->path(), "no_bos", sam::testing::kLlamaLikeFlags +
                                                                    " --bos_id=-1");
  const Tokenizer tok2 = Tokenizer::Load(no_bos.string());
  EXPECT_EQ(tok2.bos_id(), sam::format::kNoToken);
  std::vector<uint32_t> ids2;
  tok2.EncodePrompt("the quick fox\n", &ids2);
  EXPECT_EQ(ids2, OracleIds(*OracleOf(no_bos), "the quick fox\n"));
}

TEST_F(TinyModel, DecodeEqualsSentencePiece) {
  const auto sp_owned = OracleOf(llama_like_);
  const auto& sp = *sp_owned;
  const Tokenizer tok = Tokenizer::Load(llama_like_.string());
  for (const std::string& text : Texts()) {
    const std::vector<uint32_t> ids = OracleIds(sp, text);
    std::string expected;
    ASSERT_TRUE(sp.Decode(std::vector<int>(ids.begin(), ids.end()), &expected).ok());
    EXPECT_EQ(tok.Decode(ids), expected);
  }
}

TEST_F(TinyModel, Sha256IsTheModelFilesSha256sum) {
  const Tokenizer tok = Tokenizer::Load(llama_like_.string());
  const std::string expected = sam::testing::Sha256sumOf(llama_like_);
  ASSERT_EQ(expected.size(), 64u);
  EXPECT_EQ(sam::format::DigestToHex(tok.sha256()), expected);
}

// One model per ModelProto field that makes segment caching inexact; the reader must see each.
struct InexactCase {
  const char* name;
  std::string flags;
};

class InexactModel : public TinyModel, public ::testing::WithParamInterface<InexactCase> {};

TEST_P(InexactModel, ReaderTurnsCachingOffAndEncodingStaysExact) {
  const InexactCase& c = GetParam();
  const bool inside = std::string(c.name) == "whitespace_inside_pieces";
  std::string phrases;  // BPE merges across the spaces of recurring phrases
  for (int i = 0; inside && i < 3000; ++i)
    phrases += i % 2 ? "hello world of the day\n" : "in the end of the world\n";
  const fs::path model = TrainTinySpm(dir_->path(), c.name, c.flags, phrases);
  const auto sp_owned = OracleOf(model);
  const auto& sp = *sp_owned;
  if (inside) {
    // Precondition: the model really has a piece with the marker after another character.
    bool found = false;
    for (int i = 0; i < sp.GetPieceSize() && !found; ++i) {
      const std::string p = sp.IdToPiece(i);
      for (size_t k = p.find("\xe2\x96\x81", 1); k != std::string::npos && !found;
           k = p.find("\xe2\x96\x81", k + 1))
        found = p.compare(k - 3, 3, "\xe2\x96\x81") != 0;
    }
    ASSERT_TRUE(found) << "the model trained without whitespace splitting has no such piece";
  }
  const Tokenizer tok = Tokenizer::Load(model.string());
  EXPECT_FALSE(tok.segment_cache_exact()) << c.flags;
  Tokenizer::Cache cache;
  for (const std::string& text : Texts()) {
    std::vector<uint32_t> ids;
    tok.Encode(text, &ids, &cache);
    EXPECT_EQ(ids, OracleIds(sp, text)) << c.name << ": '" << text << "'";
  }
  EXPECT_EQ(cache.hits + cache.misses, 0u);  // the cache was not used
}

const std::string kBpeIdentity =
    "--model_type=bpe --normalization_rule_name=identity --byte_fallback=true ";

INSTANTIATE_TEST_SUITE_P(
    Fields, InexactModel,
    ::testing::Values(
        InexactCase{"unigram",  // TrainerSpec.model_type
                    "--model_type=unigram --normalization_rule_name=identity "
                    "--remove_extra_whitespaces=false --byte_fallback=true"},
        InexactCase{"nfkc",  // NormalizerSpec.name and precompiled_charsmap
                    "--model_type=bpe --normalization_rule_name=nmt_nfkc "
                    "--remove_extra_whitespaces=false --byte_fallback=true"},
        InexactCase{"remove_extra_whitespaces", kBpeIdentity + "--remove_extra_whitespaces=true"},
        InexactCase{"no_dummy_prefix",
                    kBpeIdentity + "--remove_extra_whitespaces=false --add_dummy_prefix=false"},
        InexactCase{"whitespace_as_suffix", kBpeIdentity +
                                                "--remove_extra_whitespaces=false "
                                                "--treat_whitespace_as_suffix=true"},
        InexactCase{"whitespace_inside_pieces",
                    kBpeIdentity + "--remove_extra_whitespaces=false --split_by_whitespace=false"}),
    [](const ::testing::TestParamInfo<InexactCase>& info) { return std::string(info.param.name); });

// ------------------------------------------------------------------ model files

std::string LoadError(const std::string& path) {
  try {
    Tokenizer::Load(path);
  } catch (const TokenizerError& e) {
    return e.what();
  }
  return "(loaded)";
}

TEST_F(TinyModel, DirectoryIsRefusedByName) {
  const std::string error = LoadError(dir_->path().string());
  EXPECT_NE(error.find(dir_->path().string()), std::string::npos) << error;
  EXPECT_NE(error.find("is a directory"), std::string::npos) << error;
}

TEST_F(TinyModel, DeviceMissingAndEmptyFilesAreRefusedByName) {
  std::string error = LoadError("/dev/null");
  EXPECT_NE(error.find("/dev/null: is a character device"), std::string::npos) << error;
  const std::string missing = (dir_->path() / "missing.model").string();
  error = LoadError(missing);
  EXPECT_NE(error.find(missing + ": cannot open"), std::string::npos) << error;
  EXPECT_NE(error.find("No such file"), std::string::npos) << error;
  const fs::path empty = dir_->path() / "empty.model";
  std::ofstream(empty).close();
  error = LoadError(empty.string());
  EXPECT_NE(error.find(empty.string() + ": empty file"), std::string::npos) << error;
  const fs::path junk = dir_->path() / "junk.model";
  std::ofstream(junk) << "not a model";
  error = LoadError(junk.string());
  EXPECT_NE(error.find(junk.string() + ": not a SentencePiece model"), std::string::npos) << error;
}

TEST_F(TinyModel, FifoWithoutWriterIsRefusedWithoutBlocking) {
  const fs::path fifo = dir_->path() / "fifo.model";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto load = std::async(std::launch::async, [&] { return LoadError(fifo.string()); });
  // A guard against a hang, not a speed check: a blocked open() is released by opening the
  // write end, so that the test fails instead of hanging.
  if (load.wait_for(std::chrono::seconds(60)) == std::future_status::timeout) {
    const int fd = open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) close(fd);
    load.wait();
    FAIL() << "Tokenizer::Load blocked on a FIFO without a writer";
  }
  const std::string error = load.get();
  EXPECT_NE(error.find(fifo.string() + ": empty stream"), std::string::npos) << error;
}

TEST_F(TinyModel, PipeWithAWriterIsReadAsAStream) {
  std::string bytes;
  {
    std::ifstream in(llama_like_, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_FALSE(bytes.empty());
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::thread writer([&] {
    for (size_t at = 0; at < bytes.size();) {
      const ssize_t n = write(fds[1], bytes.data() + at, bytes.size() - at);
      if (n <= 0) break;
      at += static_cast<size_t>(n);
    }
    close(fds[1]);
  });
  const std::string path = "/proc/self/fd/" + std::to_string(fds[0]);  // like bash's <(cat m)
  std::string error;
  try {
    const Tokenizer tok = Tokenizer::Load(path);
    EXPECT_EQ(sam::format::DigestToHex(tok.sha256()), sam::testing::Sha256sumOf(llama_like_));
    EXPECT_EQ(tok.vocab_size(), Tokenizer::Load(llama_like_.string()).vocab_size());
  } catch (const TokenizerError& e) {
    error = e.what();
  }
  writer.join();
  close(fds[0]);
  EXPECT_EQ(error, "");
}

}  // namespace
