#include "sam/format/sha256.h"

#include <openssl/evp.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "sam/format/error.h"

namespace sam::format {
namespace {

struct MdCtxDeleter {
  void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

}  // namespace

Sha256Digest Sha256(const void* data, size_t size) {
  Sha256Digest d{};
  unsigned int len = 0;
  if (EVP_Digest(data, size, d.data(), &len, EVP_sha256(), nullptr) != 1 || len != 32)
    throw FormatError(ErrorCode::kIo, "SHA-256 computation failed");
  return d;
}

Sha256Digest Sha256File(const std::string& path) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) throw FormatError(ErrorCode::kIo, path + ": cannot open: " + std::strerror(errno));
  std::unique_ptr<EVP_MD_CTX, MdCtxDeleter> ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1)
    throw FormatError(ErrorCode::kIo, "SHA-256 initialisation failed");
  std::vector<char> buf(1 << 20);
  size_t got;
  while ((got = std::fread(buf.data(), 1, buf.size(), f.get())) > 0)
    EVP_DigestUpdate(ctx.get(), buf.data(), got);
  if (std::ferror(f.get())) throw FormatError(ErrorCode::kIo, path + ": read error");
  Sha256Digest d{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(ctx.get(), d.data(), &len);
  return d;
}

std::string DigestToHex(const Sha256Digest& digest) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (uint8_t b : digest) {
    s.push_back(kHex[b >> 4]);
    s.push_back(kHex[b & 15]);
  }
  return s;
}

Sha256Digest DigestFromHex(std::string_view hex) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  Sha256Digest d{};
  if (hex.size() != 64)
    throw FormatError(ErrorCode::kInvalidArgument,
                      "SHA-256 digest must be 64 hex digits, got '" + std::string(hex) + "'");
  for (size_t i = 0; i < 32; ++i) {
    int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0)
      throw FormatError(ErrorCode::kInvalidArgument,
                        "SHA-256 digest has a non-hex digit: '" + std::string(hex) + "'");
    d[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return d;
}

}  // namespace sam::format
