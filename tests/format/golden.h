// Golden index files (tests/format/golden/): each NAME.sam is built from the
// inputs described by NAME.json, with everything that could vary between
// builds (time, tool version, tokenizer) pinned in that description. See
// tests/format/golden/README.md.
#ifndef SAM_TESTS_FORMAT_GOLDEN_H_
#define SAM_TESTS_FORMAT_GOLDEN_H_

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "sam/automaton/builder.h"

namespace sam::golden {

struct GoldenSpec {
  std::string name;                             // NAME of NAME.json / NAME.sam
  uint32_t vocab_size = 0;
  std::vector<std::vector<uint32_t>> documents;  // token ids, no separators
  automaton::IndexInfo info;                      // BOS, EOS, fingerprint, META, VOCB, TEST
};

// Reads NAME.json (and the text file it may name, relative to it). Throws
// std::runtime_error naming the file on a malformed description.
GoldenSpec LoadGoldenSpec(const std::filesystem::path& json_path);

// The descriptions in dir, by name.
std::vector<std::filesystem::path> GoldenSpecs(const std::filesystem::path& dir);

// Builds the index of a description at path (the builder and the format
// writer, deterministic for given inputs).
void BuildGolden(const GoldenSpec& spec, const std::string& path);

}  // namespace sam::golden

#endif  // SAM_TESTS_FORMAT_GOLDEN_H_
