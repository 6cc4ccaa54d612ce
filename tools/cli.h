// What every command-line program of this project shares: flag parsing with
// one exit-status convention, one usage error, one failure report, signal
// cleanup of temporary files, and safe, atomic output files.
//
//   int main(int argc, char** argv) {
//     sam::tools::SetUpTool("sam-foo");             // signal cleanup (+ test hook)
//     CLI::App app{"...", "sam-foo"};
//     ...
//     if (auto status = sam::tools::ParseCommandLine(app, argc, argv)) return *status;
//     return sam::tools::RunTool("sam-foo", [&] { ...; return 0; });
//   }
//
// Exit statuses: 0 success, 1 runtime error (unreadable or invalid input, I/O),
// 2 usage error (bad flags or flag values, an output that may not be written).
// Every message starts with the program's name; its later lines are indented.
#ifndef SAM_TOOLS_CLI_H_
#define SAM_TOOLS_CLI_H_

#include <CLI/CLI.hpp>
#include <fstream>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "sam/error.h"

namespace sam::tools {

// A usage error: the program prints "<tool>: <message>" and exits 2. It is a
// sam::Error with code kUsage: RunTool treats every kUsage error alike.
struct UsageError : sam::Error {
  explicit UsageError(const std::string& message) : sam::Error(sam::ErrorCode::kUsage, message) {}
};

// Parses the command line, adding --version ("<tool> <project version>") to
// every program. Returns the status main should exit with when it
// must stop here (0 after --help or --version, 2 after printing "<tool>: <problem>" for a
// usage error), or nothing to go on.
std::optional<int> ParseCommandLine(CLI::App& app, int argc, char** argv);

// Runs a program's body and turns what it throws into a message on stderr,
// prefixed with `tool`, and an exit status: 2 for a usage error (code kUsage),
// 1 for anything else (a sam::Error also shows its code name).
int RunTool(const char* tool, const std::function<int()>& body);

// Installs handlers for SIGINT, SIGTERM and SIGHUP (unless ignored) that remove
// every registered temporary file (sam/format/temp_files.h) and then die of the
// signal. With the environment variable SAM_TEST_PAUSE_WRITING set (tests
// only), the program also stops at the first temporary file it creates (the
// Nth when the value is a number N), after printing "<tool>: test hook:
// paused writing <path>" on stderr, until a signal ends it.
void SetUpTool(const char* tool);

// Checks, before any work, that `path` may be written as an output (named
// `flag` in messages). Throws UsageError when an existing `path` is not a
// regular file (a device, FIFO, directory or socket) or is a symbolic link
// (never followed nor replaced: give the target itself), when it is the same
// file (device and inode) as one of `inputs`, or when its directory does not
// exist; throws sam::Error (kIo) when a file cannot be created in that
// directory (permissions, read-only file system).
void CheckOutputPath(const std::string& flag, const std::string& path,
                     const std::vector<std::string>& inputs = {});

// The files that `index_paths` (--index flags) name: each path and, for a
// shard set manifest (NAME.samset), its shards' files, so that an output can
// be checked against them all (CheckOutputPath's inputs). A manifest that
// cannot be read adds only itself (opening it reports why, later).
std::vector<std::string> IndexInputs(const std::vector<std::string>& index_paths);

// Prints a note on stderr when the index file `path` has no
// accelerator sections (a format 1.0 file): every process that drafts from it
// computes them at open; `sam-build --upgrade` adds them. `has_accelerators`
// is IndexView::hubs().present(). Callers call it once for each file they open.
void NoteWithoutAccelerators(const char* tool, const std::string& path, bool has_accelerators);

// An output file written atomically: the text goes to "<path>.tmp-<pid>"
// (registered for signal cleanup); Commit() flushes, fsyncs and renames it over
// `path`. Destroyed without Commit() (an exception), it removes the temporary
// file: `path` is never left empty or partial.
class AtomicOutputFile {
 public:
  explicit AtomicOutputFile(std::string path);
  ~AtomicOutputFile();
  AtomicOutputFile(const AtomicOutputFile&) = delete;
  AtomicOutputFile& operator=(const AtomicOutputFile&) = delete;

  std::ostream& stream() { return out_; }
  const std::string& temp_path() const { return temp_path_; }
  void Commit();

 private:
  std::string path_, temp_path_;
  std::ofstream out_;
  bool committed_ = false;
};

}  // namespace sam::tools

#endif  // SAM_TOOLS_CLI_H_
