// The C++ side of the Python tests and of the overhead benchmark.
//
//   python_reference_session fixture DIR [DOCUMENTS GENERATION]
//     writes DIR/index.sam (random documents with repeated phrases) and
//     DIR/reference.json: a prompt, a generation, and for every named policy
//     the C++ session's draft at each step of a greedy replay of the
//     generation (start token, draft, committed ids, top-k fed to the
//     fallback) and its final statistics. The Python test replays the same
//     commits and must get the same drafts.
//   python_reference_session bench DIR POLICY REPS
//     replays DIR/reference.json's generation REPS times with the C++ session
//     over DIR/index.sam (prepared) and prints the median and the least ns
//     per propose + commit over the repetitions, for tools/bench/bench_python.py.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "sam/format/index.h"
#include "sam/format/sha256.h"
#include "sam/format/shard_set.h"
#include "sam/automaton/builder.h"
#include "sam/runtime/recycling.h"
#include "sam/runtime/selection.h"
#include "sam/runtime/session.h"
#include "sam/runtime/static_index.h"

namespace {

constexpr uint32_t kVocab = 200;
constexpr uint32_t kBos = 1;
constexpr size_t kTopK = 4;
constexpr size_t kDraftSize = 16;

struct Rng {
  uint64_t s;
  uint64_t Next() {
    s ^= s << 13;
    s ^= s >> 7;
    s ^= s << 17;
    return s;
  }
  uint32_t Token() { return 2 + static_cast<uint32_t>(Next() % (kVocab - 2)); }
};

// A session as the Python tests create it: Session(policy=name,
// draft_size=kDraftSize, recycling_vocab_size=kVocab when the policy needs it).
struct ReferenceSession {
  ReferenceSession(const sam::runtime::NamedPolicy& named) {
    sam::runtime::SessionOptions options;
    options.policy = named.policy;
    options.draft_size = kDraftSize;
    if (named.recycling_fallback) {
      recycling = std::make_unique<sam::runtime::RecyclingDrafter>(kVocab);
      options.fallback = recycling.get();
    }
    session = std::make_unique<sam::runtime::Session>(options);
  }
  std::unique_ptr<sam::runtime::RecyclingDrafter> recycling;
  std::unique_ptr<sam::runtime::Session> session;
};

// The model's fake top-k after token t (any deterministic rule will do).
std::vector<uint32_t> TopK(std::span<const uint32_t> tokens) {
  std::vector<uint32_t> topk;
  for (uint32_t t : tokens)
    for (size_t j = 0; j < kTopK; ++j)
      topk.push_back((t * 7 + static_cast<uint32_t>(j) * 13 + 1) % kVocab);
  return topk;
}

// The accepted path of `tree` along generation[i + 1, ...), start included.
std::vector<uint32_t> AcceptedPath(const sam::runtime::DraftTree& tree,
                                   const std::vector<uint32_t>& generation, size_t i) {
  std::vector<uint32_t> path = {generation[i]};
  int node = 0;
  for (size_t k = i + 1; k < generation.size(); ++k) {
    node = tree.Child(node, generation[k]);
    if (node < 0) break;
    path.push_back(generation[k]);
  }
  return path;
}

// The engine interface tests' oracle (test_engines.py): kEngineRequests
// requests (prompt, generation), and for policies sam and sam-cal what a
// fresh C++ session per request drafts when an engine verifies
//   "chain": a chain of at most kChainTokens tokens (vLLM, HF transformers:
//            shape kChain, the default draft_size, Propose(start,
//            kChainTokens + 1)), accepting its longest prefix that the
//            generation continues; each step also records the tree the
//            chain was cut from (last_tree: tokens, parents, depths,
//            accept_estimates), for the tests' brute-force best chain;
//   "chain_bare": the same from the bare prompt (prefilled but its last id,
//            which starts the first draft: HF's first get_candidates);
//   "tree":  the whole tree (SGLang; draft_size kTreeNodes), accepting the
//            longest root path that the generation continues.
constexpr size_t kEngineRequests = 6;
constexpr size_t kChainTokens = 7;
constexpr size_t kTreeNodes = 12;

template <typename Text>
nlohmann::json EngineReference(const sam::format::IndexFile& file, Text& text) {
  nlohmann::json requests = nlohmann::json::array();
  std::vector<std::vector<uint32_t>> prompts, generations;
  for (size_t r = 0; r < kEngineRequests; ++r) {
    std::vector<uint32_t> prompt = {kBos};
    const auto body = text(20 + 7 * r);
    prompt.insert(prompt.end(), body.begin(), body.end());
    prompts.push_back(prompt);
    generations.push_back(text(60 + 25 * r));
    requests.push_back({{"prompt", prompts.back()}, {"generation", generations.back()}});
  }
  nlohmann::json out = {{"chain_tokens", kChainTokens},
                        {"tree_nodes", kTreeNodes},
                        {"requests", requests}};
  for (const char* policy : {"sam", "sam-cal"}) {
    for (const char* mode : {"chain", "chain_bare", "tree"}) {
      const bool chain_mode = std::string(mode) != "tree";
      const bool bare = std::string(mode) == "chain_bare";
      nlohmann::json per_request = nlohmann::json::array();
      for (size_t r = 0; r < kEngineRequests; ++r) {
        sam::runtime::SessionOptions options;
        options.policy = sam::runtime::FindPolicy(policy).policy;
        if (chain_mode)
          options.shape = sam::runtime::DraftShape::kChain;
        else
          options.draft_size = kTreeNodes;
        sam::runtime::Session session(options);
        session.AttachIndex(file.shared_view());
        // The engines' first step: the prompt is prefilled and the model's
        // first token (generation[0]) is the first start token; from the
        // bare prompt, its last id starts the first draft.
        std::vector<uint32_t> generation = generations[r];
        if (bare) {
          session.Prefill(std::span(prompts[r]).first(prompts[r].size() - 1));
          generation.insert(generation.begin(), prompts[r].back());
        } else {
          session.Prefill(prompts[r]);
        }
        nlohmann::json steps = nlohmann::json::array();
        for (size_t i = 0; i + 1 < generation.size();) {
          std::vector<uint32_t> path = {generation[i]};
          if (chain_mode) {
            const sam::runtime::DraftTree& drafted =
                session.Propose(generation[i], kChainTokens + 1);
            const std::vector<uint32_t> chain(drafted.tokens.begin() + 1, drafted.tokens.end());
            for (size_t k = 0; k < chain.size() && i + 1 + k < generation.size() &&
                               chain[k] == generation[i + 1 + k];
                 ++k)
              path.push_back(chain[k]);
            const sam::runtime::DraftTree& tree = session.last_tree();
            const std::vector<double> estimates(tree.accept_estimates.begin(),
                                                tree.accept_estimates.end());
            steps.push_back({{"chain", chain},
                             {"accepted", path.size() - 1},
                             {"tokens", tree.tokens},
                             {"parents", tree.parents},
                             {"depths", tree.depths},
                             {"estimates", estimates}});
          } else {
            const sam::runtime::DraftTree& tree = session.Propose(generation[i]);
            path = AcceptedPath(tree, generation, i);
            steps.push_back({{"tokens", tree.tokens},
                             {"parents", tree.parents},
                             {"accepted", path.size() - 1}});
          }
          session.Commit(path);
          i += path.size();
        }
        per_request.push_back(steps);
      }
      out[mode][policy] = per_request;
    }
  }
  return out;
}

int Fixture(const std::string& dir, size_t num_documents, size_t generation_length) {
  std::filesystem::create_directories(dir);  // the documented command names a new folder
  Rng rng{0x9E3779B97F4A7C15ull};
  std::vector<std::vector<uint32_t>> phrases(40);
  for (auto& p : phrases) {
    p.resize(4 + rng.Next() % 12);
    for (auto& t : p) t = rng.Token();
  }
  auto text = [&](size_t length) {  // phrases and noise
    std::vector<uint32_t> out;
    while (out.size() < length) {
      if (rng.Next() % 3 == 0)
        out.push_back(rng.Token());
      else {
        const auto& p = phrases[rng.Next() % phrases.size()];
        out.insert(out.end(), p.begin(), p.end());
      }
    }
    out.resize(length);
    return out;
  };
  std::vector<std::vector<uint32_t>> documents;
  for (size_t d = 0; d < num_documents; ++d) {
    std::vector<uint32_t> doc = {kBos};
    const auto body = text(20 + rng.Next() % 60);
    doc.insert(doc.end(), body.begin(), body.end());
    documents.push_back(doc);
  }
  sam::automaton::IndexInfo info;
  info.bos_id = kBos;
  sam::automaton::BuildIndexFile(documents, kVocab, dir + "/index.sam", info);
  // The same documents as a shard set of three shards (set.samset), which
  // drafts as index.sam does, every policy.
  {
    sam::format::ShardSetManifest manifest;
    manifest.vocab_size = kVocab;
    const size_t cuts[] = {0, documents.size() / 3, documents.size() / 2, documents.size()};
    for (size_t k = 0; k < 3; ++k) {
      const std::string file = "set." + std::to_string(k) + ".sam";
      const auto w = sam::automaton::BuildIndexFile(
          std::vector<std::vector<uint32_t>>(documents.begin() + cuts[k],
                                             documents.begin() + cuts[k + 1]),
          kVocab, dir + "/" + file, info);
      sam::format::ShardEntry e;
      e.file = file;
      e.bytes = w.file_bytes;
      e.sha256 = sam::format::Sha256File(dir + "/" + file);
      e.tokens = w.tokens;
      e.documents = w.documents;
      e.states = w.states;
      manifest.shards.push_back(e);
    }
    sam::format::WriteShardSetManifest(dir + "/set.samset", manifest);
  }

  std::vector<uint32_t> prompt = {kBos};
  const auto prompt_body = text(30);
  prompt.insert(prompt.end(), prompt_body.begin(), prompt_body.end());
  const std::vector<uint32_t> generation = text(generation_length);

  auto file = sam::format::IndexFile::Open(dir + "/index.sam");
  nlohmann::json out = {{"vocab_size", kVocab},
                        {"draft_size", kDraftSize},
                        {"top_k", kTopK},
                        {"prompt", prompt},
                        {"generation", generation}};
  for (const sam::runtime::NamedPolicy& named : sam::runtime::NamedPolicies()) {
    ReferenceSession ref(named);
    ref.session->AttachIndex(file.shared_view());
    ref.session->Prefill(prompt);
    nlohmann::json steps = nlohmann::json::array();
    for (size_t i = 0; i + 1 < generation.size();) {
      const sam::runtime::DraftTree& tree = ref.session->Propose(generation[i]);
      nlohmann::json step = {{"start", generation[i]},
                             {"tokens", tree.tokens},
                             {"parents", tree.parents},
                             {"depths", tree.depths},
                             {"source", sam::runtime::DraftSourceName(tree.source)},
                             {"match_len", tree.match_len}};
      const std::vector<uint32_t> path = AcceptedPath(tree, generation, i);
      ref.session->Commit(path);
      const std::vector<uint32_t> topk = TopK(path);
      ref.session->ObserveTopK(path, topk, kTopK);
      step["commit"] = path;
      step["topk"] = topk;
      steps.push_back(step);
      i += path.size();
    }
    out["policies"][std::string(named.name)] = {
        {"steps", steps}, {"stats", nlohmann::json::parse(ref.session->statistics().ToJson())}};
  }
  out["engines"] = EngineReference(file, text);
  std::ofstream(dir + "/reference.json") << out.dump() << "\n";
  return 0;
}

int Bench(const std::string& dir, const std::string& policy, size_t reps) {
  nlohmann::json ref;
  std::ifstream(dir + "/reference.json") >> ref;
  const auto prompt = ref["prompt"].get<std::vector<uint32_t>>();
  const auto generation = ref["generation"].get<std::vector<uint32_t>>();
  auto file = sam::format::IndexFile::Open(dir + "/index.sam");
  auto prepared = sam::runtime::StaticIndex::Create(file.shared_view());
  ReferenceSession session(sam::runtime::FindPolicy(policy));
  session.session->AttachIndex(prepared);
  // The commits of a greedy replay, found once (the timed loop replays them).
  std::vector<std::vector<uint32_t>> commits;
  session.session->Prefill(prompt);
  for (size_t i = 0; i + 1 < generation.size();) {
    commits.push_back(AcceptedPath(session.session->Propose(generation[i]), generation, i));
    session.session->Commit(commits.back());
    i += commits.back().size();
  }
  std::vector<double> per_step;
  for (size_t r = 0; r < reps; ++r) {
    session.session->Reset();
    session.session->Prefill(prompt);
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& c : commits) {
      session.session->Propose(c[0]);
      session.session->Commit(c);
    }
    const auto t1 = std::chrono::steady_clock::now();
    per_step.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() /
                       static_cast<double>(commits.size()));
  }
  std::sort(per_step.begin(), per_step.end());
  std::cout << nlohmann::json{{"policy", policy},
                              {"steps", commits.size()},
                              {"median_ns_per_step", per_step[per_step.size() / 2]},
                              {"min_ns_per_step", per_step.front()}}
                   .dump()
            << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::vector<std::string> args(argv + 1, argv + argc);
    if (args.size() >= 2 && args[0] == "fixture")
      return Fixture(args[1], args.size() > 2 ? std::stoul(args[2]) : 60,
                     args.size() > 3 ? std::stoul(args[3]) : 400);
    if (args.size() == 4 && args[0] == "bench") return Bench(args[1], args[2], std::stoul(args[3]));
    std::cerr << "usage: python_reference_session fixture DIR [DOCUMENTS GENERATION]\n"
                 "       python_reference_session bench DIR POLICY REPS\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "python_reference_session: " << e.what() << "\n";
    return 1;
  }
}
