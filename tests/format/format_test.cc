// Round trips of the index format and golden error cases: each damaged file
// must fail with its specific error code, never crash.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <thread>

#include "sam/format/huge_buffer.h"
#include "sam/format/index.h"
#include "sam/format/sections.h"
#include "sam/format/sha256.h"
#include "sam/format/writer.h"
#include "sam/automaton/builder.h"
#include "reseal.h"
#include "temp_dir.h"

namespace {

namespace fs = std::filesystem;
using sam::format::ErrorCode;
using sam::format::FormatError;
using sam::format::IndexFile;
using sam::format::OpenOptions;
using Bytes = std::vector<uint8_t>;

class FormatTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (dir_ / "small.sam").string();
    std::mt19937 rng(7);
    for (int d = 0; d < 30; ++d) {
      std::vector<uint32_t> doc(5 + rng() % 40);
      for (auto& t : doc) t = rng() % 12;
      docs_.push_back(doc);
    }
    sam::automaton::IndexInfo info;
    info.tokenizer_sha256 = sam::format::Sha256("model", 5);
    info.bos_id = 1;
    info.eos_id = 2;
    info.metadata_json = R"({"tool_version":"test","corpora":[{"name":"x","kind":"ids","tokens":7}]})";
    for (int i = 0; i < 12; ++i) info.vocabulary.push_back("piece" + std::to_string(i));
    sam::automaton::BuildIndexFile(docs_, 12, path_, info);
    std::ifstream in(path_, std::ios::binary);
    bytes_.assign(std::istreambuf_iterator<char>(in), {});
  }

  std::string Write(const Bytes& b, const std::string& name) {
    const std::string p = (dir_ / name).string();
    std::ofstream out(p, std::ios::binary);
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    return p;
  }
  // Recomputes the header checksum so that a deliberate edit reaches the
  // check it is aimed at.
  static void FixHeaderChecksum(Bytes& b) { sam::testing::ResealHeader(b.data(), b.size()); }
  // Entry i of the section table.
  static uint8_t* Section(Bytes& b, int i) { return b.data() + 256 + 64 * i; }
  static int FindSection(Bytes& b, const char* tag) {
    for (int i = 0; i < 64; ++i)
      if (std::memcmp(Section(b, i), tag, 4) == 0) return i;
    return -1;
  }
  ErrorCode OpenCode(const std::string& p, const OpenOptions& o = {}) {
    try {
      IndexFile::Open(p, o);
    } catch (const FormatError& e) {
      last_message_ = e.what();
      return e.code();
    }
    return ErrorCode::kOk;
  }

  sam::testing::TempDir tmp_{"sam_format_test"};
  const fs::path dir_ = tmp_.path();
  std::string path_;
  std::vector<std::vector<uint32_t>> docs_;
  Bytes bytes_;
  std::string last_message_;
};

TEST_F(FormatTest, RoundTripAllOpenModesAgree) {
  OpenOptions o;
  o.verify = true;
  IndexFile a = IndexFile::Open(path_, o);
  IndexFile b = IndexFile::Read(path_, o);
  std::vector<uint64_t> aligned((bytes_.size() + 7) / 8);
  std::memcpy(aligned.data(), bytes_.data(), bytes_.size());
  IndexFile c = IndexFile::FromBuffer(aligned.data(), bytes_.size(), "buffer", o);
  for (const IndexFile* f : {&b, &c}) {
    ASSERT_EQ(f->view().num_states(), a.view().num_states());
    for (uint64_t s = 0; s < a.view().num_states(); ++s) {
      ASSERT_EQ(f->view().Link(s), a.view().Link(s));
      ASSERT_EQ(f->view().Count(s), a.view().Count(s));
      for (uint32_t t = 0; t < 12; ++t) ASSERT_EQ(f->view().Next(s, t), a.view().Next(s, t));
    }
  }
  const auto& h = a.header();
  EXPECT_EQ(h.major_version, 1);
  EXPECT_EQ(h.vocab_size, 12u);
  EXPECT_EQ(h.bos_id, 1u);
  EXPECT_EQ(h.eos_id, 2u);
  EXPECT_EQ(h.num_documents, 30u);
  EXPECT_EQ(h.tokenizer_sha256, sam::format::Sha256("model", 5));
  uint64_t tokens = 0;
  for (const auto& d : docs_) tokens += d.size() + 1;
  EXPECT_EQ(h.num_tokens, tokens);
  // The text round-trips token by token, with a separator after each document.
  uint64_t p = 1;
  for (const auto& d : docs_) {
    for (uint32_t t : d) ASSERT_EQ(a.view().Token(p++), t);
    ASSERT_TRUE(a.view().IsDocumentEnd(p++));
  }
  const auto meta = a.ReadMetadata();
  EXPECT_EQ(meta.tool_version, "test");
  ASSERT_EQ(meta.corpora.size(), 1u);
  EXPECT_EQ(meta.corpora[0].tokens, 7u);
  const auto vocab = a.ReadVocabulary();
  ASSERT_EQ(vocab.size(), 12u);
  EXPECT_EQ(vocab[11], "piece11");
}

TEST_F(FormatTest, PackedArraysRoundTripAtEveryWidth) {
  std::mt19937_64 rng(3);
  for (unsigned w = 1; w <= sam::format::kMaxPackedWidth; ++w) {
    sam::format::PackedWriter pw(w);
    std::vector<uint64_t> vals(257);
    for (auto& v : vals) {
      v = rng() & ((uint64_t{1} << w) - 1);
      pw.Push(v);
    }
    pw.Set(100, vals[100] = (uint64_t{1} << w) - 1);
    const auto bytes = pw.Finish();
    ASSERT_EQ(bytes.size(), sam::format::PackedBytes(vals.size(), w));
    sam::format::PackedView view(bytes.data(), vals.size(), w);
    for (size_t i = 0; i < vals.size(); ++i) ASSERT_EQ(view.Get(i), vals[i]) << "width " << w;
  }
}

TEST_F(FormatTest, TruncatedFilesFail) {
  for (size_t keep : {size_t{0}, size_t{10}, size_t{255}, size_t{256}, size_t{4000},
                      bytes_.size() / 2, bytes_.size() - 1}) {
    Bytes b(bytes_.begin(), bytes_.begin() + keep);
    const auto p = Write(b, "trunc.sam");
    EXPECT_EQ(OpenCode(p), ErrorCode::kTruncated) << "kept " << keep << ": " << last_message_;
    EXPECT_NE(last_message_.find("trunc.sam"), std::string::npos) << last_message_;
  }
}

// IndexFile::Read (into huge-page memory) and Open with populate report the
// same errors as Open, naming the file.
TEST_F(FormatTest, ReadAndPopulateFailLikeOpen) {
  auto code_of = [&](auto&& open) {
    try {
      open();
    } catch (const FormatError& e) {
      last_message_ = e.what();
      return e.code();
    }
    return ErrorCode::kOk;
  };
  OpenOptions populate;
  populate.populate = true;
  for (size_t keep : {size_t{0}, size_t{100}, bytes_.size() / 2}) {
    const auto p = Write(Bytes(bytes_.begin(), bytes_.begin() + keep), "short.sam");
    EXPECT_EQ(code_of([&] { IndexFile::Read(p); }), ErrorCode::kTruncated) << keep;
    EXPECT_NE(last_message_.find("short.sam"), std::string::npos) << last_message_;
    EXPECT_EQ(code_of([&] { IndexFile::Open(p, populate); }), ErrorCode::kTruncated) << keep;
  }
  const std::string missing = (dir_ / "missing.sam").string();
  EXPECT_EQ(code_of([&] { IndexFile::Read(missing); }), ErrorCode::kIo);
  EXPECT_NE(last_message_.find("missing.sam"), std::string::npos) << last_message_;
  EXPECT_EQ(code_of([&] { IndexFile::Read(dir_.string()); }), ErrorCode::kIo) << last_message_;
  EXPECT_NE(last_message_.find("directory"), std::string::npos) << last_message_;
  // A valid file: populate maps it whole and answers as usual.
  IndexFile f = IndexFile::Open(path_, populate);
  EXPECT_EQ(f.view().num_tokens(), IndexFile::Read(path_).view().num_tokens());
}

// A path that is not a regular file is refused by name, by every way of
// opening. A FIFO used to block the open until some process wrote to it, and a
// directory used to fail to map with "No such device".
TEST_F(FormatTest, FifoAndDirectoryAreRefusedWithoutBlocking) {
  const std::string fifo = (dir_ / "fifo.sam").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  const std::string dir = (dir_ / "dir.sam").string();
  fs::create_directories(dir);
  OpenOptions populate;
  populate.populate = true;
  const std::vector<std::pair<std::string, std::function<void(const std::string&)>>> ways = {
      {"Open", [](const std::string& p) { IndexFile::Open(p); }},
      {"Open(populate)", [populate](const std::string& p) { IndexFile::Open(p, populate); }},
      {"Read", [](const std::string& p) { IndexFile::Read(p); }},
  };
  for (const auto& [way, open] : ways) {
    for (const auto& [path, what] : {std::pair{fifo, "is a FIFO (named pipe), not an index file"},
                                     std::pair{dir, "is a directory, not an index file"}}) {
      // The open runs on a thread so that a regression shows as a failure,
      // not as a hung test: while it is blocked (after 30 s), opening the
      // FIFO for writing releases it; after ten tries it is left behind.
      struct Outcome {
        std::mutex mutex;
        std::condition_variable done_cv;
        bool done = false;
        ErrorCode code = ErrorCode::kOk;
        std::string message;
      };
      auto outcome = std::make_shared<Outcome>();
      std::thread([outcome, open = open, path = path] {
        ErrorCode code = ErrorCode::kOk;
        std::string message;
        try {
          open(path);
        } catch (const FormatError& e) {
          code = e.code();
          message = e.what();
        }
        std::lock_guard<std::mutex> lock(outcome->mutex);
        outcome->code = code;
        outcome->message = message;
        outcome->done = true;
        outcome->done_cv.notify_all();
      }).detach();
      bool finished = false;
      for (int tries = 0; !finished && tries <= 10; ++tries) {
        std::unique_lock<std::mutex> lock(outcome->mutex);
        finished = outcome->done_cv.wait_for(lock, std::chrono::seconds(tries == 0 ? 30 : 1),
                                             [&] { return outcome->done; });
        lock.unlock();
        if (finished) break;
        if (tries == 0) ADD_FAILURE() << way << "(" << path << ") blocked";
        const int fd = ::open(path.c_str(), O_WRONLY | O_NONBLOCK);
        if (fd >= 0) ::close(fd);
      }
      if (!finished) continue;
      std::lock_guard<std::mutex> lock(outcome->mutex);
      const ErrorCode code = outcome->code;
      const std::string message = outcome->message;
      EXPECT_EQ(code, ErrorCode::kIo) << way << ": " << message;
      EXPECT_EQ(message, path + ": " + what + " (an index must be a regular file)") << way;
    }
  }
}

// HugeBuffer: zeroed, writable, movable, at every size class.
TEST(HugeBuffer, ZeroedWritableMovable) {
  for (size_t bytes : {size_t{0}, size_t{24}, size_t{1} << 20, (size_t{3} << 20) + 5}) {
    sam::format::HugeBuffer b(bytes);
    EXPECT_EQ(b.size(), bytes);
    auto* p = static_cast<uint8_t*>(b.data());
    for (size_t i = 0; i < bytes; i += 4093) ASSERT_EQ(p[i], 0) << bytes;
    if (bytes >= sam::format::HugeBuffer::kHugePage / 2) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % sam::format::HugeBuffer::kHugePage, 0u);
    }
    if (bytes > 0) p[bytes - 1] = 7;
    sam::format::HugeBuffer moved(std::move(b));
    EXPECT_EQ(moved.data(), p);
    EXPECT_EQ(b.data(), nullptr);
    if (bytes > 0) {
      EXPECT_EQ(static_cast<uint8_t*>(moved.data())[bytes - 1], 7);
    }
    sam::format::HugeBuffer other(16);
    other = std::move(moved);
    EXPECT_EQ(other.data(), p);
  }
}

TEST_F(FormatTest, FlippedMagicFails) {
  Bytes b = bytes_;
  b[1] ^= 0x20;
  EXPECT_EQ(OpenCode(Write(b, "magic.sam")), ErrorCode::kBadMagic);
  EXPECT_NE(last_message_.find("not a SAM index"), std::string::npos) << last_message_;
}

TEST_F(FormatTest, TextModeCopyIsRecognised) {
  Bytes b = bytes_;
  b.erase(b.begin() + 4);  // "\r\n" -> "\n"
  EXPECT_EQ(OpenCode(Write(b, "crlf.sam")), ErrorCode::kBadMagic);
  EXPECT_NE(last_message_.find("line endings"), std::string::npos) << last_message_;
}

TEST_F(FormatTest, IncompleteFileIsRecognised) {
  Bytes b = bytes_;
  const uint8_t incomplete[8] = {0x89, 'S', 'A', 'M', 'T', 'M', 'P', '\n'};
  std::memcpy(b.data(), incomplete, 8);
  EXPECT_EQ(OpenCode(Write(b, "tmp.sam")), ErrorCode::kBadMagic);
  EXPECT_NE(last_message_.find("incomplete"), std::string::npos) << last_message_;
}

TEST_F(FormatTest, ForeignByteOrderFails) {
  Bytes b = bytes_;
  std::reverse(b.begin() + 12, b.begin() + 16);
  EXPECT_EQ(OpenCode(Write(b, "bom.sam")), ErrorCode::kBadByteOrder);
}

TEST_F(FormatTest, WrongMajorVersionFails) {
  Bytes b = bytes_;
  b[8] = 2;
  EXPECT_EQ(OpenCode(Write(b, "v2.sam")), ErrorCode::kUnsupportedVersion);
  EXPECT_NE(last_message_.find("version 2"), std::string::npos) << last_message_;
}

TEST_F(FormatTest, UnknownRequiredFeatureFailsUnknownOptionalIsIgnored) {
  Bytes b = bytes_;
  b[16] |= 0x80;
  EXPECT_EQ(OpenCode(Write(b, "req.sam")), ErrorCode::kUnknownRequiredFeature);
  Bytes o = bytes_;
  o[24 + 7] |= 0x40;  // optional bit 62
  FixHeaderChecksum(o);
  EXPECT_EQ(OpenCode(Write(o, "opt.sam")), ErrorCode::kOk) << last_message_;
}

TEST_F(FormatTest, HeaderCorruptionIsCaughtByItsChecksum) {
  Bytes b = bytes_;
  b[64] ^= 1;  // N
  EXPECT_EQ(OpenCode(Write(b, "hdr.sam")), ErrorCode::kChecksumMismatch);
}

TEST_F(FormatTest, InconsistentHeaderFails) {
  Bytes b = bytes_;
  b[80] ^= 1;  // S no longer 1 + N + C
  FixHeaderChecksum(b);
  EXPECT_EQ(OpenCode(Write(b, "sizes.sam")), ErrorCode::kBadHeader);
  Bytes w = bytes_;
  w[121] = 1;  // state width too small
  FixHeaderChecksum(w);
  EXPECT_EQ(OpenCode(Write(w, "width.sam")), ErrorCode::kBadHeader);
}

TEST_F(FormatTest, OverlappingSectionsFail) {
  Bytes b = bytes_;
  const int link = FindSection(b, "LINK");
  ASSERT_GT(link, 0);
  uint64_t text_off;
  std::memcpy(&text_off, Section(b, link - 1) + 16, 8);
  std::memcpy(Section(b, link) + 16, &text_off, 8);
  FixHeaderChecksum(b);
  EXPECT_EQ(OpenCode(Write(b, "overlap.sam")), ErrorCode::kOverlappingSections);
  EXPECT_NE(last_message_.find("LINK"), std::string::npos) << last_message_;
}

TEST_F(FormatTest, SectionOutsideFileOrWrongSizeFails) {
  Bytes b = bytes_;
  const int edge = FindSection(b, "EDGE");
  uint64_t big = bytes_.size() * 2;
  std::memcpy(Section(b, edge) + 24, &big, 8);
  FixHeaderChecksum(b);
  EXPECT_EQ(OpenCode(Write(b, "outside.sam")), ErrorCode::kBadSectionTable);
  // META renamed to a tag this reader does not know, still flagged required:
  // the file needs a newer reader.
  Bytes u = bytes_;
  std::memcpy(Section(u, FindSection(u, "META")), "XXXX", 4);
  FixHeaderChecksum(u);
  EXPECT_EQ(OpenCode(Write(u, "unknown.sam")), ErrorCode::kUnknownRequiredFeature)
      << last_message_;
  EXPECT_NE(last_message_.find("unknown.sam: section XXXX is required but unknown"),
            std::string::npos) << last_message_;
  // The same without the required flag: an unknown optional section is
  // skipped, and the required META is missing.
  Bytes m = bytes_;
  uint8_t* meta = Section(m, FindSection(m, "META"));
  std::memcpy(meta, "XXXX", 4);
  std::memset(meta + 8, 0, 4);  // flags
  FixHeaderChecksum(m);
  EXPECT_EQ(OpenCode(Write(m, "missing.sam")), ErrorCode::kBadSectionTable) << last_message_;
  EXPECT_NE(last_message_.find("missing.sam: required section META is missing"),
            std::string::npos) << last_message_;
}

// A BOS or EOS id must be a vocabulary id (or 0xFFFFFFFF, none): the runtime
// feeds it to the model and looks it up in the index.
TEST_F(FormatTest, BosOrEosOutsideTheVocabularyIsRefused) {
  struct Case {
    size_t offset;
    uint32_t value;
    ErrorCode code;
    const char* field;
  };
  // The fixture's vocabulary has 12 ids.
  for (const Case& c : {Case{112, 12, ErrorCode::kBadHeader, "BOS id 12"},
                        Case{112, 0x7fffffff, ErrorCode::kBadHeader, "BOS id 2147483647"},
                        Case{116, 12, ErrorCode::kBadHeader, "EOS id 12"},
                        Case{116, 0xfffffffe, ErrorCode::kBadHeader, "EOS id 4294967294"},
                        Case{112, 11, ErrorCode::kOk, ""},
                        Case{112, 0xffffffff, ErrorCode::kOk, ""},
                        Case{116, 0xffffffff, ErrorCode::kOk, ""}}) {
    Bytes b = bytes_;
    std::memcpy(b.data() + c.offset, &c.value, 4);
    FixHeaderChecksum(b);
    const std::string p = Write(b, "special.sam");
    ASSERT_EQ(OpenCode(p), c.code) << c.offset << " = " << c.value << ": " << last_message_;
    if (c.code == ErrorCode::kOk) {
      const uint32_t got = c.offset == 112 ? IndexFile::Open(p).header().bos_id
                                           : IndexFile::Open(p).header().eos_id;
      EXPECT_EQ(got, c.value);
      continue;
    }
    EXPECT_NE(last_message_.find(p + ": " + c.field + " is not below the vocab size 12"),
              std::string::npos) << last_message_;
  }
}

// Optional feature bit 0 says VOCB is present, bit 1 that TEST is: a bit
// that claims an absent section (or a section whose bit is clear) is refused.
TEST_F(FormatTest, OptionalFeatureBitsMustMatchTheSections) {
  auto set_optional = [](Bytes& b, uint64_t bits) {
    std::memcpy(b.data() + 24, &bits, 8);
    FixHeaderChecksum(b);
  };
  uint64_t written;
  std::memcpy(&written, bytes_.data() + 24, 8);
  ASSERT_EQ(written, 3u);  // the fixture has VOCB and TEST
  // An index without VOCB whose bit 0 claims one.
  const std::string ids = (dir_ / "ids.sam").string();
  sam::automaton::BuildIndexFile(docs_, 12, ids);
  std::ifstream in(ids, std::ios::binary);
  Bytes no_vocab(std::istreambuf_iterator<char>(in), {});
  ASSERT_EQ(FindSection(no_vocab, "VOCB"), -1);
  ASSERT_EQ(OpenCode(Write(no_vocab, "novocab.sam")), ErrorCode::kOk) << last_message_;
  set_optional(no_vocab, 3);
  const std::string claims_vocab = Write(no_vocab, "claims-vocab.sam");
  EXPECT_EQ(OpenCode(claims_vocab), ErrorCode::kBadSectionTable);
  EXPECT_NE(last_message_.find(claims_vocab + ": optional features 0x3 say section VOCB is "
                               "present, but the file has none"),
            std::string::npos) << last_message_;
  // Without its TEST section (the last one: drop its entry and its bytes).
  Bytes no_test = bytes_;
  const int test = FindSection(no_test, "TEST");
  ASSERT_EQ(test, 12);
  uint64_t test_offset;
  std::memcpy(&test_offset, Section(no_test, test) + 16, 8);
  std::memset(Section(no_test, test), 0, 64);
  no_test.resize(test_offset);
  const uint32_t nsec = 12;
  std::memcpy(no_test.data() + 44, &nsec, 4);
  std::memcpy(no_test.data() + 32, &test_offset, 8);
  set_optional(no_test, 1);
  EXPECT_EQ(OpenCode(Write(no_test, "notest.sam")), ErrorCode::kOk) << last_message_;
  set_optional(no_test, 3);
  const std::string claims_test = Write(no_test, "claims-test.sam");
  EXPECT_EQ(OpenCode(claims_test), ErrorCode::kBadSectionTable);
  EXPECT_NE(last_message_.find(claims_test + ": optional features 0x3 say section TEST is "
                               "present, but the file has none"),
            std::string::npos) << last_message_;
  // The other way round: the sections are there, their bits are clear.
  Bytes unclaimed = bytes_;
  set_optional(unclaimed, 2);
  const std::string unclaimed_vocab = Write(unclaimed, "unclaimed.sam");
  EXPECT_EQ(OpenCode(unclaimed_vocab), ErrorCode::kBadSectionTable);
  EXPECT_NE(last_message_.find(unclaimed_vocab + ": optional features 0x2 say section VOCB "
                               "is absent, but the file has it"),
            std::string::npos) << last_message_;
}

TEST_F(FormatTest, BadSectionChecksumFailsOnVerifyOnly) {
  Bytes b = bytes_;
  const int edge = FindSection(b, "EDGE");
  uint64_t off, size;
  std::memcpy(&off, Section(b, edge) + 16, 8);
  std::memcpy(&size, Section(b, edge) + 24, 8);
  b[off + size / 2] ^= 0x5a;
  const auto p = Write(b, "sum.sam");
  EXPECT_EQ(OpenCode(p), ErrorCode::kOk);  // the cheap open reads no checksum, a few values only
  OpenOptions o;
  o.verify = true;
  EXPECT_EQ(OpenCode(p, o), ErrorCode::kChecksumMismatch);
  EXPECT_NE(last_message_.find("EDGE"), std::string::npos) << last_message_;
}

TEST_F(FormatTest, CorruptValuesWithValidChecksumsFailVerify) {
  // Change stored values, then make every checksum match again: the
  // structural checks and self-test samples must still notice.
  for (const char* tag : {"LINK", "EDGE", "CCNT", "TEXT", "ROOT"}) {
    Bytes b = bytes_;
    const int s = FindSection(b, tag);
    uint64_t off, size;
    std::memcpy(&off, Section(b, s) + 16, 8);
    std::memcpy(&size, Section(b, s) + 24, 8);
    for (uint64_t i = 0; i + 8 < size; i += 3) b[off + i] ^= 0x11;
    sam::testing::Reseal(b.data(), b.size());
    const auto p = Write(b, std::string("values-") + tag + ".sam");
    OpenOptions o;
    o.verify = true;
    const ErrorCode code = OpenCode(p, o);
    // The structural invariants are checked before the self-test samples, and
    // every one of these changes breaks one of them, naming the section.
    EXPECT_EQ(code, ErrorCode::kCorruptStructure)
        << tag << ": " << sam::format::ErrorCodeName(code) << " " << last_message_;
    EXPECT_NE(last_message_.find(tag), std::string::npos) << tag << ": " << last_message_;
    // Without verify the damaged file opens (unless a value that opening
    // checks is wrong), and queries stay in bounds.
    if (OpenCode(p) != ErrorCode::kOk) {
      EXPECT_EQ(OpenCode(p), ErrorCode::kCorruptStructure) << tag << ": " << last_message_;
      continue;
    }
    IndexFile f = IndexFile::Open(p);
    const auto& v = f.view();
    for (uint64_t st = 0; st < v.num_states(); ++st)
      for (uint32_t t = 0; t < 13; ++t) {
        const uint64_t nx = v.Next(st, t);
        ASSERT_TRUE(nx == sam::format::kNoState || nx < v.num_states());
        ASSERT_LT(v.Link(st), v.num_states());
      }
  }
}

TEST_F(FormatTest, TokenizerAndVocabularyMismatchAreRefused) {
  OpenOptions o;
  o.expected_tokenizer_sha256 = sam::format::Sha256("other", 5);
  EXPECT_EQ(OpenCode(path_, o), ErrorCode::kTokenizerMismatch);
  EXPECT_NE(last_message_.find("rebuild"), std::string::npos) << last_message_;
  o.expected_tokenizer_sha256 = sam::format::Sha256("model", 5);
  EXPECT_EQ(OpenCode(path_, o), ErrorCode::kOk);
  OpenOptions v;
  v.expected_vocab_size = 32000;
  EXPECT_EQ(OpenCode(path_, v), ErrorCode::kTokenizerMismatch);
  // An index from raw ids has no fingerprint and cannot be confirmed.
  const std::string ids = (dir_ / "ids.sam").string();
  sam::automaton::BuildIndexFile(docs_, 12, ids);
  EXPECT_EQ(OpenCode(ids, o), ErrorCode::kTokenizerMismatch);
}

TEST_F(FormatTest, RandomHeaderDamageNeverCrashes) {
  std::mt19937 rng(11);
  for (int i = 0; i < 2000; ++i) {
    Bytes b = bytes_;
    const int flips = 1 + rng() % 4;
    for (int k = 0; k < flips; ++k) b[rng() % (256 + 64 * 13)] ^= static_cast<uint8_t>(1u << (rng() % 8));
    if (rng() % 2) FixHeaderChecksum(b);
    std::vector<uint64_t> aligned((b.size() + 7) / 8);
    std::memcpy(aligned.data(), b.data(), b.size());
    try {
      OpenOptions o;
      o.verify = rng() % 2;
      IndexFile f = IndexFile::FromBuffer(aligned.data(), b.size(), "fuzz", o);
      const auto& v = f.view();
      uint64_t st = 0;
      for (int q = 0; q < 50; ++q) {
        const uint64_t nx = v.Next(st, rng() % 13);
        st = nx == sam::format::kNoState ? v.Link(st) : nx;
        ASSERT_LT(st, v.num_states());
      }
    } catch (const FormatError&) {
    }
  }
}

TEST_F(FormatTest, WriterLeavesNothingWhenNotFinished) {
  const std::string p = (dir_ / "unfinished.sam").string();
  {
    sam::format::IndexWriter w(p);
    const uint8_t data[16] = {};
    w.AddSection("TEXT", data);
  }
  EXPECT_FALSE(fs::exists(p));
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find("unfinished.sam.tmp"), std::string::npos);
}

// The writer produces only files that the reader accepts: it refuses unknown
// tags, sections out of the order of FORMAT.md, compressed hot sections, a
// missing required section and BOS/EOS ids outside the vocabulary, and then
// leaves nothing behind.
TEST_F(FormatTest, WriterRefusesWhatTheReaderWouldRefuse) {
  const std::string p = (dir_ / "refused.sam").string();
  const uint8_t data[16] = {};
  auto code_of = [&](auto&& write) {
    try {
      write();
    } catch (const FormatError& e) {
      last_message_ = e.what();
      return e.code();
    }
    return ErrorCode::kOk;
  };
  {
    sam::format::IndexWriter w(p);
    EXPECT_EQ(code_of([&] { w.AddSection("XXXX", data); }), ErrorCode::kInvalidArgument);
    EXPECT_EQ(last_message_, p + ": unknown section tag 'XXXX'");
    EXPECT_EQ(code_of([&] { w.AddSection("TEXT", data, /*compress=*/true); }),
              ErrorCode::kInvalidArgument);
    EXPECT_EQ(last_message_, p + ": section TEXT must be stored raw");
    w.AddSection("LINK", data);
    EXPECT_EQ(code_of([&] { w.AddSection("TEXT", data); }), ErrorCode::kInvalidArgument);
    EXPECT_EQ(last_message_, p + ": section TEXT added after LINK (sections are written in the "
                                 "order of FORMAT.md)");
    EXPECT_EQ(code_of([&] { w.Finish(sam::format::IndexHeader{}); }),
              ErrorCode::kInvalidArgument);
    EXPECT_EQ(last_message_, p + ": required section TEXT was not written");
  }
  EXPECT_FALSE(fs::exists(p));
  // A BOS or EOS id outside the vocabulary, through the indexer.
  for (const bool bos : {true, false}) {
    sam::automaton::IndexInfo info;
    (bos ? info.bos_id : info.eos_id) = 12;
    EXPECT_EQ(code_of([&] { sam::automaton::BuildIndexFile(docs_, 12, p, info); }),
              ErrorCode::kInvalidArgument);
    EXPECT_EQ(last_message_,
              p + ": " + (bos ? "BOS" : "EOS") + " id 12 is not below the vocab size 12");
    EXPECT_FALSE(fs::exists(p));
  }
  for (const auto& e : fs::directory_iterator(dir_))
    EXPECT_EQ(e.path().filename().string().find("refused.sam"), std::string::npos) << e.path();
}

// The section encoders write FORMAT.md's bytes, little-endian, whatever the
// host; the expected bytes below are written out from the spec by hand.
TEST(Sections, EncodersWriteTheSpecifiedBytes) {
  // EDEG: states with 2, 0 and 1 stored transitions: bits 0 0 1 1 0 1 (bit 0
  // first), i.e. the word 0b101100 = 0x2C, then the zero word. ESEL at rate
  // 2^1: the positions of ones 0 and 2, i.e. 2 and 5, in bits(6) = 3 bits
  // each: 0b101'010 = 0x2A, then 8 bytes of padding.
  sam::format::DegreeVectorWriter degrees(1);
  degrees.AddEdge();
  degrees.AddEdge();
  degrees.EndState();
  degrees.EndState();
  degrees.AddEdge();
  degrees.EndState();
  const sam::format::DegreeSections d = degrees.Finish();
  EXPECT_EQ(d.num_states, 3u);
  EXPECT_EQ(d.num_edges, 3u);
  EXPECT_EQ(d.select_width, 3u);
  EXPECT_EQ(d.degree_bytes, (Bytes{0x2C, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(d.select_bytes, (Bytes{0x2A, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_THROW(sam::format::DegreeVectorWriter(0), FormatError);
  EXPECT_THROW(sam::format::DegreeVectorWriter(17), FormatError);

  // VOCB: u32 count, then u32 length + bytes per piece.
  const std::vector<std::string> pieces = {"a", "", "\xc3\xa9"};
  const Bytes vocab = sam::format::EncodeVocabulary(pieces);
  EXPECT_EQ(vocab, (Bytes{3, 0, 0, 0, 1, 0, 0, 0, 'a', 0, 0, 0, 0, 2, 0, 0, 0, 0xc3, 0xa9}));
  EXPECT_EQ(sam::format::DecodeVocabulary(vocab, 3, "f"), pieces);
  try {
    sam::format::DecodeVocabulary(vocab, 4, "f.sam");
    ADD_FAILURE() << "a count that differs from the vocab size was accepted";
  } catch (const FormatError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptStructure);
    EXPECT_STREQ(e.what(), "f.sam: VOCB has 3 pieces, vocab size is 4");
  }
  try {
    sam::format::DecodeVocabulary(std::span(vocab).first(vocab.size() - 1), 3, "f.sam");
    ADD_FAILURE() << "a truncated VOCB was accepted";
  } catch (const FormatError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptStructure);
    EXPECT_STREQ(e.what(), "f.sam: VOCB section is truncated");
  }

  // TEST: u32 count, then four u64 per sample.
  const std::vector<sam::format::SelfTestSample> samples = {{1, 2, 3, 0x0102030405060708}};
  const Bytes test = sam::format::EncodeSelfTest(samples);
  EXPECT_EQ(test, (Bytes{1, 0, 0, 0,                 // count
                         1, 0, 0, 0, 0, 0, 0, 0,     // start
                         2, 0, 0, 0, 0, 0, 0, 0,     // length
                         3, 0, 0, 0, 0, 0, 0, 0,     // count
                         8, 7, 6, 5, 4, 3, 2, 1}));  // min_endpos
  EXPECT_EQ(sam::format::DecodeSelfTest(test, "f"), samples);
  try {
    sam::format::DecodeSelfTest(std::span(test).first(20), "f.sam");
    ADD_FAILURE() << "a TEST section of the wrong size was accepted";
  } catch (const FormatError& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCorruptStructure);
    EXPECT_STREQ(e.what(), "f.sam: TEST section has a wrong size");
  }
}

TEST_F(FormatTest, Sha256KnownVectors) {
  EXPECT_EQ(sam::format::DigestToHex(sam::format::Sha256("abc", 3)),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sam::format::DigestToHex(sam::format::Sha256("", 0)),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  const auto d = sam::format::Sha256("abc", 3);
  EXPECT_EQ(sam::format::DigestFromHex(sam::format::DigestToHex(d)), d);
  EXPECT_THROW(sam::format::DigestFromHex("xyz"), FormatError);
}

}  // namespace
