// Command-line parsing shared by the tools' mains: one exit-status convention.
#ifndef SAM_TOOLS_CLI_EXIT_H_
#define SAM_TOOLS_CLI_EXIT_H_

#include <CLI/CLI.hpp>
#include <optional>

namespace sam::tools {

// Parses the command line. Returns the status main should exit with when it
// must stop here (0 after --help, 2 for a usage error, CLI11 having printed
// the message), or nothing to go on.
inline std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return std::nullopt;
}

}  // namespace sam::tools

#endif  // SAM_TOOLS_CLI_EXIT_H_
