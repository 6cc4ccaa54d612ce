// The runtime throws sam::Error (kInvalidArgument) for bad arguments, not std::invalid_argument:
// one catch (sam::Error) covers every library, and code() says what kind of error it is.
#include <gtest/gtest.h>

#include <cstddef>
#include <string>
#include <vector>

#include "sam/error.h"
#include "sam/runtime/dynamic_sam.h"
#include "sam/runtime/pld.h"
#include "sam/runtime/recycling.h"
#include "sam/runtime/selection.h"
#include "sam/runtime/session.h"
#include "sam/runtime/static_index.h"

namespace {

using sam::ErrorCode;

// Runs `fn`; expects a sam::Error with code kInvalidArgument whose message contains `part`.
template <typename Fn>
void ExpectInvalidArgument(Fn&& fn, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "nothing thrown; expected '" << part << "'";
  } catch (const sam::Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a sam::Error: " << e.what();
  }
}

TEST(RuntimeErrors, BadArgumentsThrowSamErrorInvalidArgument) {
  ExpectInvalidArgument([] { sam::runtime::FindPolicy("bogus"); }, "bogus");
  ExpectInvalidArgument([] { sam::runtime::DynamicSam sam(size_t{1} << 31); }, "capacity");
  ExpectInvalidArgument([] { sam::runtime::PldDrafter pld(0, 10); }, "max_ngram_size");
  ExpectInvalidArgument([] { sam::runtime::RecyclingDrafter recycling(0); }, "vocab_size");
  ExpectInvalidArgument([] { sam::runtime::StaticIndex::Create(nullptr); }, "null");
  sam::runtime::SessionOptions options;
  options.draft_size = 0;
  ExpectInvalidArgument([&] { sam::runtime::Session session(options); }, "draft_size");
  sam::runtime::RecyclingDrafter recycling(16);
  ExpectInvalidArgument([&] { recycling.Row(16); }, "16");
}

}  // namespace
