// Bit-packed integer arrays: the storage of every hot index section.
//
// An array of n values of width w bits (1 <= w <= 57) occupies
// PackedBytes(n, w) = ceil(n * w / 8) + 8 bytes, little-endian bit order
// (value i occupies bits [i*w, i*w + w) of the byte string, bit 0 being the
// least significant bit of byte 0). The 8 trailing padding bytes let every
// read be one unaligned 64-bit load, so access is O(1) and branch-free.
#ifndef SAM_FORMAT_PACKED_H_
#define SAM_FORMAT_PACKED_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "sam/export.h"

namespace sam::format {

inline constexpr unsigned kMaxPackedWidth = 57;

// Number of bits needed to store values in [0, max_value]; at least 1.
inline unsigned BitsFor(uint64_t max_value) {
  unsigned bits = 1;
  while (bits < 64 && (max_value >> bits) != 0) ++bits;
  return bits;
}

inline uint64_t PackedBytes(uint64_t count, unsigned width) {
  return (count * width + 7) / 8 + 8;
}

// Read-only view of a packed array living in mapped or owned memory.
class SAM_API PackedView {
 public:
  PackedView() = default;
  PackedView(const uint8_t* data, uint64_t size, unsigned width)
      : data_(data), size_(size), width_(width),
        mask_(width >= 64 ? ~uint64_t{0} : (uint64_t{1} << width) - 1) {}

  // Value i; requires i < size().
  uint64_t Get(uint64_t i) const {
    const uint64_t bit = i * width_;
    uint64_t word;
    std::memcpy(&word, data_ + (bit >> 3), sizeof(word));  // little-endian host
    return (word >> (bit & 7)) & mask_;
  }
  uint64_t operator[](uint64_t i) const { return Get(i); }
  // Asks the CPU to start loading value i (a hint; never faults).
  void Prefetch(uint64_t i) const { __builtin_prefetch(data_ + (i * width_ >> 3)); }
  uint64_t size() const { return size_; }
  unsigned width() const { return width_; }
  const uint8_t* data() const { return data_; }

 private:
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  unsigned width_ = 1;
  uint64_t mask_ = 1;
};

// Appends values to a growing packed byte string.
class SAM_API PackedWriter {
 public:
  explicit PackedWriter(unsigned width, uint64_t expected_count = 0);
  void Push(uint64_t value);  // value must fit in width bits
  void Set(uint64_t i, uint64_t value);  // overwrite an already pushed value
  uint64_t size() const { return size_; }
  unsigned width() const { return width_; }
  // The finished byte string (with padding); the writer is left empty.
  std::vector<uint8_t> Finish();
  PackedView View() const { return PackedView(bytes_.data(), size_, width_); }

 private:
  std::vector<uint8_t> bytes_;
  uint64_t size_ = 0;
  unsigned width_;
};

}  // namespace sam::format

#endif  // SAM_FORMAT_PACKED_H_
