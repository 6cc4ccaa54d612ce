#include "sam/format/response_cache_file.h"

#include <algorithm>
#include <iterator>

#include "sam/error.h"
#include "sam/format/blob_file.h"
#include "sam/format/file_checks.h"

namespace sam::format {

ResponseCacheFile ReadResponseCacheFile(const std::string& path) {
  uint32_t version = 0;
  const std::vector<uint8_t> payload =
      ReadBlobFile(path, kResponseCacheMagic, kResponseCacheFileVersion, &version);
  size_t at = 0;
  auto corrupt = [&](const std::string& what) {
    throw Error(ErrorCode::kCorruptStructure, ErrorContext{.file = path},
                what + " at payload byte " + std::to_string(at));
  };
  auto get = [&](size_t bytes) {
    if (payload.size() - at < bytes) corrupt("the payload ends early");
    uint64_t v = 0;
    for (size_t i = 0; i < bytes; ++i) v |= uint64_t{payload[at + i]} << (8 * i);
    at += bytes;
    return v;
  };
  ResponseCacheFile file;
  if (payload.size() < file.tokenizer_sha256.size()) corrupt("the payload ends early");
  std::copy(payload.begin(), payload.begin() + file.tokenizer_sha256.size(),
            file.tokenizer_sha256.begin());
  at = file.tokenizer_sha256.size();
  const uint64_t n = get(8);
  for (uint64_t i = 0; i < n; ++i) {
    const size_t key_size = get(4);
    if (payload.size() - at < key_size) corrupt("a tenant key runs past the payload");
    CachedResponse r;
    r.tenant.assign(payload.begin() + static_cast<ptrdiff_t>(at),
                    payload.begin() + static_cast<ptrdiff_t>(at + key_size));
    at += key_size;
    const size_t count = get(4);
    if (count == 0 || (payload.size() - at) / 4 < count)
      corrupt("response " + std::to_string(i + 1) + " has an impossible length " +
              std::to_string(count));
    r.tokens.resize(count);
    for (uint32_t& t : r.tokens) {
      t = static_cast<uint32_t>(get(4));
      if (t == kResponseCacheSeparator)
        corrupt("response " + std::to_string(i + 1) + " holds the separator");
    }
    file.responses.push_back(std::move(r));
  }
  if (at != payload.size()) corrupt("bytes after the last response");
  return file;
}

bool LooksLikeResponseCache(const std::string& path) {
  const std::string magic = ReadFileHead(path, kResponseCacheMagic.size());  // never blocks
  return magic.size() == kResponseCacheMagic.size() &&
         std::equal(magic.begin(), magic.end(), kResponseCacheMagic.begin());
}

}  // namespace sam::format
