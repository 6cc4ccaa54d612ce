// A process-wide registry of temporary files being written (an index's
// "<path>.tmp-<pid>", a tool's output before its rename), so that a program's
// signal handler can remove them before the process dies.
//
//   RegisterTempFile(temp);     // right after creating it
//   ... write, rename ...
//   UnregisterTempFile(temp);   // after the rename, or after unlinking it
//
// The library never installs a signal handler: programs do (tools/cli.h), and
// call RemoveRegisteredTempFiles() from it. Up to kMaxTempFiles paths of at
// most kMaxTempPathBytes - 1 bytes are held; a path that does not fit is not
// registered (RegisterTempFile returns false) and is then only removed by the
// writer's own error handling.
#ifndef SAM_FORMAT_TEMP_FILES_H_
#define SAM_FORMAT_TEMP_FILES_H_

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>

namespace sam::format {

inline constexpr size_t kMaxTempFiles = 256;  // a shard set stages one file per shard
inline constexpr size_t kMaxTempPathBytes = 4096;

// Records `path` (copied). Thread-safe; false when the registry is full or the
// path too long.
bool RegisterTempFile(const std::string& path) noexcept;
// Forgets `path` (one registration of it). Thread-safe; a path never
// registered is ignored.
void UnregisterTempFile(const std::string& path) noexcept;
// Unlinks every registered path. Async-signal-safe: only atomics and unlink(2).
void RemoveRegisteredTempFiles() noexcept;

// Test hook: called (in the registering thread) after each successful
// registration, e.g. to pause a program at its write stage. nullptr: none.
using TempFileObserver = void (*)(const char* path);
void SetTempFileObserver(TempFileObserver observer) noexcept;

// fsyncs the folder holding `path` (after a rename into it, so that the new
// name survives a crash). Best effort: a folder that cannot be opened is
// skipped.
void FsyncParentDirectory(const std::string& path) noexcept;

// Writes the concatenation of `parts` to `path` atomically, the way every file
// of this library is written: "<path>.tmp-<pid>" (registered above), fsync,
// rename over `path`, fsync of its folder. On an error the temporary file is
// removed, `path` is untouched, and FormatError (kIo) names `path` and the
// problem. For small files (manifests, blob files); index files stream
// through IndexWriter.
void WriteFileAtomically(const std::string& path,
                         std::initializer_list<std::span<const uint8_t>> parts);

}  // namespace sam::format

#endif  // SAM_FORMAT_TEMP_FILES_H_
