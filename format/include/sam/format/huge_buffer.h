// Memory for large, randomly accessed arrays (an index read into memory, the
// dynamic automaton's tables): one zero-initialised block, aligned to 2 MiB
// and, on Linux, advised for transparent huge pages when it spans at least
// one. Random lookups into tens of megabytes miss the TLB on almost every
// access with 4 KiB pages; with 2 MiB pages the whole index fits in the TLB's
// reach. The advice is a hint: where huge pages are unavailable (THP "never",
// other systems) the block is ordinary memory and everything still works.
//
//   sam::format::HugeBuffer buf(bytes);     // throws std::bad_alloc
//   auto* p = static_cast<uint32_t*>(buf.data());
#ifndef SAM_FORMAT_HUGE_BUFFER_H_
#define SAM_FORMAT_HUGE_BUFFER_H_

#include <cstddef>

namespace sam::format {

class HugeBuffer {
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
  // True when the kernel accepted the huge-page advice for this block.
  bool huge_pages_advised() const { return advised_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_ = 0;  // bytes mapped (size rounded up), 0 for malloc'd blocks
  bool advised_ = false;
};

}  // namespace sam::format

#endif  // SAM_FORMAT_HUGE_BUFFER_H_
