// Drafting from C++: open an index, draft, verify, print MAT.
//
//   draft_cpp INDEX REFERENCE
//
// REFERENCE is a text file of two lines of token ids (the index's tokenizer):
// a prompt (BOS first), then the model's greedy continuation of it. The
// reference stands in for the model: after draft node i it "predicts" the
// continuation's next token, as a model scoring the whole draft tree in one
// forward pass would; only ScoreDraft would call the model instead.
//
// The session uses the default options (policy sam-cal). Build it with CMake:
//   find_package(sam CONFIG REQUIRED)
//   target_link_libraries(draft_cpp PRIVATE sam::runtime)
// Exit status: 0 success, 1 runtime error, 2 usage error.
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "sam/error.h"
#include "sam/format/index.h"
#include "sam/runtime/session.h"
#include "sam/runtime/static_index.h"
#include "sam/runtime/verify.h"

namespace {

// argmax[i]: the continuation's token after draft node i; past its end, a
// token that no child of the node has, so nothing beyond it is accepted.
std::vector<uint32_t> ScoreDraft(const sam::runtime::DraftTree& tree,
                                 const std::vector<uint32_t>& text, size_t pos) {
  std::vector<uint32_t> argmax(tree.tokens.size());
  for (size_t i = 0; i < tree.tokens.size(); ++i) {
    const size_t next = pos + tree.depths[i] + 1;
    if (next < text.size()) {
      argmax[i] = text[next];
      continue;
    }
    uint32_t t = 0;
    for (size_t j = i + 1; j < tree.tokens.size(); ++j) {
      if (tree.parents[j] == static_cast<int32_t>(i) && tree.tokens[j] == t) ++t, j = i;
    }
    argmax[i] = t;
  }
  return argmax;
}

std::vector<uint32_t> ReadIds(std::istream& in) {
  std::string line;
  std::getline(in, line);
  std::istringstream fields(line);
  std::vector<uint32_t> ids;
  for (uint32_t id; fields >> id;) ids.push_back(id);
  return ids;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::cerr << "usage: draft_cpp INDEX REFERENCE\n";
    return 2;
  }
  std::ifstream reference(argv[2]);
  const std::vector<uint32_t> prompt = ReadIds(reference);
  const std::vector<uint32_t> text = ReadIds(reference);
  if (prompt.empty() || text.empty()) {
    std::cerr << "draft_cpp: " << argv[2]
              << ": expected two lines of token ids (prompt, continuation)\n";
    return 1;
  }
  try {
    // example-begin: cpp-loop
    const auto file = sam::format::IndexFile::Open(argv[1]);  // mmap, O(1)
    const auto shared = sam::runtime::StaticIndex::Create(file.shared_view());  // once per index
    sam::runtime::Session session;  // the defaults: policy sam-cal, 40-node drafts
    session.AttachIndex(shared);
    session.Prefill(prompt);
    size_t pos = 0, steps = 0, accepted = 0;  // text[pos]: the model's last token
    while (pos < text.size()) {
      const sam::runtime::DraftTree& tree = session.Propose(text[pos]);
      const std::vector<uint32_t> argmax = ScoreDraft(tree, text, pos);  // one forward pass
      const sam::runtime::VerifyResult r = sam::runtime::VerifyGreedy(tree, argmax);
      std::vector<uint32_t> commit = {text[pos]};  // the start token, then the accepted ones
      commit.insert(commit.end(), r.accepted_tokens.begin(), r.accepted_tokens.end());
      session.Commit(commit);  // emit r.accepted_tokens; keep the KV of r.accepted_nodes
      pos += commit.size();    // r.bonus_token is the next start token
      accepted += r.accepted_tokens.size();
      steps += 1;
    }
    std::printf("MAT %.3f (%zu tokens in %zu steps)\n",
                static_cast<double>(accepted + steps) / steps, pos, steps);
    // example-end: cpp-loop
  } catch (const sam::Error& e) {
    std::cerr << "draft_cpp: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
