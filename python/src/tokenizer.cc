// samdecoding.Tokenizer over sam::indexer::Tokenizer's isolated backend: SentencePiece and its
// protobuf are loaded from libsam_tokenizer_shim.so (beside this extension) in their own symbol
// scope, so the package works in a process that also imports torch.
#include "tokenizer.h"

#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "sam/error.h"
#include "sam/format/index.h"
#include "sam/indexer/tokenizer.h"

namespace py = pybind11;

namespace samdecoding {
namespace {

class Tokenizer {
 public:
  explicit Tokenizer(const std::string& path)
      : tokenizer_(sam::indexer::Tokenizer::Load(path)),
        sha256_(sam::format::DigestToHex(tokenizer_.sha256())) {}

  std::vector<uint32_t> Encode(const std::string& text, bool add_bos) const {
    std::vector<uint32_t> ids;
    py::gil_scoped_release release;
    if (add_bos)
      tokenizer_.EncodePrompt(text, &ids);
    else
      tokenizer_.Encode(text, &ids);
    return ids;
  }

  py::str Decode(const std::vector<int64_t>& ids) const {
    std::vector<uint32_t> checked;
    checked.reserve(ids.size());
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= tokenizer_.vocab_size())
        throw sam::Error(sam::ErrorCode::kInvalidArgument,
                         "Tokenizer.decode: ids[" + std::to_string(i) + "] = " +
                             std::to_string(ids[i]) + " is outside the vocabulary of " +
                             tokenizer_.path() + " (" + std::to_string(tokenizer_.vocab_size()) +
                             " ids)");
      checked.push_back(static_cast<uint32_t>(ids[i]));
    }
    std::string text;
    {
      py::gil_scoped_release release;
      text = tokenizer_.Decode(checked);
    }
    // A cut multi-byte character (ids that end inside one) becomes U+FFFD.
    PyObject* decoded = PyUnicode_DecodeUTF8(text.data(), static_cast<Py_ssize_t>(text.size()),
                                             "replace");
    if (decoded == nullptr) throw py::error_already_set();
    return py::reinterpret_steal<py::str>(decoded);
  }

  // Raises tokenizer-mismatch unless `index` (anything with tokenizer_sha256: an Index) was
  // built with this tokenizer.
  void Check(py::handle index) const {
    const py::object recorded = index.attr("tokenizer_sha256");
    if (!recorded.is_none() && py::cast<std::string>(recorded) == sha256_) return;
    const std::string built = recorded.is_none()
                                  ? std::string("from token ids (no tokenizer)")
                                  : "with tokenizer " + py::cast<std::string>(recorded);
    std::string where = "the index";
    if (py::hasattr(index, "path"))
      where = "index " + py::cast<std::string>(py::str(index.attr("path")));
    throw sam::Error(sam::ErrorCode::kTokenizerMismatch,
                     where + " was built " + built + ", not with " + tokenizer_.path() +
                         " (tokenizer " + sha256_ + ")");
  }

  const sam::indexer::Tokenizer& tokenizer() const { return tokenizer_; }
  const std::string& sha256() const { return sha256_; }

 private:
  sam::indexer::Tokenizer tokenizer_;
  std::string sha256_;
};

std::optional<uint32_t> IdOrNone(uint32_t id) {
  if (id == sam::format::kNoToken) return std::nullopt;
  return id;
}

}  // namespace

std::optional<sam::format::Sha256Digest> TokenizerDigest(py::handle object) {
  if (!py::isinstance<Tokenizer>(object)) return std::nullopt;
  return py::cast<const Tokenizer&>(object).tokenizer().sha256();
}

void BindTokenizer(py::module_& m) {
  py::class_<Tokenizer>(
      m, "Tokenizer",
      "The tokenizer an index was built with: a SentencePiece model (.model), a Hugging Face\n"
      "tokenizer.json, or a folder holding one (told apart by content). Encodes as sam-build\n"
      "and sam-generate do. Immutable: threads may share it.")
      .def(py::init([](py::handle path) {
             const std::string fs =
                 py::cast<std::string>(py::module_::import("os").attr("fsencode")(path));
             if (fs.find('\0') != std::string::npos) throw py::value_error("embedded null byte");
             py::gil_scoped_release release;
             return std::make_unique<Tokenizer>(fs);
           }),
           py::arg("path"),
           "Loads the tokenizer at `path` (str, bytes or os.PathLike); raises Error 'io' when\n"
           "it cannot be read, 'tokenizer' when it is not a supported tokenizer.")
      .def("encode", &Tokenizer::Encode, py::arg("text"), py::arg("add_bos") = false,
           "The ids of `text` (no special tokens added; with add_bos=True, BOS first when the\n"
           "tokenizer has one: a prompt as Session.prefill wants it).")
      .def("decode", &Tokenizer::Decode, py::arg("ids"),
           "The text of `ids` as the tokenizer's decoder writes it; an id outside the\n"
           "vocabulary raises Error 'invalid-argument'.")
      .def("check", &Tokenizer::Check, py::arg("index"),
           "Raises Error 'tokenizer-mismatch' unless `index` (an Index) was built with this\n"
           "tokenizer (its fingerprint equals index.tokenizer_sha256).")
      .def_property_readonly("sha256", &Tokenizer::sha256,
                             "The fingerprint an index built with it records (sam-inspect's\n"
                             "tokenizer): 64 hex digits.")
      .def_property_readonly("vocab_size",
                             [](const Tokenizer& t) { return t.tokenizer().vocab_size(); })
      .def_property_readonly("bos_id",
                             [](const Tokenizer& t) { return IdOrNone(t.tokenizer().bos_id()); })
      .def_property_readonly("eos_id",
                             [](const Tokenizer& t) { return IdOrNone(t.tokenizer().eos_id()); })
      .def_property_readonly(
          "kind",
          [](const Tokenizer& t) {
            return std::string(sam::indexer::TokenizerKindName(t.tokenizer().kind()));
          },
          "'sentencepiece' or 'tokenizer.json'.")
      .def_property_readonly(
          "path",
          [](const Tokenizer& t) {
            return py::module_::import("os").attr("fsdecode")(py::bytes(t.tokenizer().path()));
          })
      .def("__repr__", [](const Tokenizer& t) {
        return "<samdecoding.Tokenizer " + std::string(sam::indexer::TokenizerKindName(
                                              t.tokenizer().kind())) +
               " " + t.tokenizer().path() + ", " + std::to_string(t.tokenizer().vocab_size()) +
               " ids>";
      });
}

}  // namespace samdecoding
