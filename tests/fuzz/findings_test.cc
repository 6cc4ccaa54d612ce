// Regression tests for what the fuzzers found (docs/testing.md), each with
// the input rebuilt here from a small index so that the expected outcome is
// explicit. Reproducers themselves live in the corpora and are replayed by
// fuzz_loader_corpus and fuzz_session_corpus.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "reseal.h"
#include "sam/format/index.h"
#include "sam/automaton/builder.h"

namespace {

// A small index with compressed META, VOCB and TEST sections, as bytes.
std::vector<uint8_t> SmallIndexBytes() {
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("sam_fuzz_findings_" + std::to_string(::getpid()) + ".idx"))
                               .string();
  sam::automaton::IndexInfo info;
  for (uint32_t i = 0; i < 16; ++i) info.vocabulary.push_back(std::string("p").append(std::to_string(i)));
  info.self_test_samples = 8;
  sam::automaton::BuildIndexFile({{1, 2, 3, 4, 2, 3, 5}, {2, 3, 4, 6}}, 16, path, info);
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::remove(path.c_str());
  return bytes;
}

// Sets the raw (decompressed) size of section `tag` in the table, then re-seals.
void SetRawSize(std::vector<uint8_t>* bytes, const std::string& tag, uint64_t raw) {
  uint8_t* d = bytes->data();
  const uint32_t nsec = sam::testing::LoadLe32(d + 44);
  for (uint32_t i = 0; i < nsec; ++i) {
    uint8_t* e = d + 256 + 64 * i;
    if (std::string(reinterpret_cast<char*>(e), 4) == tag) {
      sam::testing::StoreLe64(e + 32, raw);
      sam::testing::Reseal(d, bytes->size());
      return;
    }
  }
  FAIL() << "no section " << tag;
}

// fuzz_loader, timeout: a re-sealed table claiming 1.4 GB for the 95-byte
// TEST section made --verify allocate and clear 1.4 GB before zstd refused
// the section (larger claims: bad_alloc). The claim is now checked against
// the zstd frame before anything is allocated.
TEST(FuzzFindings, CompressedSectionSizeIsCheckedBeforeAllocating) {
  for (const char* tag : {"META", "VOCB", "TEST"}) {
    SCOPED_TRACE(tag);
    std::vector<uint8_t> bytes = SmallIndexBytes();
    SetRawSize(&bytes, tag, uint64_t{64} << 20);  // above 32768 x stored, and not the frame's
    std::vector<uint64_t> aligned(bytes.size() / 8 + 1);
    std::memcpy(aligned.data(), bytes.data(), bytes.size());
    // Plain open does not decompress; reading the section refuses it.
    auto file = sam::format::IndexFile::FromBuffer(aligned.data(), bytes.size(), "t");
    try {
      if (std::string(tag) == "META") (void)file.ReadMetadata();
      if (std::string(tag) == "VOCB") (void)file.ReadVocabulary();
      if (std::string(tag) == "TEST") {
        sam::format::OpenOptions o;
        o.verify = true;
        (void)sam::format::IndexFile::FromBuffer(aligned.data(), bytes.size(), "t", o);
      }
      ADD_FAILURE() << "accepted";
    } catch (const sam::format::FormatError& e) {
      EXPECT_EQ(e.code(), sam::format::ErrorCode::kCompression);
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string("section ") + tag + ": decompressed size 67108864 does "
                          "not match its zstd frame"),
                std::string::npos)
          << what;
    }
  }
}

}  // namespace
