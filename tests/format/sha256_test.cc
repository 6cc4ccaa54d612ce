// SHA-256 (format/src/sha256.cc, FIPS 180-4 implemented in the format library): the NIST
// example vectors, and sha256sum (coreutils) as the oracle on files of every length around the
// block and padding boundaries and on a file larger than the reader's buffer.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <string>

#include "sam/format/error.h"
#include "sam/format/sha256.h"
#include "temp_dir.h"

namespace fs = std::filesystem;
using sam::format::DigestToHex;
using sam::format::Sha256;
using sam::format::Sha256File;

namespace {

using sam::testing::TempDir;

std::string Hex(const std::string& bytes) { return DigestToHex(Sha256(bytes.data(), bytes.size())); }

// file name -> hex digest, from one sha256sum run over every regular file in `dir`.
std::map<std::string, std::string> Sha256sumAll(const fs::path& dir) {
  std::map<std::string, std::string> out;
  FILE* pipe = popen(("cd '" + dir.string() + "' && sha256sum -- *").c_str(), "r");
  if (pipe == nullptr) return out;
  char line[4096];
  while (std::fgets(line, sizeof(line), pipe) != nullptr) {
    std::string s(line);
    if (s.size() < 67) continue;
    std::string name = s.substr(66);
    while (!name.empty() && name.back() == '\n') name.pop_back();
    out[name] = s.substr(0, 64);
  }
  pclose(pipe);
  return out;
}

TEST(Sha256, NistExampleVectors) {
  // FIPS 180-4 / NIST CSRC examples: one block, empty, two blocks (448 bits), 896 bits, 10^6 'a'.
  EXPECT_EQ(Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(Hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqr"
                "lmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(Hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, EqualsSha256sumOnFilesOfEveryLengthAroundTheBlocks) {
  TempDir dir;
  std::mt19937 rng(3);
  std::map<std::string, std::string> contents;
  auto add = [&](size_t n) {
    std::string bytes(n, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    const std::string name = std::string("f").append(std::to_string(n));
    std::ofstream(dir.path() / name, std::ios::binary) << bytes;
    contents[name] = bytes;
  };
  for (size_t n = 0; n <= 200; ++n) add(n);             // 55/56/63/64/119/120/128 boundaries
  add((size_t{3} << 20) + 17);                         // more than Sha256File's 1 MiB buffer
  const auto expected = Sha256sumAll(dir.path());
  ASSERT_EQ(expected.size(), contents.size()) << "sha256sum did not run";
  for (const auto& [name, bytes] : contents) {
    EXPECT_EQ(Hex(bytes), expected.at(name)) << name;
    EXPECT_EQ(DigestToHex(Sha256File((dir.path() / name).string())), expected.at(name)) << name;
  }
}

TEST(Sha256, FileErrorsNameTheFile) {
  TempDir dir;
  const std::string missing = (dir.path() / "missing.model").string();
  try {
    Sha256File(missing);
    ADD_FAILURE() << "no error for a missing file";
  } catch (const sam::format::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(missing + ": cannot open"), std::string::npos) << e.what();
  }
  try {
    Sha256File(dir.path().string());  // a directory opens, then fails to read
    ADD_FAILURE() << "no error for a directory";
  } catch (const sam::format::FormatError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.path().string() + ": "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("SHA-256"), std::string::npos) << e.what();
  }
}

}  // namespace
