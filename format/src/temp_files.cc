// Registry of in-progress temporary files (temp_files.h). Fixed slots, no
// allocation: a signal handler may read them at any time. A slot is free (0),
// being filled or emptied (1), or holds a path (2); the handler only reads
// slots in state 2.
#include "sam/format/temp_files.h"

#include <unistd.h>

#include <atomic>
#include <cstring>

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

}  // namespace sam::format
