// Shard set manifests: JSON body, "sha256 HEX" trailer, atomic writes; opening
// and checking the shards a manifest names.
#include "sam/format/shard_set.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "sam/format/error.h"
#include "sam/format/file_checks.h"
#include "sam/format/temp_files.h"

namespace sam::format {
namespace {

constexpr char kTrailer[] = "sha256 ";  // the last line: "sha256 " + 64 hex digits + "\n"
constexpr size_t kTrailerBytes = 7 + 64 + 1;
constexpr uint64_t kMaxManifestBytes = uint64_t{64} << 20;

[[noreturn]] void Fail(ErrorCode code, const std::string& file, const std::string& problem) {
  throw FormatError(code, {.file = file}, problem);
}

bool ValidFileName(const std::string& f) {
  return !f.empty() && f != "." && f != ".." && f.find('/') == std::string::npos &&
         f.find('\0') == std::string::npos;
}

// Writes bytes to path atomically (temp_files.h).
void WriteAtomically(const std::string& path, const std::string& bytes) {
  WriteFileAtomically(path, {std::span<const uint8_t>(
                                reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size())});
}

std::string ReadSmallFile(const std::string& path) {
  const int fd = OpenRegularFile(path, "shard set manifest");  // never blocks (a FIFO)
  struct stat st = {};
  ::fstat(fd, &st);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size > kMaxManifestBytes) {
    ::close(fd);
    Fail(ErrorCode::kBadMagic, path, "not a shard set manifest (" + std::to_string(size) +
                                         " bytes, more than a manifest holds)");
  }
  std::string bytes(size, '\0');
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::read(fd, bytes.data() + got, size - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  if (got != size) Fail(ErrorCode::kIo, path, "read failed");
  return bytes;
}

// The JSON text of a manifest, fields in a fixed order.
std::string ManifestBody(const ShardSetManifest& m) {
  nlohmann::ordered_json j;
  j["format"] = kShardSetMagic;
  j["version"] = kShardSetVersion;
  j["tokenizer_sha256"] = DigestToHex(m.tokenizer_sha256);
  j["vocab_size"] = m.vocab_size;
  uint64_t tokens = 0, documents = 0;
  for (const auto& s : m.shards) {
    tokens += s.tokens;
    documents += s.documents;
  }
  j["tokens"] = tokens;
  j["documents"] = documents;
  j["build"] = nlohmann::ordered_json::parse(m.build_json);
  j["shards"] = nlohmann::ordered_json::array();
  for (const auto& s : m.shards)
    j["shards"].push_back({{"file", s.file},
                           {"bytes", s.bytes},
                           {"sha256", DigestToHex(s.sha256)},
                           {"tokens", s.tokens},
                           {"documents", s.documents},
                           {"states", s.states}});
  return j.dump(1) + "\n";
}

}  // namespace

bool LooksLikeShardSet(const std::string& path) {
  const std::string s = ReadFileHead(path, 63);  // never blocks: only a regular file is read
  return !s.empty() && s[0] == '{' && s.find(kShardSetMagic) != std::string::npos;
}

void WriteShardSetManifest(const std::string& path, const ShardSetManifest& m) {
  if (m.shards.empty()) Fail(ErrorCode::kInvalidArgument, path, "a shard set needs a shard");
  if (m.shards.size() > kMaxShards)
    Fail(ErrorCode::kInvalidArgument, path,
         std::to_string(m.shards.size()) + " shards, more than the " +
             std::to_string(kMaxShards) + " a set may hold");
  std::set<std::string> names;
  for (const auto& s : m.shards) {
    if (!ValidFileName(s.file))
      Fail(ErrorCode::kInvalidArgument, path,
           "shard file name '" + s.file + "' is not a plain file name");
    if (!names.insert(s.file).second)
      Fail(ErrorCode::kInvalidArgument, path, "shard file '" + s.file + "' is listed twice");
  }
  const auto build = nlohmann::json::parse(m.build_json, nullptr, /*allow_exceptions=*/false);
  if (!build.is_object())
    Fail(ErrorCode::kInvalidArgument, path, "build options are not a JSON object");
  const std::string body = ManifestBody(m);
  WriteAtomically(path, body + kTrailer + DigestToHex(Sha256(body.data(), body.size())) + "\n");
}

ShardSetManifest ReadShardSetManifest(const std::string& path) {
  const std::string bytes = ReadSmallFile(path);
  if (bytes.empty() || bytes[0] != '{' || bytes.find(kShardSetMagic) == std::string::npos)
    Fail(ErrorCode::kBadMagic, path, "not a shard set manifest (no '" +
                                         std::string(kShardSetMagic) + "' object)");
  if (bytes.size() < kTrailerBytes ||
      bytes.compare(bytes.size() - kTrailerBytes, 7, kTrailer) != 0 || bytes.back() != '\n')
    Fail(ErrorCode::kTruncated, path, "the manifest does not end with its 'sha256 HEX' line");
  const std::string body = bytes.substr(0, bytes.size() - kTrailerBytes);
  const std::string stored = bytes.substr(bytes.size() - kTrailerBytes + 7, 64);
  const std::string actual = DigestToHex(Sha256(body.data(), body.size()));
  if (stored != actual)
    Fail(ErrorCode::kChecksumMismatch, path,
         "manifest checksum " + stored + " differs from its content's " + actual);
  const auto j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || j.value("format", "") != kShardSetMagic)
    Fail(ErrorCode::kBadMagic, path, "not a shard set manifest");
  auto field = [&](const nlohmann::json& o, const char* name, auto check) {
    if (!o.contains(name) || !check(o[name]))
      Fail(ErrorCode::kBadHeader, path, std::string("field '") + name + "' missing or invalid");
    return o[name];
  };
  auto is_uint = [](const nlohmann::json& v) { return v.is_number_unsigned(); };
  auto is_hex = [](const nlohmann::json& v) {
    return v.is_string() && v.get<std::string>().size() == 64 &&
           v.get<std::string>().find_first_not_of("0123456789abcdef") == std::string::npos;
  };
  const uint64_t version = field(j, "version", is_uint).get<uint64_t>();
  if (version != kShardSetVersion)
    Fail(ErrorCode::kUnsupportedVersion, path,
         "shard set version " + std::to_string(version) + " (this library reads " +
             std::to_string(kShardSetVersion) + ")");
  ShardSetManifest m;
  m.tokenizer_sha256 = DigestFromHex(field(j, "tokenizer_sha256", is_hex).get<std::string>());
  const uint64_t vocab = field(j, "vocab_size", is_uint).get<uint64_t>();
  if (vocab == 0 || vocab >= (uint64_t{1} << 31))
    Fail(ErrorCode::kBadHeader, path, "vocab size " + std::to_string(vocab) + " out of range");
  m.vocab_size = static_cast<uint32_t>(vocab);
  m.build_json = field(j, "build", [](const nlohmann::json& v) { return v.is_object(); }).dump();
  const auto& shards = field(j, "shards", [](const nlohmann::json& v) {
    return v.is_array() && !v.empty();
  });
  if (shards.size() > kMaxShards)
    Fail(ErrorCode::kBadHeader, path,
         "lists " + std::to_string(shards.size()) + " shards, more than the " +
             std::to_string(kMaxShards) + " a set may hold");
  uint64_t tokens = 0, documents = 0;
  std::set<std::string> names;
  for (const auto& s : shards) {
    if (!s.is_object()) Fail(ErrorCode::kBadHeader, path, "a shard entry is not an object");
    ShardEntry e;
    e.file = field(s, "file", [](const nlohmann::json& v) { return v.is_string(); })
                 .get<std::string>();
    if (!ValidFileName(e.file))
      Fail(ErrorCode::kBadHeader, path, "shard file name '" + e.file + "' is not a plain file name");
    if (!names.insert(e.file).second)
      Fail(ErrorCode::kBadHeader, path, "shard file '" + e.file + "' is listed twice");
    e.bytes = field(s, "bytes", is_uint).get<uint64_t>();
    e.sha256 = DigestFromHex(field(s, "sha256", is_hex).get<std::string>());
    e.tokens = field(s, "tokens", is_uint).get<uint64_t>();
    e.documents = field(s, "documents", is_uint).get<uint64_t>();
    e.states = field(s, "states", is_uint).get<uint64_t>();
    tokens += e.tokens;
    documents += e.documents;
    m.shards.push_back(std::move(e));
  }
  if (field(j, "tokens", is_uint).get<uint64_t>() != tokens ||
      field(j, "documents", is_uint).get<uint64_t>() != documents)
    Fail(ErrorCode::kBadHeader, path, "the totals differ from the sums over the shards");
  return m;
}

std::string ShardPath(const std::string& manifest_path, const ShardEntry& shard) {
  return (std::filesystem::path(manifest_path).parent_path() / shard.file).string();
}

std::string CheckShardBytes(const std::string& manifest_path, const ShardEntry& shard) {
  const std::string p = ShardPath(manifest_path, shard);
  std::error_code ec;
  if (std::filesystem::is_directory(p, ec)) return "is a directory, not a shard file (" + p + ")";
  if (!std::filesystem::exists(p, ec)) return "missing (" + p + ")";
  if (!std::filesystem::is_regular_file(p, ec))
    return "not a regular file (a FIFO, device or socket: " + p + ")";
  const uint64_t size = std::filesystem::file_size(p, ec);
  if (ec) return "cannot read its size: " + ec.message();
  if (size != shard.bytes)
    return "size " + std::to_string(size) + " bytes, the manifest says " +
           std::to_string(shard.bytes);
  const Sha256Digest d = Sha256File(p);
  if (d != shard.sha256)
    return "SHA-256 " + DigestToHex(d) + " differs from the manifest's " + DigestToHex(shard.sha256);
  return "";
}

ShardSet ShardSet::Open(const std::string& path, const OpenOptions& options) {
  ShardSet set;
  set.path_ = path;
  set.manifest_ = ReadShardSetManifest(path);
  const ShardSetManifest& m = set.manifest_;
  if (options.expected_vocab_size && *options.expected_vocab_size != m.vocab_size)
    Fail(ErrorCode::kInvalidArgument, path,
         "vocab size " + std::to_string(m.vocab_size) + ", expected " +
             std::to_string(*options.expected_vocab_size));
  if (options.expected_tokenizer_sha256 && *options.expected_tokenizer_sha256 != m.tokenizer_sha256)
    Fail(ErrorCode::kTokenizerMismatch, path,
         "built with tokenizer " + DigestToHex(m.tokenizer_sha256) + ", expected " +
             DigestToHex(*options.expected_tokenizer_sha256));
  const size_t n = m.shards.size();
  std::vector<std::pair<dev_t, ino_t>> identities;  // of shards 0..k-1
  for (size_t k = 0; k < n; ++k) {
    const ShardEntry& e = m.shards[k];
    const std::string file = ShardPath(path, e);
    const std::string which =
        "shard " + std::to_string(k) + " of " + std::to_string(n) + " of " + path;
    auto refuse = [&](ErrorCode code, const std::string& problem) {
      throw FormatError(code, {.file = file}, which + ": " + problem);
    };
    struct stat st = {};
    if (::stat(file.c_str(), &st) != 0) refuse(ErrorCode::kIo, "missing");
    if (S_ISDIR(st.st_mode)) refuse(ErrorCode::kIo, "is a directory, not a shard file");
    if (!S_ISREG(st.st_mode))
      refuse(ErrorCode::kIo, "is not a regular file (a FIFO, device or socket)");
    // The same file under two names (a hard or symbolic link) would be searched twice.
    for (size_t j = 0; j < k; ++j)
      if (identities[j].first == st.st_dev && identities[j].second == st.st_ino)
        refuse(ErrorCode::kBadHeader, "the same file as shard " + std::to_string(j) + " (" +
                                          ShardPath(path, m.shards[j]) + ")");
    identities.emplace_back(st.st_dev, st.st_ino);
    const uint64_t size = static_cast<uint64_t>(st.st_size);
    if (size < e.bytes)
      refuse(ErrorCode::kTruncated, "truncated: size " + std::to_string(size) +
                                        " bytes, the manifest says " + std::to_string(e.bytes));
    if (size > e.bytes)
      refuse(ErrorCode::kBadHeader, "size " + std::to_string(size) +
                                        " bytes, more than the manifest's " +
                                        std::to_string(e.bytes) + " (another file)");
    if (options.verify) {
      const std::string problem = CheckShardBytes(path, e);
      if (!problem.empty()) refuse(ErrorCode::kChecksumMismatch, problem);
    }
    OpenOptions shard_options = options;
    shard_options.expected_vocab_size = m.vocab_size;
    shard_options.expected_tokenizer_sha256.reset();
    IndexFile f = [&] {
      try {
        return IndexFile::Open(file, shard_options);
      } catch (const sam::Error& error) {
        throw FormatError(error.code(), {.file = file}, which + ": " + error.problem());
      }
    }();
    if (f.header().tokenizer_sha256 != m.tokenizer_sha256)
      refuse(ErrorCode::kTokenizerMismatch,
             "built with tokenizer " + DigestToHex(f.header().tokenizer_sha256) +
                 ", the set with " + DigestToHex(m.tokenizer_sha256) + " (a foreign shard)");
    const IndexView& v = f.view();
    if (v.num_tokens() != e.tokens || f.header().num_documents != e.documents ||
        v.num_states() != e.states)
      refuse(ErrorCode::kBadHeader,
             "holds " + std::to_string(v.num_tokens()) + " tokens, " +
                 std::to_string(f.header().num_documents) + " documents, " +
                 std::to_string(v.num_states()) + " states; the manifest says " +
                 std::to_string(e.tokens) + ", " + std::to_string(e.documents) + ", " +
                 std::to_string(e.states) + " (a foreign shard)");
    set.shards_.push_back(std::move(f));
  }
  return set;
}

uint64_t ShardSet::num_tokens() const {
  uint64_t t = 0;
  for (const auto& s : manifest_.shards) t += s.tokens;
  return t;
}

uint64_t ShardSet::num_documents() const {
  uint64_t d = 0;
  for (const auto& s : manifest_.shards) d += s.documents;
  return d;
}

}  // namespace sam::format
