// The sam::Error a call throws, for tests that check its code and context.
//
//   const sam::Error e = sam::testing::Thrown([&] { sam::format::IndexFile::Open(path); });
//   EXPECT_EQ(e.code(), sam::ErrorCode::kIo);
#ifndef SAM_TESTS_COMMON_THROWN_H_
#define SAM_TESTS_COMMON_THROWN_H_

#include <gtest/gtest.h>

#include <exception>

#include "sam/error.h"

namespace sam::testing {

// Runs `fn`, which must throw a sam::Error, and returns it. When it throws
// anything else or nothing, a test failure is added and the error returned
// has code kOk.
template <typename Fn>
sam::Error Thrown(Fn&& fn) {
  try {
    fn();
  } catch (const sam::Error& e) {
    return e;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a sam::Error: " << e.what();
    return sam::Error(sam::ErrorCode::kOk, "");
  }
  ADD_FAILURE() << "nothing thrown";
  return sam::Error(sam::ErrorCode::kOk, "");
}

}  // namespace sam::testing

#endif  // SAM_TESTS_COMMON_THROWN_H_
