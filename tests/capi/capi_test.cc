// Tests of the C API: error codes and messages, lifetime rules, and drafts
// identical to the C++ Session's on the same inputs.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "sam/format/accelerators.h"
#include "sam/format/child_records.h"
#include "sam/format/index.h"
#include "sam/format/sha256.h"
#include "sam/format/shard_set.h"
#include "sam/automaton/builder.h"
#include "sam/runtime/recycling.h"
#include "sam/runtime/replay.h"  // AcceptedLength
#include "sam/runtime/selection.h"
#include "sam/runtime/static_index.h"
#include "sam/runtime/session.h"
#include "sam/runtime/verify.h"  // Rng
#include "sam/sam.h"
#include "reseal.h"

namespace {

constexpr uint32_t kVocab = 50;

// Per process: gtest_discover_tests runs every test in its own process, and
// ctest may run them in parallel.
std::string TempPath(const std::string& name) {
  return testing::TempDir() + "capi_test_" + std::to_string(::getpid()) + "_" + name;
}

sam::format::Sha256Digest FakeTokenizerDigest() {
  const std::string model = "not really a SentencePiece model";
  return sam::format::Sha256(model.data(), model.size());
}

// Random documents over a small vocabulary, with repeats so that matches
// are long, built into an index whose tokenizer fingerprint is
// FakeTokenizerDigest().
class CapiTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    sam::runtime::Rng rng(1);
    std::vector<uint32_t> phrase(30);
    for (auto& t : phrase) t = 2 + rng.Next() % (kVocab - 2);
    for (int d = 0; d < 40; ++d) {
      std::vector<uint32_t> doc{1};
      while (doc.size() < 60) {
        if (rng.Uniform() < 0.3) {
          const size_t from = rng.Next() % phrase.size();
          doc.insert(doc.end(), phrase.begin() + from, phrase.end());
        } else {
          doc.push_back(2 + rng.Next() % (kVocab - 2));
        }
      }
      documents_->push_back(doc);
    }
    sam::automaton::IndexInfo info;
    info.tokenizer_sha256 = FakeTokenizerDigest();
    sam::automaton::BuildIndexFile(*documents_, kVocab, *path_, info);
  }
  static void TearDownTestSuite() { std::remove(path_->c_str()); }

  static inline auto* documents_ = new std::vector<std::vector<uint32_t>>();
  static inline auto* path_ = new std::string(TempPath("index.sam"));
};

TEST_F(CapiTest, OpensWithOrWithoutTheTokenizerFingerprint) {
  sam_index* index = nullptr;
  ASSERT_EQ(sam_index_open(path_->c_str(), nullptr, 0, &index), SAM_OK) << sam_last_error();
  EXPECT_EQ(sam_index_vocab_size(index), kVocab);
  EXPECT_EQ(sam_index_num_documents(index), documents_->size());
  EXPECT_GT(sam_index_num_tokens(index), 40u * 60u);
  EXPECT_EQ(sam_index_verify(index), SAM_OK) << sam_last_error();
  sam_index_close(index);

  const std::string hex = sam::format::DigestToHex(FakeTokenizerDigest());
  index = nullptr;
  ASSERT_EQ(sam_index_open(path_->c_str(), hex.c_str(), 0, &index), SAM_OK) << sam_last_error();
  sam_index_close(index);
}

TEST_F(CapiTest, RefusesAnotherTokenizer) {
  const std::string other(64, 'a');
  sam_index* index = nullptr;
  EXPECT_EQ(sam_index_open(path_->c_str(), other.c_str(), 0, &index), SAM_ERR_TOKENIZER_MISMATCH);
  EXPECT_EQ(index, nullptr);
  EXPECT_NE(std::string(sam_last_error()), "");
  EXPECT_EQ(sam_index_open(path_->c_str(), "not hex", 0, &index), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(index, nullptr);
}

TEST_F(CapiTest, MapsFileErrorsToCodes) {
  sam_index* index = nullptr;
  const std::string missing = TempPath("missing.sam");
  std::remove(missing.c_str());
  EXPECT_EQ(sam_index_open(missing.c_str(), nullptr, 0, &index), SAM_ERR_IO);
  EXPECT_NE(std::string(sam_last_error()).find("missing.sam"), std::string::npos)
      << sam_last_error();

  const std::string garbage = TempPath("garbage.sam");
  std::ofstream(garbage) << std::string(4096, 'x');
  EXPECT_EQ(sam_index_open(garbage.c_str(), nullptr, 0, &index), SAM_ERR_FORMAT);
  std::remove(garbage.c_str());

  // A truncated copy of a valid index.
  std::ifstream in(*path_, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string truncated = TempPath("truncated.sam");
  std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  EXPECT_EQ(sam_index_open(truncated.c_str(), nullptr, 0, &index), SAM_ERR_FORMAT);
  EXPECT_EQ(index, nullptr);
  std::remove(truncated.c_str());
}

TEST(Capi, NullArgumentsAreInvalidNotFatal) {
  sam_index* index = nullptr;
  sam_session* session = nullptr;
  sam_draft draft;
  EXPECT_EQ(sam_index_open(nullptr, nullptr, 0, &index), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sam_last_error()).find("path"), std::string::npos);
  EXPECT_EQ(sam_index_open("x.sam", nullptr, 0, nullptr), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_index_verify(nullptr), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_session_new(nullptr, nullptr), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_session_attach_index(nullptr, nullptr), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_session_prefill(nullptr, nullptr, 0), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_session_propose(nullptr, 0, 0, &draft), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_session_commit(nullptr, nullptr, 0), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_session_observe_topk(nullptr, nullptr, 0, nullptr, 0), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_session_reset(nullptr), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_session_stats_json(nullptr), nullptr);
  EXPECT_EQ(sam_index_vocab_size(nullptr), 0u);
  sam_index_close(nullptr);
  sam_session_free(nullptr);

  ASSERT_EQ(sam_session_new(nullptr, &session), SAM_OK);  // defaults
  EXPECT_EQ(sam_session_attach_index(session, nullptr), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_session_prefill(session, nullptr, 3), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_session_prefill(session, nullptr, 0), SAM_OK);
  EXPECT_EQ(sam_session_propose(session, 5, 0, nullptr), SAM_ERR_INVALID_ARGUMENT);
  sam_session_free(session);
}

TEST(Capi, RejectsBadOptions) {
  sam_session_config options;
  sam_session_config_init(&options);
  EXPECT_EQ(options.draft_size, 40u);
  EXPECT_EQ(options.policy, SAM_POLICY_CALIBRATED);  // the default everywhere
  sam_session* session = nullptr;
  options.policy = 17;
  EXPECT_EQ(sam_session_new(&options, &session), SAM_ERR_INVALID_ARGUMENT);
  sam_session_config_init(&options);
  options.draft_size = 0;
  EXPECT_EQ(sam_session_new(&options, &session), SAM_ERR_INVALID_ARGUMENT);
  sam_session_config_init(&options);
  options.tree_width = 0;
  EXPECT_EQ(sam_session_new(&options, &session), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sam_last_error()).find("tree_width"), std::string::npos) << sam_last_error();
  sam_session_config_init(&options);
  options.tree_nodes = SAM_MAX_DRAFT_SIZE + 1;
  EXPECT_EQ(sam_session_new(&options, &session), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sam_last_error()).find("tree_nodes"), std::string::npos) << sam_last_error();
  sam_session_config_init(&options);
  options.shape = 2;
  EXPECT_EQ(sam_session_new(&options, &session), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(session, nullptr);
  // Any negative l_bias is automatic, as documented.
  sam_session_config_init(&options);
  options.l_bias = -7;
  ASSERT_EQ(sam_session_new(&options, &session), SAM_OK) << sam_last_error();
  sam_session_free(session);
}

// The drafts of a dynamic-only session over a repetitive prompt (the draft fills draft_size).
std::vector<uint32_t> RepetitiveDraft(sam_session* session) {
  std::vector<uint32_t> prompt;
  for (uint32_t i = 0; i < 100; ++i) prompt.push_back(1 + i % 7);
  EXPECT_EQ(sam_session_prefill(session, prompt.data(), prompt.size()), SAM_OK);
  sam_draft d;
  EXPECT_EQ(sam_session_propose(session, 1 + 100 % 7, 0, &d), SAM_OK) << sam_last_error();
  return {d.tokens, d.tokens + d.count};
}

// The config's defaults are the C++ SessionOptions' (the one option table's).
TEST(Capi, ConfigDefaultsEqualTheOptionsDefaults) {
  sam_session_config config;
  sam_session_config_init(&config);
  const sam::runtime::SessionOptions options;
  EXPECT_EQ(config.struct_size, sizeof(sam_session_config));
  EXPECT_EQ(config.draft_size, options.draft_size);
  EXPECT_EQ(config.policy, static_cast<int>(options.policy));
  EXPECT_EQ(config.shape, static_cast<int>(options.shape));
  EXPECT_EQ(config.l_bias, -1);
  EXPECT_FALSE(options.paper.l_bias.has_value());
  EXPECT_EQ(config.l_threshold, options.paper.l_threshold);
  EXPECT_EQ(config.tree_nodes, options.tree.nodes);
  EXPECT_EQ(config.tree_width, options.tree.width);
  EXPECT_EQ(config.recycling_vocab_size, 0u);
  EXPECT_EQ(config.max_dynamic_bytes, options.max_dynamic_bytes);
  EXPECT_EQ(config.collect_timing, options.collect_timing ? 1 : 0);
  EXPECT_EQ(config.cost_curve, nullptr);

  sam_session* session = nullptr;
  ASSERT_EQ(sam_session_new(&config, &session), SAM_OK) << sam_last_error();
  sam_session_free(session);
  session = nullptr;
  ASSERT_EQ(sam_session_new(nullptr, &session), SAM_OK) << sam_last_error();
  sam_session_free(session);
  EXPECT_EQ(sam_session_new(&config, nullptr), SAM_ERR_INVALID_ARGUMENT);
}

// A NULL config is the initialised one; a config's fields reach the session.
TEST(Capi, NullConfigIsTheDefaults) {
  sam_session_config config;
  sam_session_config_init(&config);
  sam_session *a = nullptr, *b = nullptr, *c = nullptr;
  ASSERT_EQ(sam_session_new(nullptr, &a), SAM_OK) << sam_last_error();
  ASSERT_EQ(sam_session_new(&config, &b), SAM_OK) << sam_last_error();
  config.policy = SAM_POLICY_DYNAMIC_ONLY;
  config.draft_size = 12;
  ASSERT_EQ(sam_session_new(&config, &c), SAM_OK) << sam_last_error();
  const std::vector<uint32_t> draft = RepetitiveDraft(a);
  EXPECT_GT(draft.size(), 1u);
  EXPECT_EQ(RepetitiveDraft(b), draft);
  EXPECT_EQ(RepetitiveDraft(c).size(), 12u);
  sam_session_free(a);
  sam_session_free(b);
  sam_session_free(c);
}

// sam-cal with a cost curve: a flat one drafts as none; t(n) = n (one value: proportional
// beyond it) drafts nothing; bad curves are refused.
TEST(Capi, CostCurveSizesCalibratedDrafts) {
  auto draft = [](const std::vector<double>& curve) {
    sam_session_config config;
    sam_session_config_init(&config);
    EXPECT_EQ(config.cost_curve, nullptr);
    EXPECT_EQ(config.cost_curve_size, 0u);
    config.policy = SAM_POLICY_CALIBRATED;
    config.draft_size = 12;
    config.cost_curve = curve.empty() ? nullptr : curve.data();
    config.cost_curve_size = curve.size();
    sam_session* session = nullptr;
    EXPECT_EQ(sam_session_new(&config, &session), SAM_OK) << sam_last_error();
    const std::vector<uint32_t> tokens = RepetitiveDraft(session);
    sam_session_free(session);
    return tokens;
  };
  const std::vector<uint32_t> plain = draft({});
  EXPECT_GT(plain.size(), 1u);
  EXPECT_EQ(draft(std::vector<double>(SAM_MAX_DRAFT_SIZE, 2.5)), plain);
  EXPECT_EQ(draft({3.0}).size(), 1u);

  sam_session_config config;
  sam_session_config_init(&config);
  config.policy = SAM_POLICY_CALIBRATED;
  sam_session* session = nullptr;
  const double bad[] = {1.0, -1.0};
  config.cost_curve = bad;
  config.cost_curve_size = 2;
  EXPECT_EQ(sam_session_new(&config, &session), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sam_last_error()).find("cost_curve"), std::string::npos) << sam_last_error();
  EXPECT_NE(std::string(sam_last_error()).find("positive finite"), std::string::npos);
  config.cost_curve = nullptr;
  EXPECT_EQ(sam_session_new(&config, &session), SAM_ERR_INVALID_ARGUMENT);
  const std::vector<double> long_curve(SAM_MAX_DRAFT_SIZE + 1, 1.0);
  config.cost_curve = long_curve.data();
  config.cost_curve_size = long_curve.size();
  EXPECT_EQ(sam_session_new(&config, &session), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(session, nullptr);
}

// A caller compiled against an older, shorter sam_session_config: its object ends early (a
// buffer of exactly struct_size bytes here, so that reading past it would be caught by ASan),
// and the fields it does not cover take their defaults, whatever lies past it.
TEST(Capi, ShorterConfigGetsDefaultsForTheMissingFields) {
  sam_session_config full;
  sam_session_config_init(&full);
  full.draft_size = 12;
  full.policy = 17;  // not a policy: refused when read
  sam_session* session = nullptr;
  EXPECT_EQ(sam_session_new(&full, &session), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sam_last_error()).find("policy 17"), std::string::npos) << sam_last_error();

  // Only struct_size and draft_size: policy (and everything after) is the default.
  const size_t old_size = offsetof(sam_session_config, policy);
  full.struct_size = old_size;
  std::vector<unsigned char> old_caller(reinterpret_cast<unsigned char*>(&full),
                                        reinterpret_cast<unsigned char*>(&full) + old_size);
  ASSERT_EQ(sam_session_new(reinterpret_cast<const sam_session_config*>(old_caller.data()),
                               &session),
            SAM_OK)
      << sam_last_error();
  sam_session_config expected;
  sam_session_config_init(&expected);
  expected.draft_size = 12;  // the default policy, SAM_POLICY_PAPER
  sam_session* reference = nullptr;
  ASSERT_EQ(sam_session_new(&expected, &reference), SAM_OK);
  const std::vector<uint32_t> draft = RepetitiveDraft(session);
  EXPECT_EQ(draft.size(), 12u);
  EXPECT_EQ(RepetitiveDraft(reference), draft);
  sam_session_free(session);
  sam_session_free(reference);

  // A field cut in the middle is not read either.
  full.struct_size = old_size + 1;
  session = nullptr;
  EXPECT_EQ(sam_session_new(&full, &session), SAM_OK) << sam_last_error();
  sam_session_free(session);

  // Too short to hold draft_size: refused.
  full.struct_size = offsetof(sam_session_config, draft_size);
  session = nullptr;
  EXPECT_EQ(sam_session_new(&full, &session), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(session, nullptr);
  EXPECT_NE(std::string(sam_last_error()).find("struct_size"), std::string::npos);
}

// A caller compiled against a newer, longer struct: unknown trailing bytes must be zero.
TEST(Capi, LongerConfigNeedsZeroTrailingBytes) {
  struct Newer {
    sam_session_config known;
    uint64_t future_option;
    uint32_t another;
  } newer;
  std::memset(&newer, 0, sizeof newer);  // padding included
  sam_session_config_init(&newer.known);
  newer.known.struct_size = sizeof(Newer);
  newer.known.draft_size = 12;
  newer.known.policy = SAM_POLICY_DYNAMIC_ONLY;
  sam_session* session = nullptr;
  ASSERT_EQ(sam_session_new(&newer.known, &session), SAM_OK) << sam_last_error();
  EXPECT_EQ(RepetitiveDraft(session).size(), 12u);
  sam_session_free(session);

  newer.another = 1;
  session = nullptr;
  EXPECT_EQ(sam_session_new(&newer.known, &session), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(session, nullptr);
  const std::string message = sam_last_error();
  EXPECT_NE(message.find("struct_size " + std::to_string(sizeof(Newer))), std::string::npos)
      << message;
  EXPECT_NE(message.find("not zero"), std::string::npos) << message;
}

// draft_size has a documented maximum: SAM_MAX_DRAFT_SIZE is accepted (and
// a draft can reach it, depths included), one more is refused with a message.
TEST(Capi, DraftSizeAtAndBeyondTheMaximum) {
  EXPECT_EQ(SAM_MAX_DRAFT_SIZE, 4096);
  sam_session_config options;
  sam_session_config_init(&options);
  options.policy = SAM_POLICY_DYNAMIC_ONLY;
  options.max_dynamic_bytes = size_t{16} << 20;
  options.draft_size = SAM_MAX_DRAFT_SIZE;
  sam_session* session = nullptr;
  ASSERT_EQ(sam_session_new(&options, &session), SAM_OK) << sam_last_error();
  std::vector<uint32_t> prompt;
  for (size_t i = 0; i < 2 * SAM_MAX_DRAFT_SIZE + 10; ++i) prompt.push_back(1 + i % 5);
  ASSERT_EQ(sam_session_prefill(session, prompt.data(), prompt.size()), SAM_OK);
  sam_draft d;
  ASSERT_EQ(sam_session_propose(session, 1 + prompt.size() % 5, 0, &d), SAM_OK) << sam_last_error();
  EXPECT_EQ(d.count, size_t{SAM_MAX_DRAFT_SIZE});
  EXPECT_EQ(d.depths[d.count - 1], SAM_MAX_DRAFT_SIZE - 1);
  for (size_t i = 1; i < d.count; ++i) ASSERT_EQ(d.depths[i], d.depths[d.parents[i]] + 1) << i;
  sam_session_free(session);

  for (size_t bad : {size_t{SAM_MAX_DRAFT_SIZE} + 1, size_t{1} << 40, ~size_t{0}}) {
    options.draft_size = bad;
    session = nullptr;
    EXPECT_EQ(sam_session_new(&options, &session), SAM_ERR_INVALID_ARGUMENT) << bad;
    EXPECT_EQ(session, nullptr);
    const std::string message = sam_last_error();
    EXPECT_NE(message.find("sam_session_new: draft_size"), std::string::npos) << message;
    EXPECT_NE(message.find("4096"), std::string::npos) << message;
    EXPECT_NE(message.find(std::to_string(bad)), std::string::npos) << message;
  }
}

// The C API uses the runtime's one naming scheme (its table is the oracle).
TEST(Capi, PolicyNamesRoundTrip) {
  size_t named = 0;
  for (const sam::runtime::NamedPolicy& p : sam::runtime::NamedPolicies()) {
    int policy = -1, recycling = -1;
    ASSERT_EQ(sam_policy_from_name(std::string(p.name).c_str(), &policy, &recycling), SAM_OK)
        << p.name << ": " << sam_last_error();
    EXPECT_EQ(policy, static_cast<int>(p.policy)) << p.name;
    EXPECT_EQ(recycling, p.recycling_fallback ? 1 : 0) << p.name;
    if (!p.recycling_fallback) {
      EXPECT_EQ(std::string(sam_policy_name(policy)), p.name);
      ++named;
    }
  }
  EXPECT_EQ(named, 5u);  // SAM_POLICY_PAPER .. SAM_POLICY_CALIBRATED
  EXPECT_STREQ(sam_policy_name(SAM_POLICY_PAPER), "sam");
  EXPECT_STREQ(sam_policy_name(SAM_POLICY_CALIBRATED), "sam-cal");
  EXPECT_STREQ(sam_policy_name(5), "unknown");
  EXPECT_STREQ(sam_policy_name(-1), "unknown");
  int policy = 7;
  EXPECT_EQ(sam_policy_from_name("sam-cal", &policy, nullptr), SAM_OK);
  EXPECT_EQ(policy, SAM_POLICY_CALIBRATED);

  policy = 7;
  EXPECT_EQ(sam_policy_from_name("calibrated", &policy, nullptr), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(policy, 7);  // unchanged
  const std::string message = sam_last_error();
  EXPECT_NE(message.find("'calibrated'"), std::string::npos) << message;
  for (const sam::runtime::NamedPolicy& p : sam::runtime::NamedPolicies())
    EXPECT_NE(message.find(std::string(p.name)), std::string::npos) << message;
  EXPECT_EQ(sam_policy_from_name(nullptr, &policy, nullptr), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_policy_from_name("sam", nullptr, nullptr), SAM_ERR_INVALID_ARGUMENT);

  // An out-of-range sam_policy is refused with the names of the valid ones.
  sam_session_config options;
  sam_session_config_init(&options);
  options.policy = 9;
  sam_session* session = nullptr;
  EXPECT_EQ(sam_session_new(&options, &session), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sam_last_error()).find("4 (sam-cal)"), std::string::npos)
      << sam_last_error();
}

TEST(Capi, StatusNamesAreStable) {
  EXPECT_STREQ(sam_status_name(SAM_OK), "ok");
  EXPECT_STREQ(sam_status_name(SAM_ERR_IO), "io");
  EXPECT_STREQ(sam_status_name(SAM_ERR_FORMAT), "format");
  EXPECT_STREQ(sam_status_name(SAM_ERR_TOKENIZER_MISMATCH), "tokenizer_mismatch");
  EXPECT_STREQ(sam_status_name(SAM_ERR_INVALID_ARGUMENT), "invalid_argument");
  EXPECT_STREQ(sam_status_name(SAM_ERR_OUT_OF_MEMORY), "out_of_memory");
  EXPECT_STREQ(sam_status_name(SAM_ERR_INTERNAL), "internal");
  EXPECT_STREQ(sam_status_name(-3), "unknown");
}

TEST(Capi, HeaderAndLibraryVersionsAgree) {
  // The library's version comes from CMake's project(VERSION), the macros from sam.h.
  EXPECT_EQ(sam_version(), SAM_VERSION);
  EXPECT_EQ(SAM_VERSION, SAM_MAKE_VERSION(SAM_VERSION_MAJOR, SAM_VERSION_MINOR, SAM_VERSION_PATCH));
  EXPECT_EQ(SAM_VERSION, 200);  // 0.2.0
  EXPECT_STREQ(sam_version_string(), SAM_VERSION_STRING);
  EXPECT_EQ(std::string(SAM_VERSION_STRING), std::to_string(SAM_VERSION_MAJOR) + "." +
                                                 std::to_string(SAM_VERSION_MINOR) + "." +
                                                 std::to_string(SAM_VERSION_PATCH));
  EXPECT_EQ(sam_abi_version(), SAM_ABI_VERSION);
}

TEST(Capi, LastErrorIsPerThread) {
  sam_index* index = nullptr;
  ASSERT_EQ(sam_index_open(nullptr, nullptr, 0, &index), SAM_ERR_INVALID_ARGUMENT);
  const std::string mine = sam_last_error();
  std::string theirs;
  std::thread([&] {
    theirs = sam_last_error();  // nothing failed in this thread yet
    sam_session_reset(nullptr);
  }).join();
  EXPECT_EQ(theirs, "");
  EXPECT_EQ(std::string(sam_last_error()), mine);
}

// Statistics JSON without the "..._ns" timing fields: each `"name_ns":digits`
// (name of lower-case letters and underscores) is cut out, as the pattern
// "[a-z_]+_ns":[0-9]+ would be replaced by nothing. (Plain string code: GCC 12
// warns falsely inside std::regex in an ASan build.)
std::string WithoutTimings(const std::string& json) {
  std::string out;
  size_t copied = 0;
  for (size_t at = json.find("_ns\":"); at != std::string::npos; at = json.find("_ns\":", at + 1)) {
    size_t name = at;
    while (name > copied && (std::islower(static_cast<unsigned char>(json[name - 1])) ||
                             json[name - 1] == '_'))
      --name;
    size_t end = at + 5;
    while (end < json.size() && std::isdigit(static_cast<unsigned char>(json[end]))) ++end;
    if (name == at || name == copied || json[name - 1] != '"' || end == at + 5) continue;
    out.append(json, copied, name - 1 - copied);
    copied = end;
    at = end - 1;
  }
  return out.append(json, copied);
}

// The same request script through the C API and through sam::runtime::Session
// gives the same drafts, step by step.
// The C side opens the index with `flags` (sam_index_open); the C++ side
// always uses the bare view.
// `tree` (sam-tree's nodes and width): set through sam_session_config on the C side and
// SessionOptions::tree on the C++ side (nullopt: the defaults).
void ExpectSameDraftsAsSession(const std::string& path, const std::vector<uint32_t>& text,
                               int policy, bool recycling, unsigned flags = 0,
                               std::optional<std::pair<size_t, size_t>> tree = {}) {
  sam_index* index = nullptr;
  ASSERT_EQ(sam_index_open(path.c_str(), nullptr, flags, &index), SAM_OK) << sam_last_error();
  sam_session* c_session = nullptr;
  sam_session_config config;
  sam_session_config_init(&config);
  config.policy = policy;
  config.recycling_vocab_size = recycling ? kVocab : 0;
  if (tree) {
    config.tree_nodes = tree->first;
    config.tree_width = tree->second;
  }
  ASSERT_EQ(sam_session_new(&config, &c_session), SAM_OK) << sam_last_error();
  ASSERT_EQ(sam_session_attach_index(c_session, index), SAM_OK);

  const auto file = sam::format::IndexFile::Open(path);
  sam::runtime::RecyclingDrafter drafter(kVocab);
  sam::runtime::SessionOptions options;
  options.policy = static_cast<sam::runtime::Policy>(policy);
  if (tree) {
    options.tree.nodes = tree->first;
    options.tree.width = tree->second;
  }
  options.fallback = recycling ? &drafter : nullptr;
  sam::runtime::Session session(options);
  session.AttachIndex(&file.view());  // the bare view: no flag changes drafts

  const size_t prompt = text.size() / 3;
  ASSERT_EQ(sam_session_prefill(c_session, text.data(), prompt), SAM_OK);
  session.Prefill(std::span<const uint32_t>(text.data(), prompt));
  size_t pos = prompt;  // text[pos] is the next start token
  int drafted = 0;
  while (pos + 1 < text.size()) {
    sam_draft d;
    ASSERT_EQ(sam_session_propose(c_session, text[pos], 0, &d), SAM_OK) << sam_last_error();
    const sam::runtime::DraftTree& tree = session.Propose(text[pos]);
    ASSERT_EQ(d.count, tree.size());
    EXPECT_EQ(std::vector<uint32_t>(d.tokens, d.tokens + d.count), tree.tokens);
    EXPECT_EQ(std::vector<int32_t>(d.parents, d.parents + d.count), tree.parents);
    EXPECT_EQ(std::vector<uint16_t>(d.depths, d.depths + d.count), tree.depths);
    EXPECT_EQ(d.source, static_cast<int>(tree.source));
    EXPECT_EQ(d.match_len, tree.match_len);
    drafted += d.count > 1;
    // Greedy acceptance against the text: the longest draft path equal to
    // what follows, then the bonus token.
    std::vector<uint32_t> argmax(tree.size());
    for (size_t i = 0; i < tree.size(); ++i) {
      const size_t at = pos + 1 + tree.depths[i];
      argmax[i] = at < text.size() ? text[at] : 0;
    }
    const auto r = sam::runtime::VerifyGreedy(tree, argmax);
    std::vector<uint32_t> committed{text[pos]};
    committed.insert(committed.end(), r.accepted_tokens.begin(), r.accepted_tokens.end());
    // The C API's greedy acceptance is VerifyGreedy's.
    sam_verify_result c_r;
    ASSERT_EQ(sam_session_verify_greedy(c_session, argmax.data(), argmax.size(), &c_r), SAM_OK)
        << sam_last_error();
    ASSERT_EQ(c_r.accepted_count, r.accepted_tokens.size());
    EXPECT_EQ(std::vector<int32_t>(c_r.accepted_nodes, c_r.accepted_nodes + c_r.accepted_count + 1),
              r.accepted_nodes);
    EXPECT_EQ(std::vector<uint32_t>(c_r.commit_tokens, c_r.commit_tokens + c_r.accepted_count + 1),
              committed);
    EXPECT_EQ(c_r.bonus_token, r.bonus_token);
    // Token Recycling feedback: the "model" predicts the next text token.
    std::vector<uint32_t> topk;
    for (size_t i = 0; i < tree.size(); ++i) topk.insert(topk.end(), {argmax[i], 1, 2});
    ASSERT_EQ(sam_session_observe_topk(c_session, tree.tokens.data(), tree.size(), topk.data(), 3),
              SAM_OK);
    session.ObserveTopK(tree.tokens, topk, 3);
    ASSERT_EQ(sam_session_commit(c_session, committed.data(), committed.size()), SAM_OK);
    session.Commit(committed);
    pos += committed.size();
  }
  EXPECT_GT(drafted, 0);
  const char* json = sam_session_stats_json(c_session);
  ASSERT_NE(json, nullptr);
  // The totals are the session's statistics; the request is the whole session here.
  nlohmann::json c_stats = nlohmann::json::parse(json);
  EXPECT_EQ(c_stats["timing"], false);
  const std::string request = c_stats["request"].dump();
  c_stats.erase("timing");
  c_stats.erase("request");
  const std::string expected = nlohmann::json::parse(session.statistics().ToJson()).dump();
  EXPECT_EQ(WithoutTimings(c_stats.dump()), WithoutTimings(expected));
  EXPECT_EQ(WithoutTimings(request), WithoutTimings(expected));
  EXPECT_EQ(sam_session_reset(c_session), SAM_OK);
  sam_session_free(c_session);
  sam_index_close(index);
}

// A deterministic stand-in for a model: the next token is a hash of the last two. Its text
// falls into cycles, so the session's drafts are often accepted.
uint32_t FakeModelNext(const std::vector<uint32_t>& context) {
  const size_t n = context.size();
  const uint64_t a = n > 0 ? context[n - 1] : 0, b = n > 1 ? context[n - 2] : 0;
  uint64_t h = (a * 0x9E3779B97F4A7C15ull) ^ (b + 0x632BE59BD9B4E019ull);
  h ^= h >> 29;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 32;
  return 2 + static_cast<uint32_t>(h % 23);
}

// The whole loop in C (propose, the model's argmax per node, sam_session_verify_greedy,
// commit) emits exactly what plain greedy decoding of the fake model emits.
TEST(Capi, VerifyGreedyLoopEqualsPlainGreedyDecoding) {
  const std::vector<uint32_t> prompt{1, 7, 9, 4, 11, 3};
  constexpr size_t kGenerate = 400;
  std::vector<uint32_t> plain = prompt;
  while (plain.size() < prompt.size() + kGenerate) plain.push_back(FakeModelNext(plain));
  plain.erase(plain.begin(), plain.begin() + prompt.size());

  for (int policy : {SAM_POLICY_PAPER, SAM_POLICY_TREE, SAM_POLICY_DYNAMIC_ONLY}) {
    sam_session_config config;
    sam_session_config_init(&config);
    config.policy = policy;
    config.draft_size = 8;
    sam_session* session = nullptr;
    ASSERT_EQ(sam_session_new(&config, &session), SAM_OK) << sam_last_error();
    ASSERT_EQ(sam_session_prefill(session, prompt.data(), prompt.size()), SAM_OK);
    std::vector<uint32_t> context = prompt;  // what the model has seen
    uint32_t start = FakeModelNext(context);
    std::vector<uint32_t> emitted{start};
    size_t steps = 0, accepted = 0;
    while (emitted.size() < kGenerate) {
      sam_draft d;
      ASSERT_EQ(sam_session_propose(session, start, 0, &d), SAM_OK) << sam_last_error();
      // The model after node i: the context, then the path from the root to node i.
      std::vector<uint32_t> argmax(d.count);
      for (size_t i = 0; i < d.count; ++i) {
        std::vector<uint32_t> path;
        for (int32_t node = static_cast<int32_t>(i); node >= 0; node = d.parents[node])
          path.insert(path.begin(), d.tokens[node]);
        std::vector<uint32_t> seen = context;
        seen.insert(seen.end(), path.begin(), path.end());
        argmax[i] = FakeModelNext(seen);
      }
      sam_verify_result r;
      ASSERT_EQ(sam_session_verify_greedy(session, argmax.data(), d.count, &r), SAM_OK)
          << sam_last_error();
      ASSERT_EQ(r.commit_tokens[0], start);
      emitted.insert(emitted.end(), r.commit_tokens + 1, r.commit_tokens + 1 + r.accepted_count);
      emitted.push_back(r.bonus_token);
      context.insert(context.end(), r.commit_tokens, r.commit_tokens + r.accepted_count + 1);
      ASSERT_EQ(sam_session_commit(session, r.commit_tokens, r.accepted_count + 1), SAM_OK);
      start = r.bonus_token;
      ++steps;
      accepted += r.accepted_count;
    }
    emitted.resize(kGenerate);
    EXPECT_EQ(emitted, plain) << sam_policy_name(policy);
    EXPECT_GT(accepted, kGenerate / 2) << sam_policy_name(policy);  // drafts were used
    EXPECT_LT(steps, kGenerate / 2) << sam_policy_name(policy);
    sam_session_free(session);
  }
}

// Runs one request of the fake model through the C loop: `steps` verified drafts.
void RunFakeModelRequest(sam_session* session, std::vector<uint32_t> context, size_t steps) {
  ASSERT_EQ(sam_session_prefill(session, context.data(), context.size()), SAM_OK);
  uint32_t start = FakeModelNext(context);
  for (size_t step = 0; step < steps; ++step) {
    sam_draft d;
    ASSERT_EQ(sam_session_propose(session, start, 0, &d), SAM_OK);
    std::vector<uint32_t> argmax(d.count);
    for (size_t i = 0; i < d.count; ++i) {
      std::vector<uint32_t> seen = context;
      size_t at = seen.size();
      for (int32_t node = static_cast<int32_t>(i); node >= 0; node = d.parents[node])
        seen.insert(seen.begin() + at, d.tokens[node]);
      argmax[i] = FakeModelNext(seen);
    }
    sam_verify_result r;
    ASSERT_EQ(sam_session_verify_greedy(session, argmax.data(), d.count, &r), SAM_OK);
    context.insert(context.end(), r.commit_tokens, r.commit_tokens + r.accepted_count + 1);
    ASSERT_EQ(sam_session_commit(session, r.commit_tokens, r.accepted_count + 1), SAM_OK);
    start = r.bonus_token;
  }
}

// Figures of one statistics object of sam_session_stats_json hold together.
void ExpectConsistent(const nlohmann::json& stats, uint64_t steps) {
  EXPECT_EQ(stats["steps"], steps) << stats;
  const nlohmann::json& total = stats["total"];
  EXPECT_EQ(total["steps"], steps) << stats;
  uint64_t source_steps = 0, accepted = 0;
  for (const auto& [name, source] : stats["sources"].items()) {
    source_steps += source["steps"].get<uint64_t>();
    accepted += source["accepted_tokens"].get<uint64_t>();
  }
  EXPECT_EQ(source_steps, steps) << stats;
  EXPECT_EQ(total["accepted_tokens"], accepted) << stats;
  if (steps == 0) return;
  double mat = 1;
  for (double share : total["mat_by_depth"]) mat += share;
  EXPECT_NEAR(total["mat"].get<double>(), mat, 1e-9) << stats;
  EXPECT_NEAR(total["mat"].get<double>(),
              1.0 + static_cast<double>(accepted) / static_cast<double>(steps), 1e-9);
}

TEST(Capi, StatsReportTheRequestAndTheTotals) {
  sam_session_config config;
  sam_session_config_init(&config);
  config.draft_size = 8;
  config.collect_timing = 1;
  sam_session* session = nullptr;
  ASSERT_EQ(sam_session_new(&config, &session), SAM_OK);
  RunFakeModelRequest(session, {1, 7, 9, 4, 11, 3}, 30);
  nlohmann::json first = nlohmann::json::parse(sam_session_stats_json(session));
  EXPECT_EQ(first["timing"], true);
  ExpectConsistent(first, 30);
  ExpectConsistent(first["request"], 30);
  EXPECT_GT(first["total"]["mat"].get<double>(), 1.0) << first;  // drafts were accepted
  EXPECT_GT(first["commit_ns"].get<uint64_t>(), 0u);
  EXPECT_GT(first["prefill_ns"].get<uint64_t>(), 0u);
  EXPECT_GT(first["total"]["propose_ns"].get<uint64_t>(), 0u);

  ASSERT_EQ(sam_session_reset(session), SAM_OK);
  nlohmann::json between = nlohmann::json::parse(sam_session_stats_json(session));
  ExpectConsistent(between, 30);
  ExpectConsistent(between["request"], 0);
  EXPECT_EQ(between["request"]["committed_tokens"], 0);
  EXPECT_EQ(between["request"]["sources"], nlohmann::json::object());

  RunFakeModelRequest(session, {2, 5, 8}, 20);
  nlohmann::json second = nlohmann::json::parse(sam_session_stats_json(session));
  ExpectConsistent(second, 50);
  ExpectConsistent(second["request"], 20);
  EXPECT_EQ(second["request"]["prefill_tokens"], 3);
  EXPECT_EQ(second["prefill_tokens"], 9);
  EXPECT_EQ(second["committed_tokens"].get<uint64_t>(),
            first["committed_tokens"].get<uint64_t>() +
                second["request"]["committed_tokens"].get<uint64_t>());
  EXPECT_EQ(second["total"]["accepted_tokens"].get<uint64_t>(),
            first["total"]["accepted_tokens"].get<uint64_t>() +
                second["request"]["total"]["accepted_tokens"].get<uint64_t>());

  ASSERT_EQ(sam_session_stats_reset(session), SAM_OK);
  nlohmann::json reset = nlohmann::json::parse(sam_session_stats_json(session));
  ExpectConsistent(reset, 0);
  ExpectConsistent(reset["request"], 0);
  EXPECT_EQ(reset["commit_ns"], 0);
  RunFakeModelRequest(session, {2, 5, 8}, 5);
  nlohmann::json after = nlohmann::json::parse(sam_session_stats_json(session));
  ExpectConsistent(after, 5);
  EXPECT_EQ(sam_session_stats_reset(nullptr), SAM_ERR_INVALID_ARGUMENT);
  sam_session_free(session);

  // Without collect_timing the times are 0 and "timing" says so.
  ASSERT_EQ(sam_session_new(nullptr, &session), SAM_OK);
  RunFakeModelRequest(session, {1, 7, 9, 4, 11, 3}, 5);
  nlohmann::json untimed = nlohmann::json::parse(sam_session_stats_json(session));
  EXPECT_EQ(untimed["timing"], false);
  EXPECT_EQ(untimed["commit_ns"], 0);
  EXPECT_EQ(untimed["total"]["propose_ns"], 0);
  sam_session_free(session);
}

// The fake model's scores after `context` (kSampleVocab logits): FakeModelNext is the most
// likely token, every other token has some probability.
constexpr size_t kSampleVocab = 32;
std::vector<float> FakeModelLogits(const std::vector<uint32_t>& context) {
  std::vector<float> logits(kSampleVocab);
  const uint32_t next = FakeModelNext(context);
  for (size_t v = 0; v < kSampleVocab; ++v)
    logits[v] = static_cast<float>((next * 7 + v * 13) % 5) * 0.25f;
  logits[next] += 3.0f;
  return logits;
}

// Runs `steps` steps of the sampling loop in C over the fake model with the given temperature;
// returns the emitted tokens. With check_against_cpp, every step is also verified by
// sam::runtime::VerifySampling with a C++ Rng of the same seed, which must agree.
std::vector<uint32_t> SamplingLoop(float temperature, uint64_t seed, size_t steps,
                                   bool check_against_cpp) {
  sam_session_config config;
  sam_session_config_init(&config);
  config.draft_size = 8;
  sam_session* session = nullptr;
  sam_rng* rng = nullptr;
  EXPECT_EQ(sam_session_new(&config, &session), SAM_OK);
  EXPECT_EQ(sam_rng_new(seed, &rng), SAM_OK);
  sam::runtime::Rng cpp_rng(seed);
  std::vector<uint32_t> context{1, 7, 9, 4, 11, 3};
  EXPECT_EQ(sam_session_prefill(session, context.data(), context.size()), SAM_OK);
  std::vector<float> first = FakeModelLogits(context);
  EXPECT_EQ(sam_sampling_apply(first.data(), first.size(), temperature, 0, 1.0f, 1), SAM_OK);
  uint32_t start = 0;
  EXPECT_EQ(sam_sample_token(first.data(), first.size(), rng, &start), SAM_OK);
  EXPECT_EQ(sam::runtime::SampleToken(first, cpp_rng), start);
  std::vector<uint32_t> emitted{start};
  for (size_t step = 0; step < steps; ++step) {
    sam_draft d;
    EXPECT_EQ(sam_session_propose(session, start, 0, &d), SAM_OK);
    std::vector<float> probs;
    for (size_t i = 0; i < d.count; ++i) {
      std::vector<uint32_t> seen = context;
      const size_t at = seen.size();
      for (int32_t node = static_cast<int32_t>(i); node >= 0; node = d.parents[node])
        seen.insert(seen.begin() + at, d.tokens[node]);
      std::vector<float> row = FakeModelLogits(seen);
      EXPECT_EQ(sam_sampling_apply(row.data(), row.size(), temperature, 0, 1.0f, 1), SAM_OK);
      probs.insert(probs.end(), row.begin(), row.end());
    }
    sam_verify_result r;
    EXPECT_EQ(sam_session_verify_sampling(session, probs.data(), kSampleVocab, d.count, rng, &r),
              SAM_OK)
        << sam_last_error();
    if (check_against_cpp) {
      sam::runtime::DraftTree tree;
      tree.Reset(d.tokens[0], sam::runtime::DraftSource::kOther);
      for (size_t i = 1; i < d.count; ++i) tree.Add(d.parents[i], d.tokens[i]);
      const sam::runtime::VerifyResult expected = sam::runtime::VerifySampling(
          tree,
          [&](int32_t node) {
            return std::span<const float>(probs.data() + node * kSampleVocab, kSampleVocab);
          },
          cpp_rng);
      EXPECT_EQ(std::vector<int32_t>(r.accepted_nodes, r.accepted_nodes + r.accepted_count + 1),
                expected.accepted_nodes);
      EXPECT_EQ(r.bonus_token, expected.bonus_token);
    }
    emitted.insert(emitted.end(), r.commit_tokens + 1, r.commit_tokens + 1 + r.accepted_count);
    emitted.push_back(r.bonus_token);
    context.insert(context.end(), r.commit_tokens, r.commit_tokens + r.accepted_count + 1);
    EXPECT_EQ(sam_session_commit(session, r.commit_tokens, r.accepted_count + 1), SAM_OK);
    start = r.bonus_token;
  }
  sam_rng_free(rng);
  sam_session_free(session);
  return emitted;
}

TEST(Capi, VerifySamplingEqualsTheCppVerifySampling) {
  const std::vector<uint32_t> a = SamplingLoop(1.0f, 5, 150, true);
  EXPECT_EQ(SamplingLoop(1.0f, 5, 150, false), a);  // the seed decides everything
  EXPECT_NE(SamplingLoop(1.0f, 6, 150, false), a);
}

// Temperature 0 makes every row one-hot: sampling acceptance is then plain greedy decoding.
TEST(Capi, VerifySamplingAtTemperatureZeroIsGreedyDecoding) {
  std::vector<uint32_t> emitted = SamplingLoop(0.0f, 9, 150, true);
  std::vector<uint32_t> plain{1, 7, 9, 4, 11, 3};
  const size_t prompt = plain.size();
  while (plain.size() < prompt + emitted.size()) plain.push_back(FakeModelNext(plain));
  plain.erase(plain.begin(), plain.begin() + prompt);
  EXPECT_EQ(emitted, plain);
  EXPECT_GT(emitted.size(), 150u * 2);  // drafts were accepted
}

TEST(Capi, VerifySamplingRefusesBadArguments) {
  sam_session* session = nullptr;
  ASSERT_EQ(sam_session_new(nullptr, &session), SAM_OK);
  sam_rng* rng = nullptr;
  ASSERT_EQ(sam_rng_new(1, &rng), SAM_OK);
  EXPECT_EQ(sam_rng_new(1, nullptr), SAM_ERR_INVALID_ARGUMENT);
  const std::vector<uint32_t> prompt{5, 6, 7, 5, 6, 7, 5, 6};
  ASSERT_EQ(sam_session_prefill(session, prompt.data(), prompt.size()), SAM_OK);
  sam_draft d;
  ASSERT_EQ(sam_session_propose(session, 7, 0, &d), SAM_OK);
  ASSERT_GT(d.count, 1u);
  std::vector<float> probs(d.count * 6, 1.0f);  // draft tokens 5..7 fit a vocabulary of 6...
  sam_verify_result r;
  EXPECT_EQ(sam_session_verify_sampling(session, probs.data(), 6, d.count, nullptr, &r),
            SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_session_verify_sampling(session, probs.data(), 6, d.count - 1, rng, &r),
            SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_session_verify_sampling(session, nullptr, 6, d.count, rng, &r),
            SAM_ERR_INVALID_ARGUMENT);
  // ... but not one of 5.
  EXPECT_EQ(sam_session_verify_sampling(session, probs.data(), 5, d.count, rng, &r),
            SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_session_verify_sampling(session, probs.data(), 6, d.count, rng, &r), SAM_OK)
      << sam_last_error();
  EXPECT_LT(r.bonus_token, 6u);
  float bad[3] = {1.0f, -1.0f, 0.0f};
  EXPECT_EQ(sam_sampling_apply(bad, 3, 1.0f, 0, 1.0f, 0), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_sampling_apply(bad, 3, 1.0f, 0, 2.0f, 1), SAM_ERR_INVALID_ARGUMENT);
  uint32_t token = 0;
  EXPECT_EQ(sam_sample_token(bad, 3, rng, &token), SAM_ERR_INVALID_ARGUMENT);
  sam_rng_free(rng);
  sam_session_free(session);
}

TEST(Capi, VerifyGreedyNeedsAProposalAndOneArgmaxPerNode) {
  sam_session* session = nullptr;
  ASSERT_EQ(sam_session_new(nullptr, &session), SAM_OK);
  const uint32_t argmax[2] = {3, 4};
  sam_verify_result r;
  EXPECT_EQ(sam_session_verify_greedy(session, argmax, 1, &r), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sam_last_error()).find("sam_session_propose"), std::string::npos);
  const std::vector<uint32_t> prompt{5, 6, 7, 5, 6, 7, 5, 6};
  ASSERT_EQ(sam_session_prefill(session, prompt.data(), prompt.size()), SAM_OK);
  sam_draft d;
  ASSERT_EQ(sam_session_propose(session, 7, 0, &d), SAM_OK);
  ASSERT_GT(d.count, 1u);
  EXPECT_EQ(sam_session_verify_greedy(session, argmax, 1, &r), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sam_last_error()).find("draft's count"), std::string::npos)
      << sam_last_error();
  EXPECT_EQ(sam_session_verify_greedy(session, nullptr, d.count, &r), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_session_verify_greedy(nullptr, argmax, 1, &r), SAM_ERR_INVALID_ARGUMENT);
  std::vector<uint32_t> model(d.count, 42);  // rejects every draft token
  ASSERT_EQ(sam_session_verify_greedy(session, model.data(), d.count, nullptr),
            SAM_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(sam_session_verify_greedy(session, model.data(), d.count, &r), SAM_OK);
  EXPECT_EQ(r.accepted_count, 0u);
  EXPECT_EQ(r.bonus_token, 42u);
  EXPECT_EQ(r.commit_tokens[0], 7u);
  EXPECT_EQ(r.accepted_nodes[0], 0);
  ASSERT_EQ(sam_session_commit(session, r.commit_tokens, 1), SAM_OK);
  // The commit ended the proposal.
  EXPECT_EQ(sam_session_verify_greedy(session, model.data(), d.count, &r),
            SAM_ERR_INVALID_ARGUMENT);
  sam_session_free(session);
}

// A document with every 9th token replaced: drafts are accepted in part.
std::vector<uint32_t> Mutated(std::vector<uint32_t> text, sam::runtime::Rng& rng) {
  for (size_t i = 8; i < text.size(); i += 9) text[i] = 2 + rng.Next() % (kVocab - 2);
  return text;
}

TEST_F(CapiTest, DraftsEqualTheSessionsPaperPolicy) {
  sam::runtime::Rng rng(8);
  for (size_t d = 0; d < 3; ++d)
    ExpectSameDraftsAsSession(*path_, Mutated((*documents_)[d], rng), SAM_POLICY_PAPER, false);
}

TEST_F(CapiTest, DraftsEqualTheSessionsWithTokenRecycling) {
  sam::runtime::Rng rng(9);
  std::vector<uint32_t> text{1};
  for (int i = 0; i < 120; ++i) text.push_back(2 + rng.Next() % (kVocab - 2));
  ExpectSameDraftsAsSession(*path_, text, SAM_POLICY_PAPER, true);
  ExpectSameDraftsAsSession(*path_, Mutated((*documents_)[5], rng), SAM_POLICY_TREE, true);
}

// Reading into memory, preparing the shared accelerations (StaticIndex) and
// verifying change nothing in the drafts.
TEST_F(CapiTest, DraftsEqualTheSessionsWhateverTheOpenFlags) {
  for (const unsigned flags : {unsigned{SAM_OPEN_READ}, unsigned{SAM_OPEN_PREPARE},
                               unsigned{SAM_OPEN_READ | SAM_OPEN_PREPARE | SAM_OPEN_VERIFY},
                               unsigned{SAM_OPEN_CHILD_RECORDS}}) {
    sam::runtime::Rng rng(10 + flags);
    for (const int policy : {SAM_POLICY_PAPER, SAM_POLICY_TREE, SAM_POLICY_CALIBRATED}) {
      SCOPED_TRACE("flags " + std::to_string(flags) + " policy " + std::to_string(policy));
      ExpectSameDraftsAsSession(*path_, Mutated((*documents_)[policy], rng), policy, false, flags);
    }
  }
  // Bits beyond SAM_OPEN_CHILD_RECORDS (16 and above) are refused, with the
  // bits and the known flags named, and nothing opened.
  for (const unsigned bad : {16u, 32u, unsigned{SAM_OPEN_CHILD_RECORDS} | 16u, 1u << 31}) {
    sam_index* index = nullptr;
    EXPECT_EQ(sam_index_open(path_->c_str(), nullptr, bad, &index), SAM_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(index, nullptr);
    const std::string error = sam_last_error();
    EXPECT_NE(error.find("unknown flag bits " + std::to_string(bad & ~15u)), std::string::npos)
        << error;
    EXPECT_NE(error.find("known: SAM_OPEN_READ, SAM_OPEN_PREPARE, SAM_OPEN_VERIFY, "
                         "SAM_OPEN_CHILD_RECORDS"),
              std::string::npos)
        << error;
  }
}

// The drafts of fresh sessions, each prefilled with text[0, k) and proposing
// from text[k] for k from 8 on: through the C API with `flags`, or (flags
// -1) through a C++ session over the bare view.
std::vector<std::vector<uint32_t>> FirstDrafts(const std::string& path,
                                               const std::vector<uint32_t>& text, int policy,
                                               long flags) {
  std::vector<std::vector<uint32_t>> drafts;
  const auto file = sam::format::IndexFile::Open(path);
  sam_index* index = nullptr;
  if (flags >= 0) {
    EXPECT_EQ(sam_index_open(path.c_str(), nullptr, static_cast<unsigned>(flags), &index), SAM_OK)
        << sam_last_error();
  }
  for (size_t k = 8; k + 1 < text.size(); k += 3) {
    if (flags < 0) {
      sam::runtime::SessionOptions options;
      options.policy = static_cast<sam::runtime::Policy>(policy);
      sam::runtime::Session session(options);
      session.AttachIndex(&file.view());
      session.Prefill(std::span<const uint32_t>(text.data(), k));
      drafts.push_back(session.Propose(text[k]).tokens);
      continue;
    }
    sam_session_config config;
    sam_session_config_init(&config);
    config.policy = policy;
    sam_session* session = nullptr;
    EXPECT_EQ(sam_session_new(&config, &session), SAM_OK);
    EXPECT_EQ(sam_session_attach_index(session, index), SAM_OK);
    EXPECT_EQ(sam_session_prefill(session, text.data(), k), SAM_OK);
    sam_draft d;
    EXPECT_EQ(sam_session_propose(session, text[k], 0, &d), SAM_OK) << sam_last_error();
    drafts.emplace_back(d.tokens, d.tokens + d.count);
    sam_session_free(session);
  }
  sam_index_close(index);
  return drafts;
}

// Drafting sections built with the parameters a C open uses
// (PrepareOptions), with child records or without.
sam::format::AcceleratorParams CDefaultSections(bool child_records) {
  const sam::runtime::StaticIndex::Options prepare = sam::runtime::PrepareOptions(false);
  return sam::format::AcceleratorParams{
      .min_degree = static_cast<uint32_t>(prepare.min_degree),
      .top_k = static_cast<uint32_t>(prepare.top_k),
      .filter_bits_per_edge = prepare.filter_bits_per_edge,
      .record_min_count = child_records ? sam::format::kChildRecordMinCount : 0};
}

// A default open (flags 0) drafts with the drafting sections a file holds
// (sam-build's hub tables, edge filter and child records), in O(1): the same
// drafts as the bare automaton and as SAM_OPEN_PREPARE. That it reads them
// shows on a copy whose child records were overwritten with zeros (and
// re-sealed, so that the file still opens): a session that reads them drafts
// otherwise, the bare view does not.
TEST_F(CapiTest, DefaultOpenDraftsWithTheFilesOwnSections) {
  const std::string with = TempPath("capi_sections.sam"), damaged = TempPath("capi_damaged.sam");
  sam::automaton::IndexInfo info;
  info.tokenizer_sha256 = FakeTokenizerDigest();
  info.accelerators = CDefaultSections(true);
  sam::automaton::BuildIndexFile(*documents_, kVocab, with, info);
  {
    const auto file = sam::format::IndexFile::Open(with);
    ASSERT_TRUE(file.view().hubs().present());
    ASSERT_TRUE(file.view().child_records().present());
    ASSERT_TRUE(sam::runtime::StaticIndex::FromFile(file.shared_view(),
                                                    sam::runtime::PrepareOptions(false))
                    ->records_from_file());
  }
  sam::runtime::Rng rng(12);
  for (const int policy : {SAM_POLICY_PAPER, SAM_POLICY_TREE, SAM_POLICY_CALIBRATED}) {
    SCOPED_TRACE("policy " + std::to_string(policy));
    ExpectSameDraftsAsSession(with, Mutated((*documents_)[policy], rng), policy, false, 0);
    ExpectSameDraftsAsSession(with, Mutated((*documents_)[policy], rng), policy, false,
                              SAM_OPEN_PREPARE);
  }

  // The copy: RECS's record slots zeroed (its head and record offsets kept).
  std::vector<uint8_t> bytes;
  {
    std::ifstream in(with, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  using sam::testing::LoadLe32;
  using sam::testing::LoadLe64;
  const uint8_t* d = bytes.data();
  uint64_t recs = 0, recs_size = 0;
  for (uint32_t i = 0; i < LoadLe32(d + 44); ++i) {  // FORMAT.md sections 2-3
    const size_t entry = 256 + size_t{i} * 64;
    if (std::memcmp(d + entry, "RECS", 4) == 0) {
      recs = LoadLe64(d + entry + 16);
      recs_size = LoadLe64(d + entry + 24);
    }
  }
  ASSERT_GT(recs_size, 64u);
  const uint64_t clones = LoadLe64(d + recs + 16);  // FORMAT.md section 13: the head's C, R
  const uint64_t slots_at = recs + 64 + ((clones + 1) * 4 + 63) / 64 * 64;
  const uint64_t slots = LoadLe64(d + recs + 24);
  ASSERT_GT(slots, 0u);
  std::memset(bytes.data() + slots_at, 0, slots * 16);
  sam::testing::Reseal(bytes.data(), bytes.size());
  {
    std::ofstream out(damaged, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  const std::vector<uint32_t> text = (*documents_)[7];
  for (const int policy : {SAM_POLICY_PAPER, SAM_POLICY_CALIBRATED}) {
    SCOPED_TRACE("policy " + std::to_string(policy));
    const auto bare = FirstDrafts(damaged, text, policy, -1);
    EXPECT_EQ(FirstDrafts(with, text, policy, 0), FirstDrafts(with, text, policy, -1));
    EXPECT_NE(FirstDrafts(damaged, text, policy, 0), bare);
    EXPECT_NE(FirstDrafts(damaged, text, policy, SAM_OPEN_PREPARE), bare);
    EXPECT_EQ(bare, FirstDrafts(with, text, policy, -1));
  }
  std::remove(with.c_str());
  std::remove(damaged.c_str());
}

// sam_index_accelerators says what an open's sessions draft with, against
// what the file holds (read by the format reader) and what the flags compute:
// a file without sections, one with hub tables and a filter, one with child
// records too.
TEST_F(CapiTest, AcceleratorsSayWhatSessionsDraftWith) {
  const std::string tables = TempPath("capi_tables.sam"), records = TempPath("capi_records.sam");
  sam::automaton::IndexInfo info;
  info.accelerators = CDefaultSections(false);
  sam::automaton::BuildIndexFile(*documents_, kVocab, tables, info);
  info.accelerators = CDefaultSections(true);
  sam::automaton::BuildIndexFile(*documents_, kVocab, records, info);
  EXPECT_EQ(sam_index_accelerators(nullptr), 0u);
  for (const std::string& path : {*path_, tables, records}) {
    const auto file = sam::format::IndexFile::Open(path);
    const bool has_tables = file.view().hubs().present();
    const bool has_records = file.view().child_records().present();
    SCOPED_TRACE(path);
    ASSERT_EQ(has_tables, path != *path_);
    ASSERT_EQ(has_records, path == records);
    for (const unsigned flags : {0u, unsigned{SAM_OPEN_READ}, unsigned{SAM_OPEN_PREPARE},
                                 unsigned{SAM_OPEN_CHILD_RECORDS}}) {
      SCOPED_TRACE("flags " + std::to_string(flags));
      const bool want_tables = has_tables || flags & (SAM_OPEN_PREPARE | SAM_OPEN_CHILD_RECORDS);
      const bool want_records = has_records || flags & SAM_OPEN_CHILD_RECORDS;
      const bool computed = (want_tables && !has_tables) || (want_records && !has_records);
      const unsigned expected = (want_tables ? unsigned{SAM_INDEX_HUB_TABLES} : 0u) |
                                (want_records ? unsigned{SAM_INDEX_CHILD_RECORDS} : 0u) |
                                (computed ? unsigned{SAM_INDEX_COMPUTED} : 0u);
      sam_index* index = nullptr;
      ASSERT_EQ(sam_index_open(path.c_str(), nullptr, flags, &index), SAM_OK) << sam_last_error();
      EXPECT_EQ(sam_index_accelerators(index), expected);
      sam_index_close(index);
    }
  }
  std::remove(tables.c_str());
  std::remove(records.c_str());
}

// sam_session_config's tree_nodes and tree_width reach sam-tree: the drafts equal a C++
// session's with the same options, for settings whose drafts differ.
TEST_F(CapiTest, TreeNodesAndWidthAsTheSession) {
  for (const auto& setting : {std::pair<size_t, size_t>{12, 1}, {100, 2}, {30, 16}}) {
    SCOPED_TRACE("nodes " + std::to_string(setting.first) + " width " +
                 std::to_string(setting.second));
    sam::runtime::Rng rng(40);
    for (size_t d = 0; d < 3; ++d)
      ExpectSameDraftsAsSession(*path_, Mutated((*documents_)[d], rng), SAM_POLICY_TREE, false, 0,
                                setting);
  }
}

// sam_session_config.shape SAM_SHAPE_CHAIN: the drafts are a C++ session's
// with SessionOptions::shape kChain (chains, for every policy); an unknown
// shape is refused, naming it.
TEST_F(CapiTest, ChainShapeAsTheSession) {
  for (const int policy : {SAM_POLICY_PAPER, SAM_POLICY_TREE, SAM_POLICY_CALIBRATED}) {
    SCOPED_TRACE("policy " + std::to_string(policy));
    sam_index* index = nullptr;
    ASSERT_EQ(sam_index_open(path_->c_str(), nullptr, 0, &index), SAM_OK) << sam_last_error();
    sam_session_config config;
    sam_session_config_init(&config);
    EXPECT_EQ(config.shape, SAM_SHAPE_TREE);
    config.policy = policy;
    config.shape = SAM_SHAPE_CHAIN;
    sam_session* c_session = nullptr;
    ASSERT_EQ(sam_session_new(&config, &c_session), SAM_OK) << sam_last_error();
    ASSERT_EQ(sam_session_attach_index(c_session, index), SAM_OK);
    sam_index_close(index);
    const auto file = sam::format::IndexFile::Open(*path_);
    sam::runtime::SessionOptions options;
    options.policy = static_cast<sam::runtime::Policy>(policy);
    options.shape = sam::runtime::DraftShape::kChain;
    sam::runtime::Session session(options);
    session.AttachIndex(&file.view());
    sam::runtime::Rng rng(41);
    const std::vector<uint32_t> text = Mutated((*documents_)[2], rng);
    const size_t prompt = text.size() / 3;
    ASSERT_EQ(sam_session_prefill(c_session, text.data(), prompt), SAM_OK);
    session.Prefill(std::span<const uint32_t>(text.data(), prompt));
    size_t branching = 0;
    for (size_t pos = prompt; pos + 1 < text.size();) {
      sam_draft d;
      ASSERT_EQ(sam_session_propose(c_session, text[pos], 0, &d), SAM_OK) << sam_last_error();
      const sam::runtime::DraftTree& chain = session.Propose(text[pos]);
      ASSERT_TRUE(chain.IsLinear());
      ASSERT_EQ(std::vector<uint32_t>(d.tokens, d.tokens + d.count), chain.tokens);
      branching += !session.last_tree().IsLinear();
      const size_t a = sam::runtime::AcceptedLength(
          chain, std::span<const uint32_t>(text).subspan(pos + 1));
      ASSERT_EQ(sam_session_commit(c_session, text.data() + pos, a + 1), SAM_OK);
      session.Commit(std::span<const uint32_t>(text.data() + pos, a + 1));
      pos += a + 1;
    }
    if (policy != SAM_POLICY_PAPER) {
      EXPECT_GT(branching, 0u);  // chains cut from trees
    }
    sam_session_free(c_session);
  }
  sam_session_config config;
  sam_session_config_init(&config);
  config.shape = 2;
  sam_session* s = nullptr;
  EXPECT_EQ(sam_session_new(&config, &s), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sam_last_error()).find("shape 2 is not a sam_draft_shape"),
            std::string::npos)
      << sam_last_error();
}

// sam_session_propose's max_nodes (a chain-only engine's k + 1) and sam_propose_batch's:
// the drafts of a C++ session's Propose(start, max_nodes), for every policy, both shapes
// and limits from 1 up, step by step; 0 is no limit.
TEST_F(CapiTest, ProposeNodeLimitAsTheSession) {
  for (const int policy : {SAM_POLICY_PAPER, SAM_POLICY_TREE, SAM_POLICY_CALIBRATED}) {
    for (const int shape : {SAM_SHAPE_TREE, SAM_SHAPE_CHAIN}) {
      SCOPED_TRACE("policy " + std::to_string(policy) + " shape " + std::to_string(shape));
      sam_index* index = nullptr;
      ASSERT_EQ(sam_index_open(path_->c_str(), nullptr, 0, &index), SAM_OK) << sam_last_error();
      sam_session_config config;
      sam_session_config_init(&config);
      config.policy = policy;
      config.shape = shape;
      sam_session *one = nullptr, *batched = nullptr;
      ASSERT_EQ(sam_session_new(&config, &one), SAM_OK) << sam_last_error();
      ASSERT_EQ(sam_session_new(&config, &batched), SAM_OK) << sam_last_error();
      ASSERT_EQ(sam_session_attach_index(one, index), SAM_OK);
      ASSERT_EQ(sam_session_attach_index(batched, index), SAM_OK);
      sam_index_close(index);
      sam_draft_pool* pool = nullptr;
      ASSERT_EQ(sam_draft_pool_new(1, &pool), SAM_OK);
      const auto file = sam::format::IndexFile::Open(*path_);
      sam::runtime::SessionOptions options;
      options.policy = static_cast<sam::runtime::Policy>(policy);
      options.shape = static_cast<sam::runtime::DraftShape>(shape);
      sam::runtime::Session session(options);
      session.AttachIndex(&file.view());
      sam::runtime::Rng rng(43);
      const std::vector<uint32_t> text = Mutated((*documents_)[3], rng);
      const size_t prompt = text.size() / 3;
      ASSERT_EQ(sam_session_prefill(one, text.data(), prompt), SAM_OK);
      ASSERT_EQ(sam_session_prefill(batched, text.data(), prompt), SAM_OK);
      session.Prefill(std::span<const uint32_t>(text.data(), prompt));
      size_t limited = 0;
      for (size_t pos = prompt, step = 0; pos + 1 < text.size(); ++step) {
        const size_t limit = step % 5 == 4 ? 0 : 1 + step % 5 * 3;  // 1, 4, 7, 10, none
        sam_draft d, b;
        int status = -1;
        ASSERT_EQ(sam_session_propose(one, text[pos], limit, &d), SAM_OK) << sam_last_error();
        ASSERT_EQ(sam_propose_batch(pool, &batched, &text[pos], &limit, 1, &b, &status), SAM_OK);
        ASSERT_EQ(status, SAM_OK);
        const sam::runtime::DraftTree& tree =
            limit == 0 ? session.Propose(text[pos]) : session.Propose(text[pos], limit);
        ASSERT_EQ(std::vector<uint32_t>(d.tokens, d.tokens + d.count), tree.tokens) << step;
        ASSERT_EQ(std::vector<int32_t>(d.parents, d.parents + d.count), tree.parents) << step;
        ASSERT_EQ(std::vector<uint32_t>(b.tokens, b.tokens + b.count), tree.tokens) << step;
        if (limit != 0) {
          ASSERT_LE(d.count, limit);
        }
        limited += limit != 0 && d.count == limit && limit > 1;
        const size_t a = sam::runtime::AcceptedLength(
            tree, std::span<const uint32_t>(text).subspan(pos + 1));
        ASSERT_EQ(sam_session_commit(one, text.data() + pos, a + 1), SAM_OK);
        ASSERT_EQ(sam_session_commit(batched, text.data() + pos, a + 1), SAM_OK);
        session.Commit(std::span<const uint32_t>(text.data() + pos, a + 1));
        pos += a + 1;
      }
      EXPECT_GT(limited, 0u);  // the limits cut drafts
      sam_draft_pool_free(pool);
      sam_session_free(one);
      sam_session_free(batched);
    }
  }
}

// Two resets: sam_session_stats_reset zeroes the statistics and keeps what sam-cal learned
// (the drafts go on as a C++ session's that was never reset); sam_session_reset_calibration
// forgets it (the drafts are a new C++ session's) and keeps the statistics.
TEST_F(CapiTest, StatisticsAndCalibrationResetsAreTwoOperations) {
  sam_index* index = nullptr;
  ASSERT_EQ(sam_index_open(path_->c_str(), nullptr, 0, &index), SAM_OK) << sam_last_error();
  const auto file = sam::format::IndexFile::Open(*path_);
  sam::runtime::Rng rng(44);
  const std::vector<uint32_t> first = Mutated((*documents_)[4], rng);
  const std::vector<uint32_t> second = Mutated((*documents_)[4], rng);
  // One request through the C session and a C++ session; returns whether every draft agreed.
  auto request = [&](sam_session* c, sam::runtime::Session& cpp, const std::vector<uint32_t>& text) {
    const size_t prompt = text.size() / 3;
    EXPECT_EQ(sam_session_prefill(c, text.data(), prompt), SAM_OK);
    cpp.Prefill(std::span<const uint32_t>(text.data(), prompt));
    bool same = true;
    for (size_t pos = prompt; pos + 1 < text.size();) {
      sam_draft d;
      EXPECT_EQ(sam_session_propose(c, text[pos], 0, &d), SAM_OK);
      const sam::runtime::DraftTree& tree = cpp.Propose(text[pos]);
      same = same && std::vector<uint32_t>(d.tokens, d.tokens + d.count) == tree.tokens;
      const size_t a = sam::runtime::AcceptedLength(
          tree, std::span<const uint32_t>(text).subspan(pos + 1));
      EXPECT_EQ(sam_session_commit(c, text.data() + pos, a + 1), SAM_OK);
      cpp.Commit(std::span<const uint32_t>(text.data() + pos, a + 1));
      pos += a + 1;
    }
    EXPECT_EQ(sam_session_reset(c), SAM_OK);
    cpp.Reset();
    return same;
  };
  auto steps = [](sam_session* c) {
    const std::string json = sam_session_stats_json(c);
    return std::stoull(json.substr(json.find("\"steps\":") + 8));
  };
  for (const bool calibration : {false, true}) {
    SCOPED_TRACE(calibration ? "reset_calibration" : "stats_reset");
    sam_session* c = nullptr;
    ASSERT_EQ(sam_session_new(nullptr, &c), SAM_OK);  // sam-cal
    ASSERT_EQ(sam_session_attach_index(c, index), SAM_OK);
    sam::runtime::Session learned, fresh;
    learned.AttachIndex(&file.view());
    fresh.AttachIndex(&file.view());
    EXPECT_TRUE(request(c, learned, first));
    const uint64_t before = steps(c);
    EXPECT_GT(before, 0u);
    if (calibration) {
      ASSERT_EQ(sam_session_reset_calibration(c), SAM_OK);
      EXPECT_EQ(steps(c), before);
      EXPECT_TRUE(request(c, fresh, second));
    } else {
      ASSERT_EQ(sam_session_stats_reset(c), SAM_OK);
      EXPECT_EQ(steps(c), 0u);
      EXPECT_TRUE(request(c, learned, second));
    }
    sam_session_free(c);
  }
  // The oracle can tell them apart: what was learned changes the second request's drafts.
  sam::runtime::Session learned, fresh;
  learned.AttachIndex(&file.view());
  fresh.AttachIndex(&file.view());
  sam_session* c = nullptr;
  ASSERT_EQ(sam_session_new(nullptr, &c), SAM_OK);
  ASSERT_EQ(sam_session_attach_index(c, index), SAM_OK);
  EXPECT_TRUE(request(c, learned, first));
  EXPECT_FALSE(request(c, fresh, second));
  sam_session_free(c);
  EXPECT_EQ(sam_session_reset_calibration(nullptr), SAM_ERR_INVALID_ARGUMENT);
  sam_index_close(index);
}

TEST_F(CapiTest, SessionKeepsAClosedIndexAlive) {
  for (const unsigned flags : {0u, unsigned{SAM_OPEN_PREPARE | SAM_OPEN_READ}}) {
    sam_index* index = nullptr;
    ASSERT_EQ(sam_index_open(path_->c_str(), nullptr, flags, &index), SAM_OK);
    sam_session* session = nullptr;
    ASSERT_EQ(sam_session_new(nullptr, &session), SAM_OK);
    ASSERT_EQ(sam_session_attach_index(session, index), SAM_OK);
    sam_index_close(index);  // before the session: the session still holds it
    const std::vector<uint32_t>& doc = (*documents_)[0];
    ASSERT_EQ(sam_session_prefill(session, doc.data(), 10), SAM_OK);
    sam_draft d;
    ASSERT_EQ(sam_session_propose(session, doc[10], 0, &d), SAM_OK);
    EXPECT_GT(d.count, 1u);  // an 11-token match: the index was read
    sam_session_free(session);
  }
}

TEST(Capi, ErrorsInsideTheRuntimeBecomeCodes) {
  sam_session_config options;
  sam_session_config_init(&options);
  options.recycling_vocab_size = 10;
  sam_session* session = nullptr;
  ASSERT_EQ(sam_session_new(&options, &session), SAM_OK);
  const uint32_t tokens[2] = {1, 2};
  const uint32_t bad_topk[2] = {3, 99};  // 99 is outside the vocabulary of 10
  EXPECT_EQ(sam_session_observe_topk(session, tokens, 2, bad_topk, 1), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sam_last_error()).find("99"), std::string::npos) << sam_last_error();
  const uint32_t topk[2] = {3, 4};
  EXPECT_EQ(sam_session_observe_topk(session, tokens, 2, topk, 1), SAM_OK);
  sam_draft d;
  ASSERT_EQ(sam_session_propose(session, 1, 0, &d), SAM_OK) << sam_last_error();
  EXPECT_EQ(d.source, SAM_SOURCE_RECYCLING);
  ASSERT_EQ(d.count, 2u);
  EXPECT_EQ(d.tokens[1], 3u);
  sam_session_free(session);
}

}  // namespace

namespace {

// One request through the C API: returns each step's draft (tokens) and source.
struct Step {
  std::vector<uint32_t> tokens;
  int source;
};
std::vector<Step> RunCRequest(sam_session* s, const std::vector<uint32_t>& prompt,
                              const std::vector<uint32_t>& output) {
  std::vector<Step> steps;
  EXPECT_EQ(sam_session_reset(s), SAM_OK);
  EXPECT_EQ(sam_session_prefill(s, prompt.data(), prompt.size()), SAM_OK);
  for (size_t i = 0; i < output.size();) {
    sam_draft d;
    EXPECT_EQ(sam_session_propose(s, output[i], 0, &d), SAM_OK);
    steps.push_back({std::vector<uint32_t>(d.tokens, d.tokens + d.count), d.source});
    size_t a = 0;
    while (a + 1 < d.count && i + a + 1 < output.size() && d.tokens[a + 1] == output[i + a + 1]) ++a;
    EXPECT_EQ(sam_session_commit(s, output.data() + i, a + 1), SAM_OK);
    i += a + 1;
  }
  return steps;
}

// The oracle of RunCRequest: a C++ session fed the same way (the drafted
// tokens in order accepted while they match).
std::vector<Step> RunCppRequest(sam::runtime::Session& cpp, const std::vector<uint32_t>& prompt,
                                const std::vector<uint32_t>& output) {
  std::vector<Step> steps;
  cpp.Reset();
  cpp.Prefill(prompt);
  for (size_t i = 0; i < output.size();) {
    const sam::runtime::DraftTree& t = cpp.Propose(output[i]);
    steps.push_back({t.tokens, static_cast<int>(t.source)});
    size_t a = 0;
    while (a + 1 < t.tokens.size() && i + a + 1 < output.size() &&
           t.tokens[a + 1] == output[i + a + 1])
      ++a;
    cpp.Commit(std::span<const uint32_t>(output).subspan(i, a + 1));
    i += a + 1;
  }
  return steps;
}

void ExpectSameSteps(const std::vector<Step>& c, const std::vector<Step>& cpp, int request) {
  ASSERT_EQ(c.size(), cpp.size()) << "request " << request;
  for (size_t k = 0; k < c.size(); ++k) {
    EXPECT_EQ(c[k].tokens, cpp[k].tokens) << "request " << request << " step " << k;
    EXPECT_EQ(c[k].source, cpp[k].source) << "request " << request << " step " << k;
  }
}

TEST(CapiCache, SessionsDraftFromTheCacheLikeTheCppSession) {
  sam::runtime::Rng rng(4);
  std::vector<uint32_t> prompt = {1, 2}, output;
  for (uint32_t k = 0; k < 90; ++k) output.push_back(100 + k * 5 + rng.Next() % 5);
  for (int policy : {SAM_POLICY_PAPER, SAM_POLICY_CALIBRATED}) {
    sam_cache* cache = nullptr;
    ASSERT_EQ(sam_cache_new(1 << 20, &cache), SAM_OK);
    sam_session_config o;
    sam_session_config_init(&o);
    o.policy = policy;
    sam_session* s = nullptr;
    ASSERT_EQ(sam_session_new(&o, &s), SAM_OK);
    ASSERT_EQ(sam_session_attach_cache(s, cache, "a"), SAM_OK);
    // The oracle: the C++ session with its own cache, fed the same way.
    auto cpp_cache = std::make_shared<sam::runtime::ResponseCache>(1 << 20);
    sam::runtime::SessionOptions co;
    co.policy = static_cast<sam::runtime::Policy>(policy);
    sam::runtime::Session cpp(co);
    cpp.AttachCache(cpp_cache, "a");
    for (int request = 0; request < 3; ++request) {
      const std::vector<Step> steps = RunCRequest(s, prompt, output);
      ExpectSameSteps(steps, RunCppRequest(cpp, prompt, output), request);
      int inserted = 0;
      ASSERT_EQ(sam_session_cache_request(s, 0, &inserted), SAM_OK);
      EXPECT_EQ(inserted, 1);
      ASSERT_TRUE(cpp.CacheRequest(false));
      if (request > 0 && policy == SAM_POLICY_PAPER) {
        EXPECT_EQ(steps[0].source, SAM_SOURCE_CACHE);
      }
    }
    EXPECT_EQ(sam_cache_num_responses(cache), 3u);
    EXPECT_EQ(sam_cache_bytes(cache), cpp_cache->bytes());
    // Another tenant: nothing from the cache.
    ASSERT_EQ(sam_session_attach_cache(s, cache, "b"), SAM_OK);
    for (const Step& st : RunCRequest(s, prompt, output)) EXPECT_NE(st.source, SAM_SOURCE_CACHE);
    sam_cache_free(cache);  // the session keeps it
    ASSERT_EQ(sam_session_attach_cache(s, nullptr, nullptr), SAM_OK);
    sam_session_free(s);
  }
}

// sam_cache_new_compiling: a calibrated C session drafts as the C++ session
// over a cache with the same CompileOptions, request after request (the
// compiled index included), and the compile counters agree; bad options are
// SAM_ERR_INVALID_ARGUMENT.
TEST(CapiCache, CompilingCacheDraftsLikeTheCppSession) {
  sam::runtime::Rng rng(6);
  std::vector<uint32_t> prompt = {1, 2}, output;
  for (uint32_t k = 0; k < 90; ++k) output.push_back(100 + rng.Next() % 12);
  sam_cache* cache = nullptr;
  ASSERT_EQ(sam_cache_new_compiling(1 << 20, 64, 0.25, 0, 0, &cache), SAM_OK);
  sam_session_config o;
  sam_session_config_init(&o);
  o.policy = SAM_POLICY_CALIBRATED;
  sam_session* s = nullptr;
  ASSERT_EQ(sam_session_new(&o, &s), SAM_OK);
  ASSERT_EQ(sam_session_attach_cache(s, cache, "a"), SAM_OK);
  sam::runtime::ResponseCache::CompileOptions compile;
  compile.enabled = true;
  compile.min_tokens = 64;
  compile.growth = 0.25;
  auto cpp_cache = std::make_shared<sam::runtime::ResponseCache>(1 << 20, compile);
  sam::runtime::SessionOptions co;
  co.policy = sam::runtime::Policy::kCalibrated;
  sam::runtime::Session cpp(co);
  cpp.AttachCache(cpp_cache, "a");
  for (int request = 0; request < 4; ++request) {
    const std::vector<Step> steps = RunCRequest(s, prompt, output);
    ExpectSameSteps(steps, RunCppRequest(cpp, prompt, output), request);
    ASSERT_EQ(sam_session_cache_request(s, 0, nullptr), SAM_OK);
    ASSERT_TRUE(cpp.CacheRequest(false));
  }
  EXPECT_GT(sam_cache_num_compiles(cache), 0u);
  EXPECT_EQ(sam_cache_num_compiles(cache), cpp_cache->num_compiles());
  EXPECT_EQ(sam_cache_compiled_bytes(cache), cpp_cache->compiled_bytes());
  EXPECT_GT(sam_cache_compiled_bytes(cache), 0u);
  EXPECT_EQ(sam_cache_bytes(cache), cpp_cache->bytes());
  ASSERT_EQ(sam_session_attach_cache(s, nullptr, nullptr), SAM_OK);
  sam_session_free(s);
  sam_cache_free(cache);
  sam_cache* bad = nullptr;
  EXPECT_EQ(sam_cache_new_compiling(1 << 20, 64, 0.0, 0, 0, &bad), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_cache_new_compiling(1 << 20, 64, 0.25, 1 << 20, 0, &bad),
            SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_cache_new_compiling(0, 64, 0.25, 0, 0, &bad), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_cache_new_compiling(1 << 20, 64, 0.25, 0, 0, nullptr), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(bad, nullptr);
  // On the cache's own thread: the same compiles once waited for.
  sam_cache* background = nullptr;
  ASSERT_EQ(sam_cache_new_compiling(1 << 20, 64, 0.25, 0, 1, &background), SAM_OK);
  auto sync = std::make_shared<sam::runtime::ResponseCache>(1 << 20, compile);
  for (int i = 0; i < 12; ++i) {
    ASSERT_EQ(sam_cache_insert(background, "a", output.data(), output.size() - i, nullptr), SAM_OK);
    sam_cache_wait_for_compiles(background);
    sync->Insert("a", std::span<const uint32_t>(output).first(output.size() - i));
  }
  EXPECT_EQ(sam_cache_num_compiles(background), sync->num_compiles());
  EXPECT_EQ(sam_cache_compiled_bytes(background), sync->compiled_bytes());
  sam_cache_free(background);
  sam_cache_wait_for_compiles(nullptr);
  EXPECT_EQ(sam_cache_compiled_bytes(nullptr), 0u);
  EXPECT_EQ(sam_cache_num_compiles(nullptr), 0u);
}

TEST(CapiCache, SaveLoadAndErrors) {
  const std::string hex = sam::format::DigestToHex(FakeTokenizerDigest());
  const std::string other(64, 'a');
  sam_cache* cache = nullptr;
  ASSERT_EQ(sam_cache_new(1 << 20, &cache), SAM_OK);
  const uint32_t ids[] = {5, 6, 7, 8};
  int inserted = -1;
  ASSERT_EQ(sam_cache_insert(cache, "t", ids, 4, &inserted), SAM_OK);
  EXPECT_EQ(inserted, 1);
  ASSERT_EQ(sam_cache_insert(cache, nullptr, ids, 2, nullptr), SAM_OK);
  const uint32_t bad[] = {5, 0xFFFFFFFFu};
  EXPECT_EQ(sam_cache_insert(cache, "t", bad, 2, nullptr), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_cache_insert(cache, "t", nullptr, 2, nullptr), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_cache_new(0, &cache), SAM_ERR_INVALID_ARGUMENT);

  const std::string path = TempPath("cache.samc");
  ASSERT_EQ(sam_cache_save(cache, path.c_str(), hex.c_str()), SAM_OK);
  sam_cache* loaded = nullptr;
  ASSERT_EQ(sam_cache_new(1 << 20, &loaded), SAM_OK);
  EXPECT_EQ(sam_cache_load(loaded, path.c_str(), other.c_str()), SAM_ERR_TOKENIZER_MISMATCH);
  EXPECT_NE(std::string(sam_last_error()).find(path), std::string::npos);
  EXPECT_EQ(sam_cache_load(loaded, path.c_str(), "xyz"), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_cache_num_responses(loaded), 0u);
  ASSERT_EQ(sam_cache_load(loaded, path.c_str(), hex.c_str()), SAM_OK);
  EXPECT_EQ(sam_cache_num_responses(loaded), 2u);
  EXPECT_EQ(sam_cache_bytes(loaded), sam_cache_bytes(cache));
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(50);
    f.put('\x7f');
  }
  sam_cache* damaged = nullptr;
  ASSERT_EQ(sam_cache_new(1 << 20, &damaged), SAM_OK);
  EXPECT_EQ(sam_cache_load(damaged, path.c_str(), hex.c_str()), SAM_ERR_FORMAT);
  EXPECT_EQ(sam_cache_load(damaged, (path + ".missing").c_str(), hex.c_str()), SAM_ERR_IO);
  EXPECT_EQ(sam_cache_load(damaged, nullptr, nullptr), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_cache_save(nullptr, path.c_str(), nullptr), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_session_attach_cache(nullptr, cache, "t"), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_session_cache_request(nullptr, 0, nullptr), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_cache_bytes(nullptr), 0u);
  std::remove(path.c_str());
  sam_cache_free(damaged);
  sam_cache_free(loaded);
  sam_cache_free(cache);
  sam_cache_free(nullptr);
}

// sam_cache_save replaces only a regular file that is a response cache (or
// empty): never a device, FIFO, directory, symbolic link or another kind of
// file such as an index, which all stay as they were.
TEST_F(CapiTest, CacheSaveRefusesWhatIsNotACacheFile) {
  sam_cache* cache = nullptr;
  ASSERT_EQ(sam_cache_new(1 << 20, &cache), SAM_OK);
  const uint32_t ids[] = {5, 6, 7, 8};
  ASSERT_EQ(sam_cache_insert(cache, "t", ids, 4, nullptr), SAM_OK);
  const std::string hex = sam::format::DigestToHex(FakeTokenizerDigest());
  const std::string dir = TempPath("save-targets");
  std::filesystem::create_directories(dir);
  auto refused = [&](const std::string& path, const std::string& why) {
    EXPECT_EQ(sam_cache_save(cache, path.c_str(), hex.c_str()), SAM_ERR_INVALID_ARGUMENT) << path;
    EXPECT_NE(std::string(sam_last_error()).find(why), std::string::npos) << sam_last_error();
  };
  const std::string fifo = dir + "/fifo.samc";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  refused(fifo, "not a regular file");
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  refused(dir, "is a directory");
  const std::string target = dir + "/target.samc", link = dir + "/link.samc";
  { std::ofstream(target) << "keep"; }
  std::filesystem::create_symlink(target, link);
  refused(link, "symbolic link");
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  // The index of the fixture: another kind of file.
  const auto index_digest = sam::format::Sha256File(*path_);
  refused(*path_, "is not a 'SAMCACHE' file");
  EXPECT_EQ(sam::format::Sha256File(*path_), index_digest);
  if (::geteuid() == 0) {  // as root, a device node (/dev/null's numbers) would be replaced
    const std::string node = dir + "/null";
    ASSERT_EQ(::mknod(node.c_str(), S_IFCHR | 0666, ::makedev(1, 3)), 0);
    refused(node, "not a regular file");
    EXPECT_TRUE(std::filesystem::is_character_file(node));
  }
  // A response cache file (and a new path) is written.
  const std::string ok = dir + "/ok.samc";
  EXPECT_EQ(sam_cache_save(cache, ok.c_str(), hex.c_str()), SAM_OK);
  EXPECT_EQ(sam_cache_save(cache, ok.c_str(), hex.c_str()), SAM_OK);
  std::filesystem::remove_all(dir);
  sam_cache_free(cache);
}

// One session drafts for one vocabulary and one tokenizer: attaching an index
// of another is refused (as sam-replay refuses the mix), and nothing changes.
TEST_F(CapiTest, AttachRefusesAnotherVocabularyOrTokenizer) {
  const std::vector<std::vector<uint32_t>> docs = {{1, 2, 3, 4}, {2, 3, 4, 5}};
  const std::string wider = TempPath("wider.sam"), other_tok = TempPath("other-tok.sam");
  sam::automaton::IndexInfo info;
  info.tokenizer_sha256 = FakeTokenizerDigest();
  sam::automaton::BuildIndexFile(docs, kVocab + 10, wider, info);
  sam::automaton::IndexInfo other;
  other.tokenizer_sha256 = sam::format::Sha256("another model", 13);
  sam::automaton::BuildIndexFile(docs, kVocab, other_tok, other);
  sam_index *base = nullptr, *a = nullptr, *b = nullptr;
  ASSERT_EQ(sam_index_open(path_->c_str(), nullptr, 0, &base), SAM_OK);
  ASSERT_EQ(sam_index_open(wider.c_str(), nullptr, 0, &a), SAM_OK);
  ASSERT_EQ(sam_index_open(other_tok.c_str(), nullptr, 0, &b), SAM_OK);
  sam_session* session = nullptr;
  ASSERT_EQ(sam_session_new(nullptr, &session), SAM_OK);
  ASSERT_EQ(sam_session_attach_index(session, base), SAM_OK);
  EXPECT_EQ(sam_session_attach_index(session, a), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sam_last_error()).find("vocabulary size 60 beside one of 50"),
            std::string::npos) << sam_last_error();
  EXPECT_EQ(sam_session_attach_index(session, b), SAM_ERR_TOKENIZER_MISMATCH);
  EXPECT_NE(std::string(sam_last_error()).find("other-tok.sam"), std::string::npos)
      << sam_last_error();
  ASSERT_EQ(sam_session_attach_index(session, base), SAM_OK);  // the same kind again is fine
  sam_session_free(session);
  sam_index_close(base);
  sam_index_close(a);
  sam_index_close(b);
  std::remove(wider.c_str());
  std::remove(other_tok.c_str());
}

// A cache may hold ids of another vocabulary (a file saved elsewhere): the
// session never drafts them; the draft stops before the first such id.
TEST_F(CapiTest, CacheIdsAboveTheVocabularyAreNeverDrafted) {
  sam_cache* cache = nullptr;
  ASSERT_EQ(sam_cache_new(1 << 20, &cache), SAM_OK);
  std::vector<uint32_t> response;
  for (uint32_t t = 5; t <= 16; ++t) response.push_back(t);
  response.push_back(4294967294u);
  response.push_back(17);
  ASSERT_EQ(sam_cache_insert(cache, "t", response.data(), response.size(), nullptr), SAM_OK);
  sam_index* index = nullptr;
  ASSERT_EQ(sam_index_open(path_->c_str(), nullptr, 0, &index), SAM_OK);
  // The paper rule, whose draft is the cache's continuation when its match is
  // the longer (the default, sam-cal, may prefer the index's tree).
  sam_session_config config;
  sam_session_config_init(&config);
  ASSERT_EQ(sam_policy_from_name("sam", &config.policy, nullptr), SAM_OK);
  for (const bool cache_first : {true, false}) {
    sam_session_config config;
    sam_session_config_init(&config);
    config.policy = SAM_POLICY_PAPER;  // a linear draft: the cache's continuation as it is
    sam_session* session = nullptr;
    ASSERT_EQ(sam_session_new(&config, &session), SAM_OK);
    if (cache_first) {
      ASSERT_EQ(sam_session_attach_cache(session, cache, "t"), SAM_OK);
    }
    ASSERT_EQ(sam_session_attach_index(session, index), SAM_OK);
    if (!cache_first) {
      ASSERT_EQ(sam_session_attach_cache(session, cache, "t"), SAM_OK);
    }
    ASSERT_EQ(sam_session_prefill(session, response.data(), 9), SAM_OK);  // 5..13
    sam_draft draft{};
    ASSERT_EQ(sam_session_propose(session, 14, 0, &draft), SAM_OK);
    // The cached continuation up to the foreign id: 15, 16.
    EXPECT_EQ(draft.source, SAM_SOURCE_CACHE);
    EXPECT_EQ(std::vector<uint32_t>(draft.tokens, draft.tokens + draft.count),
              (std::vector<uint32_t>{14, 15, 16}));
    sam_session_free(session);
  }
  sam_index_close(index);
  sam_cache_free(cache);
}

// A cache file of another vocabulary: loading it and then attaching it to a
// session whose index has a smaller vocabulary is refused, naming the file,
// the response, the id and the vocabulary; once a session attached the cache,
// loading such a file is refused and inserts nothing.
TEST_F(CapiTest, CacheFilesWithIdsAboveTheVocabularyAreRefused) {
  const std::string path = TempPath("foreign.samc");
  {
    sam_cache* cache = nullptr;
    ASSERT_EQ(sam_cache_new(1 << 20, &cache), SAM_OK);
    const uint32_t ids[] = {2, 4294967294u, 40000, 5};
    ASSERT_EQ(sam_cache_insert(cache, "t", ids, 4, nullptr), SAM_OK);
    ASSERT_EQ(sam_cache_save(cache, path.c_str(), nullptr), SAM_OK) << sam_last_error();
    sam_cache_free(cache);
  }
  sam_index* index = nullptr;
  ASSERT_EQ(sam_index_open(path_->c_str(), nullptr, 0, &index), SAM_OK);
  const std::string vocab = std::to_string(sam_index_vocab_size(index));
  auto names_all = [&](const std::string& m) {
    EXPECT_NE(m.find(path), std::string::npos) << m;
    EXPECT_NE(m.find("response 1"), std::string::npos) << m;
    EXPECT_NE(m.find("4294967294"), std::string::npos) << m;
    EXPECT_NE(m.find("vocabulary size " + vocab), std::string::npos) << m;
  };
  sam_cache* cache = nullptr;
  ASSERT_EQ(sam_cache_new(1 << 20, &cache), SAM_OK);
  ASSERT_EQ(sam_cache_load(cache, path.c_str(), nullptr), SAM_OK) << sam_last_error();
  sam_session* session = nullptr;
  ASSERT_EQ(sam_session_new(nullptr, &session), SAM_OK);
  ASSERT_EQ(sam_session_attach_index(session, index), SAM_OK);
  EXPECT_EQ(sam_session_attach_cache(session, cache, "t"), SAM_ERR_INVALID_ARGUMENT);
  names_all(sam_last_error());
  sam_cache* fresh = nullptr;
  ASSERT_EQ(sam_cache_new(1 << 20, &fresh), SAM_OK);
  ASSERT_EQ(sam_session_attach_cache(session, fresh, "t"), SAM_OK) << sam_last_error();
  EXPECT_EQ(sam_cache_load(fresh, path.c_str(), nullptr), SAM_ERR_INVALID_ARGUMENT);
  names_all(sam_last_error());
  EXPECT_EQ(sam_cache_num_responses(fresh), 0u);
  sam_session_free(session);
  sam_cache_free(fresh);
  sam_cache_free(cache);
  sam_index_close(index);
  std::remove(path.c_str());
}

// A length whose byte size overflows is refused, not taken as so many ids.
TEST(Capi, LengthsWhoseByteSizeOverflowsAreRefused) {
  sam_session* session = nullptr;
  ASSERT_EQ(sam_session_new(nullptr, &session), SAM_OK);
  const uint32_t ids[] = {1, 2, 3};
  const size_t huge = size_t{1} << 62;
  EXPECT_EQ(sam_session_prefill(session, ids, huge), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(sam_last_error()).find("overflows"), std::string::npos) << sam_last_error();
  EXPECT_EQ(sam_session_observe_topk(session, ids, huge, ids, 1), SAM_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(sam_session_observe_topk(session, ids, 1, ids, huge), SAM_ERR_INVALID_ARGUMENT);
  const nlohmann::json stats = nlohmann::json::parse(sam_session_stats_json(session));
  EXPECT_EQ(stats.dump().find(std::to_string(huge)), std::string::npos) << stats.dump();
  sam_session_free(session);
}

// The same session twice in one batch is refused before anything is drafted,
// under every policy (its drafts would overwrite each other).
// Ids of another vocabulary are refused by prefill, propose (alone or batched) and commit,
// naming the id; the refused calls change nothing: the drafts after them equal those of a
// session that never got them.
TEST_F(CapiTest, OutOfVocabularyIdsAreRefused) {
  sam_index* index = nullptr;
  ASSERT_EQ(sam_index_open(path_->c_str(), nullptr, 0, &index), SAM_OK);
  sam_session *s = nullptr, *oracle = nullptr;
  ASSERT_EQ(sam_session_new(nullptr, &s), SAM_OK);
  ASSERT_EQ(sam_session_new(nullptr, &oracle), SAM_OK);
  for (sam_session* x : {s, oracle}) ASSERT_EQ(sam_session_attach_index(x, index), SAM_OK);
  const std::vector<uint32_t>& doc = (*documents_)[0];
  auto expect_refused = [](int status, const std::string& expected) {
    EXPECT_EQ(status, SAM_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(sam_last_error()).find(expected), std::string::npos) << sam_last_error();
  };
  std::vector<uint32_t> bad_prompt(doc.begin(), doc.begin() + 20);
  bad_prompt[7] = kVocab;
  expect_refused(sam_session_prefill(s, bad_prompt.data(), bad_prompt.size()),
                 "ids[7] = 50 is outside the vocabulary of the attached indexes (50 ids");
  for (sam_session* x : {s, oracle}) ASSERT_EQ(sam_session_prefill(x, doc.data(), 20), SAM_OK);
  sam_draft d{}, expected{};
  expect_refused(sam_session_propose(s, kVocab + 3, 0, &d), "start token 53 is outside the vocabulary");
  sam_draft_pool* pool = nullptr;
  ASSERT_EQ(sam_draft_pool_new(1, &pool), SAM_OK);
  sam_session* const batch[] = {s};
  const uint32_t bad_start[] = {kVocab};
  int statuses[1] = {-1};
  sam_draft out[1];
  sam_propose_batch(pool, batch, bad_start, nullptr, 1, out, statuses);
  EXPECT_EQ(statuses[0], SAM_ERR_INVALID_ARGUMENT);
  sam_draft_pool_free(pool);
  for (size_t at = 20; at + 3 < doc.size(); at += 3) {
    ASSERT_EQ(sam_session_propose(oracle, doc[at], 0, &expected), SAM_OK);
    const std::vector<uint32_t> want(expected.tokens, expected.tokens + expected.count);
    ASSERT_EQ(sam_session_propose(s, doc[at], 0, &d), SAM_OK);
    EXPECT_EQ(std::vector<uint32_t>(d.tokens, d.tokens + d.count), want) << at;
    const uint32_t bad_commit[] = {doc[at], doc[at + 1], 1u << 20};
    expect_refused(sam_session_commit(s, bad_commit, 3), "ids[2] = 1048576");
    for (sam_session* x : {s, oracle}) ASSERT_EQ(sam_session_commit(x, &doc[at], 3), SAM_OK);
  }
  sam_session_free(s);
  sam_session_free(oracle);
  sam_index_close(index);
}

TEST_F(CapiTest, BatchRefusesTheSameSessionTwice) {
  sam_index* index = nullptr;
  ASSERT_EQ(sam_index_open(path_->c_str(), nullptr, SAM_OPEN_PREPARE, &index), SAM_OK);
  sam_draft_pool* pool = nullptr;
  ASSERT_EQ(sam_draft_pool_new(2, &pool), SAM_OK);
  for (const char* policy : {"sam", "sam-tree", "sam-cal"}) {
    sam_session_config config;
    sam_session_config_init(&config);
    ASSERT_EQ(sam_policy_from_name(policy, &config.policy, nullptr), SAM_OK) << policy;
    sam_session *a = nullptr, *b = nullptr;
    ASSERT_EQ(sam_session_new(&config, &a), SAM_OK) << policy;
    ASSERT_EQ(sam_session_new(&config, &b), SAM_OK) << policy;
    for (sam_session* s : {a, b}) {
      ASSERT_EQ(sam_session_attach_index(s, index), SAM_OK);
      ASSERT_EQ(sam_session_prefill(s, (*documents_)[0].data(), 20), SAM_OK);
    }
    sam_session* const sessions[] = {a, b, a};
    const uint32_t starts[] = {(*documents_)[0][20], (*documents_)[0][20], (*documents_)[0][20]};
    sam_draft out[3];
    int statuses[3] = {-1, -1, -1};
    EXPECT_EQ(sam_propose_batch(pool, sessions, starts, nullptr, 3, out, statuses), SAM_ERR_INVALID_ARGUMENT)
        << policy;
    EXPECT_NE(std::string(sam_last_error()).find("sessions[0] and sessions[2] are the same session"),
              std::string::npos) << sam_last_error();
    EXPECT_EQ(statuses[0], -1);  // nothing ran
    // Without the duplicate the batch runs (and the marks of the refused call do not linger).
    EXPECT_EQ(sam_propose_batch(pool, sessions, starts, nullptr, 2, out, statuses), SAM_OK) << policy;
    EXPECT_EQ(sam_propose_batch(pool, sessions, starts, nullptr, 2, out, statuses), SAM_OK) << policy;
    EXPECT_EQ(statuses[0], SAM_OK);
    EXPECT_EQ(statuses[1], SAM_OK);
    sam_session_free(a);
    sam_session_free(b);
  }
  sam_draft_pool_free(pool);
  sam_index_close(index);
}

// Opening never blocks: a FIFO without a writer, given as a cache file, an
// index or a shard set manifest, is refused at once (SAM_ERR_IO). alarm()
// turns a hang into a failure.
TEST(Capi, OpeningAFifoNeverBlocks) {
  const std::string fifo = TempPath("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  ::alarm(20);
  sam_cache* cache = nullptr;
  ASSERT_EQ(sam_cache_new(1 << 20, &cache), SAM_OK);
  EXPECT_EQ(sam_cache_load(cache, fifo.c_str(), std::string(64, '0').c_str()), SAM_ERR_IO);
  EXPECT_NE(std::string(sam_last_error()).find("not a regular file"), std::string::npos)
      << sam_last_error();
  sam_index* index = nullptr;
  EXPECT_EQ(sam_index_open(fifo.c_str(), nullptr, 0, &index), SAM_ERR_IO);
  sam_shard_set* set = nullptr;
  EXPECT_EQ(sam_shard_set_open(fifo.c_str(), nullptr, 0, &set), SAM_ERR_IO);
  ::alarm(0);
  sam_cache_free(cache);
  std::remove(fifo.c_str());
}

}  // namespace

namespace {

// Writes `docs` as the shard file `path` (with the sections `info` asks for)
// and returns its manifest entry.
sam::format::ShardEntry WriteShard(const std::vector<std::vector<uint32_t>>& docs, uint32_t vocab,
                                   const std::string& path,
                                   const sam::automaton::IndexInfo& info = {}) {
  const auto w = sam::automaton::BuildIndexFile(docs, vocab, path, info);
  sam::format::ShardEntry e;
  e.file = std::filesystem::path(path).filename().string();
  e.bytes = w.file_bytes;
  e.sha256 = sam::format::Sha256File(path);
  e.tokens = w.tokens;
  e.documents = w.documents;
  e.states = w.states;
  return e;
}

// 60 random documents of up to 40 tokens below `vocab` (0 and 1 more often).
std::vector<std::vector<uint32_t>> SetDocuments(uint32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::vector<uint32_t>> docs(60);
  for (auto& d : docs) {
    d.resize(1 + rng() % 40);
    for (auto& t : d) t = rng() % 3 == 0 ? rng() % 2 : rng() % vocab;
  }
  return docs;
}

}  // namespace

// A shard set (three shards over consecutive documents, manifest written by
// the format library) drafts through the C API as the single index over all
// the documents does through the C++ API; a missing shard is refused by name.
TEST(Capi, ShardSetDraftsAsTheSingleIndex) {
  constexpr uint32_t kSetVocab = 10;
  const std::vector<std::vector<uint32_t>> docs = SetDocuments(kSetVocab, 77);
  std::mt19937 rng(177);  // the streams
  const std::string single_path = TempPath("set_single.sam");
  sam::automaton::BuildIndexFile(docs, kSetVocab, single_path);
  const std::string manifest_path = TempPath("set.samset");
  sam::format::ShardSetManifest manifest;
  manifest.vocab_size = kSetVocab;
  std::vector<std::string> shard_paths;
  for (const auto& [begin, end] : {std::pair<size_t, size_t>{0, 20}, {20, 45}, {45, 60}}) {
    const std::string path = TempPath("set_shard" + std::to_string(begin) + ".sam");
    manifest.shards.push_back(WriteShard(
        std::vector<std::vector<uint32_t>>(docs.begin() + begin, docs.begin() + end), kSetVocab,
        path));
    shard_paths.push_back(path);
  }
  sam::format::WriteShardSetManifest(manifest_path, manifest);
  {  // Opened as an index, the manifest is named for what it is.
    sam_index* not_index = nullptr;
    EXPECT_EQ(sam_index_open(manifest_path.c_str(), nullptr, 0, &not_index), SAM_ERR_FORMAT);
    EXPECT_NE(std::string(sam_last_error()).find("a shard set manifest, not an index file"),
              std::string::npos) << sam_last_error();
  }

  sam_shard_set* set = nullptr;
  ASSERT_EQ(sam_shard_set_open(manifest_path.c_str(), nullptr, SAM_OPEN_VERIFY, &set), SAM_OK)
      << sam_last_error();
  EXPECT_EQ(sam_shard_set_num_shards(set), 3u);
  EXPECT_EQ(sam_shard_set_num_documents(set), docs.size());
  EXPECT_EQ(sam_shard_set_num_tokens(set), sam::format::IndexFile::Open(single_path).view().num_tokens());
  EXPECT_EQ(sam_shard_set_open(manifest_path.c_str(), nullptr, SAM_OPEN_READ, &set),
            SAM_ERR_INVALID_ARGUMENT);
  // With child records too (every shard's tables; merged lookups read them).
  sam_shard_set* records = nullptr;
  ASSERT_EQ(sam_shard_set_open(manifest_path.c_str(), nullptr, SAM_OPEN_CHILD_RECORDS, &records),
            SAM_OK)
      << sam_last_error();
  for (const auto& [opened, policy] :
       std::vector<std::pair<sam_shard_set*, int>>{{set, SAM_POLICY_STATIC_ONLY},
                                                  {set, SAM_POLICY_TREE},
                                                  {set, SAM_POLICY_PAPER},
                                                  {set, SAM_POLICY_CALIBRATED},
                                                  {records, SAM_POLICY_TREE},
                                                  {records, SAM_POLICY_CALIBRATED}}) {
    sam_session_config config;
    sam_session_config_init(&config);
    config.policy = policy;
    sam_session* c_session = nullptr;
    ASSERT_EQ(sam_session_new(&config, &c_session), SAM_OK) << sam_last_error();
    ASSERT_EQ(sam_session_attach_shard_set(c_session, opened), SAM_OK) << sam_last_error();
    sam::runtime::SessionOptions o;
    o.policy = static_cast<sam::runtime::Policy>(policy);
    sam::runtime::Session single(o);
    single.AttachIndex(sam::format::IndexFile::Open(single_path).shared_view());
    for (int step = 0; step < 400; ++step) {
      const auto& d = docs[rng() % docs.size()];
      const uint32_t t = rng() % 4 == 0 ? rng() % kSetVocab : d[rng() % d.size()];
      sam_draft draft;
      ASSERT_EQ(sam_session_propose(c_session, t, 0, &draft), SAM_OK) << sam_last_error();
      const sam::runtime::DraftTree& expected = single.Propose(t);
      ASSERT_EQ(std::vector<uint32_t>(draft.tokens, draft.tokens + draft.count), expected.tokens);
      ASSERT_EQ(std::vector<int32_t>(draft.parents, draft.parents + draft.count), expected.parents);
      ASSERT_EQ(sam_session_commit(c_session, &t, 1), SAM_OK) << sam_last_error();
      single.Commit(std::span<const uint32_t>(&t, 1));
    }
    sam_session_free(c_session);
  }
  sam_shard_set_close(set);
  sam_shard_set_close(records);

  std::remove(shard_paths[1].c_str());
  set = nullptr;
  EXPECT_EQ(sam_shard_set_open(manifest_path.c_str(), nullptr, 0, &set), SAM_ERR_IO);
  EXPECT_EQ(set, nullptr);
  EXPECT_NE(std::string(sam_last_error()).find(std::filesystem::path(shard_paths[1]).filename().string()),
            std::string::npos)
      << sam_last_error();
  for (const auto& p : shard_paths) std::remove(p.c_str());
  std::remove(manifest_path.c_str());
  std::remove(single_path.c_str());
}

// sam_shard_set_accelerators says what a set's sessions draft with: hub
// tables always (a shard set's open computes what a shard lacks), child
// records when every shard's file holds them or SAM_OPEN_CHILD_RECORDS
// computes them, and COMPUTED when some shard's were computed. Expected from
// how each set's shards were written (checked with the format reader):
// without sections, with a shard's sections (top_k kShardTopK), with child
// records too, one shard with sections beside two without, and one shard
// without records beside two with.
TEST(Capi, ShardSetAcceleratorsSayWhatSessionsDraftWith) {
  constexpr uint32_t kSetVocab = 40;
  const std::vector<std::vector<uint32_t>> docs = SetDocuments(kSetVocab, 78);
  // A shard's sections: the C parameters with a shard's top_k.
  auto shard_sections = [](bool records) {
    sam::automaton::IndexInfo info;
    info.accelerators = CDefaultSections(records);
    info.accelerators->top_k = sam::format::kShardTopK;
    return info;
  };
  // Per set, the sections of its three shards: 0 none, 1 tables, 2 tables and records.
  const std::vector<std::array<int, 3>> sets = {{0, 0, 0}, {1, 1, 1}, {2, 2, 2}, {1, 0, 0}, {2, 1, 2}};
  EXPECT_EQ(sam_shard_set_accelerators(nullptr), 0u);
  for (size_t k = 0; k < sets.size(); ++k) {
    SCOPED_TRACE("set " + std::to_string(k));
    const std::string manifest_path = TempPath("acc" + std::to_string(k) + ".samset");
    sam::format::ShardSetManifest manifest;
    manifest.vocab_size = kSetVocab;
    std::vector<std::string> paths;
    bool all_tables = true, all_records = true;
    for (size_t i = 0; i < 3; ++i) {
      const std::string path = TempPath("acc" + std::to_string(k) + "_" + std::to_string(i) + ".sam");
      manifest.shards.push_back(WriteShard(
          std::vector<std::vector<uint32_t>>(docs.begin() + 20 * i, docs.begin() + 20 * (i + 1)),
          kSetVocab, path,
          sets[k][i] == 0 ? sam::automaton::IndexInfo{} : shard_sections(sets[k][i] == 2)));
      const auto file = sam::format::IndexFile::Open(path);
      ASSERT_EQ(file.view().hubs().present(), sets[k][i] != 0);
      ASSERT_EQ(file.view().child_records().present(), sets[k][i] == 2);
      all_tables = all_tables && file.view().hubs().present();
      all_records = all_records && file.view().child_records().present();
      paths.push_back(path);
    }
    sam::format::WriteShardSetManifest(manifest_path, manifest);
    for (const unsigned flags : {0u, unsigned{SAM_OPEN_CHILD_RECORDS}}) {
      SCOPED_TRACE("flags " + std::to_string(flags));
      const bool want_records = all_records || (flags & SAM_OPEN_CHILD_RECORDS) != 0;
      const bool computed = !all_tables || (want_records && !all_records);
      const unsigned expected = unsigned{SAM_INDEX_HUB_TABLES} |
                                (want_records ? unsigned{SAM_INDEX_CHILD_RECORDS} : 0u) |
                                (computed ? unsigned{SAM_INDEX_COMPUTED} : 0u);
      sam_shard_set* set = nullptr;
      ASSERT_EQ(sam_shard_set_open(manifest_path.c_str(), nullptr, flags, &set), SAM_OK)
          << sam_last_error();
      EXPECT_EQ(sam_shard_set_accelerators(set), expected);
      sam_shard_set_close(set);
    }
    for (const std::string& path : paths) std::remove(path.c_str());
    std::remove(manifest_path.c_str());
  }
}
