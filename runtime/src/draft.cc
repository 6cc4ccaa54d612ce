#include "sam/runtime/draft.h"

#include <string>

#include "sam/error.h"

namespace sam::runtime {

std::string_view DraftSourceName(DraftSource source) {
  switch (source) {
    case DraftSource::kNone: return "none";
    case DraftSource::kStatic: return "static";
    case DraftSource::kDynamic: return "dynamic";
    case DraftSource::kRecycling: return "recycling";
    case DraftSource::kPld: return "pld";
    case DraftSource::kMerged: return "merged";
    case DraftSource::kOther: return "other";
    case DraftSource::kModel: return "model";
    case DraftSource::kCache: return "cache";
    case DraftSource::kSdsat: return "sdsat";
  }
  return "unknown";
}

void DraftTree::ThrowTooDeep() {
  throw Error(ErrorCode::kCapacity, "DraftTree::Add: a node deeper than " +
                                        std::to_string(kMaxDepth) +
                                        " (the depth limit of a draft tree) was refused");
}

}  // namespace sam::runtime
