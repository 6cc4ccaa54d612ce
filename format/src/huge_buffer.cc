#include "sam/format/huge_buffer.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <utility>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace sam::format {

// Blocks of at least half a huge page are mapped anonymously (zeroed, aligned by
// over-mapping and trimming) and advised MADV_HUGEPAGE; smaller ones come
// from calloc. Pages are faulted in when first touched, as with malloc.
HugeBuffer::HugeBuffer(size_t bytes) : size_(bytes) {
  if (bytes == 0) return;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (bytes >= kHugePage / 2) {
    const size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
    const size_t span = rounded + kHugePage;
    void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) throw std::bad_alloc();
    const uintptr_t start = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = (start + kHugePage - 1) / kHugePage * kHugePage;
    if (aligned > start) munmap(raw, aligned - start);
    const size_t tail = start + span - (aligned + rounded);
    if (tail > 0) munmap(reinterpret_cast<void*>(aligned + rounded), tail);
    data_ = reinterpret_cast<void*>(aligned);
    mapped_ = rounded;
    madvise(data_, rounded, MADV_HUGEPAGE);  // a hint: refused, the block is ordinary memory
    return;
  }
#endif
  data_ = std::calloc(1, bytes);
  if (data_ == nullptr) throw std::bad_alloc();
}

HugeBuffer::HugeBuffer(HugeBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      mapped_(std::exchange(other.mapped_, 0)) {}

HugeBuffer& HugeBuffer::operator=(HugeBuffer&& other) noexcept {
  if (this != &other) {
    HugeBuffer old(std::move(*this));
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    mapped_ = std::exchange(other.mapped_, 0);
  }
  return *this;
}

HugeBuffer::~HugeBuffer() {
  if (data_ == nullptr) return;
#if defined(__linux__)
  if (mapped_ != 0) {
    munmap(data_, mapped_);
    return;
  }
#endif
  std::free(data_);
}

}  // namespace sam::format
