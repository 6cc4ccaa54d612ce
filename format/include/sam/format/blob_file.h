// Small checksummed files other than indexes (the response cache,
// FORMAT.md "Blob files"): a 40-byte header and one payload, written
// atomically, checked whole on every read.
//
//   sam::format::WriteBlobFile("cache.samc", sam::format::kResponseCacheMagic, 1, payload);
//   uint32_t version = 0;
//   std::vector<uint8_t> bytes =
//       sam::format::ReadBlobFile("cache.samc", sam::format::kResponseCacheMagic, 1, &version);
//
// Errors are sam::Errors whose context names the file: kIo, kTruncated (shorter
// than its header or its declared payload, or longer), kBadMagic, kBadByteOrder,
// kUnsupportedVersion (above the reader's), kChecksumMismatch.
#ifndef SAM_FORMAT_BLOB_FILE_H_
#define SAM_FORMAT_BLOB_FILE_H_

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "sam/export.h"

namespace sam::format {

using BlobMagic = std::array<char, 8>;
inline constexpr BlobMagic kResponseCacheMagic = {'S', 'A', 'M', 'C', 'A', 'C', 'H', 'E'};
inline constexpr size_t kBlobHeaderSize = 40;

// Writes header + payload to "<path>.tmp-<pid>", fsyncs, renames over path and
// fsyncs the directory; path is untouched on failure (kIo).
SAM_API void WriteBlobFile(const std::string& path, const BlobMagic& magic, uint32_t version,
                           std::span<const uint8_t> payload);
// Reads and checks a blob file; returns its payload and *version (<= max_version).
SAM_API std::vector<uint8_t> ReadBlobFile(const std::string& path, const BlobMagic& magic,
                                          uint32_t max_version, uint32_t* version);

}  // namespace sam::format

#endif  // SAM_FORMAT_BLOB_FILE_H_
