// Writes the small indexes the C example and the ctypes example run on:
//   capi_make_index OUT_PATH              (the C example's index, vocabulary 64)
//   capi_make_index OUT_PATH --sam-h-ids  (vocabulary 32000, with the ids of sam.h's
//                                          ctypes example: prompt 1 450 4996, start 263)
#include <cstdint>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "sam/automaton/builder.h"

int main(int argc, char** argv) {
  const bool sam_h_ids = argc == 3 && std::string(argv[2]) == "--sam-h-ids";
  if (argc != 2 && !sam_h_ids) {
    std::cerr << "usage: capi_make_index OUT_PATH [--sam-h-ids]\n";
    return 2;
  }
  // Two documents over a vocabulary of 64 ids; 1 plays BOS.
  std::vector<std::vector<uint32_t>> documents = {
      {1, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20},
      {1, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39},
  };
  uint32_t vocab_size = 64;
  if (sam_h_ids) {
    // After "1 450 4996 263" the corpus continues with 29871 ... 29875: the
    // example's draft is 263 29871 29872 29873 29874 29875.
    documents.push_back({1, 450, 4996, 263, 29871, 29872, 29873, 29874, 29875});
    vocab_size = 32000;
  }
  try {
    sam::automaton::BuildIndexFile(documents, vocab_size, argv[1]);
  } catch (const std::exception& e) {
    std::cerr << "capi_make_index: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
