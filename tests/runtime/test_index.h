// Helpers shared by the runtime tests: random token texts, per-process
// temporary paths and indexes built from documents (removed afterwards).
#ifndef SAM_TESTS_RUNTIME_TEST_INDEX_H_
#define SAM_TESTS_RUNTIME_TEST_INDEX_H_

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "sam/format/index.h"
#include "sam/indexer/builder.h"

namespace sam::runtime::test_util {

using Text = std::vector<uint32_t>;

// `count` texts of min_len + [0, spread) tokens drawn uniformly from
// [0, alphabet), in that order from rng (length, then tokens, per text).
inline std::vector<Text> RandomTexts(std::mt19937& rng, size_t count, size_t min_len,
                                     size_t spread, uint32_t alphabet) {
  std::vector<Text> texts(count);
  for (auto& d : texts) {
    d.resize(min_len + rng() % spread);
    for (auto& t : d) t = rng() % alphabet;
  }
  return texts;
}

// A path in the temporary directory, distinct per process (ctest runs test
// binaries in parallel).
inline std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("sam_rt_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// An index built from `docs` at TempPath(name), open, removed on destruction.
struct BuiltIndex {
  std::string path;
  format::IndexFile file;
  BuiltIndex(const std::vector<Text>& docs, uint32_t vocab, const std::string& name)
      : path(TempPath(name)), file(Build(docs, vocab, path)) {}
  ~BuiltIndex() { std::remove(path.c_str()); }
  BuiltIndex(const BuiltIndex&) = delete;
  BuiltIndex& operator=(const BuiltIndex&) = delete;
  const format::IndexView& view() const { return file.view(); }

 private:
  static format::IndexFile Build(const std::vector<Text>& docs, uint32_t vocab,
                                 const std::string& path) {
    indexer::BuildIndexFile(docs, vocab, path);
    return format::IndexFile::Open(path);
  }
};

}  // namespace sam::runtime::test_util

#endif  // SAM_TESTS_RUNTIME_TEST_INDEX_H_
