// Running a shell command from a test: its exit status and standard output.
//
//   const auto r = sam::testing::RunCommand("sha256sum " + sam::testing::ShellQuote(path));
#ifndef SAM_TESTS_COMMON_RUN_COMMAND_H_
#define SAM_TESTS_COMMON_RUN_COMMAND_H_

#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace sam::testing {

inline std::string ShellQuote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout
};

inline CommandResult RunCommand(const std::string& command) {
  CommandResult r;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return r;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) r.output.append(buffer, n);
  const int status = pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace sam::testing

#endif  // SAM_TESTS_COMMON_RUN_COMMAND_H_
