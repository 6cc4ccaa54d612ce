// Shard sets: an index split into independent shard files (documents never
// cross a shard) and the manifest NAME.samset that names them.
//
//   sam::format::ShardSet set = sam::format::ShardSet::Open("corpus.samset");
//   for (const auto& shard : set.shards()) use(shard.view());   // one IndexFile each
//
// The manifest (FORMAT.md section 11) is a JSON object followed by a line
// "sha256 HEX" over the bytes before it; it holds the tokenizer fingerprint,
// the vocabulary size, the build options and, per shard, its file name (in
// the manifest's folder), size, SHA-256 and counts. Written atomically
// (temporary file, fsync, rename), like an index.
//
// Open() checks the manifest (checksum, version, fields) and opens every
// shard with the cheap checks of IndexFile::Open plus: the size, token,
// document and state counts the manifest records, and the tokenizer
// fingerprint and vocabulary size of the set. With verify, also every shard's
// SHA-256 and IndexFile's deep checks. A missing, corrupted or foreign shard is
// refused with an error naming the shard file (context file) and the manifest.
//
// Thread safety: a ShardSet is immutable after Open(); its IndexFiles may be
// shared like any other.
#ifndef SAM_FORMAT_SHARD_SET_H_
#define SAM_FORMAT_SHARD_SET_H_

#include <cstdint>
#include <string>
#include <vector>

#include "sam/export.h"
#include "sam/format/index.h"
#include "sam/format/sha256.h"

namespace sam::format {

inline constexpr char kShardSetMagic[] = "sam-shard-set";
inline constexpr uint32_t kShardSetVersion = 1;
// Most shards a set may list (each is mapped; far below the kernel's default
// limit of 65530 mappings per process).
inline constexpr size_t kMaxShards = 4096;

struct SAM_API ShardEntry {
  std::string file;  // file name in the manifest's folder (no '/')
  uint64_t bytes = 0;
  Sha256Digest sha256{};
  uint64_t tokens = 0, documents = 0, states = 0;
};

struct SAM_API ShardSetManifest {
  Sha256Digest tokenizer_sha256{};  // zero for pre-tokenized ids
  uint32_t vocab_size = 0;
  std::string build_json = "{}";    // a JSON object: options, corpora, tool version
  std::vector<ShardEntry> shards;
};

// True when the file at `path` starts like a manifest ('{' then the magic
// within its first bytes). Never throws; false for unreadable files.
SAM_API bool LooksLikeShardSet(const std::string& path);

// Writes the manifest atomically. Throws FormatError: kInvalidArgument for
// no shard or more than kMaxShards, a file name with '/' or empty or listed
// twice, or build_json not a JSON object;
// kIo on I/O errors (then `path` is untouched).
SAM_API void WriteShardSetManifest(const std::string& path, const ShardSetManifest& manifest);

// Reads and checks a manifest (not its shards). Throws FormatError: kIo,
// kBadMagic (not a manifest), kChecksumMismatch, kUnsupportedVersion,
// kBadHeader (a field missing or out of range, a file listed twice, more
// than kMaxShards shards).
SAM_API ShardSetManifest ReadShardSetManifest(const std::string& path);

// The path of a shard: the manifest's folder joined with its file name.
SAM_API std::string ShardPath(const std::string& manifest_path, const ShardEntry& shard);

// Describes one shard entry's problem with the file at its path: "" when its
// size and SHA-256 match, else what differs (or that it is missing). Reads
// the whole file.
SAM_API std::string CheckShardBytes(const std::string& manifest_path, const ShardEntry& shard);

class SAM_API ShardSet {
 public:
  // options.verify: also each shard's SHA-256 and IndexFile::Verify.
  // options.expected_tokenizer_sha256 / expected_vocab_size apply to every
  // shard. Throws FormatError as above; a shard's error names the shard's
  // file (context file) and says "shard K of N of MANIFEST": kIo when it is
  // missing or not a regular file, kTruncated when shorter than the manifest
  // says, kBadHeader when longer or when it is the same file (device and
  // inode) as an earlier shard.
  static ShardSet Open(const std::string& path, const OpenOptions& options = {});

  const std::string& path() const { return path_; }
  const ShardSetManifest& manifest() const { return manifest_; }
  const std::vector<IndexFile>& shards() const { return shards_; }
  uint64_t num_tokens() const;
  uint64_t num_documents() const;

 private:
  std::string path_;
  ShardSetManifest manifest_;
  std::vector<IndexFile> shards_;
};

}  // namespace sam::format

#endif  // SAM_FORMAT_SHARD_SET_H_
