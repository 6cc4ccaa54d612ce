// Encoding of the index sections that are more than one packed array
// (FORMAT.md, "Sections"): the writer hands these functions its arrays and
// gets back the section bytes, little-endian whatever the host; the reader
// decodes them with the function beside each encoder. Listed in file order.
//
//   sam::format::DegreeVectorWriter degrees(/*select_rate_log2=*/6);
//   for (each state v in id order) {
//     for (each stored transition of v) degrees.AddEdge();
//     degrees.EndState();
//   }
//   sam::format::DegreeSections d = degrees.Finish();
//   writer.AddSection("EDEG", d.degree_bytes);
//   writer.AddSection("ESEL", d.select_bytes);
//   writer.AddSection("VOCB", sam::format::EncodeVocabulary(pieces), /*compress=*/true);
//   writer.AddSection("TEST", sam::format::EncodeSelfTest(samples), /*compress=*/true);
//
// TEXT, LINK, CLEN, CMEP, CCNT, NCNT, ROOT and EDGE are single packed arrays:
// PackedWriter (packed.h) writes them and IndexView (index.h) reads them in
// place, as it reads EDEG and ESEL. META is a JSON document (IndexFile::ReadMetadata).
//
// Errors: encoders throw FormatError(kInvalidArgument) for values the format
// cannot hold; decoders throw FormatError(kCorruptStructure) naming the file
// and the section. Thread safety: none needed (no shared state).
#ifndef SAM_FORMAT_SECTIONS_H_
#define SAM_FORMAT_SECTIONS_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace sam::format {

// ---- EDEG and ESEL -----------------------------------------------------------

// The two sections of a degree bit vector.
struct DegreeSections {
  std::vector<uint8_t> degree_bytes;  // EDEG: 64-bit little-endian words, then one zero word
  std::vector<uint8_t> select_bytes;  // ESEL: Packed(ceil(S / 2^r), select_width)
  uint64_t num_states = 0;            // S, the ones
  uint64_t num_edges = 0;             // E, the zeros
  unsigned select_width = 0;          // bits(S + E), for IndexHeader::select_width
};

// Builds EDEG (for each state in id order, one 0 per stored transition, then
// one 1) and ESEL (the position of every 2^select_rate_log2-th one) as the
// states are visited. O(1) amortized per call.
class DegreeVectorWriter {
 public:
  // select_rate_log2 in [1, 16]; expected_bits (S + E, if known) reserves memory.
  explicit DegreeVectorWriter(unsigned select_rate_log2, uint64_t expected_bits = 0);
  void AddEdge();   // one stored transition of the current state
  void EndState();  // the current state has no more transitions
  // The finished sections; the writer is left empty.
  DegreeSections Finish();

 private:
  void PushBit(bool one);

  unsigned select_rate_log2_;
  std::vector<uint64_t> words_;
  std::vector<uint64_t> samples_;  // position of every 2^r-th one
  uint64_t bits_ = 0, ones_ = 0;
};

// ---- VOCB ----------------------------------------------------------------------

// u32 count, then per id: u32 byte length, the piece's bytes (uncompressed;
// the writer compresses the section).
std::vector<uint8_t> EncodeVocabulary(const std::vector<std::string>& pieces);
// The pieces; the count must equal vocab_size. `file` names the index in errors.
std::vector<std::string> DecodeVocabulary(std::span<const uint8_t> bytes, uint32_t vocab_size,
                                          const std::string& file);

// ---- TEST ----------------------------------------------------------------------

// A self-test sample: the substring T[start .. start+length-1] occurs `count`
// times and first ends at `min_endpos` (1-based positions).
struct SelfTestSample {
  uint64_t start = 0;
  uint64_t length = 0;
  uint64_t count = 0;
  uint64_t min_endpos = 0;
  bool operator==(const SelfTestSample&) const = default;
};

// u32 count, then per sample four u64 (uncompressed).
std::vector<uint8_t> EncodeSelfTest(std::span<const SelfTestSample> samples);
std::vector<SelfTestSample> DecodeSelfTest(std::span<const uint8_t> bytes,
                                           const std::string& file);

}  // namespace sam::format

#endif  // SAM_FORMAT_SECTIONS_H_
