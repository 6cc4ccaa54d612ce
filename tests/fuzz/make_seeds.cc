// Writes the fuzzers' seed indexes: fuzz_make_seeds OUT_DIR.
// Small valid index files built from id documents (the committed corpora
// tests/fuzz/corpus_loader and tests/fuzz/corpus_session were made with it;
// every run writes the same bytes except META's created_utc).
#include <cstdint>
#include <exception>
#include <filesystem>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "sam/indexer/builder.h"

namespace {

using Docs = std::vector<std::vector<uint32_t>>;

void Write(const std::string& dir, const std::string& name, const Docs& docs, uint32_t vocab,
           const sam::indexer::IndexInfo& info = {}) {
  const std::string path = dir + "/" + name;
  const auto report = sam::indexer::BuildIndexFile(docs, vocab, path, info);
  std::cout << name << ": " << report.file_bytes << " bytes, " << report.tokens << " tokens, "
            << report.states << " states, " << report.explicit_edges << " explicit edges\n";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_make_seeds OUT_DIR\n";
    return 2;
  }
  const std::string dir = argv[1];
  try {
    std::filesystem::create_directories(dir);
    sam::indexer::IndexInfo small_info;
    small_info.self_test_samples = 8;

    // Two documents of distinct ids (the C example's index).
    Write(dir, "tiny", {{1, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20},
                        {1, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39}},
          64, small_info);

    // Repetitions over a small alphabet: many clones and suffix links.
    Write(dir, "repeats", {{0, 1, 0, 1, 0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 3, 0, 0, 0, 0},
                           {1, 2, 3, 1, 2, 3, 1, 2},
                           {3, 3, 3, 3, 3, 3, 3}},
          4, small_info);

    // A hub: token 5 followed by 40 distinct tokens (StaticIndex hubs, trees).
    Docs hub;
    for (uint32_t i = 0; i < 40; ++i) hub.push_back({7, 5, 100 + i, 5, 100 + (i * 7) % 40});
    Write(dir, "hub", hub, 300, small_info);

    // BOS/EOS, a vocabulary section (VOCB), metadata, more self-test samples.
    sam::indexer::IndexInfo full;
    full.bos_id = 1;
    full.eos_id = 2;
    full.metadata_json = R"({"corpora":[{"name":"seed","kind":"ids","documents":3}]})";
    for (uint32_t i = 0; i < 32; ++i) full.vocabulary.push_back("p" + std::to_string(i));
    full.self_test_samples = 16;
    Write(dir, "vocab", {{1, 4, 5, 6, 4, 5, 7, 2}, {1, 4, 5, 6, 8, 9, 2}, {1, 10, 11, 4, 5, 2}},
          32, full);

    // Random documents: a wider vocabulary (two-byte tokens), mixed repeats.
    std::mt19937 rng(8);
    Docs random(12);
    for (auto& d : random) {
      d.resize(10 + rng() % 30);
      for (auto& t : d) t = rng() % 4 == 0 ? rng() % 3000 : rng() % 12;
    }
    Write(dir, "random", random, 3000, small_info);
  } catch (const std::exception& e) {
    std::cerr << "fuzz_make_seeds: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
