// The response cache file (FORMAT.md "Blob files", magic SAMCACHE, version 1):
// the payload's reader, shared by ResponseCache::Load (the runtime) and
// sam-build's `cache` corpora (the indexer).
//
//   sam::format::ResponseCacheFile f = sam::format::ReadResponseCacheFile("cache.samc");
//   for (const auto& r : f.responses) use(r.tenant, r.tokens);   // oldest first
//
// Payload, version 1 (little-endian): tokenizer SHA-256 [32], u64 responses,
// then per response, oldest first: u32 key bytes, key, u32 tokens, u32 ids.
#ifndef SAM_FORMAT_RESPONSE_CACHE_FILE_H_
#define SAM_FORMAT_RESPONSE_CACHE_FILE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "sam/export.h"
#include "sam/format/index.h"  // Sha256Digest

namespace sam::format {

inline constexpr uint32_t kResponseCacheFileVersion = 1;
// Never a token of a cached response (it separates responses in the cache).
inline constexpr uint32_t kResponseCacheSeparator = 0xFFFFFFFFu;

struct CachedResponse {
  std::string tenant;
  std::vector<uint32_t> tokens;  // never empty, never kResponseCacheSeparator
};

struct ResponseCacheFile {
  Sha256Digest tokenizer_sha256{};
  std::vector<CachedResponse> responses;  // oldest first
};

// Reads and checks the whole file. Errors are sam::Errors naming the file: the
// blob errors (kIo, kTruncated, kBadMagic, kBadByteOrder, kUnsupportedVersion,
// kChecksumMismatch) and kCorruptStructure for a payload that does not parse
// (naming the payload byte).
SAM_API ResponseCacheFile ReadResponseCacheFile(const std::string& path);
// Whether `path` starts with the response cache's magic (false when it cannot
// be read): how tools tell a cache file from an index.
SAM_API bool LooksLikeResponseCache(const std::string& path);

}  // namespace sam::format

#endif  // SAM_FORMAT_RESPONSE_CACHE_FILE_H_
