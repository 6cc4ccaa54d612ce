// Section encoders and decoders, in file order (FORMAT.md, "Sections"). Every
// multi-byte value goes through the little-endian helpers of layout.h.
#include "sam/format/sections.h"

#include <limits>

#include "layout.h"
#include "sam/format/error.h"
#include "sam/format/packed.h"

namespace sam::format {

using namespace layout;

// ---- EDEG and ESEL -----------------------------------------------------------

DegreeVectorWriter::DegreeVectorWriter(unsigned select_rate_log2, uint64_t expected_bits)
    : select_rate_log2_(select_rate_log2) {
  if (select_rate_log2 < 1 || select_rate_log2 > 16)
    throw FormatError(ErrorCode::kInvalidArgument,
                      "select sampling rate 2^" + std::to_string(select_rate_log2) +
                          " outside [2^1, 2^16]");
  words_.reserve(expected_bits / 64 + 2);
}

void DegreeVectorWriter::PushBit(bool one) {
  if ((bits_ >> 6) >= words_.size()) words_.push_back(0);
  if (one) words_[bits_ >> 6] |= uint64_t{1} << (bits_ & 63);
  ++bits_;
}

void DegreeVectorWriter::AddEdge() { PushBit(false); }

void DegreeVectorWriter::EndState() {
  if ((ones_ & ((uint64_t{1} << select_rate_log2_) - 1)) == 0) samples_.push_back(bits_);
  PushBit(true);
  ++ones_;
}

DegreeSections DegreeVectorWriter::Finish() {
  DegreeSections d;
  d.num_states = ones_;
  d.num_edges = bits_ - ones_;
  words_.resize((bits_ + 63) / 64 + 1, 0);  // the trailing zero word
  d.degree_bytes.resize(words_.size() * 8);
  for (size_t w = 0; w < words_.size(); ++w) Write64(d.degree_bytes.data() + w * 8, words_[w]);
  d.select_width = BitsFor(bits_);
  PackedWriter select(d.select_width, samples_.size());
  for (uint64_t pos : samples_) select.Push(pos);
  d.select_bytes = select.Finish();
  std::vector<uint64_t>().swap(words_);
  std::vector<uint64_t>().swap(samples_);
  bits_ = ones_ = 0;
  return d;
}

// ---- VOCB ----------------------------------------------------------------------

std::vector<uint8_t> EncodeVocabulary(const std::vector<std::string>& pieces) {
  constexpr uint64_t kMax = std::numeric_limits<uint32_t>::max();
  if (pieces.size() > kMax)
    throw FormatError(ErrorCode::kInvalidArgument,
                      "VOCB: " + std::to_string(pieces.size()) + " pieces do not fit a u32 count");
  uint64_t total = 4;
  for (const auto& piece : pieces) total += 4 + piece.size();
  std::vector<uint8_t> bytes(total);
  uint8_t* p = bytes.data();
  Write32(p, static_cast<uint32_t>(pieces.size()));
  p += 4;
  for (size_t i = 0; i < pieces.size(); ++i) {
    if (pieces[i].size() > kMax)
      throw FormatError(ErrorCode::kInvalidArgument,
                        "VOCB: piece " + std::to_string(i) + " is longer than 2^32 bytes");
    Write32(p, static_cast<uint32_t>(pieces[i].size()));
    p += 4;
    if (!pieces[i].empty()) std::memcpy(p, pieces[i].data(), pieces[i].size());
    p += pieces[i].size();
  }
  return bytes;
}

std::vector<std::string> DecodeVocabulary(std::span<const uint8_t> bytes, uint32_t vocab_size,
                                          const std::string& file) {
  auto corrupt = [&](const std::string& what) {
    throw FormatError(ErrorCode::kCorruptStructure, file + ": " + what);
  };
  size_t pos = 0;
  auto need = [&](size_t k) {
    if (bytes.size() - pos < k) corrupt("VOCB section is truncated");
  };
  need(4);
  const uint32_t count = Read32(bytes.data());
  pos = 4;
  if (count != vocab_size)
    corrupt("VOCB has " + std::to_string(count) + " pieces, vocab size is " +
            std::to_string(vocab_size));
  std::vector<std::string> pieces;
  pieces.reserve(count);
  for (uint32_t i = 0; i < count; ++i) {
    need(4);
    const uint32_t len = Read32(bytes.data() + pos);
    pos += 4;
    need(len);
    pieces.emplace_back(reinterpret_cast<const char*>(bytes.data()) + pos, len);
    pos += len;
  }
  return pieces;
}

// ---- TEST ----------------------------------------------------------------------

namespace {
constexpr uint64_t kSampleBytes = 32;
}  // namespace

std::vector<uint8_t> EncodeSelfTest(std::span<const SelfTestSample> samples) {
  if (samples.size() > std::numeric_limits<uint32_t>::max())
    throw FormatError(ErrorCode::kInvalidArgument,
                      "TEST: " + std::to_string(samples.size()) + " samples do not fit a u32 count");
  std::vector<uint8_t> bytes(4 + samples.size() * kSampleBytes);
  Write32(bytes.data(), static_cast<uint32_t>(samples.size()));
  uint8_t* p = bytes.data() + 4;
  for (const SelfTestSample& s : samples) {
    Write64(p, s.start);
    Write64(p + 8, s.length);
    Write64(p + 16, s.count);
    Write64(p + 24, s.min_endpos);
    p += kSampleBytes;
  }
  return bytes;
}

std::vector<SelfTestSample> DecodeSelfTest(std::span<const uint8_t> bytes,
                                           const std::string& file) {
  auto corrupt = [&](const std::string& what) {
    throw FormatError(ErrorCode::kCorruptStructure, file + ": " + what);
  };
  if (bytes.size() < 4) corrupt("TEST section is truncated");
  const uint32_t count = Read32(bytes.data());
  if (bytes.size() != 4 + uint64_t{count} * kSampleBytes) corrupt("TEST section has a wrong size");
  std::vector<SelfTestSample> samples(count);
  const uint8_t* p = bytes.data() + 4;
  for (SelfTestSample& s : samples) {
    s.start = Read64(p);
    s.length = Read64(p + 8);
    s.count = Read64(p + 16);
    s.min_endpos = Read64(p + 24);
    p += kSampleBytes;
  }
  return samples;
}

}  // namespace sam::format
