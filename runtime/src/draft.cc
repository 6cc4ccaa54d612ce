#include "sam/runtime/draft.h"

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
  }
  return "unknown";
}

}  // namespace sam::runtime
