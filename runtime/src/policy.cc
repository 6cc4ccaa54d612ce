#include "policy.h"

namespace sam::runtime::internal {

std::unique_ptr<DraftPolicy> MakePolicy(const SessionOptions& options) {
  switch (options.policy) {
    case Policy::kPaper: return MakePaperPolicy(options);
    case Policy::kStaticOnly:
    case Policy::kDynamicOnly: return MakeLinearPolicy(options);
    case Policy::kTree: return MakeTreePolicy(options);
    case Policy::kCalibrated: return MakeCalibratedPolicy(options);
  }
  return MakePaperPolicy(options);
}

}  // namespace sam::runtime::internal
