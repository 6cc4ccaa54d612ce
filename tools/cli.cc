#include "cli.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <iostream>

#include "sam/format/error.h"
#include "sam/format/file_checks.h"
#include "sam/format/shard_set.h"
#include "sam/format/temp_files.h"

namespace sam::tools {
namespace {

namespace fs = std::filesystem;

const char* g_tool = "";

extern "C" void RemoveTempFilesAndDie(int signal_number) {
  sam::format::RemoveRegisteredTempFiles();
  // SA_RESETHAND restored the default action; the signal is blocked until the
  // handler returns, and then ends the process as if never caught.
  ::raise(signal_number);
}

// With SAM_TEST_PAUSE_WRITING=N (a number), the Nth temporary file is the one paused at.
std::atomic<long> g_pause_countdown{1};

void PauseAtTempFile(const char* path) {
  if (g_pause_countdown.fetch_sub(1) != 1) return;
  // One write, so that a reader never sees half the line; then wait for the signal that ends
  // the program (only async-signal-safe calls from here on).
  std::string line = std::string(g_tool) + ": test hook: paused writing " + path + "\n";
  const ssize_t ignored = ::write(2, line.data(), line.size());
  (void)ignored;
  for (;;) ::pause();
}

std::string Errno(int error) { return std::strerror(error); }

// A message's later lines, indented under its first ("tool: ...") line.
std::string Indented(std::string_view message) {
  std::string out;
  for (const char c : message) {
    out += c;
    if (c == '\n') out += "  ";
  }
  while (!out.empty() && (out.back() == ' ' || out.back() == '\n')) out.pop_back();
  return out;
}

// CLI11 (2.1) reads "-3" into an unsigned option as 2^64 - 3, "nan" or "inf"
// into a floating-point one (and a range check lets NaN through), and an
// empty value ("", as a script's unset variable gives) into any number as 0,
// which for many flags means "no limit" or "never". So every numeric option
// (type UINT, INT or FLOAT, lists included) of every program refuses an empty
// value, every unsigned one a minus sign, and every floating-point one a value
// that is not a finite number. The checks have no description: --help is
// unchanged.
void GuardNumbers(CLI::App& app) {
  const CLI::Validator nonempty_value(
      [](std::string& value) -> std::string {
        if (value.find_first_not_of(" \t") == std::string::npos)
          return "Value '" + value + "' is empty, not a number";
        return "";
      },
      "");
  const CLI::Validator unsigned_value(
      [](std::string& value) -> std::string {
        const size_t at = value.find_first_not_of(" \t");
        if (at != std::string::npos && value[at] == '-')
          return "Value " + value + " is not an unsigned number";
        return "";
      },
      "");
  const CLI::Validator finite_value(
      [](std::string& value) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(value.c_str(), &end);
        if (end != value.c_str() && !std::isfinite(v))
          return "Value " + value + " is not a finite number";
        return "";
      },
      "");
  for (CLI::Option* option : app.get_options()) {
    const std::string type = option->get_type_name();
    const bool is_unsigned = type.rfind("UINT", 0) == 0;
    const bool is_float = type.rfind("FLOAT", 0) == 0;
    if (is_unsigned || is_float || type.rfind("INT", 0) == 0) option->check(nonempty_value);
    if (is_unsigned) option->check(unsigned_value);
    if (is_float) option->check(finite_value);
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) GuardNumbers(*sub);
}

// An empty value given to any option ("--report ''", a script's unset
// variable) would read as "not given" (no bound, a full index, no report), and
// CLI11 drops the empty items of a delimited list ("1,,2" reads as 1,2): both
// are usage errors. Returns the problem, or "" when there is none.
std::string EmptyValueProblem(const CLI::App& app, int argc, char** argv) {
  for (const CLI::Option* option : app.get_options()) {
    if (option->get_type_size() == 0 || option->count() == 0) continue;  // a flag, or not given
    for (const std::string& value : option->results())
      if (value.find_first_not_of(" \t") == std::string::npos)
        return option->get_name() + ": empty value";
  }
  for (int i = 1; i + 1 <= argc; ++i) {
    std::string arg = argv[i], value;
    if (arg.rfind("--", 0) != 0) continue;
    if (const size_t eq = arg.find('='); eq != std::string::npos) {
      value = arg.substr(eq + 1);
      arg.resize(eq);
    } else if (i + 1 < argc) {
      value = argv[i + 1];
    } else {
      continue;
    }
    const CLI::Option* option = app.get_option_no_throw(arg);
    if (option == nullptr || option->get_delimiter() == '\0' || option->get_type_size() == 0)
      continue;
    const char d = option->get_delimiter();
    if (!value.empty() && (value.front() == d || value.back() == d ||
                           value.find(std::string(2, d)) != std::string::npos))
      return arg + ": '" + value + "' has an empty item";
  }
  return "";
}

}  // namespace

std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv) {
  GuardNumbers(app);
  app.set_version_flag("--version", app.get_name() + " " SAM_TOOLS_VERSION,
                       "print the program's name and the project's version, and exit");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e) == 0 ? 0 : 2;  // --help, --version
    std::cerr << app.get_name() << ": " << Indented(e.what()) << "\n"
              << app.get_name() << ": run '" << app.get_name() << " --help' for usage\n";
    return 2;
  }
  if (const std::string problem = EmptyValueProblem(app, argc, argv); !problem.empty()) {
    std::cerr << app.get_name() << ": " << problem << "\n"
              << app.get_name() << ": run '" << app.get_name() << " --help' for usage\n";
    return 2;
  }
  return std::nullopt;
}

int RunTool(const char* tool, const std::function<int()>& body) {
  try {
    return body();
  } catch (const sam::Error& e) {
    if (e.code() == sam::ErrorCode::kUsage) {
      std::cerr << tool << ": " << Indented(e.what()) << "\n";
      return 2;
    }
    std::cerr << tool << ": error [" << sam::ErrorCodeName(e.code())
              << "]: " << Indented(e.what()) << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << tool << ": error: " << Indented(e.what()) << "\n";
    return 1;
  }
}

void SetUpTool(const char* tool) {
  g_tool = tool;
  for (const int signal_number : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction old = {};
    if (::sigaction(signal_number, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    struct sigaction action = {};
    action.sa_handler = RemoveTempFilesAndDie;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND;
    ::sigaction(signal_number, &action, nullptr);
  }
  const char* pause = std::getenv("SAM_TEST_PAUSE_WRITING");
  if (pause != nullptr && *pause != '\0') {
    const long nth = std::strtol(pause, nullptr, 10);
    g_pause_countdown.store(nth > 0 ? nth : 1);
    sam::format::SetTempFileObserver(PauseAtTempFile);
  }
}

std::vector<std::string> IndexInputs(const std::vector<std::string>& index_paths) {
  std::vector<std::string> files;
  for (const std::string& path : index_paths) {
    files.push_back(path);
    if (!sam::format::LooksLikeShardSet(path)) continue;
    try {
      for (const sam::format::ShardEntry& shard : sam::format::ReadShardSetManifest(path).shards)
        files.push_back(sam::format::ShardPath(path, shard));
    } catch (const std::exception&) {
    }
  }
  return files;
}

void NoteWithoutAccelerators(const char* tool, const std::string& path, bool has_accelerators) {
  if (has_accelerators) return;
  if (sam::format::LooksLikeShardSet(path)) {
    std::fprintf(stderr,
                 "%s: note: the shards of %s have no accelerator sections (written before "
                 "index format 1.1); this process computes them at open; `sam-build --upgrade` "
                 "on each shard, then `sam-build --write-samset`, adds them\n",
                 tool, path.c_str());
    return;
  }
  std::fprintf(stderr,
               "%s: note: %s has no accelerator sections (written before index format 1.1); "
               "this process computes them at open; `sam-build --upgrade %s` adds them to the "
               "file\n",
               tool, path.c_str(), path.c_str());
}

void CheckOutputPath(const std::string& flag, const std::string& path,
                     const std::vector<std::string>& inputs) {
  try {
    sam::format::CheckOutputPath(path, inputs,
                                 {.label = flag,
                                  .probe_directory = true,
                                  .missing_folder_code = sam::ErrorCode::kInvalidArgument});
  } catch (const sam::Error& e) {
    // The messages already name the flag and the path.
    if (e.code() == sam::ErrorCode::kInvalidArgument) throw UsageError(e.problem());
    throw sam::Error(e.code(), e.problem());
  }
}

AtomicOutputFile::AtomicOutputFile(std::string path)
    : path_(std::move(path)), temp_path_(path_ + ".tmp-" + std::to_string(::getpid())) {
  out_.open(temp_path_, std::ios::binary | std::ios::trunc);
  if (!out_)
    throw sam::Error(sam::ErrorCode::kIo, "cannot create " + temp_path_ + ": " + Errno(errno));
  sam::format::RegisterTempFile(temp_path_);
}

AtomicOutputFile::~AtomicOutputFile() {
  if (committed_) return;
  out_.close();
  ::unlink(temp_path_.c_str());
  sam::format::UnregisterTempFile(temp_path_);
}

void AtomicOutputFile::Commit() {
  out_.flush();
  if (!out_)
    throw sam::Error(sam::ErrorCode::kIo, "cannot write " + temp_path_ + ": " + Errno(errno));
  out_.close();
  if (!out_)
    throw sam::Error(sam::ErrorCode::kIo, "cannot close " + temp_path_ + ": " + Errno(errno));
  const int fd = ::open(temp_path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  if (std::rename(temp_path_.c_str(), path_.c_str()) != 0)
    throw sam::Error(sam::ErrorCode::kIo,
                     "cannot rename " + temp_path_ + " to " + path_ + ": " + Errno(errno));
  committed_ = true;
  sam::format::UnregisterTempFile(temp_path_);
}

}  // namespace sam::tools
