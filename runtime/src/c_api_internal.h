// Shared by the files of the C API (c_api.cc, c_api_tokenizer.cc): the one place where
// exceptions become status codes and the thread's message (c_api.cc's Guard).
#ifndef SAM_RUNTIME_C_API_INTERNAL_H_
#define SAM_RUNTIME_C_API_INTERNAL_H_

#include <functional>
#include <string>

#include "sam/error.h"

namespace sam::capi_internal {

// Runs body; returns SAM_OK, or the status of what it threw with sam_last_error() set.
int Guard(const std::function<void()>& body) noexcept;

// Throws kInvalidArgument "function: what" unless condition holds.
inline void Require(bool condition, const char* function, const std::string& what) {
  if (!condition) throw sam::Error(sam::ErrorCode::kInvalidArgument, std::string(function) + ": " + what);
}

}  // namespace sam::capi_internal

#endif  // SAM_RUNTIME_C_API_INTERNAL_H_
