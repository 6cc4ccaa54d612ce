// Byte layout of format 1.x (see format/FORMAT.md): offsets, tags, feature
// bits, and little-endian field helpers shared by the reader and the writer.
#ifndef SAM_FORMAT_SRC_LAYOUT_H_
#define SAM_FORMAT_SRC_LAYOUT_H_

#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

static_assert(std::endian::native == std::endian::little,
              "the index format is read in place and needs a little-endian host");

namespace sam::format::layout {

inline constexpr uint8_t kMagic[8] = {0x89, 'S', 'A', 'M', '\r', '\n', 0x1a, '\n'};
inline constexpr uint8_t kMagicIncomplete[8] = {0x89, 'S', 'A', 'M', 'T', 'M', 'P', '\n'};
inline constexpr uint16_t kMajorVersion = 1;
inline constexpr uint16_t kMinorVersion = 1;
inline constexpr uint32_t kByteOrderMark = 0x01020304;
inline constexpr uint32_t kHeaderSize = 256;
inline constexpr uint32_t kSectionEntrySize = 64;
inline constexpr uint32_t kMaxSections = 64;
inline constexpr uint32_t kAlignment = 4096;

// Required feature bits: a reader refuses a file with a bit it does not know.
inline constexpr uint64_t kFeatureAutomatonV1 = 1ull << 0;
inline constexpr uint64_t kKnownRequiredFeatures = kFeatureAutomatonV1;
// Optional feature bits: unknown ones are ignored.
inline constexpr uint64_t kFeatureVocabulary = 1ull << 0;
inline constexpr uint64_t kFeatureSelfTest = 1ull << 1;
inline constexpr uint64_t kFeatureHubTables = 1ull << 2;
inline constexpr uint64_t kFeatureEdgeFilter = 1ull << 3;
inline constexpr uint64_t kFeatureChildRecords = 1ull << 4;
inline constexpr uint64_t kFeatureCloneLabels = 1ull << 5;

// Header field offsets.
enum HeaderOffset : uint32_t {
  kOffMagic = 0,
  kOffMajor = 8,
  kOffMinor = 10,
  kOffByteOrder = 12,
  kOffRequired = 16,
  kOffOptional = 24,
  kOffFileSize = 32,
  kOffHeaderSize = 40,
  kOffSectionCount = 44,
  kOffSectionTable = 48,
  kOffAlignment = 52,
  kOffHeaderChecksum = 56,
  kOffNumTokens = 64,
  kOffNumClones = 72,
  kOffNumStates = 80,
  kOffNumEdges = 88,
  kOffNumDocuments = 96,
  kOffVocabSize = 104,
  kOffSeparator = 108,
  kOffBos = 112,
  kOffEos = 116,
  kOffTokenWidth = 120,
  kOffStateWidth = 121,
  kOffPositionWidth = 122,
  kOffCloneLenWidth = 123,
  kOffCountWidth = 124,
  kOffSelectWidth = 125,
  kOffSelectRateLog2 = 126,
  kOffTokenizerSha = 128,
  kOffNumPrefixCounts = 160,
  kOffReservedEnd = 256,
};

// Section table entry field offsets.
enum SectionOffset : uint32_t {
  kSecTag = 0,
  kSecCodec = 4,
  kSecFlags = 8,
  kSecOffset = 16,
  kSecStored = 24,
  kSecRaw = 32,
  kSecChecksum = 40,
};
inline constexpr uint32_t kCodecRaw = 0;
inline constexpr uint32_t kCodecZstd = 1;
inline constexpr uint32_t kSectionRequired = 1;

// The sections of format v1, the one list that the writer and the reader both
// follow (FORMAT.md section 5): table order == file order.
struct SectionKind {
  const char* tag;
  bool required;              // the table entry's required flag; the reader refuses a file without it
  bool hot;                   // raw, page-aligned, size implied by the header
  uint64_t optional_feature;  // the optional feature bit that says the section is present (0: none)
  bool mapped = false;        // raw and page-aligned (read in place), its size given by its own head
  // Computed from the automaton by IndexWriter::AddAccelerators: what
  // AddAcceleratorsToFile (sam-build --upgrade) writes again.
  bool accelerator = false;
};
inline constexpr SectionKind kSectionKinds[] = {
    {"TEXT", true, true, 0},   {"LINK", true, true, 0},  {"CLEN", true, true, 0},
    {"CMEP", true, true, 0},   {"CCNT", true, true, 0},  {"NCNT", true, true, 0},
    {"ROOT", true, true, 0},   {"EDGE", true, true, 0},  {"EDEG", true, true, 0},
    {"ESEL", true, true, 0},   {"META", true, false, 0},
    {"VOCB", false, false, kFeatureVocabulary},
    {"TEST", false, false, kFeatureSelfTest},
    {"HUBS", false, false, kFeatureHubTables, true, true},
    {"FILT", false, false, kFeatureEdgeFilter, true, true},
    {"RECS", false, false, kFeatureChildRecords, true, true},
    {"CLAB", false, true, kFeatureCloneLabels, false, true},
};
// The known section with this tag, or nullptr.
inline const SectionKind* FindSectionKind(const std::string& tag) {
  for (const SectionKind& k : kSectionKinds)
    if (tag == k.tag) return &k;
  return nullptr;
}

inline uint16_t Read16(const uint8_t* p) { uint16_t v; std::memcpy(&v, p, 2); return v; }
inline uint32_t Read32(const uint8_t* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
inline uint64_t Read64(const uint8_t* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }
inline void Write16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
inline void Write32(uint8_t* p, uint32_t v) { std::memcpy(p, &v, 4); }
inline void Write64(uint8_t* p, uint64_t v) { std::memcpy(p, &v, 8); }

inline uint32_t TagValue(const char* tag) {
  return static_cast<uint32_t>(static_cast<uint8_t>(tag[0])) |
         static_cast<uint32_t>(static_cast<uint8_t>(tag[1])) << 8 |
         static_cast<uint32_t>(static_cast<uint8_t>(tag[2])) << 16 |
         static_cast<uint32_t>(static_cast<uint8_t>(tag[3])) << 24;
}
inline std::string TagString(uint32_t tag) {
  std::string s(4, ' ');
  for (int i = 0; i < 4; ++i) {
    char c = static_cast<char>((tag >> (8 * i)) & 0xff);
    s[i] = (c >= 0x20 && c < 0x7f) ? c : '?';
  }
  return s;
}

inline uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// The first byte at which `a` and `b` differ, or the shorter's size.
inline size_t FirstDifference(std::span<const uint8_t> a, std::span<const uint8_t> b) {
  const size_t n = a.size() < b.size() ? a.size() : b.size();
  size_t i = 0;
  while (i < n && a[i] == b[i]) ++i;
  return i;
}

// Bytes of the degree bit vector for S states and E edges (uint64 words plus
// one padding word).
inline uint64_t DegreeBytes(uint64_t states, uint64_t edges) {
  return (states + edges + 63) / 64 * 8 + 8;
}

}  // namespace sam::format::layout

#endif  // SAM_FORMAT_SRC_LAYOUT_H_
