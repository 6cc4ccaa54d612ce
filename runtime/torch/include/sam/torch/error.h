// Errors thrown by the libtorch verification backend (sam::torch).
//
//   try {
//     auto model = sam::torch_backend::Model::Load("/models/llama");
//   } catch (const sam::torch_backend::Error& e) {
//     std::cerr << e.what() << "\n";            // names the file / tensor / field
//     if (e.code() == sam::torch_backend::ErrorCode::kMissingTensor) { ... }
//   }
//
// Library code never prints and never aborts on bad input: every failure is an Error whose message
// names the file, tensor or field, the value found and the value expected. Codes are stable.
#pragma once

#include <stdexcept>
#include <string>

namespace sam::torch_backend {

enum class ErrorCode : int {
  kIo = 1,               // a file could not be opened, mapped, read or written
  kFormat = 2,           // a safetensors file is malformed (truncated, bad header, offsets out of bounds)
  kConfig = 3,           // config.json is malformed or describes an unsupported model
  kMissingTensor = 4,    // a tensor the model needs is absent from the checkpoint
  kShapeMismatch = 5,    // a tensor has the wrong shape
  kDtype = 6,            // a tensor or option has an unsupported dtype
  kInvalidArgument = 7,  // a bad argument to Forward / Commit / options (token id, parents, path)
  kCapacity = 8,         // the KV cache is too small for the request
};

// Stable short name of a code ("missing_tensor", ...).
const char* ErrorCodeName(ErrorCode code);

class Error : public std::runtime_error {
 public:
  Error(ErrorCode code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  ErrorCode code() const noexcept { return code_; }

 private:
  ErrorCode code_;
};

}  // namespace sam::torch_backend
