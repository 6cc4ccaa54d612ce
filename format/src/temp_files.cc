// Registry of in-progress temporary files (temp_files.h). Fixed slots, no
// allocation: a signal handler may read them at any time. A slot is free (0),
// being filled or emptied (1), or holds a path (2); the handler only reads
// slots in state 2.
#include "sam/format/temp_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "sam/format/error.h"
#include "sam/format/file_checks.h"

namespace sam::format {
namespace {

enum : int { kFree = 0, kBusy = 1, kHeld = 2 };

struct Slot {
  std::atomic<int> state{kFree};
  char path[kMaxTempPathBytes];
};

Slot g_slots[kMaxTempFiles];
std::atomic<TempFileObserver> g_observer{nullptr};

}  // namespace

bool RegisterTempFile(const std::string& path) noexcept {
  if (path.empty() || path.size() >= kMaxTempPathBytes) return false;
  for (Slot& slot : g_slots) {
    int expected = kFree;
    if (!slot.state.compare_exchange_strong(expected, kBusy)) continue;
    std::memcpy(slot.path, path.c_str(), path.size() + 1);
    slot.state.store(kHeld);
    if (const TempFileObserver observer = g_observer.load()) observer(slot.path);
    return true;
  }
  return false;
}

void UnregisterTempFile(const std::string& path) noexcept {
  for (Slot& slot : g_slots) {
    if (slot.state.load() != kHeld || path != slot.path) continue;
    int expected = kHeld;
    if (slot.state.compare_exchange_strong(expected, kBusy)) {
      slot.state.store(kFree);
      return;
    }
  }
}

void RemoveRegisteredTempFiles() noexcept {
  for (Slot& slot : g_slots)
    if (slot.state.load() == kHeld) ::unlink(slot.path);
}

void SetTempFileObserver(TempFileObserver observer) noexcept { g_observer.store(observer); }

void FsyncParentDirectory(const std::string& path) noexcept {
  try {
    std::filesystem::path dir = std::filesystem::path(path).parent_path();
    if (dir.empty()) dir = ".";
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  } catch (...) {  // a path object that cannot be made: nothing to sync
  }
}

void WriteFileAtomically(const std::string& path,
                         std::initializer_list<std::span<const uint8_t>> parts) {
  auto fail = [&](const std::string& what) {
    throw FormatError(ErrorCode::kIo, ErrorContext{.file = path}, what);
  };
  CheckOutputPath(path);  // never a device, FIFO, directory or symbolic link
  const std::string temp = path + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create " + temp + ": " + std::strerror(errno));
  RegisterTempFile(temp);
  // Removes the temporary file and throws; `fd` is closed first unless -1.
  auto abandon = [&](int open_fd, const std::string& what) {
    const std::string why = std::strerror(errno);
    if (open_fd >= 0) ::close(open_fd);
    ::unlink(temp.c_str());
    UnregisterTempFile(temp);
    fail(what + ": " + why);
  };
  for (std::span<const uint8_t> part : parts) {
    const uint8_t* data = part.data();
    size_t size = part.size();
    while (size > 0) {
      const ssize_t n = ::write(fd, data, size);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) abandon(fd, "write failed");
      data += n;
      size -= static_cast<size_t>(n);
    }
  }
  if (::fsync(fd) != 0) abandon(fd, "fsync failed");
  if (::close(fd) != 0) abandon(-1, "close failed");
  if (std::rename(temp.c_str(), path.c_str()) != 0) abandon(-1, "cannot rename " + temp);
  UnregisterTempFile(temp);
  FsyncParentDirectory(path);
}

}  // namespace sam::format
