// Blob files (FORMAT.md "Blob files"): header (40 bytes, little-endian)
//   0  magic[8]
//   8  byte-order mark u32 = 0x01020304
//  12  version u32
//  16  flags u64 (0; reserved)
//  24  payload bytes u64
//  32  XXH3-64 of the header (this field zeroed) and the payload
// then the payload.
#include "sam/format/blob_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <filesystem>

#include "sam/format/error.h"
#include "sam/format/file_checks.h"
#include "sam/format/temp_files.h"

namespace sam::format {
namespace {

constexpr uint32_t kByteOrderMark = 0x01020304;

[[noreturn]] void Fail(ErrorCode code, const std::string& file, const std::string& what) {
  throw FormatError(code, ErrorContext{.file = file}, what);
}

std::string Errno() { return std::strerror(errno); }

void Put(uint8_t* p, uint64_t v, size_t bytes) {
  for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t Get(const uint8_t* p, size_t bytes) {
  uint64_t v = 0;
  for (size_t i = 0; i < bytes; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

uint64_t Checksum(const uint8_t* header, std::span<const uint8_t> payload) {
  uint8_t head[kBlobHeaderSize];
  std::memcpy(head, header, kBlobHeaderSize);
  Put(head + 32, 0, 8);
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  XXH3_64bits_update(st, head, kBlobHeaderSize);
  XXH3_64bits_update(st, payload.data(), payload.size());
  const uint64_t sum = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return sum;
}

}  // namespace

void WriteBlobFile(const std::string& path, const BlobMagic& magic, uint32_t version,
                   std::span<const uint8_t> payload) {
  uint8_t head[kBlobHeaderSize] = {};
  std::memcpy(head, magic.data(), 8);
  Put(head + 8, kByteOrderMark, 4);
  Put(head + 12, version, 4);
  Put(head + 24, payload.size(), 8);
  Put(head + 32, Checksum(head, payload), 8);

  // A blob file replaces only a blob file of its kind (or an empty file): never
  // an index, a corpus or another program's file given by mistake.
  CheckOutputPath(path);
  const std::string existing = ReadFileHead(path, magic.size());
  if (!existing.empty() &&
      std::memcmp(existing.data(), magic.data(), std::min(existing.size(), magic.size())) != 0)
    throw FormatError(ErrorCode::kInvalidArgument, {.file = path},
                      "exists and is not a '" + std::string(magic.data(), magic.size()) +
                          "' file; refusing to replace it");
  WriteFileAtomically(path, {std::span<const uint8_t>(head, kBlobHeaderSize), payload});
}

std::vector<uint8_t> ReadBlobFile(const std::string& path, const BlobMagic& magic,
                                  uint32_t max_version, uint32_t* version) {
  const int fd = OpenRegularFile(path);  // never blocks: a FIFO or a directory is refused
  struct stat st {};
  ::fstat(fd, &st);
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (got != bytes.size()) Fail(ErrorCode::kIo, path, "read failed: " + Errno());
  if (bytes.size() < kBlobHeaderSize)
    Fail(ErrorCode::kTruncated, path,
         "file of " + std::to_string(bytes.size()) + " bytes is shorter than its 40-byte header");
  const uint8_t* head = bytes.data();
  if (std::memcmp(head, magic.data(), 8) != 0)
    Fail(ErrorCode::kBadMagic, path,
         "bad magic (expected '" + std::string(magic.data(), 8) + "')");
  if (Get(head + 8, 4) != kByteOrderMark)
    Fail(ErrorCode::kBadByteOrder, path, "byte-order mark does not read as little-endian");
  *version = static_cast<uint32_t>(Get(head + 12, 4));
  if (*version == 0 || *version > max_version)
    Fail(ErrorCode::kUnsupportedVersion, path,
         "version " + std::to_string(*version) + " (this library reads 1.." +
             std::to_string(max_version) + ")");
  const uint64_t declared = Get(head + 24, 8);
  if (declared != bytes.size() - kBlobHeaderSize)
    Fail(ErrorCode::kTruncated, path,
         "payload of " + std::to_string(bytes.size() - kBlobHeaderSize) + " bytes, header says " +
             std::to_string(declared));
  std::span<const uint8_t> payload(bytes.data() + kBlobHeaderSize, bytes.size() - kBlobHeaderSize);
  if (Checksum(head, payload) != Get(head + 32, 8))
    Fail(ErrorCode::kChecksumMismatch, path, "checksum mismatch: the file is corrupt");
  return std::vector<uint8_t>(payload.begin(), payload.end());
}

}  // namespace sam::format
