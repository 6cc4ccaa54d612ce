// The C API (sam/sam.h) over sam::format::IndexFile and sam::runtime::Session.
// Every entry point runs its body through Guard(), which turns exceptions
// into status codes plus a thread-local message.
#include <cstddef>
#include <cstring>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "sam/error.h"
#include "sam/format/index.h"
#include "sam/format/sha256.h"
#include "sam/format/shard_set.h"
#include "sam/runtime/shard_set.h"
#include "sam/runtime/batch.h"
#include "sam/runtime/recycling.h"
#include "sam/runtime/response_cache.h"
#include "sam/runtime/selection.h"
#include "sam/runtime/session.h"
#include "sam/runtime/static_index.h"
#include "sam/runtime/verify.h"
#include "sam/sam.h"
#include "c_api_internal.h"

struct sam_index {
  std::shared_ptr<const sam::format::IndexFile> file;
  // What sessions attach: SAM_OPEN_PREPARE's tables, else the file's own
  // (StaticIndex::FromFile: a plain automaton when it has none).
  std::shared_ptr<const sam::runtime::StaticIndex> prepared;
};

struct sam_cache {
  std::shared_ptr<sam::runtime::ResponseCache> cache;
};

struct sam_shard_set {
  std::vector<std::shared_ptr<const sam::runtime::StaticIndex>> shards;
  sam::format::Sha256Digest tokenizer{};  // the manifest's
  uint64_t tokens = 0, documents = 0;
};

struct sam_rng {
  sam::runtime::Rng rng;
};

struct sam_session {
  // Declared before `session`, which borrows it, so it outlives it. (The
  // session shares the indexes it attaches: IndexFile::shared_view().)
  std::unique_ptr<sam::runtime::RecyclingDrafter> recycling;
  std::unique_ptr<sam::runtime::Session> session;
  // The tokenizer fingerprint of the indexes attached so far (all alike).
  std::optional<sam::format::Sha256Digest> tokenizer;
  // The last sam_propose_batch call that held this session (duplicates are refused).
  const sam_draft_pool* batch_pool = nullptr;
  uint64_t batch_call = 0;
  std::string stats_json;
  bool collect_timing = false;
  // The session's statistics at the last sam_session_stats_reset (the totals' origin) and at
  // the start of the current request (sam_session_reset).
  sam::runtime::SessionStatistics totals_origin;
  sam::runtime::SessionStatistics request_origin;
  // The last proposal, until the next commit, reset, prefill or attach (Session::Propose's
  // reference stays valid until the next call on the session).
  const sam::runtime::DraftTree* proposed = nullptr;
  sam::runtime::VerifyResult verified;
  std::vector<uint32_t> commit_tokens;
};

namespace {

thread_local std::string last_error;

int Fail(sam_status status, const std::string& message) {
  // Assigning may itself throw bad_alloc; the status is still returned.
  try {
    last_error = message;
  } catch (...) {
    last_error.clear();
  }
  return status;
}

// The status of each code of the one sam::ErrorCode. No default: a new code must be given a
// status here (-Wswitch), and a value that is not a code is a bug.
sam_status StatusOf(sam::ErrorCode code) {
  using sam::ErrorCode;
  switch (code) {
    case ErrorCode::kIo:
      return SAM_ERR_IO;
    case ErrorCode::kTokenizerMismatch:
      return SAM_ERR_TOKENIZER_MISMATCH;
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kBadValue:
    case ErrorCode::kCapacity:
    case ErrorCode::kUsage:
      return SAM_ERR_INVALID_ARGUMENT;
    // A file that is not what it should be.
    case ErrorCode::kTruncated:
    case ErrorCode::kBadMagic:
    case ErrorCode::kBadByteOrder:
    case ErrorCode::kUnsupportedVersion:
    case ErrorCode::kUnknownRequiredFeature:
    case ErrorCode::kBadHeader:
    case ErrorCode::kBadSectionTable:
    case ErrorCode::kOverlappingSections:
    case ErrorCode::kChecksumMismatch:
    case ErrorCode::kSelfTestFailed:
    case ErrorCode::kCorruptStructure:
    case ErrorCode::kCompression:
    case ErrorCode::kInvalidJson:
    case ErrorCode::kBadRecord:
    case ErrorCode::kTokenizer:
    case ErrorCode::kBadCheckpoint:
    case ErrorCode::kBadModelConfig:
    case ErrorCode::kMissingTensor:
    case ErrorCode::kShapeMismatch:
    case ErrorCode::kDtype:
      return SAM_ERR_FORMAT;
    case ErrorCode::kOk:  // never thrown
    case ErrorCode::kInternal:
      return SAM_ERR_INTERNAL;
  }
  return SAM_ERR_INTERNAL;
}

// Runs body; maps whatever it throws to a status (the one place where
// exceptions stop).
template <typename Body>
int Guard(Body&& body) noexcept {
  try {
    body();
    return SAM_OK;
  } catch (const sam::Error& e) {
    return Fail(StatusOf(e.code()), e.what());
  } catch (const std::out_of_range& e) {
    return Fail(SAM_ERR_INVALID_ARGUMENT, e.what());
  } catch (const std::bad_alloc&) {
    return Fail(SAM_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return Fail(SAM_ERR_INTERNAL, e.what());
  } catch (...) {
    return Fail(SAM_ERR_INTERNAL, "unknown exception");
  }
}

// Every index of a session is of one tokenizer (sam-replay refuses a mix too).
void CheckSameTokenizer(const sam_session& session, const sam::format::Sha256Digest& tokenizer,
                        const std::string& what) {
  if (session.tokenizer && *session.tokenizer != tokenizer)
    throw sam::Error(sam::ErrorCode::kTokenizerMismatch,
                     "sam_session_attach: " + what + " was built with tokenizer " +
                         sam::format::DigestToHex(tokenizer) + ", the session's indexes with " +
                         sam::format::DigestToHex(*session.tokenizer) +
                         " (one session drafts for one tokenizer)");
}

void Require(bool condition, const char* function, const char* what) {
  if (!condition)
    throw sam::Error(sam::ErrorCode::kInvalidArgument, std::string(function) + ": " + what);
}

std::span<const uint32_t> Ids(const uint32_t* ids, size_t n, const char* function) {
  Require(ids != nullptr || n == 0, function, "ids is NULL but n > 0");
  // No array holds more bytes than PTRDIFF_MAX: a larger n is a caller's error.
  Require(n <= static_cast<size_t>(PTRDIFF_MAX) / sizeof(uint32_t), function,
          "n is larger than any array (its byte length overflows)");
  return {ids, n};
}

// sam_policy values are the runtime's Policy values.
static_assert(SAM_POLICY_PAPER == static_cast<int>(sam::runtime::Policy::kPaper));
static_assert(SAM_POLICY_STATIC_ONLY == static_cast<int>(sam::runtime::Policy::kStaticOnly));
static_assert(SAM_POLICY_DYNAMIC_ONLY == static_cast<int>(sam::runtime::Policy::kDynamicOnly));
static_assert(SAM_POLICY_TREE == static_cast<int>(sam::runtime::Policy::kTree));
static_assert(SAM_POLICY_CALIBRATED == static_cast<int>(sam::runtime::Policy::kCalibrated));
static_assert(SAM_MAX_DRAFT_SIZE == sam::runtime::kMaxDraftSize);

bool IsPolicy(int policy) {
  return policy >= SAM_POLICY_PAPER && policy <= SAM_POLICY_CALIBRATED;
}

// The C config's fields, in the order of sam_session_config, each the user option of the same
// name in the one option table (sam/runtime/options.h: SessionOptionSpecs), whose setter
// checks its value and range. `text` renders the field's value as the option's text (a
// sam_policy or sam_draft_shape as its name); fields without a row (cost_curve's array,
// recycling_vocab_size) are read by ToSessionOptions itself.
struct ConfigField {
  const char* name;
  size_t offset, size;
  std::string (*text)(const sam_session_config& c);
};

#define SAM_FIELD(field, render)                                                           \
  ConfigField {                                                                            \
    #field, offsetof(sam_session_config, field), sizeof(sam_session_config::field),        \
        [](const sam_session_config& c) -> std::string { return render(c.field); }         \
  }

std::string PolicyText(int policy) {
  if (!IsPolicy(policy)) {
    std::string valid;
    for (int p = SAM_POLICY_PAPER; p <= SAM_POLICY_CALIBRATED; ++p)
      valid += (valid.empty() ? "" : ", ") + std::to_string(p) + " (" +
               std::string(sam::runtime::PolicyName(static_cast<sam::runtime::Policy>(p))) + ")";
    throw sam::Error(sam::ErrorCode::kInvalidArgument,
                     "policy " + std::to_string(policy) + " is not a sam_policy (valid: " + valid + ")");
  }
  return std::string(sam::runtime::PolicyName(static_cast<sam::runtime::Policy>(policy)));
}

std::string ShapeText(int shape) {
  if (shape != SAM_SHAPE_TREE && shape != SAM_SHAPE_CHAIN)
    throw sam::Error(sam::ErrorCode::kInvalidArgument,
                     "shape " + std::to_string(shape) +
                         " is not a sam_draft_shape (valid: 0 (tree), 1 (chain))");
  return std::string(sam::runtime::DraftShapeName(static_cast<sam::runtime::DraftShape>(shape)));
}

std::string Number(uint64_t v) { return std::to_string(v); }
// l_bias: any negative value is automatic.
std::string Bias(int32_t v) { return v < 0 ? "auto" : std::to_string(v); }
std::string Flag(int v) { return v != 0 ? "true" : "false"; }

const ConfigField kConfigFields[] = {
    SAM_FIELD(policy, PolicyText),
    SAM_FIELD(draft_size, Number),
    SAM_FIELD(shape, ShapeText),
    SAM_FIELD(max_dynamic_bytes, Number),
    SAM_FIELD(collect_timing, Flag),
    SAM_FIELD(l_bias, Bias),
    SAM_FIELD(l_threshold, Number),
    SAM_FIELD(tree_nodes, Number),
    SAM_FIELD(tree_width, Number),
};

#undef SAM_FIELD

// Whether the caller's struct (struct_size bytes) holds `field` whole.
bool Covers(size_t struct_size, size_t offset, size_t size) { return offset + size <= struct_size; }

// The session options of a caller's config, by the rule of sam.h: the fields that
// in.struct_size covers whole, the defaults for the others; a larger struct_size is accepted
// only when the bytes past sam_session_config are zero. *recycling_vocab_size receives that
// field (the options hold no drafter).
sam::runtime::SessionOptions ToSessionOptions(const sam_session_config& in,
                                              uint32_t* recycling_vocab_size) {
  const size_t size = in.struct_size;
  constexpr size_t kFirstOptionEnd =
      offsetof(sam_session_config, draft_size) + sizeof(sam_session_config::draft_size);
  Require(size >= kFirstOptionEnd, "sam_session_new",
          ("struct_size " + std::to_string(size) + " is below " + std::to_string(kFirstOptionEnd) +
           ": initialise the config with sam_session_config_init()")
              .c_str());
  const auto* bytes = reinterpret_cast<const unsigned char*>(&in);
  for (size_t i = sizeof(sam_session_config); i < size; ++i)
    if (bytes[i] != 0)
      throw sam::Error(sam::ErrorCode::kInvalidArgument,
                       "sam_session_new: struct_size " + std::to_string(size) +
                           " is larger than this library's sam_session_config (" +
                           std::to_string(sizeof(sam_session_config)) + " bytes, version " +
                           SAM_BUILD_VERSION_STRING + ") and byte " + std::to_string(i) +
                           " is not zero: an option this library does not know is set");
  // The caller's fields, copied as bytes (its object may end before the fields it does not
  // know) over the defaults.
  sam_session_config c;
  sam_session_config_init(&c);
  std::memcpy(&c, bytes, std::min(size, sizeof c));
  c.struct_size = sizeof c;
  sam_session_config defaults;
  sam_session_config_init(&defaults);
  auto keep_covered = [&](size_t offset, size_t field_size) {
    if (!Covers(size, offset, field_size))  // partly copied: back to the default
      std::memcpy(reinterpret_cast<unsigned char*>(&c) + offset,
                  reinterpret_cast<const unsigned char*>(&defaults) + offset, field_size);
  };
  for (const ConfigField& f : kConfigFields) keep_covered(f.offset, f.size);
  keep_covered(offsetof(sam_session_config, cost_curve), sizeof c.cost_curve);
  keep_covered(offsetof(sam_session_config, cost_curve_size), sizeof c.cost_curve_size);
  keep_covered(offsetof(sam_session_config, recycling_vocab_size), sizeof c.recycling_vocab_size);

  sam::runtime::SessionOptions options;
  for (const ConfigField& f : kConfigFields) {
    try {
      sam::runtime::SetSessionOption(&options, f.name, f.text(c));
    } catch (const sam::Error& e) {
      throw sam::Error(e.code(), std::string("sam_session_new: ") + e.what());
    }
  }
  if (c.cost_curve_size > 0) {
    Require(c.cost_curve != nullptr, "sam_session_new",
            "cost_curve is NULL but cost_curve_size is not 0");
    Require(c.cost_curve_size <= SAM_MAX_DRAFT_SIZE, "sam_session_new",
            "cost_curve_size is above SAM_MAX_DRAFT_SIZE");
    std::vector<sam::runtime::CostPoint> points(c.cost_curve_size);
    for (size_t i = 0; i < points.size(); ++i) points[i] = {i + 1, c.cost_curve[i]};
    options.cost_curve = sam::runtime::CostCurve::FromPoints(points, "sam_session_config.cost_curve");
  }
  *recycling_vocab_size = c.recycling_vocab_size;
  return options;
}

// The last proposal of `session`, checked to exist and to have n nodes.
const sam::runtime::DraftTree& Proposed(const sam_session* session, size_t n,
                                        const char* function) {
  Require(session != nullptr, function, "session is NULL");
  Require(session->proposed != nullptr, function,
          "no proposal to verify: call sam_session_propose first (a commit, reset, prefill or "
          "attach ends the proposal)");
  const sam::runtime::DraftTree& tree = *session->proposed;
  Require(n == tree.size(), function,
          ("n is " + std::to_string(n) + "; expected the draft's count, " +
           std::to_string(tree.size()))
              .c_str());
  return tree;
}

// Fills *out from session->verified, the verification of `tree`.
void ReturnVerified(sam_session* session, const sam::runtime::DraftTree& tree,
                    sam_verify_result* out) {
  const sam::runtime::VerifyResult& r = session->verified;
  session->commit_tokens.assign(1, tree.tokens[0]);
  session->commit_tokens.insert(session->commit_tokens.end(), r.accepted_tokens.begin(),
                                r.accepted_tokens.end());
  out->accepted_nodes = r.accepted_nodes.data();
  out->commit_tokens = session->commit_tokens.data();
  out->accepted_count = r.accepted_tokens.size();
  out->bonus_token = r.bonus_token;
}

// Hands `tree`, the session's new proposal, to the caller as `out` and
// remembers it for the verification calls (sam_session_verify_*).
void ExposeDraft(sam_session* session, const sam::runtime::DraftTree& tree, sam_draft* out) {
  session->proposed = &tree;
  out->tokens = tree.tokens.data();
  out->parents = tree.parents.data();
  out->depths = tree.depths.data();
  out->count = tree.size();
  out->source = static_cast<int>(tree.source);
  out->match_len = tree.match_len;
}

}  // namespace

extern "C" {

const char* sam_status_name(int status) {
  switch (status) {
    case SAM_OK:
      return "ok";
    case SAM_ERR_IO:
      return "io";
    case SAM_ERR_FORMAT:
      return "format";
    case SAM_ERR_TOKENIZER_MISMATCH:
      return "tokenizer_mismatch";
    case SAM_ERR_INVALID_ARGUMENT:
      return "invalid_argument";
    case SAM_ERR_OUT_OF_MEMORY:
      return "out_of_memory";
    case SAM_ERR_INTERNAL:
      return "internal";
    default:
      return "unknown";
  }
}

const char* sam_last_error(void) { return last_error.c_str(); }

// SAM_BUILD_VERSION_* and SAM_BUILD_ABI_VERSION come from CMake (the project version and the
// soname's number), so the library reports what it was built as, not what sam.h claims.
int sam_version(void) {
  return SAM_MAKE_VERSION(SAM_BUILD_VERSION_MAJOR, SAM_BUILD_VERSION_MINOR,
                          SAM_BUILD_VERSION_PATCH);
}

const char* sam_version_string(void) { return SAM_BUILD_VERSION_STRING; }

int sam_abi_version(void) { return SAM_BUILD_ABI_VERSION; }

const char* sam_policy_name(int policy) {
  // The table's names are string literals: NUL-terminated static storage.
  return IsPolicy(policy) ? sam::runtime::PolicyName(static_cast<sam::runtime::Policy>(policy)).data()
                          : "unknown";
}

int sam_policy_from_name(const char* name, int* policy, int* recycling_fallback) {
  return Guard([&] {
    Require(name != nullptr, "sam_policy_from_name", "name is NULL");
    Require(policy != nullptr, "sam_policy_from_name", "policy is NULL");
    const sam::runtime::NamedPolicy* found = nullptr;
    try {
      found = &sam::runtime::FindPolicy(name);
    } catch (const sam::Error& e) {
      throw sam::Error(e.code(), std::string("sam_policy_from_name: ") + e.what());
    }
    *policy = static_cast<int>(found->policy);
    if (recycling_fallback != nullptr) *recycling_fallback = found->recycling_fallback ? 1 : 0;
  });
}

// ---- Index files ------------------------------------------------------------

int sam_index_open(const char* path, const char* expected_tokenizer_sha256, unsigned flags,
                   sam_index** out) {
  return Guard([&] {
    Require(path != nullptr, "sam_index_open", "path is NULL");
    Require(out != nullptr, "sam_index_open", "out is NULL");
    constexpr unsigned kKnown =
        SAM_OPEN_READ | SAM_OPEN_PREPARE | SAM_OPEN_VERIFY | SAM_OPEN_CHILD_RECORDS;
    Require((flags & ~kKnown) == 0, "sam_index_open",
            ("unknown flag bits " + std::to_string(flags & ~kKnown) +
             " (known: SAM_OPEN_READ, SAM_OPEN_PREPARE, SAM_OPEN_VERIFY, SAM_OPEN_CHILD_RECORDS)")
                .c_str());
    sam::format::OpenOptions options;
    options.verify = (flags & SAM_OPEN_VERIFY) != 0;
    if (expected_tokenizer_sha256 != nullptr)
      options.expected_tokenizer_sha256 = sam::format::DigestFromHex(expected_tokenizer_sha256);
    auto index = std::make_unique<sam_index>();
    index->file = std::make_shared<const sam::format::IndexFile>(
        (flags & SAM_OPEN_READ) ? sam::format::IndexFile::Read(path, options)
                                : sam::format::IndexFile::Open(path, options));
    // Without PREPARE, what the file holds (O(1)): its drafting sections
    // when sam-build wrote them, else the plain automaton.
    index->prepared = sam::runtime::IndexForOpen(index->file->shared_view(),
                                                 (flags & SAM_OPEN_PREPARE) != 0,
                                                 (flags & SAM_OPEN_CHILD_RECORDS) != 0);
    *out = index.release();
  });
}

void sam_index_close(sam_index* index) { delete index; }

int sam_index_verify(const sam_index* index) {
  return Guard([&] {
    Require(index != nullptr, "sam_index_verify", "index is NULL");
    index->file->Verify();
  });
}

uint32_t sam_index_vocab_size(const sam_index* index) {
  return index == nullptr ? 0 : index->file->view().vocab_size();
}

uint64_t sam_index_num_tokens(const sam_index* index) {
  return index == nullptr ? 0 : index->file->view().num_tokens();
}

uint64_t sam_index_num_documents(const sam_index* index) {
  return index == nullptr ? 0 : index->file->header().num_documents;
}

namespace {

// SAM_INDEX_* bits of one StaticIndex.
unsigned AcceleratorBits(const sam::runtime::StaticIndex& s) {
  unsigned bits = 0;
  if (s.prepared()) {
    bits |= SAM_INDEX_HUB_TABLES;
    if (!s.accelerators_from_file()) bits |= SAM_INDEX_COMPUTED;
  }
  if (s.has_records()) {
    bits |= SAM_INDEX_CHILD_RECORDS;
    if (!s.records_from_file()) bits |= SAM_INDEX_COMPUTED;
  }
  return bits;
}

}  // namespace

unsigned sam_index_accelerators(const sam_index* index) {
  if (index == nullptr || index->prepared == nullptr) return 0;
  return AcceleratorBits(*index->prepared);
}

// ---- Shard sets -------------------------------------------------------------

int sam_shard_set_open(const char* path, const char* expected_tokenizer_sha256, unsigned flags,
                       sam_shard_set** out) {
  return Guard([&] {
    Require(path != nullptr, "sam_shard_set_open", "path is NULL");
    Require(out != nullptr, "sam_shard_set_open", "out is NULL");
    const unsigned known = SAM_OPEN_VERIFY | SAM_OPEN_CHILD_RECORDS;
    Require((flags & ~known) == 0, "sam_shard_set_open",
            ("unknown or unsupported flag bits " + std::to_string(flags & ~known)).c_str());
    const sam::runtime::StaticIndex::Options prepare = sam::runtime::ShardIndexOptions(
        sam::runtime::PrepareOptions((flags & SAM_OPEN_CHILD_RECORDS) != 0));
    sam::format::OpenOptions options;
    options.verify = (flags & SAM_OPEN_VERIFY) != 0;
    if (expected_tokenizer_sha256 != nullptr)
      options.expected_tokenizer_sha256 = sam::format::DigestFromHex(expected_tokenizer_sha256);
    auto set = std::make_unique<sam_shard_set>();
    const sam::format::ShardSet opened = sam::format::ShardSet::Open(path, options);
    for (const auto& f : opened.shards())
      set->shards.push_back(
          sam::runtime::StaticIndex::Create(f.shared_view(), prepare));
    set->tokenizer = opened.manifest().tokenizer_sha256;
    set->tokens = opened.num_tokens();
    set->documents = opened.num_documents();
    *out = set.release();
  });
}

void sam_shard_set_close(sam_shard_set* set) { delete set; }

size_t sam_shard_set_num_shards(const sam_shard_set* set) {
  return set == nullptr ? 0 : set->shards.size();
}

uint64_t sam_shard_set_num_tokens(const sam_shard_set* set) {
  return set == nullptr ? 0 : set->tokens;
}

// What every shard has (tables, records), and whether any shard computed some.
unsigned sam_shard_set_accelerators(const sam_shard_set* set) {
  if (set == nullptr || set->shards.empty()) return 0;
  unsigned all = SAM_INDEX_HUB_TABLES | SAM_INDEX_CHILD_RECORDS, any = 0;
  for (const auto& shard : set->shards) {
    const unsigned bits = AcceleratorBits(*shard);
    all &= bits;
    any |= bits;
  }
  return all | (any & SAM_INDEX_COMPUTED);
}

uint64_t sam_shard_set_num_documents(const sam_shard_set* set) {
  return set == nullptr ? 0 : set->documents;
}

// ---- Sessions ---------------------------------------------------------------

void sam_session_config_init(sam_session_config* config) {
  if (config == nullptr) return;
  const sam::runtime::SessionOptions defaults;
  *config = sam_session_config{};
  config->struct_size = sizeof(sam_session_config);
  config->policy = static_cast<int>(defaults.policy);
  config->draft_size = defaults.draft_size;
  config->shape = static_cast<int>(defaults.shape);
  config->max_dynamic_bytes = defaults.max_dynamic_bytes;
  config->collect_timing = defaults.collect_timing ? 1 : 0;
  config->recycling_vocab_size = 0;
  config->l_bias = -1;
  config->l_threshold = defaults.paper.l_threshold;
  config->tree_nodes = defaults.tree.nodes;
  config->tree_width = defaults.tree.width;
}

int sam_session_new(const sam_session_config* config, sam_session** out) {
  return Guard([&] {
    Require(out != nullptr, "sam_session_new", "out is NULL");
    sam_session_config defaults;
    sam_session_config_init(&defaults);
    uint32_t recycling_vocab_size = 0;
    sam::runtime::SessionOptions session_options =
        ToSessionOptions(config != nullptr ? *config : defaults, &recycling_vocab_size);
    auto session = std::make_unique<sam_session>();
    if (recycling_vocab_size > 0) {
      session->recycling = std::make_unique<sam::runtime::RecyclingDrafter>(recycling_vocab_size);
      session_options.fallback = session->recycling.get();
    }
    session->session = std::make_unique<sam::runtime::Session>(session_options);
    session->collect_timing = session_options.collect_timing;
    *out = session.release();
  });
}

void sam_session_free(sam_session* session) { delete session; }

int sam_session_attach_index(sam_session* session, sam_index* index) {
  return Guard([&] {
    Require(session != nullptr, "sam_session_attach_index", "session is NULL");
    Require(index != nullptr, "sam_session_attach_index", "index is NULL");
    const sam::format::Sha256Digest& tokenizer = index->file->header().tokenizer_sha256;
    CheckSameTokenizer(*session, tokenizer, index->file->path());
    session->proposed = nullptr;
    // The session shares the index (and its prepared tables): it stays
    // mapped after sam_index_close. (The session refuses another vocabulary.)
    if (index->prepared) session->session->AttachIndex(index->prepared);
    else session->session->AttachIndex(index->file->shared_view());
    session->tokenizer = tokenizer;
  });
}

int sam_session_attach_shard_set(sam_session* session, sam_shard_set* set) {
  return Guard([&] {
    Require(session != nullptr, "sam_session_attach_shard_set", "session is NULL");
    Require(set != nullptr, "sam_session_attach_shard_set", "set is NULL");
    CheckSameTokenizer(*session, set->tokenizer, "the shard set");
    session->proposed = nullptr;
    session->session->AttachShardSet(set->shards);  // shared: open after sam_shard_set_close
    session->tokenizer = set->tokenizer;
  });
}

int sam_session_prefill(sam_session* session, const uint32_t* ids, size_t n) {
  return Guard([&] {
    Require(session != nullptr, "sam_session_prefill", "session is NULL");
    session->proposed = nullptr;
    session->session->Prefill(Ids(ids, n, "sam_session_prefill"));
  });
}

int sam_session_propose(sam_session* session, uint32_t start_token, size_t max_nodes,
                        sam_draft* out) {
  return Guard([&] {
    Require(session != nullptr, "sam_session_propose", "session is NULL");
    Require(out != nullptr, "sam_session_propose", "out is NULL");
    session->proposed = nullptr;
    const sam::runtime::DraftTree& tree = max_nodes == 0
                                              ? session->session->Propose(start_token)
                                              : session->session->Propose(start_token, max_nodes);
    ExposeDraft(session, tree, out);
  });
}

int sam_session_commit(sam_session* session, const uint32_t* ids, size_t n) {
  return Guard([&] {
    Require(session != nullptr, "sam_session_commit", "session is NULL");
    session->proposed = nullptr;
    session->session->Commit(Ids(ids, n, "sam_session_commit"));
  });
}

int sam_session_verify_greedy(sam_session* session, const uint32_t* argmax, size_t n,
                              sam_verify_result* out) {
  return Guard([&] {
    const sam::runtime::DraftTree& tree = Proposed(session, n, "sam_session_verify_greedy");
    Require(out != nullptr, "sam_session_verify_greedy", "out is NULL");
    sam::runtime::VerifyGreedy(tree, Ids(argmax, n, "sam_session_verify_greedy"),
                               &session->verified);
    ReturnVerified(session, tree, out);
  });
}

int sam_rng_new(uint64_t seed, sam_rng** out) {
  return Guard([&] {
    Require(out != nullptr, "sam_rng_new", "out is NULL");
    *out = new sam_rng{sam::runtime::Rng(seed)};
  });
}

void sam_rng_free(sam_rng* rng) { delete rng; }

int sam_sampling_apply(float* scores, size_t vocab_size, float temperature, int top_k,
                       float top_p, int scores_are_logits) {
  return Guard([&] {
    Require(scores != nullptr, "sam_sampling_apply", "scores is NULL");
    sam::runtime::SamplingParams params;
    params.temperature = temperature;
    params.top_k = top_k;
    params.top_p = top_p;
    sam::runtime::ApplySampling(std::span<float>(scores, vocab_size), params,
                                scores_are_logits ? sam::runtime::ScoreKind::kLogits
                                                  : sam::runtime::ScoreKind::kProbabilities);
  });
}

int sam_sample_token(const float* weights, size_t vocab_size, sam_rng* rng, uint32_t* token) {
  return Guard([&] {
    Require(weights != nullptr, "sam_sample_token", "weights is NULL");
    Require(rng != nullptr, "sam_sample_token", "rng is NULL");
    Require(token != nullptr, "sam_sample_token", "token is NULL");
    *token = sam::runtime::SampleToken(std::span<const float>(weights, vocab_size), rng->rng);
  });
}

int sam_session_verify_sampling(sam_session* session, const float* probs, size_t vocab_size,
                                size_t n, sam_rng* rng, sam_verify_result* out) {
  return Guard([&] {
    const sam::runtime::DraftTree& tree = Proposed(session, n, "sam_session_verify_sampling");
    Require(probs != nullptr, "sam_session_verify_sampling", "probs is NULL");
    Require(vocab_size > 0, "sam_session_verify_sampling", "vocab_size is 0");
    Require(n <= std::numeric_limits<size_t>::max() / vocab_size, "sam_session_verify_sampling",
            "n * vocab_size overflows");
    Require(rng != nullptr, "sam_session_verify_sampling", "rng is NULL");
    Require(out != nullptr, "sam_session_verify_sampling", "out is NULL");
    const auto row = [&](int32_t node) {
      return std::span<const float>(probs + static_cast<size_t>(node) * vocab_size, vocab_size);
    };
    session->verified = sam::runtime::VerifySampling(tree, row, rng->rng);
    ReturnVerified(session, tree, out);
  });
}

int sam_session_observe_topk(sam_session* session, const uint32_t* tokens, size_t n,
                             const uint32_t* topk, size_t k) {
  return Guard([&] {
    Require(session != nullptr, "sam_session_observe_topk", "session is NULL");
    Require(k == 0 || n <= std::numeric_limits<size_t>::max() / k, "sam_session_observe_topk",
            "n * k overflows");
    session->session->ObserveTopK(Ids(tokens, n, "sam_session_observe_topk"),
                                  Ids(topk, n * k, "sam_session_observe_topk"), k);
  });
}

int sam_session_reset(sam_session* session) {
  return Guard([&] {
    Require(session != nullptr, "sam_session_reset", "session is NULL");
    session->proposed = nullptr;
    session->session->Reset();
    session->request_origin = session->session->statistics();
  });
}

int sam_session_reset_calibration(sam_session* session) {
  return Guard([&] {
    Require(session != nullptr, "sam_session_reset_calibration", "session is NULL");
    session->proposed = nullptr;
    session->session->ResetCalibration();
  });
}

const char* sam_session_stats_json(sam_session* session) {
  const int status = Guard([&] {
    Require(session != nullptr, "sam_session_stats_json", "session is NULL");
    sam::runtime::SessionStatistics totals = session->session->statistics();
    sam::runtime::SessionStatistics request = totals;
    totals.Subtract(session->totals_origin);
    request.Subtract(session->request_origin);
    // The totals' object, with "timing" and "request" added before its closing brace.
    std::string json = totals.ToJson();
    json.pop_back();
    json += session->collect_timing ? ",\"timing\":true" : ",\"timing\":false";
    json += ",\"request\":" + request.ToJson() + "}";
    session->stats_json = std::move(json);
  });
  return status == SAM_OK ? session->stats_json.c_str() : nullptr;
}

int sam_session_stats_reset(sam_session* session) {
  return Guard([&] {
    Require(session != nullptr, "sam_session_stats_reset", "session is NULL");
    session->totals_origin = session->session->statistics();
    session->request_origin = session->totals_origin;
  });
}

}  // extern "C"

// ---- Batched drafting (sam_draft_pool, sam_propose_batch).

struct sam_draft_pool {
  explicit sam_draft_pool(size_t num_threads) : pool(num_threads) {}
  sam::runtime::DraftPool pool;
  std::mutex mutex;  // guards the scratch below (DraftPool serializes calls itself)
  // Reused between calls: a step allocates nothing once they are big enough.
  std::vector<sam::runtime::Session*> sessions;
  std::vector<sam::runtime::BatchDraft> drafts;
  std::vector<size_t> limits;
  uint64_t calls = 0;  // numbers the calls (sam_session::batch_call)
};

extern "C" {

int sam_draft_pool_new(size_t num_threads, sam_draft_pool** out) {
  return Guard([&] {
    Require(out != nullptr, "sam_draft_pool_new", "out is NULL");
    *out = nullptr;
    *out = new sam_draft_pool(num_threads);
  });
}

void sam_draft_pool_free(sam_draft_pool* pool) { delete pool; }

size_t sam_draft_pool_num_threads(const sam_draft_pool* pool) {
  return pool ? pool->pool.num_threads() : 0;
}

int sam_propose_batch(sam_draft_pool* pool, sam_session* const* sessions,
                      const uint32_t* start_tokens, const size_t* max_nodes, size_t n,
                      sam_draft* out, int* statuses) {
  std::string first_failure;
  const int status = Guard([&] {
    const char* f = "sam_propose_batch";
    Require(pool != nullptr, f, "pool is NULL");
    Require(n == 0 || (sessions && start_tokens && out && statuses), f,
            "sessions, start_tokens, out or statuses is NULL but n > 0");
    for (size_t i = 0; i < n; ++i)
      if (sessions[i] == nullptr)
        throw sam::Error(sam::ErrorCode::kInvalidArgument,
                         "sam_propose_batch: session " + std::to_string(i) + " is NULL");
    std::lock_guard lock(pool->mutex);
    // A session twice would have its drafts overwrite each other: refused in
    // O(n), by marking each session with this call's number.
    const uint64_t call = ++pool->calls;
    for (size_t i = 0; i < n; ++i) {
      sam_session* s = sessions[i];
      if (s->batch_pool == pool && s->batch_call == call) {
        size_t first = 0;
        while (sessions[first] != s) ++first;
        throw sam::Error(sam::ErrorCode::kInvalidArgument,
                         "sam_propose_batch: sessions[" + std::to_string(first) + "] and sessions[" +
                             std::to_string(i) + "] are the same session (each may appear once)");
      }
      s->batch_pool = pool;
      s->batch_call = call;
    }
    pool->sessions.resize(n);
    pool->drafts.resize(n);
    for (size_t i = 0; i < n; ++i) {
      sessions[i]->proposed = nullptr;  // until its new draft is known
      pool->sessions[i] = sessions[i]->session.get();
    }
    // max_nodes NULL or 0: no limit but the options' (Session::Propose(start)).
    pool->limits.resize(n);
    for (size_t i = 0; i < n; ++i)
      pool->limits[i] = max_nodes != nullptr && max_nodes[i] != 0 ? max_nodes[i] : SIZE_MAX;
    pool->pool.Propose(pool->sessions, {start_tokens, n}, pool->limits, pool->drafts);
    for (size_t i = 0; i < n; ++i) {
      const sam::runtime::BatchDraft& d = pool->drafts[i];
      if (d.error) {
        statuses[i] = Guard([&] { std::rethrow_exception(d.error); });
        if (first_failure.empty())
          first_failure = "sam_propose_batch: session " + std::to_string(i) + ": " + last_error;
        continue;
      }
      statuses[i] = SAM_OK;
      ExposeDraft(sessions[i], *d.tree, &out[i]);
    }
  });
  if (status == SAM_OK && !first_failure.empty()) Fail(SAM_OK, first_failure);
  return status;
}

}  // extern "C"

/* ---- Cross-request response cache ------------------------------------------ */

namespace {

sam::format::Sha256Digest TokenizerDigest(const char* hex, const char* function) {
  if (hex == nullptr) return sam::format::Sha256Digest{};
  try {
    return sam::format::DigestFromHex(hex);
  } catch (const sam::Error& e) {
    throw sam::Error(sam::ErrorCode::kInvalidArgument, std::string(function) +
                                                           ": tokenizer_sha256: " + e.what());
  }
}

}  // namespace

int sam_cache_new(size_t max_bytes, sam_cache** out) {
  return Guard([&] {
    Require(out != nullptr, "sam_cache_new", "out is NULL");
    Require(max_bytes > 0, "sam_cache_new", "max_bytes must be positive");
    auto handle = std::make_unique<sam_cache>();
    handle->cache = std::make_shared<sam::runtime::ResponseCache>(max_bytes);
    *out = handle.release();
  });
}

int sam_cache_new_compiling(size_t max_bytes, size_t min_tokens, double growth,
                            size_t compile_bytes, int background, sam_cache** out) {
  return Guard([&] {
    Require(out != nullptr, "sam_cache_new_compiling", "out is NULL");
    Require(max_bytes > 0, "sam_cache_new_compiling", "max_bytes must be positive");
    sam::runtime::ResponseCache::CompileOptions compile;
    compile.enabled = true;
    compile.min_tokens = min_tokens;
    compile.growth = growth;
    compile.max_bytes = compile_bytes;
    compile.background = background != 0;
    auto handle = std::make_unique<sam_cache>();
    handle->cache = std::make_shared<sam::runtime::ResponseCache>(max_bytes, compile);
    *out = handle.release();
  });
}

void sam_cache_wait_for_compiles(sam_cache* cache) {
  if (cache != nullptr) cache->cache->WaitForCompiles();
}

size_t sam_cache_compiled_bytes(const sam_cache* cache) {
  return cache ? cache->cache->compiled_bytes() : 0;
}

uint64_t sam_cache_num_compiles(const sam_cache* cache) {
  return cache ? cache->cache->num_compiles() : 0;
}

void sam_cache_free(sam_cache* cache) { delete cache; }

int sam_cache_insert(sam_cache* cache, const char* tenant, const uint32_t* ids, size_t n,
                     int* inserted) {
  return Guard([&] {
    Require(cache != nullptr, "sam_cache_insert", "cache is NULL");
    const bool done = cache->cache->Insert(tenant ? tenant : "", Ids(ids, n, "sam_cache_insert"));
    if (inserted != nullptr) *inserted = done ? 1 : 0;
  });
}

size_t sam_cache_bytes(const sam_cache* cache) { return cache ? cache->cache->bytes() : 0; }

size_t sam_cache_num_responses(const sam_cache* cache) {
  return cache ? cache->cache->num_responses() : 0;
}

int sam_cache_save(const sam_cache* cache, const char* path, const char* tokenizer_sha256) {
  return Guard([&] {
    Require(cache != nullptr, "sam_cache_save", "cache is NULL");
    Require(path != nullptr, "sam_cache_save", "path is NULL");
    cache->cache->Save(path, TokenizerDigest(tokenizer_sha256, "sam_cache_save"));
  });
}

int sam_cache_load(sam_cache* cache, const char* path, const char* tokenizer_sha256) {
  return Guard([&] {
    Require(cache != nullptr, "sam_cache_load", "cache is NULL");
    Require(path != nullptr, "sam_cache_load", "path is NULL");
    cache->cache->Load(path, TokenizerDigest(tokenizer_sha256, "sam_cache_load"));
  });
}

int sam_session_attach_cache(sam_session* session, sam_cache* cache, const char* tenant) {
  return Guard([&] {
    Require(session != nullptr, "sam_session_attach_cache", "session is NULL");
    session->proposed = nullptr;
    session->session->AttachCache(cache ? cache->cache : nullptr, tenant ? tenant : "");
  });
}

int sam_session_cache_request(sam_session* session, int include_prompt, int* inserted) {
  return Guard([&] {
    Require(session != nullptr, "sam_session_cache_request", "session is NULL");
    const bool done = session->session->CacheRequest(include_prompt != 0);
    if (inserted != nullptr) *inserted = done ? 1 : 0;
  });
}

// ---- Shared with the other files of the C API (c_api_internal.h) -------------

int sam::capi_internal::Guard(const std::function<void()>& body) noexcept { return ::Guard(body); }

int sam_index_tokenizer_sha256(const sam_index* index, char out[65]) {
  return Guard([&] {
    Require(index != nullptr, "sam_index_tokenizer_sha256", "index is NULL");
    Require(out != nullptr, "sam_index_tokenizer_sha256", "out is NULL");
    const auto& header = index->file->header();
    const std::string hex =
        header.has_tokenizer() ? sam::format::DigestToHex(header.tokenizer_sha256) : std::string();
    std::memcpy(out, hex.c_str(), hex.size() + 1);
  });
}
