// Reading index files: O(1) open with cheap structural checks, deep verify on
// request. The order of checks follows FORMAT.md.
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <boost/interprocess/file_mapping.hpp>
#include <boost/interprocess/mapped_region.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "layout.h"
#include "sam/format/huge_buffer.h"
#include "sam/format/index.h"
#include "sam/format/sha256.h"

namespace sam::format {
namespace {

namespace bip = boost::interprocess;
using namespace layout;

[[noreturn]] void Fail(ErrorCode code, const std::string& file, const std::string& what) {
  throw FormatError(code, file + ": " + what);
}

std::string Num(uint64_t v) { return std::to_string(v); }

struct ExpectedSection {
  const char* tag;
  bool required;
  bool hot;  // raw, page-aligned, size fixed by the header
};
// Table order == file order == FORMAT.md order.
constexpr ExpectedSection kSections[] = {
    {"TEXT", true, true}, {"LINK", true, true}, {"CLEN", true, true},
    {"CMEP", true, true}, {"CCNT", true, true}, {"NCNT", true, true},
    {"ROOT", true, true},
    {"EDGE", true, true}, {"EDEG", true, true}, {"ESEL", true, true},
    {"META", true, false}, {"VOCB", false, false}, {"TEST", false, false},
};

unsigned PopCount(uint64_t x) { return static_cast<unsigned>(__builtin_popcountll(x)); }

unsigned SelectInWord(uint64_t x, unsigned k) {
  for (unsigned i = 0; i < k; ++i) x &= x - 1;
  return static_cast<unsigned>(__builtin_ctzll(x));
}

}  // namespace

bool IndexHeader::has_tokenizer() const {
  for (uint8_t b : tokenizer_sha256)
    if (b != 0) return true;
  return false;
}

// ---- IndexView out-of-line parts -------------------------------------------

// POPCNT is not in the x86-64 baseline that Debian targets; without it
// popcount is a library call. Clone the select loop for CPUs that have it.
// (Not under sanitizers: their runtimes are not ready when ifunc resolvers run.)
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("popcnt", "default")))
#endif
uint64_t IndexView::Select1(uint64_t k) const {
  const uint64_t j = k >> select_rate_log2_;
  if (j >= select_samples_.size()) return degree_bit_count_;
  const uint64_t pos = select_samples_.Get(j);
  const uint64_t nwords = (degree_bit_count_ + 63) / 64;
  uint64_t w = pos >> 6;
  if (w >= nwords) return degree_bit_count_;
  uint64_t need = k - (j << select_rate_log2_);
  uint64_t word = degree_bits_[w] & (~uint64_t{0} << (pos & 63));
  for (;;) {
    const unsigned c = PopCount(word);
    if (need < c) return (w << 6) + SelectInWord(word, static_cast<unsigned>(need));
    need -= c;
    if (++w >= nwords) return degree_bit_count_;
    word = degree_bits_[w];
  }
}

uint64_t IndexView::PrevOne(uint64_t pos) const {
  uint64_t w = pos >> 6;
  if (w >= (degree_bit_count_ + 63) / 64) return 0;
  uint64_t word = degree_bits_[w] & ((uint64_t{1} << (pos & 63)) - 1);
  while (word == 0) {
    if (w == 0) return 0;
    word = degree_bits_[--w];
  }
  return (w << 6) + 63 - static_cast<unsigned>(__builtin_clzll(word));
}

uint64_t IndexView::Degree(uint64_t v) const {
  uint64_t d = 0;
  ForEachChild(v, [&](uint32_t, uint64_t) { ++d; });
  return d;
}

// ---- IndexFile ---------------------------------------------------------------

namespace {

// Maps every page of a read-only mapping (OpenOptions::populate).
void Populate(void* address, size_t size) {
  if (size == 0) return;
#if defined(__linux__) && defined(MADV_POPULATE_READ)
  if (madvise(address, size, MADV_POPULATE_READ) == 0) return;
#endif
  const volatile uint8_t* p = static_cast<const volatile uint8_t*>(address);
  uint8_t sink = 0;
  for (size_t i = 0; i < size; i += 4096) sink ^= p[i];
  (void)sink;
}

}  // namespace

struct IndexFile::Storage {
  std::unique_ptr<bip::file_mapping> mapping;
  std::unique_ptr<bip::mapped_region> region;
  HugeBuffer buffer;  // owned copy (Read), 2 MiB aligned
};

IndexFile::IndexFile() : storage_(std::make_unique<Storage>()) {}
IndexFile::IndexFile(IndexFile&&) noexcept = default;
IndexFile& IndexFile::operator=(IndexFile&&) noexcept = default;
IndexFile::~IndexFile() = default;

IndexFile IndexFile::Open(const std::string& path, const OpenOptions& options) {
  IndexFile f;
  f.path_ = path;
  try {
    f.storage_->mapping = std::make_unique<bip::file_mapping>(path.c_str(), bip::read_only);
    f.storage_->region =
        std::make_unique<bip::mapped_region>(*f.storage_->mapping, bip::read_only);
  } catch (const bip::interprocess_exception& e) {
    // An empty file cannot be mapped: report it as truncated, like any short file.
    std::ifstream probe(path, std::ios::binary | std::ios::ate);
    if (probe && probe.tellg() == 0)
      Fail(ErrorCode::kTruncated, path, "file is empty (0 bytes); not an index file");
    Fail(ErrorCode::kIo, path, std::string("cannot map file: ") + e.what());
  }
  f.data_ = static_cast<const uint8_t*>(f.storage_->region->get_address());
  f.size_ = f.storage_->region->get_size();
  if (options.prefetch || options.populate)
    f.storage_->region->advise(bip::mapped_region::advice_willneed);
  if (options.populate) Populate(f.storage_->region->get_address(), f.size_);
  f.Init(options);
  return f;
}

IndexFile IndexFile::Read(const std::string& path, const OpenOptions& options) {
  IndexFile f;
  f.path_ = path;
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    Fail(ErrorCode::kIo, path, "is a directory, not an index file");
  std::FILE* fp = std::fopen(path.c_str(), "rb");
  if (!fp) Fail(ErrorCode::kIo, path, std::string("cannot open: ") + std::strerror(errno));
  long size = -1;
  if (std::fseek(fp, 0, SEEK_END) == 0) size = std::ftell(fp);
  if (size < 0 || std::fseek(fp, 0, SEEK_SET) != 0) {
    std::fclose(fp);
    Fail(ErrorCode::kIo, path, "cannot determine the file size (not a regular file?)");
  }
  try {
    f.storage_->buffer = HugeBuffer(static_cast<size_t>(size));
  } catch (const std::bad_alloc&) {
    std::fclose(fp);
    Fail(ErrorCode::kIo, path, "out of memory reading " + std::to_string(size) + " bytes");
  }
  const size_t got =
      size == 0 ? 0 : std::fread(f.storage_->buffer.data(), 1, static_cast<size_t>(size), fp);
  std::fclose(fp);
  if (got != static_cast<size_t>(size)) Fail(ErrorCode::kIo, path, "short read");
  static const uint64_t kEmpty = 0;  // Init reports an empty file as truncated
  f.data_ = size == 0 ? reinterpret_cast<const uint8_t*>(&kEmpty)
                      : static_cast<const uint8_t*>(f.storage_->buffer.data());
  f.size_ = static_cast<uint64_t>(size);
  f.Init(options);
  return f;
}

IndexFile IndexFile::FromBuffer(const void* data, size_t size, const std::string& name,
                                const OpenOptions& options) {
  if (reinterpret_cast<uintptr_t>(data) % 8 != 0)
    Fail(ErrorCode::kInvalidArgument, name, "buffer must be 8-byte aligned");
  IndexFile f;
  f.path_ = name;
  f.data_ = static_cast<const uint8_t*>(data);
  f.size_ = size;
  f.Init(options);
  return f;
}

const uint8_t* IndexFile::SectionData(const SectionInfo& s) const { return data_ + s.offset; }

const SectionInfo* IndexFile::FindSection(const char* tag) const {
  for (const auto& s : sections_)
    if (s.tag == tag) return &s;
  return nullptr;
}

void IndexFile::Init(const OpenOptions& options) {
  const std::string& p = path_;
  const uint8_t* h = data_;
  const bool magic_ok = size_ >= 8 && (std::memcmp(h, kMagic, 8) == 0 ||
                                       std::memcmp(h, kMagicIncomplete, 8) == 0);
  if (size_ >= 4 && !magic_ok && !(h[0] == 0x89 && h[1] == 'S' && h[2] == 'A' && h[3] == 'M'))
    Fail(ErrorCode::kBadMagic, p, "not a SAM index file (bad magic number)");
  if (size_ < kHeaderSize)
    Fail(ErrorCode::kTruncated, p,
         "file has " + Num(size_) + " bytes, less than the " + Num(kHeaderSize) +
             "-byte header; truncated or not an index file");
  if (std::memcmp(h, kMagicIncomplete, 8) == 0)
    Fail(ErrorCode::kBadMagic, p, "incomplete index file (the writer did not finish)");
  if (std::memcmp(h, kMagic, 8) != 0) {
    // A text-mode copy turns "\r\n" into "\n" and shifts the magic.
    if (h[0] == 0x89 && h[1] == 'S' && h[2] == 'A' && h[3] == 'M')
      Fail(ErrorCode::kBadMagic, p,
           "magic number mangled (line endings converted by a text-mode transfer?)");
    Fail(ErrorCode::kBadMagic, p, "not a SAM index file (bad magic number)");
  }
  if (Read32(h + kOffByteOrder) != kByteOrderMark)
    Fail(ErrorCode::kBadByteOrder, p, "byte-order mark does not read as little-endian");
  IndexHeader& hd = header_;
  hd.major_version = Read16(h + kOffMajor);
  hd.minor_version = Read16(h + kOffMinor);
  if (hd.major_version != kMajorVersion)
    Fail(ErrorCode::kUnsupportedVersion, p,
         "format version " + Num(hd.major_version) + "." + Num(hd.minor_version) +
             " is not supported (this library reads " + Num(kMajorVersion) +
             ".x); rebuild the index with this version of sam-build");
  hd.required_features = Read64(h + kOffRequired);
  hd.optional_features = Read64(h + kOffOptional);
  if (hd.required_features & ~kKnownRequiredFeatures) {
    std::ostringstream os;
    os << "unknown required feature bits 0x" << std::hex
       << (hd.required_features & ~kKnownRequiredFeatures)
       << "; the file needs a newer reader";
    Fail(ErrorCode::kUnknownRequiredFeature, p, os.str());
  }
  if (!(hd.required_features & kFeatureAutomatonV1))
    Fail(ErrorCode::kBadHeader, p, "required feature 'automaton v1' is not set");
  hd.file_size = Read64(h + kOffFileSize);
  if (hd.file_size != size_) {
    if (size_ < hd.file_size)
      Fail(ErrorCode::kTruncated, p,
           "file is truncated: " + Num(size_) + " bytes, header says " + Num(hd.file_size));
    Fail(ErrorCode::kBadHeader, p,
         "file has " + Num(size_) + " bytes, header says " + Num(hd.file_size) +
             " (trailing garbage?)");
  }
  if (Read32(h + kOffHeaderSize) != kHeaderSize)
    Fail(ErrorCode::kBadHeader, p, "header size " + Num(Read32(h + kOffHeaderSize)) +
                                       ", expected " + Num(kHeaderSize));
  const uint32_t nsec = Read32(h + kOffSectionCount);
  const uint32_t table = Read32(h + kOffSectionTable);
  const uint32_t align = Read32(h + kOffAlignment);
  if (nsec == 0 || nsec > kMaxSections)
    Fail(ErrorCode::kBadSectionTable, p, "section count " + Num(nsec) + " outside [1, 64]");
  if (align != kAlignment)
    Fail(ErrorCode::kBadHeader, p, "alignment " + Num(align) + ", expected 4096");
  if (table != kHeaderSize || uint64_t{table} + uint64_t{nsec} * kSectionEntrySize > size_)
    Fail(ErrorCode::kBadSectionTable, p, "section table outside the file");
  // Header checksum: XXH3 of header (checksum field zeroed) + table.
  {
    uint8_t head[kHeaderSize];
    std::memcpy(head, h, kHeaderSize);
    Write64(head + kOffHeaderChecksum, 0);
    XXH3_state_t* st = XXH3_createState();
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, head, kHeaderSize);
    XXH3_64bits_update(st, h + table, uint64_t{nsec} * kSectionEntrySize);
    const uint64_t sum = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    if (sum != Read64(h + kOffHeaderChecksum))
      Fail(ErrorCode::kChecksumMismatch, p, "header checksum mismatch (corrupted header)");
  }
  hd.num_tokens = Read64(h + kOffNumTokens);
  hd.num_clones = Read64(h + kOffNumClones);
  hd.num_states = Read64(h + kOffNumStates);
  hd.num_edges = Read64(h + kOffNumEdges);
  hd.num_documents = Read64(h + kOffNumDocuments);
  hd.num_prefix_counts = Read64(h + kOffNumPrefixCounts);
  hd.vocab_size = Read32(h + kOffVocabSize);
  hd.separator_id = Read32(h + kOffSeparator);
  hd.bos_id = Read32(h + kOffBos);
  hd.eos_id = Read32(h + kOffEos);
  hd.token_width = h[kOffTokenWidth];
  hd.state_width = h[kOffStateWidth];
  hd.position_width = h[kOffPositionWidth];
  hd.clone_len_width = h[kOffCloneLenWidth];
  hd.count_width = h[kOffCountWidth];
  hd.select_width = h[kOffSelectWidth];
  hd.select_rate_log2 = Read16(h + kOffSelectRateLog2);
  std::memcpy(hd.tokenizer_sha256.data(), h + kOffTokenizerSha, 32);

  // Parameters: bounded before any use.
  const uint64_t n = hd.num_tokens, c = hd.num_clones, s = hd.num_states, e = hd.num_edges;
  const uint64_t kMaxCount = uint64_t{1} << 56;
  if (n == 0 || n >= kMaxCount || c >= kMaxCount || e >= kMaxCount || s != 1 + n + c)
    Fail(ErrorCode::kBadHeader, p,
         "inconsistent automaton sizes: tokens " + Num(n) + ", clones " + Num(c) +
             ", states " + Num(s) + " (states must be 1 + tokens + clones)");
  if (hd.vocab_size == 0 || hd.vocab_size >= (1u << 31) || hd.separator_id != hd.vocab_size)
    Fail(ErrorCode::kBadHeader, p,
         "vocab size " + Num(hd.vocab_size) + " / separator " + Num(hd.separator_id) +
             " invalid (separator must equal vocab size)");
  if (hd.num_prefix_counts > n)
    Fail(ErrorCode::kBadHeader, p, "prefix count entries " + Num(hd.num_prefix_counts) +
                                       " exceed the token count " + Num(n));
  if (hd.num_documents == 0 || hd.num_documents > n)
    Fail(ErrorCode::kBadHeader, p, "document count " + Num(hd.num_documents) + " invalid");
  auto check_width = [&](const char* name, unsigned w, uint64_t max_value) {
    if (w < BitsFor(max_value) || w > kMaxPackedWidth)
      Fail(ErrorCode::kBadHeader, p,
           std::string(name) + " width " + Num(w) + " bits cannot hold " + Num(max_value));
  };
  check_width("token", hd.token_width, hd.vocab_size);
  check_width("state", hd.state_width, s - 1);
  check_width("position", hd.position_width, n);
  check_width("clone length", hd.clone_len_width, 1);
  check_width("count", hd.count_width, 1);
  check_width("select", hd.select_width, s + e);
  if (hd.select_rate_log2 < 1 || hd.select_rate_log2 > 16)
    Fail(ErrorCode::kBadHeader, p, "select sampling rate 2^" + Num(hd.select_rate_log2) +
                                       " outside [2^1, 2^16]");

  // Section table.
  const uint64_t select_samples = (s + (uint64_t{1} << hd.select_rate_log2) - 1) >>
                                  hd.select_rate_log2;
  auto expected_raw = [&](const std::string& tag) -> uint64_t {
    if (tag == "TEXT") return PackedBytes(n, hd.token_width);
    if (tag == "LINK") return PackedBytes(s, hd.state_width);
    if (tag == "CLEN") return PackedBytes(c, hd.clone_len_width);
    if (tag == "CMEP") return PackedBytes(c, hd.position_width);
    if (tag == "CCNT") return PackedBytes(c, hd.count_width);
    if (tag == "NCNT") return PackedBytes(hd.num_prefix_counts, hd.count_width);
    if (tag == "ROOT") return PackedBytes(hd.vocab_size, hd.state_width);
    if (tag == "EDGE") return PackedBytes(e, hd.state_width);
    if (tag == "EDEG") return DegreeBytes(s, e);
    if (tag == "ESEL") return PackedBytes(select_samples, hd.select_width);
    return 0;
  };
  sections_.clear();
  uint64_t prev_end = table + uint64_t{nsec} * kSectionEntrySize;
  for (uint32_t i = 0; i < nsec; ++i) {
    const uint8_t* t = h + table + uint64_t{i} * kSectionEntrySize;
    SectionInfo si;
    si.tag = TagString(Read32(t + kSecTag));
    const uint32_t codec = Read32(t + kSecCodec);
    si.codec = codec == kCodecRaw ? "raw" : codec == kCodecZstd ? "zstd" : "?";
    si.required = (Read32(t + kSecFlags) & kSectionRequired) != 0;
    si.offset = Read64(t + kSecOffset);
    si.stored_bytes = Read64(t + kSecStored);
    si.raw_bytes = Read64(t + kSecRaw);
    si.checksum = Read64(t + kSecChecksum);
    const std::string where = "section " + si.tag;
    if (si.codec == "?")
      Fail(ErrorCode::kBadSectionTable, p, where + ": unknown codec " + Num(codec));
    if (si.offset > size_ || si.stored_bytes > size_ - si.offset)
      Fail(ErrorCode::kBadSectionTable, p,
           where + " [" + Num(si.offset) + ", +" + Num(si.stored_bytes) +
               ") lies outside the file of " + Num(size_) + " bytes");
    if (si.offset < prev_end)
      Fail(ErrorCode::kOverlappingSections, p,
           where + " at offset " + Num(si.offset) + " overlaps the previous section or the "
               "section table (ending at " + Num(prev_end) + ")");
    prev_end = si.offset + si.stored_bytes;
    for (const auto& other : sections_)
      if (other.tag == si.tag) Fail(ErrorCode::kBadSectionTable, p, where + " appears twice");
    const ExpectedSection* known = nullptr;
    for (const auto& k : kSections)
      if (si.tag == k.tag) known = &k;
    if (!known && si.required)
      Fail(ErrorCode::kUnknownRequiredFeature, p,
           where + " is required but unknown to this reader");
    if (known && known->hot) {
      if (si.codec != "raw" || si.offset % kAlignment != 0)
        Fail(ErrorCode::kBadSectionTable, p, where + " must be raw and page-aligned");
      const uint64_t want = expected_raw(si.tag);
      if (si.stored_bytes != want || si.raw_bytes != want)
        Fail(ErrorCode::kBadSectionTable, p,
             where + " has " + Num(si.stored_bytes) + " bytes, the header implies " +
                 Num(want));
    } else if (si.codec == "raw" && si.raw_bytes != si.stored_bytes) {
      Fail(ErrorCode::kBadSectionTable, p, where + ": raw section with differing sizes");
    } else if (si.raw_bytes > (uint64_t{1} << 34)) {
      Fail(ErrorCode::kBadSectionTable, p, where + ": absurd decompressed size");
    }
    sections_.push_back(si);
  }
  for (const auto& k : kSections)
    if (k.required && !FindSection(k.tag))
      Fail(ErrorCode::kBadSectionTable, p,
           std::string("required section ") + k.tag + " is missing");

  // Tokenizer / vocabulary compatibility.
  if (options.expected_tokenizer_sha256) {
    if (!hd.has_tokenizer())
      Fail(ErrorCode::kTokenizerMismatch, p,
           "index was built from pre-tokenized ids with no tokenizer fingerprint; "
           "cannot confirm it matches tokenizer " +
               DigestToHex(*options.expected_tokenizer_sha256));
    if (*options.expected_tokenizer_sha256 != hd.tokenizer_sha256)
      Fail(ErrorCode::kTokenizerMismatch, p,
           "index was built with tokenizer sha256 " + DigestToHex(hd.tokenizer_sha256) +
               " but the given tokenizer has sha256 " +
               DigestToHex(*options.expected_tokenizer_sha256) +
               "; rebuild the index with this tokenizer");
  }
  if (options.expected_vocab_size && *options.expected_vocab_size != hd.vocab_size)
    Fail(ErrorCode::kTokenizerMismatch, p,
         "index vocabulary has " + Num(hd.vocab_size) + " ids, the model/tokenizer has " +
             Num(*options.expected_vocab_size));

  // Views.
  IndexView& v = view_;
  auto packed = [&](const char* tag, uint64_t count, unsigned w) {
    return PackedView(SectionData(*FindSection(tag)), count, w);
  };
  v.n_ = n;
  v.s_ = s;
  v.vocab_size_ = hd.vocab_size;
  v.text_ = packed("TEXT", n, hd.token_width);
  v.link_ = packed("LINK", s, hd.state_width);
  v.clone_len_ = packed("CLEN", c, hd.clone_len_width);
  v.clone_min_endpos_ = packed("CMEP", c, hd.position_width);
  v.clone_count_ = packed("CCNT", c, hd.count_width);
  v.prefix_count_ = packed("NCNT", hd.num_prefix_counts, hd.count_width);
  v.root_ = packed("ROOT", hd.vocab_size, hd.state_width);
  v.edges_ = packed("EDGE", e, hd.state_width);
  v.degree_bits_ = reinterpret_cast<const uint64_t*>(SectionData(*FindSection("EDEG")));
  v.degree_bit_count_ = s + e;
  v.select_samples_ = packed("ESEL", select_samples, hd.select_width);
  v.select_rate_log2_ = hd.select_rate_log2;

  if (options.verify) Verify();
}

std::vector<uint8_t> IndexFile::SectionBytes(const SectionInfo& s) const {
  const uint8_t* d = SectionData(s);
  if (s.codec == "raw") return std::vector<uint8_t>(d, d + s.stored_bytes);
  // The raw size comes from the section table: before allocating it, check it
  // against the zstd frame header and zstd's largest possible ratio (a block
  // of at most 128 KiB takes at least 4 bytes).
  const unsigned long long framed = ZSTD_getFrameContentSize(d, s.stored_bytes);
  if (framed != s.raw_bytes || s.raw_bytes > s.stored_bytes * uint64_t{32768})
    Fail(ErrorCode::kCompression, path_,
         "section " + s.tag + ": decompressed size " + Num(s.raw_bytes) +
             " does not match its zstd frame (" +
             (framed == ZSTD_CONTENTSIZE_ERROR     ? std::string("not a zstd frame")
              : framed == ZSTD_CONTENTSIZE_UNKNOWN ? std::string("size not recorded")
                                                   : "content size " + Num(framed)) +
             ", " + Num(s.stored_bytes) + " bytes stored)");
  std::vector<uint8_t> out(s.raw_bytes);
  const size_t got = ZSTD_decompress(out.data(), out.size(), d, s.stored_bytes);
  if (ZSTD_isError(got) || got != s.raw_bytes)
    Fail(ErrorCode::kCompression, path_,
         "section " + s.tag + ": zstd decompression failed" +
             (ZSTD_isError(got) ? std::string(": ") + ZSTD_getErrorName(got) : std::string()));
  return out;
}

Metadata IndexFile::ReadMetadata() const {
  const auto bytes = SectionBytes(*FindSection("META"));
  Metadata m;
  m.json.assign(bytes.begin(), bytes.end());
  try {
    const auto j = nlohmann::json::parse(m.json);
    m.tool_version = j.value("tool_version", "");
    m.created_utc = j.value("created_utc", "");
    m.tokenizer = j.value("tokenizer", "");
    m.template_name = j.value("template", "");
    if (j.contains("build_options")) m.build_options_json = j["build_options"].dump();
    for (const auto& c : j.value("corpora", nlohmann::json::array())) {
      CorpusManifestEntry e;
      e.name = c.value("name", "");
      e.kind = c.value("kind", "");
      e.source = c.value("source", "");
      e.source_sha256 = c.value("source_sha256", "");
      e.records = c.value("records", uint64_t{0});
      e.documents = c.value("documents", uint64_t{0});
      e.skipped = c.value("skipped", uint64_t{0});
      e.tokens = c.value("tokens", uint64_t{0});
      m.corpora.push_back(std::move(e));
    }
  } catch (const nlohmann::json::exception& e) {
    Fail(ErrorCode::kCorruptStructure, path_, std::string("META section: ") + e.what());
  }
  return m;
}

std::vector<std::string> IndexFile::ReadVocabulary() const {
  std::vector<std::string> pieces;
  const SectionInfo* s = FindSection("VOCB");
  if (!s) return pieces;
  const auto bytes = SectionBytes(*s);
  size_t pos = 0;
  auto need = [&](size_t k) {
    if (bytes.size() - pos < k)
      Fail(ErrorCode::kCorruptStructure, path_, "VOCB section is truncated");
  };
  need(4);
  const uint32_t count = Read32(bytes.data());
  pos = 4;
  if (count != header_.vocab_size)
    Fail(ErrorCode::kCorruptStructure, path_,
         "VOCB has " + Num(count) + " pieces, vocab size is " + Num(header_.vocab_size));
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

void IndexFile::Verify() const {
  const std::string& p = path_;
  for (const auto& s : sections_) {
    const uint64_t sum = XXH3_64bits(SectionData(s), s.stored_bytes);
    if (sum != s.checksum)
      Fail(ErrorCode::kChecksumMismatch, p, "section " + s.tag + " checksum mismatch (" +
                                                Num(sum) + " != " + Num(s.checksum) +
                                                "): the file is corrupted");
  }
  const IndexView& v = view_;
  const uint64_t n = v.num_tokens(), s = v.num_states(), c = v.num_clones();
  const uint32_t sep = v.separator();
  auto corrupt = [&](const std::string& what) { Fail(ErrorCode::kCorruptStructure, p, what); };
  // Text: tokens in range, documents end with the separator.
  uint64_t docs = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t t = v.text().Get(i);
    if (t > sep) corrupt("TEXT: token " + Num(t) + " at position " + Num(i + 1) +
                         " exceeds the vocabulary");
    docs += (t == sep);
  }
  if (docs != header_.num_documents || v.text().Get(n - 1) != sep)
    corrupt("TEXT: " + Num(docs) + " document ends, header says " +
            Num(header_.num_documents));
  // Clones.
  for (uint64_t k = 0; k < c; ++k) {
    const uint64_t len = v.clone_lens().Get(k), mep = v.clone_min_endpos().Get(k);
    if (len == 0 || mep == 0 || mep > n || len > mep || v.clone_counts().Get(k) == 0)
      corrupt("clone " + Num(n + 1 + k) + ": impossible length/min_endpos/count");
  }
  for (uint64_t i = 0; i < v.prefix_counts().size(); ++i)
    if (v.prefix_counts().Get(i) < 2)
      corrupt("NCNT: state " + Num(i + 1) + " has a stored count below 2");
  // Links: strictly shorter.
  if (v.links().Get(0) != 0) corrupt("LINK: the root's link must be 0");
  for (uint64_t st = 1; st < s; ++st) {
    const uint64_t l = v.links().Get(st);
    if (l >= s || v.Len(l) >= v.Len(st))
      corrupt("LINK: state " + Num(st) + " links to " + Num(l) +
              ", which is not a shorter state");
  }
  // Root table.
  for (uint32_t t = 0; t < v.vocab_size(); ++t) {
    const uint64_t target = v.root_table().Get(t);
    if (target >= s) corrupt("ROOT: transition on " + Num(t) + " to state " + Num(target));
    if (target != 0 && v.LastToken(target) != t)
      corrupt("ROOT: transition on " + Num(t) + " leads to a state ending in another token");
  }
  // Degree bit vector: S ones and E zeros, trailing bits zero.
  {
    const uint64_t bits = s + v.num_edges();
    const uint64_t words = (bits + 63) / 64;
    const auto* dw = reinterpret_cast<const uint64_t*>(SectionData(*FindSection("EDEG")));
    uint64_t ones = 0;
    for (uint64_t w = 0; w < words; ++w) ones += PopCount(dw[w]);
    if (ones != s) corrupt("EDEG: " + Num(ones) + " state ends, expected " + Num(s));
    if (bits % 64 && (dw[words - 1] >> (bits % 64)) != 0)
      corrupt("EDEG: bits set past the end");
    if (dw[words] != 0) corrupt("EDEG: padding word is not zero");
  }
  // Edges: targets valid, labels strictly increasing, lengths consistent.
  for (uint64_t st = 0; st < s; ++st) {
    auto [lo, hi] = v.EdgeRange(st);
    if (lo > hi || hi > v.num_edges())
      corrupt("EDEG/ESEL: edge range of state " + Num(st) + " is invalid");
    if (st == 0 && lo != hi) corrupt("EDGE: the root has explicit edges");
    uint32_t prev = 0;
    const uint32_t implicit = (st != 0 && st < n) ? v.Token(st + 1) : kNoToken;
    for (uint64_t i = lo; i < hi; ++i) {
      const uint64_t t = v.edges().Get(i);
      if (t == 0 || t >= s) corrupt("EDGE: state " + Num(st) + " has an invalid target");
      const uint32_t label = v.LastToken(t);
      if (label >= sep || (i > lo && label <= prev) || label == implicit)
        corrupt("EDGE: labels of state " + Num(st) + " are not strictly increasing");
      if (v.Len(t) < v.Len(st) + 1)
        corrupt("EDGE: transition " + Num(st) + " -> " + Num(t) + " shortens the string");
      prev = label;
    }
  }
  // Self-test samples: walk each stored substring and compare.
  if (const SectionInfo* ts = FindSection("TEST")) {
    const auto bytes = SectionBytes(*ts);
    if (bytes.size() < 4) corrupt("TEST section is truncated");
    const uint32_t count = Read32(bytes.data());
    if (bytes.size() != 4 + uint64_t{count} * 32) corrupt("TEST section has a wrong size");
    for (uint32_t i = 0; i < count; ++i) {
      const uint8_t* r = bytes.data() + 4 + uint64_t{i} * 32;
      const uint64_t start = Read64(r), len = Read64(r + 8), cnt = Read64(r + 16),
                     mep = Read64(r + 24);
      if (start == 0 || len == 0 || start > n || len > n - start + 1)
        corrupt("TEST: sample " + Num(i) + " lies outside the text");
      uint64_t st = kRoot;
      for (uint64_t k = 0; k < len && st != kNoState; ++k) st = v.Next(st, v.Token(start + k));
      if (st == kNoState || v.Count(st) != cnt || v.MinEndpos(st) != mep || v.Len(st) < len ||
          v.Len(v.Link(st)) >= len)
        Fail(ErrorCode::kSelfTestFailed, p,
             "self-test sample " + Num(i) + " (positions " + Num(start) + ".." +
                 Num(start + len - 1) + ") gives another answer than at build time");
    }
  }
}

}  // namespace sam::format
