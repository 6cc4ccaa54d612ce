// libtorch's own exceptions (c10::Error: a CUDA or CPU allocation that fails, a device-side error
// surfacing at a synchronisation, a kernel that refuses its inputs) turned into the one error
// family of the sam libraries (sam/torch/error.h), so that callers catch sam::Error only.
#pragma once

#include <string>
#include <string_view>
#include <utility>

#include <c10/util/Exception.h>

#include "sam/format/file_checks.h"

#include "sam/torch/error.h"

namespace sam::torch_backend::internal {

// Runs f(); a c10::OutOfMemoryError (or a c10::Error saying memory ran out) becomes
// Error(kCapacity), any other c10::Error Error(kInternal), both prefixed with `what` (e.g.
// "Forward").
template <class F>
decltype(auto) TranslateTorchErrors(std::string_view what, F&& f) {
  try {
    return std::forward<F>(f)();
  } catch (const c10::OutOfMemoryError& e) {
    throw Error(ErrorCode::kCapacity,
                std::string(what) + ": out of memory: " + e.what_without_backtrace());
  } catch (const c10::Error& e) {
    // libtorch 1.13's CPU allocator reports a failed allocation as a plain c10::Error ("can't
    // allocate memory").
    const std::string message = e.what_without_backtrace();
    const bool memory = message.find("allocate memory") != std::string::npos ||
                        message.find("not enough memory") != std::string::npos ||
                        message.find("out of memory") != std::string::npos;
    throw Error(memory ? ErrorCode::kCapacity : ErrorCode::kInternal,
                std::string(what) + (memory ? ": out of memory: " : ": libtorch failed: ") + message);
  }
}

// format::OpenRegularFile (never blocks; a directory or FIFO is refused naming
// the file), its refusal thrown as this backend's Error like its other I/O errors.
inline int OpenRegularFile(const std::string& path, const std::string& what) {
  try {
    return format::OpenRegularFile(path, what);
  } catch (const sam::Error& e) {
    throw Error(e.code(), e.context(), e.problem());
  }
}

}  // namespace sam::torch_backend::internal
