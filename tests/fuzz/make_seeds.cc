// The fuzzers' seed corpora, and reproducers as index files:
//   fuzz_make_seeds OUT_DIR          small valid index files built from id
//       documents, as files (OUT_DIR/loader/NAME, fuzz_loader's input) and in
//       compact form (OUT_DIR/session/NAME, fuzz_session's input; compact.h).
//       The committed corpora tests/fuzz/corpus_loader and
//       tests/fuzz/corpus_session were made with it; every run writes the
//       same bytes except META's created_utc.
//   fuzz_make_seeds --expand IN OUT  writes fuzz_session's input IN as the
//       index file the fuzzer opened (expanded and re-sealed), for sam-inspect
//       or sam-replay.
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "compact.h"
#include "reseal.h"
#include "sam/automaton/builder.h"

namespace {

using Docs = std::vector<std::vector<uint32_t>>;

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void WriteAll(const std::string& path, const void* data, size_t size) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out.flush()) throw std::runtime_error("cannot write " + path);
}

void Write(const std::string& dir, const std::string& name, const Docs& docs, uint32_t vocab,
           const sam::automaton::IndexInfo& info = {}) {
  const std::string path = dir + "/loader/" + name;
  const auto report = sam::automaton::BuildIndexFile(docs, vocab, path, info);
  const std::vector<uint8_t> file = ReadAll(path);
  const std::vector<uint8_t> compact = sam::fuzz::Compact(file.data(), file.size());
  WriteAll(dir + "/session/" + name, compact.data(), compact.size());
  std::cout << name << ": " << report.file_bytes << " bytes (" << compact.size()
            << " compact), " << report.tokens << " tokens, " << report.states << " states, "
            << report.explicit_edges << " explicit edges\n";
}

}  // namespace

int main(int argc, char** argv) {
  const bool expand = argc == 4 && std::string(argv[1]) == "--expand";
  if (argc != 2 && !expand) {
    std::cerr << "usage: fuzz_make_seeds OUT_DIR | fuzz_make_seeds --expand IN OUT\n";
    return 2;
  }
  if (expand) {
    try {
      const std::vector<uint8_t> in = ReadAll(argv[2]);
      size_t size = 0;
      std::vector<uint64_t> file = sam::fuzz::Expand(in.data(), in.size(), &size);
      sam::testing::Reseal(reinterpret_cast<uint8_t*>(file.data()), size);
      WriteAll(argv[3], file.data(), size);
    } catch (const std::exception& e) {
      std::cerr << "fuzz_make_seeds: " << e.what() << "\n";
      return 1;
    }
    return 0;
  }
  const std::string dir = argv[1];
  try {
    std::filesystem::create_directories(dir + "/loader");
    std::filesystem::create_directories(dir + "/session");
    sam::automaton::IndexInfo small_info;
    small_info.self_test_samples = 8;

    // Two documents of distinct ids (the C example's index).
    Write(dir, "tiny", {{1, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20},
                        {1, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39}},
          64, small_info);

    // Repetitions over a small alphabet: many clones and suffix links.
    const Docs repeats = {{0, 1, 0, 1, 0, 1, 2, 0, 1, 2, 3, 0, 1, 2, 3, 0, 0, 0, 0},
                          {1, 2, 3, 1, 2, 3, 1, 2},
                          {3, 3, 3, 3, 3, 3, 3}};
    Write(dir, "repeats", repeats, 4, small_info);

    // A hub: token 5 followed by 40 distinct tokens (StaticIndex hubs, trees).
    Docs hub;
    for (uint32_t i = 0; i < 40; ++i) hub.push_back({7, 5, 100 + i, 5, 100 + (i * 7) % 40});
    Write(dir, "hub", hub, 300, small_info);
    // The same with the accelerator sections (HUBS, FILT) of small hubs.
    sam::automaton::IndexInfo accelerated = small_info;
    accelerated.accelerators = sam::format::AcceleratorParams{.min_degree = 4, .top_k = 4,
                                                              .filter_bits_per_edge = 10};
    Write(dir, "hub_accelerated", hub, 300, accelerated);
    // Child records (RECS, at the min count sam-build writes) beside them,
    // over the repetitions and part of the hub: records of hubs and of other
    // clones, records that keep 4 of their children, children that occur once.
    Docs records = repeats;
    records.insert(records.end(), hub.begin(), hub.begin() + 12);
    sam::automaton::IndexInfo with_records = accelerated;
    with_records.accelerators->record_min_count = sam::format::kChildRecordMinCount;
    Write(dir, "records", records, 300, with_records);

    // BOS/EOS, a vocabulary section (VOCB), metadata, more self-test samples.
    sam::automaton::IndexInfo full;
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
