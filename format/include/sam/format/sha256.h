// SHA-256 fingerprints of tokenizer models and corpus files (FIPS 180-4, implemented here: the
// format library and the runtime that links it need no crypto library).
//
//   sam::format::Sha256Digest d = sam::format::Sha256File("llama-32k.model");
//   std::string hex = sam::format::DigestToHex(d);
#ifndef SAM_FORMAT_SHA256_H_
#define SAM_FORMAT_SHA256_H_

#include <cstddef>
#include <string>
#include <string_view>

#include "sam/export.h"
#include "sam/format/index.h"

namespace sam::format {

// The digest of `size` bytes at `data`. Never throws.
SAM_API Sha256Digest Sha256(const void* data, size_t size);
// Hashes a whole file; throws FormatError(kIo) naming the file when it cannot be opened or read.
SAM_API Sha256Digest Sha256File(const std::string& path);
SAM_API std::string DigestToHex(const Sha256Digest& digest);
// Parses 64 hex digits; throws FormatError(kInvalidArgument) otherwise.
SAM_API Sha256Digest DigestFromHex(std::string_view hex);

}  // namespace sam::format

#endif  // SAM_FORMAT_SHA256_H_
