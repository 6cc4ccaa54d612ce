// Prints the default policy of each native binding, one "binding policy" line each:
// the C++ library (SessionOptions{}), the C API's config and the option table's default
// (which Python and the tools show). tests/defaults/defaults_test.sh compares them.
#include <cstdio>
#include <string>

#include "sam/runtime/options.h"
#include "sam/runtime/selection.h"
#include "sam/runtime/session.h"
#include "sam/sam.h"

int main() {
  const sam::runtime::SessionOptions cxx;
  std::printf("c++:SessionOptions %s\n", sam::runtime::PolicyName(cxx.policy).data());
  sam_session_config config;
  sam_session_config_init(&config);
  std::printf("c:sam_session_config_init %s\n", sam_policy_name(config.policy));
  const sam::runtime::OptionSpec* policy =
      sam::runtime::FindOptionSpec(sam::runtime::SessionOptionSpecs(), "policy");
  std::printf("c++:SessionOptionSpecs %s\n", std::string(policy->default_text).c_str());
  return 0;
}
