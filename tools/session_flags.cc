#include "session_flags.h"

#include <iostream>

#include "cli.h"
#include "sam/error.h"

namespace sam::tools {

namespace rt = sam::runtime;

std::string SessionFlags::FlagOf(std::string_view name) {
  std::string flag = "--" + std::string(name);
  for (char& c : flag)
    if (c == '_') c = '-';
  return flag;
}

void SessionFlags::Add(CLI::App& app, std::initializer_list<std::string_view> names) {
  options_.reserve(names.size());
  for (std::string_view name : names) {
    const rt::OptionSpec* spec = rt::FindOptionSpec(rt::SessionOptionSpecs(), name);
    if (spec == nullptr)
      throw sam::Error(sam::ErrorCode::kInvalidArgument, "no session option " + std::string(name));
    options_.push_back({std::string(name), nullptr, {}});
    Given& g = options_.back();
    std::string help(spec->help);
    for (char& c : help)
      if (c == '\n') c = ' ';
    CLI::Option* option = app.add_option(FlagOf(name), g.value, help);
    switch (spec->type) {
      case rt::OptionType::kUnsigned: option->type_name("UINT"); break;
      case rt::OptionType::kSigned: option->type_name("INT"); break;
      case rt::OptionType::kNumber: option->type_name("FLOAT"); break;
      case rt::OptionType::kBool: option->type_name("BOOL"); break;
      case rt::OptionType::kFile: option->type_name("FILE"); break;
      case rt::OptionType::kName: option->type_name("TEXT"); break;
    }
    if (!spec->default_text.empty()) option->default_str(std::string(spec->default_text));
    g.option = option;
  }
  app.add_option("--experimental", experimental_,
                 "set a tuning parameter, NAME=VALUE (repeatable; --help-experimental lists "
                 "them): experiments, not options, which may change or go in any release")
      ->type_name("NAME=VALUE");
  AddExperimentalHelp(app);
}

void SessionFlags::AddExperimentalHelp(CLI::App& app) {
  app.add_flag_callback(
      "--help-experimental",
      [] {
        std::cout << "Tuning parameters (--experimental NAME=VALUE), with their measured "
                     "defaults:\n"
                  << rt::OptionHelp(rt::ExperimentalOptionSpecs(), "  ");
        throw CLI::Success();  // like --help: exit 0 before required flags are checked
      },
      "list the tuning parameters that --experimental sets, and exit");
}

bool SessionFlags::given(std::string_view name) const {
  for (const Given& g : options_)
    if (g.name == name) return g.option->count() > 0;
  return false;
}

bool SessionFlags::experimental_given(std::string_view name) const {
  for (const std::string& a : experimental_)
    if (a.substr(0, a.find('=')) == name) return true;
  return false;
}

void SessionFlags::Apply(rt::SessionOptions* options) const {
  for (const Given& g : options_) {
    if (g.option->count() == 0) continue;
    try {
      rt::SetSessionOption(options, g.name, g.value);
    } catch (const sam::Error& e) {
      throw UsageError(FlagOf(g.name) + ": " + e.problem());
    }
  }
  for (const std::string& assignment : experimental_) {
    try {
      rt::SetExperimentalAssignment(options, assignment);
    } catch (const sam::Error& e) {
      throw UsageError("--experimental: " + e.problem());
    }
  }
}

}  // namespace sam::tools
