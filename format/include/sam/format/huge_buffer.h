// Memory for large, randomly accessed arrays (an index read into memory, the
// dynamic automaton's tables, the StaticIndex's tables): one zero-initialised
// block, aligned to 2 MiB and, on Linux, advised for transparent huge pages
// when it spans at least half of one (rounded up to whole huge pages).
// Random lookups into megabytes of data miss the TLB on almost every access
// with 4 KiB pages; with 2 MiB pages the whole index fits in the TLB's reach.
// The advice is a hint: where huge pages are unavailable (THP "never", other
// systems) the block is ordinary memory and everything still works.
//
//   sam::format::HugeBuffer buf(bytes);     // throws std::bad_alloc
//   auto* p = static_cast<uint32_t*>(buf.data());
#ifndef SAM_FORMAT_HUGE_BUFFER_H_
#define SAM_FORMAT_HUGE_BUFFER_H_

#include <cstddef>
#include <cstdint>

#include "sam/export.h"

namespace sam::format {

class SAM_API HugeBuffer {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;

  HugeBuffer() = default;
  // Allocates `bytes` zeroed bytes (none for 0). Throws std::bad_alloc.
  explicit HugeBuffer(size_t bytes);
  HugeBuffer(HugeBuffer&& other) noexcept;
  HugeBuffer& operator=(HugeBuffer&& other) noexcept;
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;
  ~HugeBuffer();

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;  // bytes mapped (size rounded up), 0 for malloc'd blocks
};

// A fixed-size array of trivially copyable T in a HugeBuffer.
template <typename T>
class HugeArray {
 public:
  // Replaces the contents with n copies of value. Throws std::bad_alloc.
  void assign(size_t n, const T& value) {
    buffer_ = HugeBuffer(n * sizeof(T));
    data_ = static_cast<T*>(buffer_.data());
    size_ = n;
    for (size_t i = 0; i < n; ++i) data_[i] = value;
  }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }

 private:
  HugeBuffer buffer_;
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace sam::format

#endif  // SAM_FORMAT_HUGE_BUFFER_H_
