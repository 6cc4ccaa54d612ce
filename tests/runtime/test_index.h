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
#include "sam/automaton/builder.h"

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

// A stream of n tokens for a session to replay: stretches of 1 to max_span
// tokens copied from random places of `docs` (so that drafts are accepted
// and trees branch), with one token in `random_one_in` drawn uniformly from
// [0, vocab) instead.
inline Text CopiedStream(std::mt19937& rng, const std::vector<Text>& docs, size_t n,
                         uint32_t vocab, uint32_t random_one_in, uint32_t max_span) {
  Text out;
  while (out.size() < n) {
    if (rng() % random_one_in == 0) {
      out.push_back(rng() % vocab);
      continue;
    }
    const Text& d = docs[rng() % docs.size()];
    const size_t from = rng() % d.size();
    const size_t len = 1 + rng() % max_span;
    for (size_t k = from; k < d.size() && k < from + len; ++k) out.push_back(d[k]);
  }
  out.resize(n);
  return out;
}

// A path in the temporary directory, distinct per process (ctest runs test
// binaries in parallel).
inline std::string TempPath(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("sam_rt_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

// "" when a draft (tokens, parents, depths of `count` nodes) is a well-formed
// tree of at most `budget` nodes rooted at `start`: parents[0] = -1 and
// parents[i] < i, depths one more than the parent's, every token below
// `token_bound`. Otherwise what is wrong.
inline std::string MalformedDraft(const uint32_t* tokens, const int32_t* parents,
                                  const uint16_t* depths, size_t count, uint32_t start,
                                  uint32_t token_bound, size_t budget) {
  if (count < 1 || count > budget) return "size " + std::to_string(count);
  if (tokens[0] != start || parents[0] != -1 || depths[0] != 0) return "bad root";
  for (size_t i = 1; i < count; ++i) {
    const std::string at = " at node " + std::to_string(i);
    if (parents[i] < 0 || static_cast<size_t>(parents[i]) >= i) return "bad parent" + at;
    if (depths[i] != depths[parents[i]] + 1) return "bad depth" + at;
    if (tokens[i] >= token_bound) return "token " + std::to_string(tokens[i]) + at;
  }
  return "";
}

// An index built from `docs` at TempPath(name), open, removed on destruction.
struct BuiltIndex {
  std::string path;
  format::IndexFile file;
  // `info`: the IndexInfo to write (the accelerator sections when it asks).
  BuiltIndex(const std::vector<Text>& docs, uint32_t vocab, const std::string& name,
             const automaton::IndexInfo& info = {})
      : path(TempPath(name)), file(Build(docs, vocab, path, info)) {}
  ~BuiltIndex() { std::remove(path.c_str()); }
  BuiltIndex(const BuiltIndex&) = delete;
  BuiltIndex& operator=(const BuiltIndex&) = delete;
  const format::IndexView& view() const { return file.view(); }
  std::shared_ptr<const format::IndexView> shared_view() const { return file.shared_view(); }

 private:
  static format::IndexFile Build(const std::vector<Text>& docs, uint32_t vocab,
                                 const std::string& path, const automaton::IndexInfo& info) {
    automaton::BuildIndexFile(docs, vocab, path, info);
    return format::IndexFile::Open(path);
  }
};

}  // namespace sam::runtime::test_util

#endif  // SAM_TESTS_RUNTIME_TEST_INDEX_H_
