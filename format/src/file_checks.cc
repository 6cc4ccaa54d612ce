#include "sam/format/file_checks.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "sam/format/error.h"

namespace sam::format {
namespace {

std::string Errno(int error) { return std::strerror(error); }

}  // namespace

void CheckOutputPath(const std::string& path, std::span<const std::string> inputs,
                     const OutputCheckOptions& options) {
  // Messages read "LABEL PATH is a directory" with a label, else "is a directory" under the
  // context's file (what() = "PATH: is a directory").
  const std::string what = options.label.empty() ? "" : options.label + " " + path + " ";
  const std::string at = options.label.empty() ? "" : options.label + " " + path + ": ";
  auto refuse = [&](const std::string& problem) {
    throw FormatError(ErrorCode::kInvalidArgument, {.file = path}, problem);
  };
  auto io = [&](const std::string& problem) {
    throw FormatError(ErrorCode::kIo, {.file = path}, problem);
  };
  if (path.empty()) refuse((options.label.empty() ? "" : options.label + ": ") + "empty output path");
  if (path.find('\0') != std::string::npos) refuse(at + "the path holds a NUL byte");
  struct stat out = {};
  if (::lstat(path.c_str(), &out) == 0) {
    if (S_ISLNK(out.st_mode))
      refuse(what + "is a symbolic link; refusing to replace it (give the target path itself, "
                    "or remove the link)");
    if (S_ISDIR(out.st_mode)) refuse(what + "is a directory");
    if (!S_ISREG(out.st_mode))
      refuse(what + "exists and is not a regular file (a device, FIFO or socket); refusing to "
                    "replace it");
    for (const std::string& input : inputs) {
      struct stat in = {};
      if (!input.empty() && ::stat(input.c_str(), &in) == 0 && in.st_dev == out.st_dev &&
          in.st_ino == out.st_ino)
        refuse(what + "is the input " + input + "; refusing to overwrite an input");
    }
  } else if (errno != ENOENT && errno != ENOTDIR) {  // ENOTDIR: reported below
    io(at + Errno(errno));
  }
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  if (dir.empty()) dir = ".";
  struct stat d = {};
  if (::stat(dir.c_str(), &d) != 0) {
    if (errno == ENOENT || errno == ENOTDIR)
      throw FormatError(options.missing_folder_code, {.file = path},
                        at + "directory " + dir.string() + " does not exist");
    io(at + "directory " + dir.string() + ": " + Errno(errno));
  }
  if (!S_ISDIR(d.st_mode))
    throw FormatError(options.missing_folder_code, {.file = path},
                      at + dir.string() + " is not a directory");
  if (!options.probe_directory) return;
  // Creating a file is the only honest test of writability (root, read-only mounts).
  const std::string probe = path + ".probe-" + std::to_string(::getpid());
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    if (errno == EEXIST) return;  // a stale probe: the directory is writable enough to judge later
    io(at + "cannot create files in " + dir.string() + ": " + Errno(errno));
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

int OpenRegularFile(const std::string& path, const std::string& what) {
  const std::string name = what.empty() ? "" : what + " ";
  auto fail = [&](const std::string& problem) {
    throw FormatError(ErrorCode::kIo, {.file = path}, name + problem);
  };
  if (path.find('\0') != std::string::npos) fail("path holds a NUL byte");
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) fail("does not exist");
    fail("cannot open: " + Errno(error));
  }
  struct stat st = {};
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    fail("cannot stat: " + Errno(error));
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    fail("is a directory, not a file");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("is not a regular file (a FIFO, device or socket); refusing to read it");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

std::string ReadFileHead(const std::string& path, size_t max_bytes) {
  int fd = -1;
  try {
    fd = OpenRegularFile(path);
  } catch (const sam::Error&) {
    return "";
  }
  std::string head(max_bytes, '\0');
  size_t got = 0;
  while (got < max_bytes) {
    const ssize_t n = ::read(fd, head.data() + got, max_bytes - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  head.resize(got);
  return head;
}

}  // namespace sam::format
