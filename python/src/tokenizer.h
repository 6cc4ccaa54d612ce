// samdecoding.Tokenizer (tokenizer.cc): the tokenizer an index was built with, from Python.
#ifndef SAM_PYTHON_TOKENIZER_H_
#define SAM_PYTHON_TOKENIZER_H_

#include <pybind11/pybind11.h>

#include <optional>

#include "sam/format/sha256.h"

namespace samdecoding {

// Adds the Tokenizer class to the module.
void BindTokenizer(pybind11::module_& m);

// The fingerprint of `object` when it is a samdecoding.Tokenizer (Index.open's and
// ShardSet.open's tokenizer argument), else nullopt.
std::optional<sam::format::Sha256Digest> TokenizerDigest(pybind11::handle object);

}  // namespace samdecoding

#endif  // SAM_PYTHON_TOKENIZER_H_
