// The C API's tokenizer calls (sam_tokenizer_*), through the shared library as users link it.
// Oracles: SentencePiece's own command-line tools (spm_encode, spm_decode) for ids and text;
// sam-inspect for the fingerprint an index records; sha256sum for a SentencePiece file's.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "run_command.h"
#include "sam/sam.h"
#include "temp_dir.h"
#include "tiny_spm.h"

namespace {

using sam::testing::RunCommand;
using sam::testing::ShellQuote;

// Texts with spaces, digits, punctuation, accents and CJK (byte fallback), newlines and a tab.
const std::vector<std::string> kTexts = {
    "Hello world",
    "  two leading spaces and 12345 digits, then: punctuation!?",
    "caf\xc3\xa9 na\xc3\xafve \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x99\x82",
    "def f(x):\n    return x  # tab\tend",
    "the quick brown fox jumps over the lazy dog",
};

std::vector<uint32_t> Ids(const std::string& line) {
  std::vector<uint32_t> ids;
  std::istringstream in(line);
  for (uint32_t id; in >> id;) ids.push_back(id);
  return ids;
}

class CTokenizer : public ::testing::Test {
 protected:
  void SetUp() override {
    if (sam::testing::SpmTrainPath().empty()) GTEST_SKIP() << "spm_train was not found by CMake";
    model_ = sam::testing::TrainTinySpm(dir_.path(), "llama_like", sam::testing::kLlamaLikeFlags);
    ASSERT_EQ(sam_tokenizer_open(model_.c_str(), &tok_), SAM_OK) << sam_last_error();
  }
  void TearDown() override { sam_tokenizer_free(tok_); }

  // spm_encode's ids of each line of kTexts (a line each: no text above holds a newline but one,
  // which is encoded through a file of its own).
  std::vector<uint32_t> SpmEncode(const std::string& text) {
    const auto input = dir_.path() / "in.txt";
    std::ofstream(input) << text;
    const auto r = RunCommand("spm_encode --model=" + ShellQuote(model_.string()) +
                              " --output_format=id < " + ShellQuote(input.string()));
    EXPECT_EQ(r.exit_code, 0);
    // spm_encode encodes line by line; the lines' ids joined with the newline's are the
    // text's only when the model has no newline piece, so texts with newlines compare per line.
    return Ids(r.output);
  }

  std::string SpmDecode(const std::vector<uint32_t>& ids) {
    std::string line;
    for (uint32_t id : ids) line += std::to_string(id) + " ";
    const auto input = dir_.path() / "ids.txt";
    std::ofstream(input) << line << "\n";
    const auto r = RunCommand("spm_decode --model=" + ShellQuote(model_.string()) +
                              " --input_format=id < " + ShellQuote(input.string()));
    EXPECT_EQ(r.exit_code, 0);
    std::string text = r.output;
    if (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
  }

  std::vector<uint32_t> Encode(const std::string& text, int add_bos) {
    size_t n = 0;
    EXPECT_EQ(sam_tokenizer_encode(tok_, text.data(), text.size(), add_bos, nullptr, 0, &n), SAM_OK)
        << sam_last_error();
    std::vector<uint32_t> ids(n);
    size_t again = 0;
    EXPECT_EQ(sam_tokenizer_encode(tok_, text.data(), text.size(), add_bos, ids.data(), ids.size(),
                                   &again),
              SAM_OK);
    EXPECT_EQ(again, n);
    return ids;
  }

  // Builds an index of a small text corpus with `tokenizer` (or from ids) and returns its path.
  std::filesystem::path BuildIndex(const std::string& name, const std::string& tokenizer_args) {
    const auto corpus = dir_.path() / (name + ".txt");
    std::ofstream(corpus) << "the quick brown fox\n\njumps over the lazy dog\n";
    const auto ids = dir_.path() / (name + ".jsonl");
    std::ofstream(ids) << "[1, 5, 6, 7]\n[1, 8, 9]\n";
    const auto out = dir_.path() / (name + ".sam");
    const bool from_ids = tokenizer_args.empty();
    const std::string corpus_arg = from_ids ? "ids=" + ids.string() : "text=" + corpus.string();
    const auto r = RunCommand(ShellQuote(SAM_BUILD_PATH) + " " + tokenizer_args +
                              (from_ids ? " --vocab-size 400" : " --text-split blank-line") +
                              " --corpus " + ShellQuote(corpus_arg) + " -o " +
                              ShellQuote(out.string()) + " > /dev/null 2>&1");
    EXPECT_EQ(r.exit_code, 0) << name;
    return out;
  }

  sam::testing::TempDir dir_{"capi_tokenizer"};
  std::filesystem::path model_;
  sam_tokenizer* tok_ = nullptr;
};

TEST_F(CTokenizer, EncodesAndDecodesAsSentencePiece) {
  EXPECT_EQ(sam_tokenizer_vocab_size(tok_), 400u);
  EXPECT_EQ(sam_tokenizer_bos_id(tok_), 1u);
  EXPECT_EQ(sam_tokenizer_eos_id(tok_), 2u);
  for (const std::string& text : kTexts) {
    SCOPED_TRACE(text);
    std::vector<uint32_t> expected;
    if (text.find('\n') == std::string::npos) {
      expected = SpmEncode(text);
      EXPECT_EQ(Encode(text, 0), expected);
      std::vector<uint32_t> with_bos = {1};
      with_bos.insert(with_bos.end(), expected.begin(), expected.end());
      EXPECT_EQ(Encode(text, 1), with_bos);
    }
    const std::vector<uint32_t> ids = Encode(text, 0);
    ASSERT_FALSE(ids.empty());
    size_t length = 0;
    ASSERT_EQ(sam_tokenizer_decode(tok_, ids.data(), ids.size(), nullptr, 0, &length), SAM_OK);
    std::string decoded(length + 1, '#');
    size_t again = 0;
    ASSERT_EQ(sam_tokenizer_decode(tok_, ids.data(), ids.size(), decoded.data(), decoded.size(),
                                   &again),
              SAM_OK);
    EXPECT_EQ(again, length);
    EXPECT_EQ(decoded[length], '\0');
    decoded.resize(length);
    if (text.find('\n') == std::string::npos) {
      EXPECT_EQ(decoded, SpmDecode(ids));
    }
    if (text[0] != ' ') {  // exact but for the dummy prefix's space
      EXPECT_EQ(decoded, text);
    }
  }
}

TEST_F(CTokenizer, ShortBuffersGetAPrefixAndTheFullCount) {
  const std::string text = kTexts[1];
  const std::vector<uint32_t> all = Encode(text, 1);
  ASSERT_GT(all.size(), 3u);
  std::vector<uint32_t> three(3, 0xdeadu);
  size_t n = 0;
  ASSERT_EQ(sam_tokenizer_encode(tok_, text.data(), text.size(), 1, three.data(), 3, &n), SAM_OK);
  EXPECT_EQ(n, all.size());
  EXPECT_EQ(three, std::vector<uint32_t>(all.begin(), all.begin() + 3));
  char small[4] = {'#', '#', '#', '#'};
  size_t length = 0;
  ASSERT_EQ(sam_tokenizer_decode(tok_, all.data(), all.size(), small, sizeof(small), &length),
            SAM_OK);
  EXPECT_GT(length, sizeof(small));
  EXPECT_EQ(std::string(small, 4), text.substr(0, 4));  // no NUL: it did not fit
}

TEST_F(CTokenizer, FingerprintIsWhatTheIndexRecords) {
  char hex[65];
  ASSERT_EQ(sam_tokenizer_sha256(tok_, hex), SAM_OK);
  EXPECT_EQ(std::string(hex), sam::testing::Sha256sumOf(model_));  // a .model: its bytes
  const auto index_path = BuildIndex("same", "--tokenizer " + ShellQuote(model_.string()));
  const auto inspect = RunCommand(ShellQuote(SAM_INSPECT_PATH) + " " +
                                  ShellQuote(index_path.string()));
  ASSERT_EQ(inspect.exit_code, 0);
  EXPECT_NE(inspect.output.find("(sentencepiece) sha256 " + std::string(hex)), std::string::npos)
      << inspect.output;
  sam_index* index = nullptr;
  ASSERT_EQ(sam_index_open(index_path.c_str(), hex, 0, &index), SAM_OK) << sam_last_error();
  char recorded[65];
  ASSERT_EQ(sam_index_tokenizer_sha256(index, recorded), SAM_OK);
  EXPECT_STREQ(recorded, hex);
  EXPECT_EQ(sam_tokenizer_check_index(tok_, index), SAM_OK) << sam_last_error();
  sam_index_close(index);
}

TEST_F(CTokenizer, AnotherTokenizersIndexIsRefused) {
  const auto other_model = sam::testing::TrainTinySpm(
      dir_.path(), "other", sam::testing::kLlamaLikeFlags, "other words entirely\nmore text\n");
  const auto other = BuildIndex("other", "--tokenizer " + ShellQuote(other_model.string()));
  const auto ids = BuildIndex("ids", "");
  for (const auto& path : {other, ids}) {
    SCOPED_TRACE(path.string());
    sam_index* index = nullptr;
    ASSERT_EQ(sam_index_open(path.c_str(), nullptr, 0, &index), SAM_OK) << sam_last_error();
    EXPECT_EQ(sam_tokenizer_check_index(tok_, index), SAM_ERR_TOKENIZER_MISMATCH);
    const std::string message = sam_last_error();
    EXPECT_NE(message.find(model_.string()), std::string::npos) << message;
    char recorded[65];
    ASSERT_EQ(sam_index_tokenizer_sha256(index, recorded), SAM_OK);
    if (path == ids) {
      EXPECT_STREQ(recorded, "");
      EXPECT_NE(message.find("from token ids"), std::string::npos) << message;
    } else {
      EXPECT_EQ(std::string(recorded), sam::testing::Sha256sumOf(other_model));
      EXPECT_NE(message.find(recorded), std::string::npos) << message;
    }
    sam_index_close(index);
    // The fingerprint as sam_index_open's expectation: refused at open too.
    char hex[65];
    ASSERT_EQ(sam_tokenizer_sha256(tok_, hex), SAM_OK);
    sam_index* refused = nullptr;
    EXPECT_EQ(sam_index_open(path.c_str(), hex, 0, &refused), SAM_ERR_TOKENIZER_MISMATCH);
    EXPECT_EQ(refused, nullptr);
  }
}

TEST_F(CTokenizer, BadInputIsRefusedByName) {
  const uint32_t ids[] = {5, 400, 6};
  size_t length = 0;
  char text[16];
  EXPECT_EQ(sam_tokenizer_decode(tok_, ids, 3, text, sizeof(text), &length),
            SAM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sam_last_error()).find("ids[1] = 400 is outside the vocabulary"),
            std::string::npos)
      << sam_last_error();
  size_t n = 0;
  EXPECT_EQ(sam_tokenizer_encode(nullptr, "x", 1, 0, nullptr, 0, &n), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_tokenizer_encode(tok_, "x", 1, 0, nullptr, 0, nullptr), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_tokenizer_encode(tok_, "xy", 2, 0, nullptr, 5, &n), SAM_ERR_INVALID_ARGUMENT);

  sam_tokenizer* tok = nullptr;
  const auto missing = dir_.path() / "missing.model";
  EXPECT_EQ(sam_tokenizer_open(missing.c_str(), &tok), SAM_ERR_IO);
  EXPECT_NE(std::string(sam_last_error()).find(missing.string()), std::string::npos);
  const auto garbage = dir_.path() / "garbage.model";
  std::ofstream(garbage) << "not a tokenizer at all";
  EXPECT_EQ(sam_tokenizer_open(garbage.c_str(), &tok), SAM_ERR_FORMAT);
  EXPECT_NE(std::string(sam_last_error()).find(garbage.string()), std::string::npos);
  EXPECT_EQ(tok, nullptr);
  EXPECT_EQ(sam_tokenizer_open(nullptr, &tok), SAM_ERR_INVALID_ARGUMENT);
  sam_tokenizer_free(nullptr);
  EXPECT_EQ(sam_tokenizer_vocab_size(nullptr), 0u);
}

}  // namespace
