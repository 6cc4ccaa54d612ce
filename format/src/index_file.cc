// Reading index files: O(1) open with cheap structural checks, deep verify on
// request. The order of checks follows FORMAT.md.
#include <xxhash.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <nlohmann/json.hpp>
#include <sstream>

// POSIX: open without blocking, fstat, mmap.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "layout.h"
#include "structure_checks.h"
#include "sam/format/accelerators.h"
#include "sam/format/child_records.h"
#include "sam/format/huge_buffer.h"
#include "sam/format/index.h"
#include "sam/format/sections.h"
#include "sam/format/sha256.h"

namespace sam::format {
namespace {

using namespace layout;

[[noreturn]] void Fail(ErrorCode code, const std::string& file, const std::string& what) {
  throw FormatError(code, ErrorContext{.file = file}, what);
}

std::string Num(uint64_t v) { return std::to_string(v); }

unsigned PopCount(uint64_t x) { return static_cast<unsigned>(__builtin_popcountll(x)); }

unsigned SelectInWord(uint64_t x, unsigned k) {
  for (unsigned i = 0; i < k; ++i) x &= x - 1;
  return static_cast<unsigned>(__builtin_ctzll(x));
}

// Every section's stored bytes against its checksum.
void CheckSectionChecksums(const uint8_t* data, const std::vector<SectionInfo>& sections,
                           const std::string& path) {
  for (const auto& s : sections) {
    const uint64_t sum = XXH3_64bits(data + s.offset, s.stored_bytes);
    if (sum != s.checksum)
      Fail(ErrorCode::kChecksumMismatch, path,
           "section " + s.tag + " checksum mismatch (" + Num(sum) + " != " + Num(s.checksum) +
               "): the file is corrupted");
  }
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
  if (pos >= degree_bit_count_) return degree_bit_count_;
  uint64_t need = k - (j << select_rate_log2_);
  // The sample's one, then per later state at most vocab_size_ zeros and its
  // one: the k-th one lies at or before `last` (need < 2^16, so no overflow).
  const uint64_t last =
      std::min(degree_bit_count_ - 1, pos + need * (uint64_t{vocab_size_} + 1));
  const uint64_t last_word = last >> 6;
  uint64_t w = pos >> 6;
  uint64_t word = degree_bits_[w] & (~uint64_t{0} << (pos & 63));
  for (;;) {
    const unsigned c = PopCount(word);
    if (need < c) {
      const uint64_t found = (w << 6) + SelectInWord(word, static_cast<unsigned>(need));
      return found <= last ? found : degree_bit_count_;
    }
    need -= c;
    if (++w > last_word) return degree_bit_count_;
    word = degree_bits_[w];
  }
}

uint64_t IndexView::PrevOne(uint64_t pos) const {
  // A state has at most vocab_size_ zeros before its one.
  const uint64_t lowest = pos > vocab_size_ ? pos - vocab_size_ - 1 : 0;
  const uint64_t lowest_word = lowest >> 6;
  uint64_t w = pos >> 6;
  uint64_t word = degree_bits_[w] & ((uint64_t{1} << (pos & 63)) - 1);
  while (word == 0) {
    if (w <= lowest_word) return pos;
    word = degree_bits_[--w];
  }
  const uint64_t found = (w << 6) + 63 - static_cast<unsigned>(__builtin_clzll(word));
  return found >= lowest ? found : pos;
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

// Opens path for reading, refusing anything but a regular file by name. The
// open does not block (O_NONBLOCK: a FIFO would wait for a writer) and the
// type is checked on the opened descriptor, so nothing can be swapped in
// between. Returns the descriptor; *size is the file's size.
int OpenRegularFile(const std::string& path, uint64_t* size) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) Fail(ErrorCode::kIo, path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    Fail(ErrorCode::kIo, path, std::string("cannot stat: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    const char* what = S_ISDIR(st.st_mode)    ? "a directory"
                       : S_ISFIFO(st.st_mode) ? "a FIFO (named pipe)"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    Fail(ErrorCode::kIo, path,
         std::string("is ") + what + ", not an index file (an index must be a regular file)");
  }
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

// Init reads an empty file from here and reports it as truncated.
const uint64_t kEmptyFile = 0;

// The magic number, with the likely mistakes named: a shard set manifest, a
// file the writer did not finish, a text-mode copy.
void CheckMagic(const uint8_t* h, uint64_t size, const std::string& p) {
  const bool magic_ok = size >= 8 && (std::memcmp(h, kMagic, 8) == 0 ||
                                       std::memcmp(h, kMagicIncomplete, 8) == 0);
  if (size >= 4 && !magic_ok && !(h[0] == 0x89 && h[1] == 'S' && h[2] == 'A' && h[3] == 'M')) {
    // A shard set manifest: '{' and its magic within the first 64 bytes.
    const std::string_view head(reinterpret_cast<const char*>(h), std::min<uint64_t>(size, 64));
    if (head.front() == '{' && head.find("sam-shard-set") != std::string_view::npos)
      Fail(ErrorCode::kBadMagic, p,
           "a shard set manifest, not an index file: open it as a shard set (ShardSet.open, "
           "sam_shard_set_open, ShardSet::Open)");
    Fail(ErrorCode::kBadMagic, p, "not a SAM index file (bad magic number)");
  }
  if (size < kHeaderSize)
    Fail(ErrorCode::kTruncated, p,
         "file has " + Num(size) + " bytes, less than the " + Num(kHeaderSize) +
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
}

// The fixed header: magic, byte order, version, feature bits, sizes, the
// section table's place (checked against the file's size) and the header
// checksum; then its fields, unchecked (CheckParameters).
void ReadHeader(const uint8_t* h, uint64_t size, const std::string& p, IndexHeader* header,
                uint32_t* section_count) {
  IndexHeader& hd = *header;
  if (Read32(h + kOffByteOrder) != kByteOrderMark)
    Fail(ErrorCode::kBadByteOrder, p, "byte-order mark does not read as little-endian");
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
  if (hd.file_size != size) {
    if (size < hd.file_size)
      Fail(ErrorCode::kTruncated, p,
           "file is truncated: " + Num(size) + " bytes, header says " + Num(hd.file_size));
    Fail(ErrorCode::kBadHeader, p,
         "file has " + Num(size) + " bytes, header says " + Num(hd.file_size) +
             " (trailing garbage?)");
  }
  if (Read32(h + kOffHeaderSize) != kHeaderSize)
    Fail(ErrorCode::kBadHeader, p, "header size " + Num(Read32(h + kOffHeaderSize)) +
                                       ", expected " + Num(kHeaderSize));
  const uint32_t nsec = Read32(h + kOffSectionCount);
  const uint32_t table = Read32(h + kOffSectionTable);
  *section_count = nsec;
  const uint32_t align = Read32(h + kOffAlignment);
  if (nsec == 0 || nsec > kMaxSections)
    Fail(ErrorCode::kBadSectionTable, p, "section count " + Num(nsec) + " outside [1, 64]");
  if (align != kAlignment)
    Fail(ErrorCode::kBadHeader, p, "alignment " + Num(align) + ", expected 4096");
  if (table != kHeaderSize || uint64_t{table} + uint64_t{nsec} * kSectionEntrySize > size)
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
}

// The header's sizes, ids and widths, bounded before any use.
void CheckParameters(const IndexHeader& hd, const std::string& p) {
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
  auto check_token_id = [&](const char* field, uint32_t id) {
    if (id != kNoToken && id >= hd.vocab_size)
      Fail(ErrorCode::kBadHeader, p,
           std::string(field) + " " + Num(id) + " is not below the vocab size " +
               Num(hd.vocab_size) + " (and is not 0xFFFFFFFF, none)");
  };
  check_token_id("BOS id", hd.bos_id);
  check_token_id("EOS id", hd.eos_id);
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
}

// The section table: each entry inside the file, in order without
// overlap, unique; hot sections raw, page-aligned and of the size the header
// implies; required ones present; optional feature bits as the sections say.
std::vector<SectionInfo> ReadSectionTable(const uint8_t* h, uint64_t size, const IndexHeader& hd,
                                          uint32_t nsec, const std::string& p) {
  const uint64_t n = hd.num_tokens, c = hd.num_clones, s = hd.num_states, e = hd.num_edges;
  const uint32_t table = kHeaderSize;  // ReadHeader checked it
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
    if (tag == "CLAB") return PackedBytes(c, hd.token_width);
    return 0;
  };
  std::vector<SectionInfo> sections;
  auto find = [&](const char* tag) {
    for (const auto& si : sections)
      if (si.tag == tag) return true;
    return false;
  };
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
    if (si.offset > size || si.stored_bytes > size - si.offset)
      Fail(ErrorCode::kBadSectionTable, p,
           where + " [" + Num(si.offset) + ", +" + Num(si.stored_bytes) +
               ") lies outside the file of " + Num(size) + " bytes");
    if (si.offset < prev_end)
      Fail(ErrorCode::kOverlappingSections, p,
           where + " at offset " + Num(si.offset) + " overlaps the previous section or the "
               "section table (ending at " + Num(prev_end) + ")");
    prev_end = si.offset + si.stored_bytes;
    for (const auto& other : sections)
      if (other.tag == si.tag) Fail(ErrorCode::kBadSectionTable, p, where + " appears twice");
    const SectionKind* known = FindSectionKind(si.tag);
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
    } else if (known && known->mapped) {
      if (si.codec != "raw" || si.offset % kAlignment != 0 || si.raw_bytes != si.stored_bytes)
        Fail(ErrorCode::kBadSectionTable, p, where + " must be raw and page-aligned");
    } else if (si.codec == "raw" && si.raw_bytes != si.stored_bytes) {
      Fail(ErrorCode::kBadSectionTable, p, where + ": raw section with differing sizes");
    } else if (si.raw_bytes > (uint64_t{1} << 34)) {
      Fail(ErrorCode::kBadSectionTable, p, where + ": absurd decompressed size");
    }
    sections.push_back(si);
  }
  for (const SectionKind& k : kSectionKinds) {
    const bool present = find(k.tag);
    if (k.required && !present)
      Fail(ErrorCode::kBadSectionTable, p,
           std::string("required section ") + k.tag + " is missing");
    // The optional feature bits say which optional sections exist.
    if (k.optional_feature != 0 && ((hd.optional_features & k.optional_feature) != 0) != present) {
      std::ostringstream os;
      os << "optional features 0x" << std::hex << hd.optional_features << " say section "
         << k.tag << (present ? " is absent, but the file has it"
                              : " is present, but the file has none");
      Fail(ErrorCode::kBadSectionTable, p, os.str());
    }
  }

  return sections;
}

// The tokenizer and vocabulary the caller expects, if any.
void CheckTokenizer(const IndexHeader& hd, const OpenOptions& options, const std::string& p) {
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
}

}  // namespace

// The mapping (or buffer) and the view over it, in one heap block shared by
// the IndexFile and every shared_view(): the view's address never changes
// when the IndexFile moves, and the memory lives while any owner does.
struct IndexFile::Storage {
  void* mapping = nullptr;  // the mapped file (Open)
  size_t mapping_size = 0;
  HugeBuffer buffer;        // owned copy (Read), 2 MiB aligned
  Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  IndexView view;
  ~Storage() {
    if (mapping) ::munmap(mapping, mapping_size);
  }
};

IndexFile::IndexFile()
    : storage_(std::make_shared<Storage>()), view_(storage_, &storage_->view) {}
IndexFile::IndexFile(IndexFile&&) noexcept = default;
IndexFile& IndexFile::operator=(IndexFile&&) noexcept = default;
IndexFile::~IndexFile() = default;

const IndexView& IndexFile::view() const {
  static const IndexView kEmpty;  // a moved-from file: no states but the root
  return view_ ? *view_ : kEmpty;
}

IndexFile IndexFile::Open(const std::string& path, const OpenOptions& options) {
  IndexFile f;
  f.path_ = path;
  uint64_t size = 0;
  const int fd = OpenRegularFile(path, &size);
  if (size > 0) {
    void* address = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    const int err = errno;
    ::close(fd);  // the mapping keeps the file
    if (address == MAP_FAILED)
      Fail(ErrorCode::kIo, path, std::string("cannot map file: ") + std::strerror(err));
    f.storage_->mapping = address;
    f.storage_->mapping_size = size;
    if (options.prefetch || options.populate) ::madvise(address, size, MADV_WILLNEED);
    if (options.populate) Populate(address, size);
    f.data_ = static_cast<const uint8_t*>(address);
  } else {
    ::close(fd);
    f.data_ = reinterpret_cast<const uint8_t*>(&kEmptyFile);
  }
  f.size_ = size;
  f.Init(options);
  return f;
}

IndexFile IndexFile::Read(const std::string& path, const OpenOptions& options) {
  IndexFile f;
  f.path_ = path;
  uint64_t size = 0;
  const int fd = OpenRegularFile(path, &size);
  try {
    f.storage_->buffer = HugeBuffer(static_cast<size_t>(size));
  } catch (const std::bad_alloc&) {
    ::close(fd);
    Fail(ErrorCode::kIo, path, "out of memory reading " + std::to_string(size) + " bytes");
  }
  auto* out = static_cast<uint8_t*>(f.storage_->buffer.data());
  uint64_t got = 0;
  while (got < size) {
    const ssize_t r = ::read(fd, out + got, static_cast<size_t>(size - got));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      const int err = errno;
      ::close(fd);
      Fail(ErrorCode::kIo, path,
           r == 0 ? "short read (the file shrank while being read)"
                  : std::string("read failed: ") + std::strerror(err));
    }
    got += static_cast<uint64_t>(r);
  }
  ::close(fd);
  f.data_ = size == 0 ? reinterpret_cast<const uint8_t*>(&kEmptyFile) : out;
  f.size_ = size;
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
  CheckMagic(data_, size_, p);
  uint32_t section_count = 0;
  ReadHeader(data_, size_, p, &header_, &section_count);
  CheckParameters(header_, p);
  sections_ = ReadSectionTable(data_, size_, header_, section_count, p);
  CheckTokenizer(header_, options, p);

  const IndexHeader& hd = header_;
  const uint64_t n = hd.num_tokens, c = hd.num_clones, s = hd.num_states, e = hd.num_edges;
  const uint64_t select_samples = (s + (uint64_t{1} << hd.select_rate_log2) - 1) >>
                                  hd.select_rate_log2;
  IndexView& v = storage_->view;
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
  if (FindSection("CLAB")) v.clone_labels_ = packed("CLAB", c, hd.token_width);
  // The accelerator sections (FORMAT.md section 12): their heads, in O(1).
  auto bytes_of = [&](const char* tag) {
    const SectionInfo* si = FindSection(tag);
    return si ? std::span<const uint8_t>(SectionData(*si), si->stored_bytes)
              : std::span<const uint8_t>();
  };
  try {
    if (FindSection("HUBS")) v.hubs_ = ParseHubTables(bytes_of("HUBS"), v, p);
    if (FindSection("FILT")) v.edge_filter_ = ParseEdgeFilter(bytes_of("FILT"), v, p);
    if (FindSection("RECS")) {
      v.child_records_ = ParseChildRecords(bytes_of("RECS"), v, p);
      if (!v.hubs_.present())
        throw FormatError(ErrorCode::kCorruptStructure, ErrorContext{.file = p},
                          "RECS: child records without hub tables (HUBS)");
    }
  } catch (const FormatError&) {
    CheckSectionChecksums(data_, sections_, p);  // an accident is reported as such
    throw;
  }

  if (options.verify) {
    Verify();
  } else {
    try {
      internal::CheckOpenInvariants(view(), header_, p);
    } catch (const FormatError&) {
      // Damage by accident is reported as such (reading every section only
      // on this path; opening stays O(1)).
      CheckSectionChecksums(data_, sections_, p);
      throw;
    }
  }
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
    m.tokenizer_kind = j.value("tokenizer_kind", "");
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
  const SectionInfo* s = FindSection("VOCB");
  if (!s) return {};
  return DecodeVocabulary(SectionBytes(*s), header_.vocab_size, path_);
}

void IndexFile::Verify() const {
  const std::string& p = path_;
  CheckSectionChecksums(data_, sections_, p);
  internal::VerifyStructure(view(), header_, p);
  // Compressed sections decode and parse.
  ReadMetadata();
  ReadVocabulary();
  const IndexView& v = view();
  auto bytes_of = [&](const char* tag) {
    const SectionInfo* si = FindSection(tag);
    return si ? std::span<const uint8_t>(SectionData(*si), si->stored_bytes)
              : std::span<const uint8_t>();
  };
  VerifyAccelerators(v, bytes_of("HUBS"), bytes_of("FILT"), p);
  VerifyChildRecords(v, bytes_of("HUBS"), bytes_of("RECS"), p);
  const uint64_t n = v.num_tokens();
  auto corrupt = [&](const std::string& what) { Fail(ErrorCode::kCorruptStructure, p, what); };
  // Self-test samples: walk each stored substring and compare.
  if (const SectionInfo* ts = FindSection("TEST")) {
    const std::vector<SelfTestSample> samples = DecodeSelfTest(SectionBytes(*ts), p);
    for (uint64_t i = 0; i < samples.size(); ++i) {
      const uint64_t start = samples[i].start, len = samples[i].length,
                     cnt = samples[i].count, mep = samples[i].min_endpos;
      if (start == 0 || len == 0 || start > n || len > n - start + 1)
        corrupt("TEST: sample " + Num(i) + " lies outside the text");
      uint64_t st = kRoot;
      for (uint64_t k = 0; k < len && st != kNoState; ++k) st = v.Next(st, v.Token(start + k));
      if (st == kNoState || v.Count(st) != cnt || v.MinEndpos(st) != mep || v.Len(st) < len ||
          v.Len(v.Link(st)) >= len)
        Fail(ErrorCode::kSelfTestFailed, p,
             "TEST: self-test sample " + Num(i) + " (positions " + Num(start) + ".." +
                 Num(start + len - 1) + ") gives another answer than at build time");
    }
  }
}

}  // namespace sam::format
