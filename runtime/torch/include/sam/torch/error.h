// Errors thrown by the libtorch verification backend (sam::torch): sam::Error (sam/error.h, the
// one family of every sam library), thrown as the subclass torch_backend::Error.
//
//   try {
//     auto model = sam::torch_backend::Model::Load("/models/llama");
//   } catch (const sam::Error& e) {
//     std::cerr << e.what() << "\n";            // names the file / tensor / field
//     if (e.code() == sam::ErrorCode::kMissingTensor) { ... }
//   }
//
// Library code never prints and never aborts on bad input: every failure is an Error whose message
// names the file, tensor or field, the value found and the value expected. Its codes:
//   kIo              a file could not be opened, mapped, read or written
//   kBadCheckpoint   a safetensors file is malformed (truncated, bad header, offsets out of bounds)
//   kBadModelConfig  config.json is malformed or describes an unsupported model
//   kMissingTensor   a tensor the model needs is absent from the checkpoint
//   kShapeMismatch   a tensor has the wrong shape
//   kDtype           a tensor or option has an unsupported dtype
//   kInvalidArgument a bad argument to Forward / Commit / options (token id, parents, path)
//   kCapacity        the KV cache is too small for the request
#pragma once

#include "sam/error.h"

namespace sam::torch_backend {

// The former names, kept: torch_backend::ErrorCode is sam::ErrorCode. (The former kFormat and
// kConfig are kBadCheckpoint and kBadModelConfig.)
using ErrorCode = sam::ErrorCode;
using sam::ErrorCodeName;

// A sam::Error thrown by the torch backend.
class Error : public sam::Error {
 public:
  using sam::Error::Error;
};

}  // namespace sam::torch_backend
