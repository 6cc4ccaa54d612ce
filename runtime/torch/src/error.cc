#include "sam/torch/error.h"

namespace sam::torch_backend {

const char* ErrorCodeName(ErrorCode code) {
  switch (code) {
    case ErrorCode::kIo: return "io";
    case ErrorCode::kFormat: return "format";
    case ErrorCode::kConfig: return "config";
    case ErrorCode::kMissingTensor: return "missing_tensor";
    case ErrorCode::kShapeMismatch: return "shape_mismatch";
    case ErrorCode::kDtype: return "dtype";
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kCapacity: return "capacity";
  }
  return "unknown";
}

}  // namespace sam::torch_backend
