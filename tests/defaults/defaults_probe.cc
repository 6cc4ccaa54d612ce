// Prints the default policy of each native binding, one "binding policy" line each:
// the C++ library (SessionOptions{}), the C API's two option structs, and what a
// session made from each reports. tests/defaults/defaults_test.sh compares them.
#include <cstdio>

#include "sam/runtime/selection.h"
#include "sam/runtime/session.h"
#include "sam/sam.h"

int main() {
  const sam::runtime::SessionOptions cxx;
  std::printf("c++:SessionOptions %s\n", sam::runtime::PolicyName(cxx.selection.policy).data());
  sam_session_config config;
  sam_session_config_init(&config);
  std::printf("c:sam_session_config_init %s\n", sam_policy_name(config.policy));
  sam_session_options options;
  sam_session_options_default(&options);
  std::printf("c:sam_session_options_default %s\n", sam_policy_name(options.policy));
  return 0;
}
