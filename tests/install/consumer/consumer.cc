// An outside C++ program over the installed runtime (sam/runtime/*.h):
//
//   consumer_cxx INDEX
//
// The C example's index through the C++ API: IndexFile, a shared StaticIndex,
// a Session; then a missing file, whose sam::Error (thrown inside the shared
// library) is caught here by type. Exit status 0 on success, 1 on a runtime
// error, 2 on bad usage.
#include <cstdint>
#include <iostream>
#include <vector>

#include "sam/error.h"
#include "sam/format/index.h"
#include "sam/runtime/session.h"
#include "sam/runtime/static_index.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: consumer_cxx INDEX\n";
    return 2;
  }
  try {
    const auto file = sam::format::IndexFile::Open(argv[1]);
    const auto shared = sam::runtime::StaticIndex::Create(file.shared_view());
    sam::runtime::Session session;
    session.AttachIndex(shared);
    const std::vector<uint32_t> prompt = {1, 10, 11, 12};
    session.Prefill(prompt);
    const sam::runtime::DraftTree& draft = session.Propose(13);
    std::cout << "consumer_cxx: draft from " << sam::runtime::DraftSourceName(draft.source) << ":";
    for (uint32_t token : draft.tokens) std::cout << " " << token;
    std::cout << "\n";
  } catch (const sam::Error& e) {
    std::cerr << "consumer_cxx: " << e.what() << "\n";
    return 1;
  }
  try {
    sam::format::IndexFile::Open("/nonexistent/missing.sam");
    std::cerr << "consumer_cxx: opening a missing file did not throw\n";
    return 1;
  } catch (const sam::Error& e) {
    std::cout << "consumer_cxx: missing index: " << sam::ErrorCodeName(e.code()) << "\n";
  }
  return 0;
}
