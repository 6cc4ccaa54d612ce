// samdecoding._native: the pybind11 bindings of the runtime (docs/python.md).
//
// Ownership: an Index holds the IndexFile (and its StaticIndex when
// prepared) by shared_ptr; a Session shares what it attaches, so Python may
// free Index, Session and Draft objects in any order. A Draft's arrays are
// views of its session's draft buffer, which they keep alive.
//
// Threads: the GIL is released around native work (open, prefill, propose,
// commit, observe_topk). An Index is immutable and may serve any number of
// sessions in any threads; a Session refuses a call that overlaps another
// call on it from a second thread (samdecoding.Error) instead of racing.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "sam/error.h"
#include "sam/format/index.h"
#include "sam/format/shard_set.h"
#include "sam/runtime/shard_set.h"
#include "sam/format/sha256.h"
#include "sam/runtime/batch.h"
#include "sam/runtime/draft.h"
#include "sam/runtime/recycling.h"
#include "sam/runtime/response_cache.h"
#include "sam/runtime/options.h"
#include "sam/runtime/selection.h"
#include "sam/runtime/session.h"
#include "sam/runtime/static_index.h"
#include "sam/runtime/verify.h"
#include "tokenizer.h"

namespace py = pybind11;

namespace {

using sam::Error;
using sam::ErrorCode;

// samdecoding.Error, created at import (module init).
PyObject* error_type = nullptr;

// Raises samdecoding.Error(message) with .code (the stable code name, e.g.
// "io") and .code_value (its number).
py::object MakeError(ErrorCode code, const char* message) {
  py::object type = py::reinterpret_borrow<py::object>(error_type);
  // Messages quote file names and values, which need not be UTF-8.
  py::object text = py::reinterpret_steal<py::object>(
      PyUnicode_DecodeUTF8(message, static_cast<py::ssize_t>(std::strlen(message)), "replace"));
  if (!text) throw py::error_already_set();
  py::object exc = type(text);
  exc.attr("code") = std::string(sam::ErrorCodeName(code));
  exc.attr("code_value") = static_cast<int>(code);
  return exc;
}

void RaiseError(ErrorCode code, const char* message) {
  PyErr_SetObject(error_type, MakeError(code, message).ptr());
}

[[noreturn]] void ThrowInvalid(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, message);
}

// A path (str, bytes or os.PathLike) as the file system's bytes
// (os.fsencode: undecodable names survive).
// A path holding a NUL byte raises ValueError("embedded null byte"), as open()
// does: the C library would read it only up to the NUL.
std::string FsPath(py::handle object) {
  std::string path = py::cast<std::string>(py::module_::import("os").attr("fsencode")(object));
  if (path.find('\0') != std::string::npos) throw py::value_error("embedded null byte");
  return path;
}

// The fingerprint Index.open's and ShardSet.open's tokenizer argument asks for: a
// samdecoding.Tokenizer's, or the SHA-256 of a SentencePiece model file (str, bytes or
// os.PathLike); None asks for none.
std::optional<sam::format::Sha256Digest> ExpectedTokenizer(py::handle object) {
  if (object.is_none()) return std::nullopt;
  if (auto digest = samdecoding::TokenizerDigest(object)) return digest;
  const std::string path = FsPath(object);
  py::gil_scoped_release release;
  return sam::format::Sha256File(path);
}

// A UserWarning for an index file without the accelerator sections (format
// 1.0): opening it computed them in this process. Requires the GIL.
void WarnNoAccelerators(const std::string& path) {
  const std::string message =
      path + " has no accelerator sections (an index written before format 1.1): every "
             "process computes them at open, about 5 bytes per corpus token of private memory "
             "and up to a second per 7M tokens; `sam-build --upgrade " + path + "` adds them "
             "to the file";
  if (PyErr_WarnEx(PyExc_UserWarning, message.c_str(), 1) != 0) throw py::error_already_set();
}

class Index {
 public:
  // path: str, bytes or os.PathLike; tokenizer: as ExpectedTokenizer.
  static std::shared_ptr<Index> Open(py::handle path_object, py::handle tokenizer_object, bool read,
                                     bool prepare, bool verify, bool child_records) {
    const std::string path = FsPath(path_object);
    const std::optional<sam::format::Sha256Digest> tokenizer = ExpectedTokenizer(tokenizer_object);
    auto index = std::make_shared<Index>();
    {
      py::gil_scoped_release release;
      sam::format::OpenOptions options;
      options.verify = verify;
      options.expected_tokenizer_sha256 = tokenizer;
      index->file_ = std::make_shared<const sam::format::IndexFile>(
          read ? sam::format::IndexFile::Read(path, options)
               : sam::format::IndexFile::Open(path, options));
      // Without prepare, what the file holds, nothing computed (O(1)): its
      // drafting sections when sam-build wrote them, else the plain
      // automaton; as a C sam_index_open without SAM_OPEN_PREPARE.
      index->prepared_ =
          sam::runtime::IndexForOpen(index->file_->shared_view(), prepare, child_records);
    }
    if ((prepare || child_records) && !index->file_->view().hubs().present())
      WarnNoAccelerators(path);
    return index;
  }

  const sam::format::IndexFile& file() const { return *file_; }
  const sam::format::IndexHeader& header() const { return file_->header(); }
  bool prepared() const { return prepared_->prepared(); }
  size_t prepared_bytes() const { return prepared_->prepared() ? prepared_->memory_bytes() : 0; }
  size_t child_record_bytes() const { return prepared_->record_bytes(); }

  void AttachTo(sam::runtime::Session* session) const { session->AttachIndex(prepared_); }

  void Verify() const {
    py::gil_scoped_release release;
    file_->Verify();
  }

 private:
  std::shared_ptr<const sam::format::IndexFile> file_;
  std::shared_ptr<const sam::runtime::StaticIndex> prepared_;  // never null
};

// A shard set (NAME.samset): its shards, each with its drafting tables,
// attached to a session as one index (sam/runtime/shard_set.h).
class ShardSet {
 public:
  static std::shared_ptr<ShardSet> Open(py::handle path_object, py::handle tokenizer_object,
                                        bool verify, bool child_records) {
    const std::string path = FsPath(path_object);
    const std::optional<sam::format::Sha256Digest> tokenizer = ExpectedTokenizer(tokenizer_object);
    auto set = std::make_shared<ShardSet>();
    {
      py::gil_scoped_release release;
      sam::format::OpenOptions options;
      options.verify = verify;
      options.expected_tokenizer_sha256 = tokenizer;
      const sam::format::ShardSet opened = sam::format::ShardSet::Open(path, options);
      for (const auto& f : opened.shards()) {
        set->shards_.push_back(
            sam::runtime::StaticIndex::Create(
                f.shared_view(),
                sam::runtime::ShardIndexOptions(sam::runtime::PrepareOptions(child_records))));
        set->paths_.push_back(f.path());
      }
      set->manifest_ = opened.manifest();
      set->tokens_ = opened.num_tokens();
      set->documents_ = opened.num_documents();
    }
    for (size_t i = 0; i < set->shards_.size(); ++i)
      if (!set->shards_[i]->view().hubs().present()) WarnNoAccelerators(set->paths_[i]);
    return set;
  }
  void AttachTo(sam::runtime::Session* session) const { session->AttachShardSet(shards_); }
  size_t num_shards() const { return shards_.size(); }
  uint64_t num_tokens() const { return tokens_; }
  uint64_t num_documents() const { return documents_; }
  uint32_t vocab_size() const { return manifest_.vocab_size; }
  const sam::format::Sha256Digest& tokenizer() const { return manifest_.tokenizer_sha256; }
  const std::vector<std::string>& paths() const { return paths_; }

 private:
  std::vector<std::shared_ptr<const sam::runtime::StaticIndex>> shards_;
  std::vector<std::string> paths_;
  sam::format::ShardSetManifest manifest_;
  uint64_t tokens_ = 0, documents_ = 0;
};

// The draft buffer of a session: reserved for the largest draft once, so
// that the arrays viewing it never see it move.
struct DraftBuffer {
  DraftBuffer() {
    tree.tokens.reserve(sam::runtime::kMaxDraftSize);
    tree.parents.reserve(sam::runtime::kMaxDraftSize);
    tree.depths.reserve(sam::runtime::kMaxDraftSize);
    tree.Reset(0, sam::runtime::DraftSource::kNone);
  }
  sam::runtime::DraftTree tree;
};

// What propose returns: the size, source and match length of that proposal
// and the buffer its arrays view.
struct Draft {
  std::shared_ptr<const DraftBuffer> buffer;
  size_t size = 0;
  sam::runtime::DraftSource source = sam::runtime::DraftSource::kNone;
  uint32_t match_len = 0;
};

// A read-only 1-D array of n elements at data, kept alive by `owner`.
template <typename T>
py::array View(const T* data, size_t n, py::handle owner) {
  py::array_t<T> array({static_cast<py::ssize_t>(n)}, {static_cast<py::ssize_t>(sizeof(T))}, data,
                       owner);
  py::detail::array_proxy(array.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  return array;
}

// A token id from a Python integer in [0, 2^32); `index` names its place in
// a sequence (SIZE_MAX: a lone id) in the error.
uint32_t TokenOf(PyObject* item, const char* what, size_t index) {
  long long value = 0;
  int overflow = 0;
  bool is_integer = true;
  if (PyLong_CheckExact(item)) {  // the common case: no conversion object
    value = PyLong_AsLongLongAndOverflow(item, &overflow);
  } else if (PyObject* number = PyNumber_Index(item)) {  // numpy integers, __index__
    value = PyLong_AsLongLongAndOverflow(number, &overflow);
    Py_DECREF(number);
  } else {
    PyErr_Clear();
    is_integer = false;
  }
  if (is_integer && overflow == 0 && value >= 0 && value <= UINT32_MAX)
    return static_cast<uint32_t>(value);
  const std::string name =
      std::string(what) +
      (index == SIZE_MAX ? std::string(": token") : ": ids[" + std::to_string(index) + "]");
  if (!is_integer) ThrowInvalid(name + " is not an integer");
  ThrowInvalid(name + " = " + std::string(py::str(item)) + " is outside the token range [0, 2^32)");
}

// A draft's node limit (max_nodes: the start id included) from a Python
// integer of at least 1; None is no limit (SIZE_MAX).
size_t NodeLimitOf(py::handle value, const std::string& what) {
  if (value.is_none()) return SIZE_MAX;
  PyObject* number = PyNumber_Index(value.ptr());
  if (number == nullptr) {
    PyErr_Clear();
    ThrowInvalid(what + " must be an integer or None");
  }
  int overflow = 0;
  const long long n = PyLong_AsLongLongAndOverflow(number, &overflow);
  Py_DECREF(number);
  if (overflow > 0) return SIZE_MAX;
  if (overflow < 0 || n < 1)
    ThrowInvalid(what + " = " + std::string(py::str(value)) +
                 ": a draft holds at least 1 node (the start id)");
  return static_cast<size_t>(n);
}

// Per-session node limits of a batch: None (empty: no limit), one integer
// for every session, or a sequence of n integers or Nones.
std::vector<size_t> NodeLimits(py::handle value, size_t n, const char* what) {
  std::vector<size_t> limits;
  if (value.is_none()) return limits;
  if (PyIndex_Check(value.ptr())) {
    limits.assign(n, NodeLimitOf(value, std::string(what) + ": max_nodes"));
    return limits;
  }
  if (PyUnicode_Check(value.ptr()) || !PySequence_Check(value.ptr()))
    ThrowInvalid(std::string(what) + ": max_nodes must be an integer, a sequence of them or None");
  py::sequence items = py::reinterpret_borrow<py::sequence>(value);
  if (items.size() != n)
    ThrowInvalid(std::string(what) + ": " + std::to_string(n) + " sessions but " +
                 std::to_string(items.size()) + " max_nodes");
  limits.resize(n);
  for (size_t i = 0; i < n; ++i)
    limits[i] = NodeLimitOf(items[i], std::string(what) + ": max_nodes[" + std::to_string(i) + "]");
  return limits;
}

// Token ids from Python: a C-contiguous uint32 array is read in place; a
// list, tuple or other sequence of integers is converted, each id checked to
// be in [0, 2^32) (into a small inline buffer when it fits: commits are
// short).
class TokenIds {
 public:
  TokenIds(const py::handle& ids, const char* what) {
    PyObject* obj = ids.ptr();
    if (PyList_Check(obj) || PyTuple_Check(obj)) {
      Convert(obj, what);
      return;
    }
    if (py::isinstance<py::array>(ids)) {
      auto array = py::reinterpret_borrow<py::array>(ids);
      if (array.ndim() != 1) ThrowInvalid(std::string(what) + ": ids must be one-dimensional");
      if (py::isinstance<py::array_t<uint32_t, py::array::c_style>>(array)) {
        array_ = array;
        span_ = {static_cast<const uint32_t*>(array.data()), static_cast<size_t>(array.size())};
        return;
      }
    }
    if (PyUnicode_Check(obj) || PyBytes_Check(obj) || !PySequence_Check(obj))
      ThrowInvalid(std::string(what) + ": ids must be a sequence of integers or a 1-D array");
    py::object fast = py::reinterpret_steal<py::object>(PySequence_Fast(obj, what));
    if (!fast) throw py::error_already_set();
    Convert(fast.ptr(), what);
  }
  std::span<const uint32_t> span() const { return span_; }

 private:
  // obj: a list or tuple. Items are held while converted: __index__ may run
  // Python code (which could even shrink the list).
  void Convert(PyObject* obj, const char* what) {
    const size_t n = static_cast<size_t>(PySequence_Fast_GET_SIZE(obj));
    uint32_t* out = inline_.data();
    if (n > inline_.size()) {
      copy_.resize(n);
      out = copy_.data();
    }
    size_t i = 0;
    for (; i < n && i < static_cast<size_t>(PySequence_Fast_GET_SIZE(obj)); ++i) {
      py::object item = py::reinterpret_borrow<py::object>(PySequence_Fast_GET_ITEM(obj, i));
      out[i] = TokenOf(item.ptr(), what, i);
    }
    span_ = {out, i};
  }

  py::object array_;  // keeps the viewed array alive
  std::array<uint32_t, 64> inline_;
  std::vector<uint32_t> copy_;
  std::span<const uint32_t> span_;
};

// samdecoding.ResponseCache: shared by sessions (and threads); thread-safe.
class ResponseCache {
 public:
  ResponseCache(size_t max_bytes, bool compile, size_t compile_min_tokens, double compile_growth,
                size_t compile_bytes, bool compile_background)
      : cache_(std::make_shared<sam::runtime::ResponseCache>(
            max_bytes, Options(compile, compile_min_tokens, compile_growth, compile_bytes,
                               compile_background))) {}
  static sam::runtime::ResponseCache::CompileOptions Options(bool compile, size_t min_tokens,
                                                             double growth, size_t bytes,
                                                             bool background) {
    sam::runtime::ResponseCache::CompileOptions o;
    o.enabled = compile;
    o.min_tokens = min_tokens;
    o.growth = growth;
    o.max_bytes = bytes;
    o.background = background;
    return o;
  }
  void WaitForCompiles() {
    py::gil_scoped_release release;
    cache_->WaitForCompiles();
  }
  const std::shared_ptr<sam::runtime::ResponseCache>& get() const { return cache_; }

  bool Insert(const std::string& tenant, const py::handle& ids) {
    TokenIds tokens(ids, "insert");
    py::gil_scoped_release release;
    return cache_->Insert(tenant, tokens.span());
  }
  py::tuple Draft(const std::string& tenant, const py::handle& context, size_t want,
                  bool climb_links) {
    TokenIds tokens(context, "draft");
    std::vector<uint32_t> out(want);
    size_t n = 0;
    uint32_t len = 0;
    {
      py::gil_scoped_release release;
      len = cache_->Draft(tenant, tokens.span(), want, climb_links, out.data(), &n);
    }
    out.resize(n);
    return py::make_tuple(len, out);
  }
  static sam::format::Sha256Digest Digest(const std::optional<std::string>& hex) {
    return hex ? sam::format::DigestFromHex(*hex) : sam::format::Sha256Digest{};
  }
  void Save(py::handle path_object, const std::optional<std::string>& tokenizer_sha256) {
    const std::string path = FsPath(path_object);
    const auto digest = Digest(tokenizer_sha256);
    py::gil_scoped_release release;
    cache_->Save(path, digest);
  }
  void Load(py::handle path_object, const std::optional<std::string>& tokenizer_sha256) {
    const std::string path = FsPath(path_object);
    const auto digest = Digest(tokenizer_sha256);
    py::gil_scoped_release release;
    cache_->Load(path, digest);
  }

 private:
  std::shared_ptr<sam::runtime::ResponseCache> cache_;
};


// ---------------------------------------------------------------------------
// Verification helpers (sam/runtime/verify.h).

// What a verification accepted, with numpy views of its own vectors.
struct Verified {
  std::shared_ptr<sam::runtime::VerifyResult> result;
  std::vector<uint32_t> commit;  // start token + accepted tokens
};

py::object MakeVerified(const sam::runtime::DraftTree& tree, sam::runtime::VerifyResult&& r) {
  auto v = std::make_shared<Verified>();
  v->result = std::make_shared<sam::runtime::VerifyResult>(std::move(r));
  v->commit.assign(1, tree.tokens[0]);
  v->commit.insert(v->commit.end(), v->result->accepted_tokens.begin(),
                   v->result->accepted_tokens.end());
  return py::cast(v);
}

// A draft tree from Python arrays: tokens (ids) and parents (parents[0] = -1,
// parents[i] < i); depths are derived. Malformed trees are Error
// (invalid-argument) naming the node.
sam::runtime::DraftTree TreeFromArrays(const py::handle& tokens_object,
                                       const py::handle& parents_object, const char* what) {
  TokenIds tokens(tokens_object, what);
  py::array_t<int64_t, py::array::c_style | py::array::forcecast> parents =
      py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(parents_object);
  if (!parents) {
    PyErr_Clear();
    ThrowInvalid(std::string(what) + ": parents must be a sequence of integers");
  }
  const size_t n = tokens.span().size();
  if (parents.ndim() != 1 || static_cast<size_t>(parents.size()) != n || n == 0)
    ThrowInvalid(std::string(what) + ": tokens and parents must be 1-D, non-empty and of one size (" +
                 std::to_string(n) + " tokens, " + std::to_string(parents.size()) + " parents)");
  sam::runtime::DraftTree tree;
  tree.Reset(tokens.span()[0], sam::runtime::DraftSource::kOther);
  const int64_t* p = parents.data();
  if (p[0] != -1) ThrowInvalid(std::string(what) + ": parents[0] must be -1 (node 0 is the root)");
  for (size_t i = 1; i < n; ++i) {
    if (p[i] < 0 || p[i] >= static_cast<int64_t>(i))
      ThrowInvalid(std::string(what) + ": parents[" + std::to_string(i) + "] = " +
                   std::to_string(p[i]) + " must be in [0, " + std::to_string(i) +
                   ") (a parent comes before its children)");
    tree.Add(static_cast<int>(p[i]), tokens.span()[i]);
  }
  return tree;
}

// Probability rows (n, V), float32, C-contiguous (converted when not).
using FloatRows = py::array_t<float, py::array::c_style | py::array::forcecast>;

std::span<const float> RowOf(const FloatRows& rows, int32_t node) {
  const size_t v = static_cast<size_t>(rows.shape(1));
  return {rows.data() + static_cast<size_t>(node) * v, v};
}

FloatRows Rows(const py::handle& object, size_t n, const char* what, const char* name) {
  FloatRows rows = FloatRows::ensure(object);
  if (!rows) {
    PyErr_Clear();
    ThrowInvalid(std::string(what) + ": " + name + " must be a 2-D array of numbers");
  }
  if (rows.ndim() != 2 || static_cast<size_t>(rows.shape(0)) != n || rows.shape(1) == 0)
    ThrowInvalid(std::string(what) + ": " + name + " must have shape (" + std::to_string(n) +
                 ", vocab_size): one row per draft node");
  return rows;
}

sam::runtime::DraftMode ModeOf(const std::string& mode) {
  if (mode == "deterministic") return sam::runtime::DraftMode::kDeterministic;
  if (mode == "without-replacement") return sam::runtime::DraftMode::kWithoutReplacement;
  ThrowInvalid("verify_sampling: mode '" + mode +
               "' is not one of 'deterministic', 'without-replacement'");
}

py::object VerifyGreedyTree(const sam::runtime::DraftTree& tree, const py::handle& argmax) {
  TokenIds ids(argmax, "verify_greedy");
  sam::runtime::VerifyResult r;
  {
    py::gil_scoped_release release;
    sam::runtime::VerifyGreedy(tree, ids.span(), &r);
  }
  return MakeVerified(tree, std::move(r));
}

py::object VerifySamplingTree(const sam::runtime::DraftTree& tree, const py::handle& probs,
                              sam::runtime::Rng& rng, const std::string& mode,
                              const py::handle& proposal) {
  const sam::runtime::DraftMode m = ModeOf(mode);
  FloatRows target = Rows(probs, tree.size(), "verify_sampling", "probs");
  FloatRows q;
  if (m == sam::runtime::DraftMode::kWithoutReplacement) {
    if (proposal.is_none())
      ThrowInvalid("verify_sampling: mode 'without-replacement' needs proposal (rows of q)");
    q = Rows(proposal, tree.size(), "verify_sampling", "proposal");
  }
  sam::runtime::VerifyResult r;
  {
    py::gil_scoped_release release;
    const auto p_row = [&](int32_t node) { return RowOf(target, node); };
    sam::runtime::NodeDistribution q_row;
    if (q) q_row = [&](int32_t node) { return RowOf(q, node); };
    r = sam::runtime::VerifySampling(tree, p_row, rng, m, q_row);
  }
  return MakeVerified(tree, std::move(r));
}

class Session {
 public:
  // Options by the runtime's one table (sam/runtime/options.h: SessionOptionSpecs), each
  // value checked against its row's type here and its range there; `experimental`: a dict of
  // tuning parameters (ExperimentalOptionSpecs).
  explicit Session(const py::kwargs& kwargs) {
    sam::runtime::SessionOptions options;
    std::string policy = "sam-cal";
    uint32_t recycling_vocab_size = 0;
    for (auto [key, value] : kwargs) {
      const std::string name = py::cast<std::string>(key);
      if (name == "recycling_vocab_size") {
        recycling_vocab_size = Option<uint32_t>(name, value);
      } else if (name == "cost_curve") {
        options.cost_curve = CostCurveOption(value);
      } else if (name == "experimental") {
        if (value.is_none()) continue;
        if (!py::isinstance<py::dict>(value))
          ThrowInvalid("Session: option 'experimental' must be a dict {name: value}, got " +
                       std::string(py::repr(value)));
        for (auto [tuning_key, tuning_value] : py::reinterpret_borrow<py::dict>(value)) {
          const std::string tuning = py::str(tuning_key);
          const sam::runtime::OptionSpec* spec =
              sam::runtime::FindOptionSpec(sam::runtime::ExperimentalOptionSpecs(), tuning);
          if (spec == nullptr)
            ThrowInvalid("Session: unknown experimental option '" + tuning + "' (valid: " +
                         SpecNames(sam::runtime::ExperimentalOptionSpecs()) + ")");
          sam::runtime::SetExperimentalOption(&options, tuning,
                                              OptionText(*spec, tuning, tuning_value));
        }
      } else if (const sam::runtime::OptionSpec* spec =
                     sam::runtime::FindOptionSpec(sam::runtime::SessionOptionSpecs(), name)) {
        if (name == "l_bias" && value.is_none()) continue;  // automatic
        const std::string text = OptionText(*spec, name, value);
        if (name == "policy") policy = text;
        sam::runtime::SetSessionOption(&options, name, text);
      } else {
        ThrowInvalid("Session: unknown option '" + name + "' (valid: " + OptionNames() +
                     "; tuning parameters go in experimental={name: value})");
      }
    }
    const sam::runtime::NamedPolicy& named = sam::runtime::FindPolicy(policy);
    if (named.recycling_fallback && recycling_vocab_size == 0)
      ThrowInvalid(
          "Session: policy '" + policy +
          "' drafts with Token Recycling: give recycling_vocab_size (the vocabulary size)");
    if (recycling_vocab_size > 0) {
      recycling_ = std::make_unique<sam::runtime::RecyclingDrafter>(recycling_vocab_size);
      options.fallback = recycling_.get();
    }
    session_ = std::make_unique<sam::runtime::Session>(options);
    policy_ = policy;
  }

  // The value of option `name`, or Error (kInvalidArgument) naming it.
  template <typename T>
  static T Option(const std::string& name, py::handle value,
                  const char* expected = "a non-negative integer") {
    try {
      return py::cast<T>(value);
    } catch (const py::cast_error&) {
      ThrowInvalid("Session: option '" + name + "' must be " + expected + ", got " +
                   std::string(py::repr(value)));
    }
  }

  // A Python value as the text the option table parses, checked against the row's type:
  // a bool for BOOL, an int (not a bool) for the integers, a number for FLOAT, a str for
  // names and files.
  static std::string OptionText(const sam::runtime::OptionSpec& spec, const std::string& name,
                                py::handle value) {
    using sam::runtime::OptionType;
    const bool is_bool = py::isinstance<py::bool_>(value);
    const bool is_int = PyIndex_Check(value.ptr()) && !is_bool;  // int, numpy integers
    switch (spec.type) {
      case OptionType::kBool:
        if (!is_bool) break;
        return value.cast<bool>() ? "true" : "false";
      case OptionType::kUnsigned:
        if (!is_int || PyNumber_Index(value.ptr()) == nullptr ||
            py::reinterpret_steal<py::int_>(PyNumber_Index(value.ptr())) < py::int_(0)) {
          PyErr_Clear();
          break;
        }
        return py::str(py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr())));
      case OptionType::kSigned:
        if (!is_int) break;
        return py::str(py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr())));
      case OptionType::kNumber:
        if (!is_int && !py::isinstance<py::float_>(value)) break;
        return py::repr(py::float_(py::reinterpret_borrow<py::object>(value)));
      case OptionType::kName:
      case OptionType::kFile:
        if (!py::isinstance<py::str>(value)) break;
        return value.cast<std::string>();
    }
    static constexpr const char* kExpected[] = {"a name", "a non-negative integer", "an integer",
                                                "a number", "a bool", "a file path"};
    ThrowInvalid("Session: option '" + name + "' must be " +
                 (name == "policy" ? std::string("a policy name")
                                   : std::string(kExpected[static_cast<int>(spec.type)])) +
                 ", got " + std::string(py::repr(value)));
  }

  static std::string SpecNames(std::span<const sam::runtime::OptionSpec> specs) {
    std::string out;
    for (const auto& s : specs) out += (out.empty() ? "" : ", ") + std::string(s.name);
    return out;
  }

  static std::string OptionNames() {
    return SpecNames(sam::runtime::SessionOptionSpecs()) + ", recycling_vocab_size, experimental";
  }

  // cost_curve: None, the path of a cost curve file, or (tokens, cost) pairs
  // (sam/runtime/budget.h); a curve that breaks the rules is an Error.
  static sam::runtime::CostCurve CostCurveOption(py::handle value) {
    if (value.is_none()) return {};
    if (py::isinstance<py::str>(value))
      return sam::runtime::CostCurve::Load(FsPath(value));
    const auto pairs = Option<std::vector<std::pair<size_t, double>>>(
        "cost_curve", value, "a file path or a list of (tokens, cost) pairs");
    std::vector<sam::runtime::CostPoint> points;
    for (const auto& [tokens, cost] : pairs) points.push_back({tokens, cost});
    return sam::runtime::CostCurve::FromPoints(points, "cost_curve");
  }

  void Attach(const Index& index) {
    InUse guard(this);
    const sam::format::Sha256Digest& tokenizer = index.file().header().tokenizer_sha256;
    CheckTokenizer(tokenizer, index.file().path());
    proposed_ = false;
    index.AttachTo(session_.get());  // the session refuses another vocabulary
    tokenizer_ = tokenizer;
  }
  void AttachSet(const ShardSet& set) {
    InUse guard(this);
    CheckTokenizer(set.tokenizer(), "the shard set");
    set.AttachTo(session_.get());
    tokenizer_ = set.tokenizer();
  }

  void Prefill(const py::handle& ids) {
    TokenIds tokens(ids, "prefill");
    InUse guard(this);
    proposed_ = false;
    py::gil_scoped_release release;
    session_->Prefill(tokens.span());
  }

  Draft Propose(py::handle start_id, py::handle max_nodes) {
    const uint32_t start = TokenOf(start_id.ptr(), "propose", SIZE_MAX);
    const size_t limit = NodeLimitOf(max_nodes, "propose: max_nodes");
    InUse guard(this);
    {
      py::gil_scoped_release release;
      // The Drafter overload copies the proposal into our buffer (a memcpy of
      // at most draft_size nodes): its capacity is fixed, so earlier arrays
      // stay valid memory.
      session_->Propose(start, limit, &buffer_->tree);
    }
    proposed_ = true;
    const sam::runtime::DraftTree& tree = buffer_->tree;
    return Draft{buffer_, tree.size(), tree.source, tree.match_len};
  }

  void Commit(const py::handle& ids) {
    TokenIds tokens(ids, "commit");
    InUse guard(this);
    proposed_ = false;
    py::gil_scoped_release release;
    session_->Commit(tokens.span());
  }

  void ObserveTopK(const py::handle& tokens, const py::handle& topk) {
    TokenIds evaluated(tokens, "observe_topk");
    py::array_t<int64_t, py::array::c_style | py::array::forcecast> table(
        py::reinterpret_borrow<py::object>(topk));
    if (table.ndim() != 2 || static_cast<size_t>(table.shape(0)) != evaluated.span().size())
      ThrowInvalid("observe_topk: topk must have shape (len(tokens), k)");
    std::vector<uint32_t> candidates(static_cast<size_t>(table.size()));
    const int64_t* data = table.data();
    for (size_t i = 0; i < candidates.size(); ++i) {
      if (data[i] < 0 || data[i] > UINT32_MAX)
        ThrowInvalid("observe_topk: topk holds " + std::to_string(data[i]) +
                     ", outside the token range [0, 2^32)");
      candidates[i] = static_cast<uint32_t>(data[i]);
    }
    InUse guard(this);
    py::gil_scoped_release release;
    session_->ObserveTopK(evaluated.span(), candidates, static_cast<size_t>(table.shape(1)));
  }

  void Reset() {
    InUse guard(this);
    proposed_ = false;
    session_->Reset();
  }
  // cache: None detaches. The session shares the cache.
  void AttachCache(const ResponseCache* cache, const std::string& tenant) {
    InUse guard(this);
    session_->AttachCache(cache ? cache->get() : nullptr, tenant);
  }
  // include_prompt None: the session's cache_prompts option.
  bool CacheRequest(std::optional<bool> include_prompt) {
    InUse guard(this);
    py::gil_scoped_release release;
    return include_prompt ? session_->CacheRequest(*include_prompt) : session_->CacheRequest();
  }
  void ResetStatistics() {
    InUse guard(this);
    session_->ResetStatistics();
  }
  void ResetCalibration() {
    InUse guard(this);
    proposed_ = false;
    session_->ResetCalibration();
  }
  std::string StatsJson() {
    InUse guard(this);
    return session_->statistics().ToJson();
  }
  // For propose_batch: marks the session busy (false when it already is)
  // and idle again; the native session; the Draft of its last proposal,
  // copied into the draft buffer like Propose does.
  bool TryAcquire() { return !busy_.exchange(true, std::memory_order_acquire); }
  void Release() { busy_.store(false, std::memory_order_release); }
  sam::runtime::Session* native() { return session_.get(); }
  Draft Take(const sam::runtime::DraftTree& tree) {
    buffer_->tree = tree;  // within the reserved capacity: no reallocation
    proposed_ = true;
    return Draft{buffer_, tree.size(), tree.source, tree.match_len};
  }

  // Verification of the last proposal (propose or propose_batch); nothing
  // is committed.
  py::object VerifyGreedy(const py::handle& argmax) {
    InUse guard(this);
    return VerifyGreedyTree(Proposal("verify_greedy"), argmax);
  }
  py::object VerifySampling(const py::handle& probs, sam::runtime::Rng& rng) {
    InUse guard(this);
    return VerifySamplingTree(Proposal("verify_sampling"), probs, rng, "deterministic",
                              py::none());
  }

  const std::string& policy() const { return policy_; }
  size_t num_indexes() const { return session_->num_indexes(); }
  size_t draft_size() const { return session_->options().draft_size; }

 private:
  // Marks the session busy for one call; a call from another thread that
  // overlaps it is refused rather than racing on the session.
  class InUse {
   public:
    explicit InUse(Session* s) : s_(s) {
      if (s_->busy_.exchange(true, std::memory_order_acquire))
        ThrowInvalid(
            "Session: used by another thread at the same time (use one session per thread)");
    }
    ~InUse() { s_->busy_.store(false, std::memory_order_release); }
    InUse(const InUse&) = delete;
    InUse& operator=(const InUse&) = delete;

   private:
    Session* s_;
  };

  // Declared before session_, which borrows it, so it outlives it.
  std::unique_ptr<sam::runtime::RecyclingDrafter> recycling_;
  std::unique_ptr<sam::runtime::Session> session_;
  std::shared_ptr<DraftBuffer> buffer_ = std::make_shared<DraftBuffer>();
  std::string policy_;
  std::atomic<bool> busy_{false};
  bool proposed_ = false;  // buffer_ holds a proposal not yet committed
  // The tokenizer fingerprint of the indexes attached so far (all alike).
  std::optional<sam::format::Sha256Digest> tokenizer_;

  void CheckTokenizer(const sam::format::Sha256Digest& tokenizer, const std::string& what) const {
    if (tokenizer_ && *tokenizer_ != tokenizer)
      throw Error(ErrorCode::kTokenizerMismatch,
                  "attach: " + what + " was built with tokenizer " +
                      sam::format::DigestToHex(tokenizer) + ", the session's indexes with " +
                      sam::format::DigestToHex(*tokenizer_) +
                      " (one session drafts for one tokenizer)");
  }

  const sam::runtime::DraftTree& Proposal(const char* what) const {
    if (!proposed_)
      ThrowInvalid(std::string(what) +
                   ": no proposal to verify: call propose first (a commit, reset, prefill or "
                   "attach ends the proposal)");
    return buffer_->tree;
  }
};

// propose_batch: one DraftPool::Propose over the sessions, with the GIL
// released. Returns a list with each session's Draft, or the samdecoding.Error
// (not raised) of a session whose proposal failed. Refuses (before drafting)
// a session that is busy in another thread or appears twice.
py::list ProposeBatch(sam::runtime::DraftPool& pool, const py::sequence& sessions,
                      const py::handle& starts, const py::handle& max_nodes) {
  TokenIds start_ids(starts, "propose_batch");
  const size_t n = sessions.size();
  if (start_ids.span().size() != n)
    ThrowInvalid("propose_batch: " + std::to_string(n) + " sessions but " +
                 std::to_string(start_ids.span().size()) + " start ids");
  const std::vector<size_t> limits = NodeLimits(max_nodes, n, "propose_batch");
  std::vector<Session*> wrappers(n);
  for (size_t i = 0; i < n; ++i) {
    py::object item = sessions[i];
    if (!py::isinstance<Session>(item))
      ThrowInvalid("propose_batch: sessions[" + std::to_string(i) + "] is not a Session");
    wrappers[i] = &item.cast<Session&>();  // the sequence keeps it alive
  }
  size_t acquired = 0;
  struct ReleaseAll {
    std::vector<Session*>& w;
    size_t& count;
    ~ReleaseAll() {
      for (size_t i = 0; i < count; ++i) w[i]->Release();
    }
  } release_all{wrappers, acquired};
  for (; acquired < n; ++acquired)
    if (!wrappers[acquired]->TryAcquire())
      ThrowInvalid("propose_batch: session " + std::to_string(acquired) +
                   " appears twice or is used by another thread at the same time");
  std::vector<sam::runtime::Session*> natives(n);
  for (size_t i = 0; i < n; ++i) natives[i] = wrappers[i]->native();
  std::vector<sam::runtime::BatchDraft> drafts(n);
  std::vector<Draft> taken(n);
  {
    py::gil_scoped_release release;
    pool.Propose(natives, start_ids.span(), limits, drafts);
    for (size_t i = 0; i < n; ++i)
      if (!drafts[i].error) taken[i] = wrappers[i]->Take(*drafts[i].tree);
  }
  py::list out;
  for (size_t i = 0; i < n; ++i) {
    if (!drafts[i].error) {
      out.append(py::cast(std::move(taken[i])));
      continue;
    }
    try {
      std::rethrow_exception(drafts[i].error);
    } catch (const Error& e) {
      out.append(MakeError(e.code(), e.what()));
    } catch (const std::exception& e) {
      out.append(MakeError(ErrorCode::kInternal, e.what()));
    }
  }
  return out;
}

// Session(policy=..., draft_size=..., ...): the named options help() shows (the option
// table's, SessionOptionSpecs, in its order: OptionsSignatureTest checks they agree); those left
// None keep the runtime's defaults, and any other name is refused.
std::unique_ptr<Session> MakeSession(const py::object& policy, const py::object& draft_size,
                                     const py::object& shape, const py::object& cost_curve,
                                     const py::object& max_dynamic_bytes,
                                     const py::object& collect_timing,
                                     const py::object& cache_prompts, const py::object& l_bias,
                                     const py::object& l_threshold, const py::object& tree_nodes,
                                     const py::object& tree_width,
                                     const py::object& recycling_vocab_size,
                                     const py::object& experimental, const py::kwargs& unknown) {
  const std::pair<const char*, const py::object*> named[] = {
      {"policy", &policy},
      {"draft_size", &draft_size},
      {"shape", &shape},
      {"cost_curve", &cost_curve},
      {"max_dynamic_bytes", &max_dynamic_bytes},
      {"collect_timing", &collect_timing},
      {"cache_prompts", &cache_prompts},
      {"l_bias", &l_bias},
      {"l_threshold", &l_threshold},
      {"tree_nodes", &tree_nodes},
      {"tree_width", &tree_width},
      {"recycling_vocab_size", &recycling_vocab_size},
      {"experimental", &experimental}};
  py::kwargs options;  // an unknown name is the constructor's error (it lists the valid ones)
  for (const auto& [name, value] : unknown) options[name] = value;
  for (const auto& [name, value] : named)
    if (!value->is_none()) options[name] = *value;
  return std::make_unique<Session>(options);
}

// The Session docstring: every option of the table with its default, range and meaning.
const char* SessionDoc() {
  static const std::string doc =
      "A session drafting for one request at a time (reset() between requests): a dynamic\n"
      "automaton over its prompt and generation, the indexes it drafts from, and the policy's\n"
      "learned state. One thread at a time. Options left None keep the runtime's defaults;\n"
      "an unknown option or a bad value raises Error ('invalid-argument').\n\n"
      "Options:\n" +
      sam::runtime::OptionHelp(sam::runtime::SessionOptionSpecs(), "  ") +
      "  recycling_vocab_size INT (default 0): a Token Recycling fallback over ids below this\n"
      "      (sam-rec needs it)\n"
      "  cost_curve: also a list of (tokens, cost) pairs\n"
      "  experimental DICT (default none): tuning parameters, {name: value}; experiments,\n"
      "      not options, which may change or go in any release:\n" +
      sam::runtime::OptionHelp(sam::runtime::ExperimentalOptionSpecs(), "    ");
  return doc.c_str();
}

// The pool of samdecoding.propose_batch without a pool: all cores, made on
// first use, never destroyed (its workers sleep until the process ends).
sam::runtime::DraftPool& DefaultPool() {
  static auto* pool = new sam::runtime::DraftPool(0);
  return *pool;
}

std::string HexOrNone(const sam::format::IndexHeader& h) {
  return h.has_tokenizer() ? sam::format::DigestToHex(h.tokenizer_sha256) : std::string();
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "SAM-Decoding retrieval drafting (native part of the samdecoding package)";
  m.attr("__version__") = SAM_PYTHON_VERSION;

  error_type = PyErr_NewExceptionWithDoc(
      "samdecoding.Error",
      "An error of the SAM-Decoding runtime. str(e) is the message; e.code the stable code\n"
      "name (e.g. 'io', 'tokenizer-mismatch', 'invalid-argument'), e.code_value its number.",
      nullptr, nullptr);
  if (error_type == nullptr) throw py::error_already_set();
  m.add_object("Error", py::handle(error_type));
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const Error& e) {
      RaiseError(e.code(), e.what());
    }
  });

  py::list policies;
  for (const sam::runtime::NamedPolicy& p : sam::runtime::NamedPolicies())
    policies.append(std::string(p.name));
  m.attr("POLICIES") = py::tuple(policies);
  m.attr("MAX_DRAFT_SIZE") = sam::runtime::kMaxDraftSize;

  py::class_<Index, std::shared_ptr<Index>>(
      m, "Index",
      "A SAM index file opened read-only (memory-mapped), shared by any number of sessions\n"
      "and threads. Open with Index.open(path).")
      .def_static("open", &Index::Open, py::arg("path"), py::arg("tokenizer") = py::none(),
                  py::arg("read") = false, py::arg("prepare") = true, py::arg("verify") = false,
                  py::arg("child_records") = false,
                  "Opens the index at `path`. tokenizer: a Tokenizer, or the model's SentencePiece\n"
                  "file, checked against the index's fingerprint (Error 'tokenizer-mismatch');\n"
                  "read: read the\n"
                  "file into memory instead of mapping it; prepare: compute the static index's\n"
                  "tables when the file lacks them (False: the file's own, or none); verify:\n"
                  "check every checksum first;\n"
                  "child_records: precompute child records, faster sam-cal steps, same drafts\n"
                  "(docs/python.md).")
      .def("verify", &Index::Verify, "Checks every section's checksum; raises Error if one fails.")
      .def("metadata_json", [](const Index& i) { return i.file().ReadMetadata().json; },
           "The index's build metadata (META section) as JSON text; Index.metadata() parses it.")
      .def_property_readonly(
          "path",
          [](const Index& i) {
            return py::module_::import("os").attr("fsdecode")(py::bytes(i.file().path()));
          })
      .def_property_readonly("prepared", &Index::prepared)
      .def_property_readonly("prepared_bytes", &Index::prepared_bytes)
      .def_property_readonly("child_record_bytes", &Index::child_record_bytes)
      .def_property_readonly("vocab_size", [](const Index& i) { return i.header().vocab_size; })
      .def_property_readonly("num_tokens", [](const Index& i) { return i.header().num_tokens; })
      .def_property_readonly("num_documents",
                             [](const Index& i) { return i.header().num_documents; })
      .def_property_readonly("num_states", [](const Index& i) { return i.header().num_states; })
      .def_property_readonly("num_edges", [](const Index& i) { return i.header().num_edges; })
      .def_property_readonly("bos_id",
                             [](const Index& i) -> std::optional<uint32_t> {
                               const uint32_t id = i.header().bos_id;
                               if (id == sam::format::kNoToken) return std::nullopt;
                               return id;
                             })
      .def_property_readonly("eos_id",
                             [](const Index& i) -> std::optional<uint32_t> {
                               const uint32_t id = i.header().eos_id;
                               if (id == sam::format::kNoToken) return std::nullopt;
                               return id;
                             })
      .def_property_readonly("version",
                             [](const Index& i) {
                               return py::make_tuple(i.header().major_version,
                                                     i.header().minor_version);
                             })
      .def_property_readonly("tokenizer_sha256",
                             [](const Index& i) -> std::optional<std::string> {
                               std::string hex = HexOrNone(i.header());
                               if (hex.empty()) return std::nullopt;
                               return hex;
                             })
      .def_property_readonly("file_size", [](const Index& i) { return i.header().file_size; });

  samdecoding::BindTokenizer(m);

  py::class_<ShardSet, std::shared_ptr<ShardSet>>(
      m, "ShardSet", "A set of index shards (a .samset file) that sessions draft from together.")
      .def_static("open", &ShardSet::Open, py::arg("path"), py::arg("tokenizer") = py::none(),
                  py::arg("verify") = false, py::arg("child_records") = false,
                  "Opens the shard set at `path` (options as Index.open).")
      .def_property_readonly("num_shards", &ShardSet::num_shards)
      .def_property_readonly("num_tokens", &ShardSet::num_tokens)
      .def_property_readonly("num_documents", &ShardSet::num_documents)
      .def_property_readonly("vocab_size", &ShardSet::vocab_size)
      .def_property_readonly("shard_paths", [](const ShardSet& s) {
        py::list paths;
        for (const auto& p : s.paths())
          paths.append(py::module_::import("os").attr("fsdecode")(py::bytes(p)));
        return paths;
      });

  py::class_<Draft>(m, "Draft",
                    "One proposal: tokens[0] is the start id, parents[i] the node before node i\n"
                    "(-1 for the root), depths[i] its depth; numpy views, valid until the\n"
                    "session's next propose. source names the drafter, match_len its match.")
      .def("__len__", [](const Draft& d) { return d.size; })
      .def_property_readonly("tokens",
                             [](py::object self) {
                               const Draft& d = self.cast<const Draft&>();
                               return View(d.buffer->tree.tokens.data(), d.size, self);
                             })
      .def_property_readonly("parents",
                             [](py::object self) {
                               const Draft& d = self.cast<const Draft&>();
                               return View(d.buffer->tree.parents.data(), d.size, self);
                             })
      .def_property_readonly("depths",
                             [](py::object self) {
                               const Draft& d = self.cast<const Draft&>();
                               return View(d.buffer->tree.depths.data(), d.size, self);
                             })
      .def_property_readonly(
          "source",
          [](const Draft& d) { return std::string(sam::runtime::DraftSourceName(d.source)); })
      .def_property_readonly("source_id", [](const Draft& d) { return static_cast<int>(d.source); })
      .def_property_readonly("match_len", [](const Draft& d) { return d.match_len; });

  py::class_<Session>(m, "Session", SessionDoc())
      .def(py::init(&MakeSession), py::arg("policy") = "sam-cal", py::arg("draft_size") = py::none(),
           py::arg("shape") = py::none(), py::arg("cost_curve") = py::none(),
           py::arg("max_dynamic_bytes") = py::none(), py::arg("collect_timing") = py::none(),
           py::arg("cache_prompts") = py::none(), py::arg("l_bias") = py::none(),
           py::arg("l_threshold") = py::none(), py::arg("tree_nodes") = py::none(),
           py::arg("tree_width") = py::none(), py::arg("recycling_vocab_size") = py::none(),
           py::arg("experimental") = py::none(), SessionDoc())
      .def("attach", &Session::Attach, py::arg("index"), "Drafts from `index` too (an Index).")
      .def("attach", &Session::AttachSet, py::arg("index"), "Drafts from a ShardSet too.")
      .def("prefill", &Session::Prefill, py::arg("ids"),
           "Takes in the prompt ids (all but the first start id).")
      .def("propose", &Session::Propose, py::arg("start"), py::arg("max_nodes") = py::none(),
           "The draft that follows `start` (the last id the model produced): a Draft.\n"
           "max_nodes: at most this many nodes, the start included (None: draft_size); with\n"
           "shape='chain' the chain is cut from the policy's whole tree.")
      .def("commit", &Session::Commit, py::arg("ids"),
           "Takes in the verified ids: the last start id and the accepted draft ids.")
      .def("observe_topk", &Session::ObserveTopK, py::arg("tokens"), py::arg("topk"),
           "Token Recycling: the model's top-k ids (len(tokens) x k) after each evaluated id.")
      .def("reset", &Session::Reset,
           "Forgets the request (keeps the indexes, options and learned estimates).")
      .def("reset_statistics", &Session::ResetStatistics,
           "Zeroes the statistics; drafting is unaffected (what sam-cal has learned is kept).")
      .def("reset_calibration", &Session::ResetCalibration,
           "Forgets what the policy has learned across requests (sam-cal's acceptance\n"
           "estimates): the next drafts are a new session's. Statistics are kept.")
      .def("stats_json", &Session::StatsJson,
           "The statistics as JSON text; Session.stats() parses it.")
      .def("verify_greedy", &Session::VerifyGreedy, py::arg("argmax"),
           "Greedy verification of the last proposal: argmax[i] is the model's id after\n"
           "node i. Returns a VerifyResult; commits nothing.")
      .def("verify_sampling", &Session::VerifySampling, py::arg("probs"), py::arg("rng"),
           "Lossless sampling verification of the last proposal: probs[i] is the model's\n"
           "distribution after node i. Returns a VerifyResult; commits nothing.")
      .def_property_readonly("policy", &Session::policy)
      .def_property_readonly("draft_size", &Session::draft_size)
      .def_property_readonly("num_indexes", &Session::num_indexes)
      .def("attach_cache", &Session::AttachCache, py::arg("cache"), py::arg("tenant") = "",
           "Drafts from `cache` (a ResponseCache; None detaches) under `tenant`.")
      .def("cache_request", &Session::CacheRequest, py::arg("include_prompt") = py::none(),
           "Adds this request's output (and, with include_prompt, its prompt; None: the\n"
           "cache_prompts option) to the attached cache; False if none.");

  py::class_<ResponseCache>(m, "ResponseCache",
                            "A cross-request cache of responses, bounded by max_bytes, that\n"
                            "sessions draft from (Session.attach_cache); compile=True compiles a\n"
                            "tenant's responses into an automaton (on its own thread with\n"
                            "compile_background=True).")
      .def(py::init<size_t, bool, size_t, double, size_t, bool>(), py::arg("max_bytes"),
           py::arg("compile") = false, py::arg("compile_min_tokens") = 512,
           py::arg("compile_growth") = 0.25, py::arg("compile_bytes") = 0,
           py::arg("compile_background") = false)
      .def("wait_for_compiles", &ResponseCache::WaitForCompiles)
      .def("insert", &ResponseCache::Insert, py::arg("tenant"), py::arg("ids"))
      .def("draft", &ResponseCache::Draft, py::arg("tenant"), py::arg("context"),
           py::arg("want"), py::arg("climb_links") = false)
      .def("save", &ResponseCache::Save, py::arg("path"), py::arg("tokenizer_sha256") = py::none())
      .def("load", &ResponseCache::Load, py::arg("path"), py::arg("tokenizer_sha256") = py::none())
      .def("responses", [](const ResponseCache& c, const std::string& t) { return c.get()->Responses(t); },
           py::arg("tenant"))
      .def("tenants",
           [](const ResponseCache& c) {
             // Keys are bytes; one that is not UTF-8 (from a file) decodes with
             // surrogateescape, as os.fsdecode does, instead of failing.
             py::list keys;
             for (const std::string& key : c.get()->Tenants())
               keys.append(py::reinterpret_steal<py::str>(
                   PyUnicode_DecodeUTF8(key.data(), static_cast<Py_ssize_t>(key.size()),
                                        "surrogateescape")));
             return keys;
           })
      .def_property_readonly("bytes", [](const ResponseCache& c) { return c.get()->bytes(); })
      .def_property_readonly("max_bytes", [](const ResponseCache& c) { return c.get()->max_bytes(); })
      .def_property_readonly("num_responses",
                             [](const ResponseCache& c) { return c.get()->num_responses(); })
      .def_property_readonly("num_evicted",
                             [](const ResponseCache& c) { return c.get()->num_evicted(); })
      .def_property_readonly("compiled_bytes",
                             [](const ResponseCache& c) { return c.get()->compiled_bytes(); })
      .def_property_readonly("num_compiles",
                             [](const ResponseCache& c) { return c.get()->num_compiles(); });

  py::class_<sam::runtime::DraftPool>(m, "DraftPool",
                                       "Threads that draft many sessions in one call.")
      .def(py::init<size_t>(), py::arg("threads") = 0,
           "A pool of `threads` threads, the caller's included (0: one per core).")
      .def_property_readonly("threads", &sam::runtime::DraftPool::num_threads)
      .def("propose", &ProposeBatch, py::arg("sessions"), py::arg("starts"),
           py::arg("max_nodes") = py::none(),
           "session.propose(start, max_nodes) for every pair, on the pool's threads with\n"
           "the GIL released: a list of Drafts (or the Error of a session that failed).\n"
           "max_nodes: None, one limit for all, or one per session.");

  py::class_<sam::runtime::Rng>(m, "Rng")
      .def(py::init<uint64_t>(), py::arg("seed") = 0)
      .def("seed", &sam::runtime::Rng::Seed, py::arg("seed"))
      .def("next", &sam::runtime::Rng::Next)
      .def("uniform", &sam::runtime::Rng::Uniform);

  py::class_<Verified, std::shared_ptr<Verified>>(m, "VerifyResult")
      .def_property_readonly("accepted_nodes",
                             [](py::object self) {
                               const auto& v = self.cast<const Verified&>();
                               return View(v.result->accepted_nodes.data(),
                                           v.result->accepted_nodes.size(), self);
                             })
      .def_property_readonly("accepted_tokens",
                             [](py::object self) {
                               const auto& v = self.cast<const Verified&>();
                               return View(v.result->accepted_tokens.data(),
                                           v.result->accepted_tokens.size(), self);
                             })
      .def_property_readonly("commit_tokens",
                             [](py::object self) {
                               const auto& v = self.cast<const Verified&>();
                               return View(v.commit.data(), v.commit.size(), self);
                             })
      .def_property_readonly("bonus_token",
                             [](const Verified& v) { return v.result->bonus_token; })
      .def_property_readonly("accepted_count",
                             [](const Verified& v) { return v.result->accepted_tokens.size(); })
      .def("__repr__", [](const Verified& v) {
        std::string s = "VerifyResult(accepted_tokens=[";
        for (size_t i = 0; i < v.result->accepted_tokens.size(); ++i)
          s += (i ? ", " : "") + std::to_string(v.result->accepted_tokens[i]);
        return s + "], bonus_token=" + std::to_string(v.result->bonus_token) + ")";
      });

  m.def(
      "verify_greedy",
      [](const py::handle& tokens, const py::handle& parents, const py::handle& argmax) {
        return VerifyGreedyTree(TreeFromArrays(tokens, parents, "verify_greedy"), argmax);
      },
      py::arg("tokens"), py::arg("parents"), py::arg("argmax"));
  m.def(
      "verify_sampling",
      [](const py::handle& tokens, const py::handle& parents, const py::handle& probs,
         sam::runtime::Rng& rng, const std::string& mode, const py::handle& proposal) {
        return VerifySamplingTree(TreeFromArrays(tokens, parents, "verify_sampling"), probs, rng,
                                  mode, proposal);
      },
      py::arg("tokens"), py::arg("parents"), py::arg("probs"), py::arg("rng"),
      py::arg("mode") = "deterministic", py::arg("proposal") = py::none());
  m.def(
      "apply_sampling",
      [](py::array scores, float temperature, int top_k, float top_p, bool logits) {
        if (!py::isinstance<py::array_t<float>>(scores) ||
            !(scores.flags() & py::array::c_style) || !scores.writeable() ||
            (scores.ndim() != 1 && scores.ndim() != 2) || scores.size() == 0)
          ThrowInvalid(
              "apply_sampling: scores must be a non-empty, writeable, C-contiguous float32 "
              "array of 1 or 2 dimensions (rows are processed in place)");
        const size_t v = static_cast<size_t>(scores.shape(scores.ndim() - 1));
        const size_t rows = static_cast<size_t>(scores.size()) / v;
        float* data = static_cast<float*>(scores.mutable_data());
        const sam::runtime::SamplingParams params{temperature, top_k, top_p};
        {
          py::gil_scoped_release release;
          for (size_t r = 0; r < rows; ++r)
            sam::runtime::ApplySampling(std::span<float>(data + r * v, v), params,
                                        logits ? sam::runtime::ScoreKind::kLogits
                                               : sam::runtime::ScoreKind::kProbabilities);
        }
        return scores;
      },
      py::arg("scores"), py::arg("temperature") = 1.0f, py::arg("top_k") = 0,
      py::arg("top_p") = 1.0f, py::arg("logits") = true);
  m.def(
      "sample_token",
      [](const py::handle& weights, sam::runtime::Rng& rng) {
        py::array_t<float, py::array::c_style | py::array::forcecast> w =
            py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(weights);
        if (!w || w.ndim() != 1) {
          PyErr_Clear();
          ThrowInvalid("sample_token: weights must be a 1-D array of numbers");
        }
        return sam::runtime::SampleToken(
            std::span<const float>(w.data(), static_cast<size_t>(w.size())), rng);
      },
      py::arg("weights"), py::arg("rng"));
  m.def(
      "propose_batch",
      [](const py::sequence& sessions, const py::handle& starts, py::object pool,
         const py::handle& max_nodes) {
        if (pool.is_none()) return ProposeBatch(DefaultPool(), sessions, starts, max_nodes);
        return ProposeBatch(py::cast<sam::runtime::DraftPool&>(pool), sessions, starts,
                            max_nodes);
      },
      py::arg("sessions"), py::arg("starts"), py::arg("pool") = py::none(),
      py::arg("max_nodes") = py::none(),
      "DraftPool.propose on `pool` (None: a pool over all cores, made on first use).");
}
