// The checks every file this project reads or writes goes through, in one
// place: the tools (-o, --save-cache, --report, ...), the library's writers
// (index files and shards, shard set manifests, response cache files) and its
// readers.
//
//   sam::format::CheckOutputPath("out.sam", {"corpus.jsonl"});   // before any work
//   const int fd = sam::format::OpenRegularFile("in.samc");      // never blocks
//
// Errors are sam::Errors naming the file: kInvalidArgument for a path that may
// not be written (tools turn it into a usage error), kIo for a file that
// cannot be opened or is not a regular file.
#ifndef SAM_FORMAT_FILE_CHECKS_H_
#define SAM_FORMAT_FILE_CHECKS_H_

#include <span>
#include <string>

#include "sam/error.h"
#include "sam/export.h"

namespace sam::format {

struct OutputCheckOptions {
  // Prefix of the messages (e.g. "-o"); the path follows it. Empty: the path alone.
  std::string label;
  // Also create and remove a probe file next to `path`, to learn before any
  // work whether files can be created there (permissions, read-only mounts).
  bool probe_directory = false;
  // The code for a folder that does not exist or is not a folder: kIo (a
  // library writer cannot create the file); the tools ask for kInvalidArgument
  // (a usage error, before any work).
  ErrorCode missing_folder_code = ErrorCode::kIo;
};

// Checks that `path` may be written (replaced by a rename) as an output.
// Refuses (kInvalidArgument) an empty path or one holding a NUL byte; an
// existing `path` that is a symbolic link (never followed nor replaced), a
// directory, or not a regular file (a device, FIFO or socket); and a `path`
// that is the same file (device and inode) as one of `inputs`. A folder that
// does not exist or is not a folder: options.missing_folder_code. kIo when the
// path cannot be examined, or (probe_directory) when no file can be created in
// its folder.
SAM_API void CheckOutputPath(const std::string& path, std::span<const std::string> inputs = {},
                             const OutputCheckOptions& options = {});

// Opens `path` for reading without ever blocking (O_NONBLOCK, so that a FIFO
// without a writer does not wait), then requires a regular file (fstat) and
// clears O_NONBLOCK. Returns the descriptor (close-on-exec; the caller closes
// it). Throws kIo naming the file: cannot open, "is a directory", or "is not a
// regular file (a FIFO, device or socket)". `what` (e.g. "index") is named in
// the message when not empty.
SAM_API int OpenRegularFile(const std::string& path, const std::string& what = "");

// The first up to `max_bytes` bytes of `path`, read through OpenRegularFile;
// empty when the file cannot be opened or is not a regular file. Never throws
// for an I/O problem (for sniffing a file's kind).
SAM_API std::string ReadFileHead(const std::string& path, size_t max_bytes);

}  // namespace sam::format

#endif  // SAM_FORMAT_FILE_CHECKS_H_
