// A tool's session flags, made from the runtime's one option table
// (sam/runtime/options.h): --NAME (NAME's '_' as '-') for each user option a
// tool takes, and the experimental family for the tuning parameters:
//
//   sam::tools::SessionFlags flags;
//   flags.Add(app, {"draft_size", "shape", "tree_nodes", "tree_width"});
//   ... parse ...
//   sam::runtime::SessionOptions options;
//   flags.Apply(&options);                        // UsageError naming the flag
//
//   --experimental NAME=VALUE   a tuning parameter (repeatable; --help-experimental
//                               lists them with their defaults)
#ifndef SAM_TOOLS_SESSION_FLAGS_H_
#define SAM_TOOLS_SESSION_FLAGS_H_

#include <CLI/CLI.hpp>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sam/runtime/options.h"

namespace sam::tools {

class SessionFlags {
 public:
  // Adds --NAME for each named user option (the table's type, default and
  // help), --experimental and --help-experimental.
  void Add(CLI::App& app, std::initializer_list<std::string_view> names);
  // Sets the given flags over *options (user options, then --experimental
  // ones, in order). Throws UsageError ("--draft-size: ...") for a bad value.
  void Apply(sam::runtime::SessionOptions* options) const;
  // Whether --NAME (a user option's name) was given.
  bool given(std::string_view name) const;
  // Whether --experimental set `name`.
  bool experimental_given(std::string_view name) const;
  // "--" NAME with '-' for '_'.
  static std::string FlagOf(std::string_view name);
  // --help-experimental alone: prints the tuning table with its defaults and
  // exits 0 (Add adds it; bench-step, whose --experimental takes lists, too).
  static void AddExperimentalHelp(CLI::App& app);

 private:
  struct Given {
    std::string name;
    CLI::Option* option = nullptr;
    std::string value;
  };
  std::vector<Given> options_;
  std::vector<std::string> experimental_;
};

}  // namespace sam::tools

#endif  // SAM_TOOLS_SESSION_FLAGS_H_
