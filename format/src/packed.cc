#include "sam/format/packed.h"

#include <algorithm>
#include <string>

#include "sam/format/error.h"

namespace sam::format {

PackedWriter::PackedWriter(unsigned width, uint64_t expected_count) : width_(width) {
  if (width == 0 || width > kMaxPackedWidth)
    throw FormatError(ErrorCode::kInvalidArgument,
                      "packed array width " + std::to_string(width) + " outside [1, 57]");
  bytes_.assign(PackedBytes(expected_count, width), 0);
}

void PackedWriter::Push(uint64_t value) {
  const uint64_t need = ((size_ + 1) * width_ + 7) / 8 + 8;
  if (bytes_.size() < need) {
    // Grow geometrically; the zero fill is what Set's read-modify-write expects.
    bytes_.resize(std::max<uint64_t>(need, bytes_.size() * 3 / 2), 0);
  }
  ++size_;
  Set(size_ - 1, value);
}

void PackedWriter::Set(uint64_t i, uint64_t value) {
  const uint64_t bit = i * width_;
  uint8_t* p = bytes_.data() + (bit >> 3);
  const unsigned shift = bit & 7;
  const uint64_t mask = ((uint64_t{1} << width_) - 1) << shift;
  uint64_t word;
  std::memcpy(&word, p, 8);
  word = (word & ~mask) | ((value << shift) & mask);
  std::memcpy(p, &word, 8);
}

std::vector<uint8_t> PackedWriter::Finish() {
  bytes_.resize(PackedBytes(size_, width_), 0);
  std::vector<uint8_t> out;
  out.swap(bytes_);
  size_ = 0;
  bytes_.assign(8, 0);
  return out;
}

}  // namespace sam::format
