// Writes the small index the C example runs on: capi_make_index OUT_PATH.
#include <cstdint>
#include <exception>
#include <iostream>
#include <vector>

#include "sam/indexer/builder.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: capi_make_index OUT_PATH\n";
    return 2;
  }
  // Two documents over a vocabulary of 64 ids; 1 plays BOS.
  const std::vector<std::vector<uint32_t>> documents = {
      {1, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20},
      {1, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39},
  };
  try {
    sam::indexer::BuildIndexFile(documents, 64, argv[1]);
  } catch (const std::exception& e) {
    std::cerr << "capi_make_index: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
