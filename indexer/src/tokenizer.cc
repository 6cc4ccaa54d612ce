#include "sam/indexer/tokenizer.h"

#include <fcntl.h>
#include <sentencepiece_processor.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <filesystem>

#include "hf_tokenizer.h"
#include "sam/format/sha256.h"

namespace sam::indexer {
namespace {

// Minimal protobuf wire-format reader, enough to read the few ModelProto
// fields that decide whether segment caching is exact.
struct Wire {
  const uint8_t* p;
  const uint8_t* end;
  bool ok = true;

  uint64_t Varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64 && p < end; shift += 7) {
      const uint8_t b = *p++;
      v |= uint64_t{b & 0x7fu} << shift;
      if (!(b & 0x80)) return v;
    }
    ok = false;
    return 0;
  }
  // Calls f(field, wire_type, varint value, bytes) for every field.
  template <typename F>
  void ForEach(F&& f) {
    while (ok && p < end) {
      const uint64_t key = Varint();
      const uint32_t field = static_cast<uint32_t>(key >> 3), type = key & 7;
      if (type == 0) {
        const uint64_t v = Varint();
        f(field, type, v, std::string_view());
      } else if (type == 2) {
        const uint64_t len = Varint();
        if (len > static_cast<uint64_t>(end - p)) { ok = false; return; }
        f(field, type, 0, std::string_view(reinterpret_cast<const char*>(p), len));
        p += len;
      } else if (type == 1) {
        if (end - p < 8) { ok = false; return; }
        p += 8;
      } else if (type == 5) {
        if (end - p < 4) { ok = false; return; }
        p += 4;
      } else {
        ok = false;
      }
    }
  }
};

Wire WireOf(std::string_view s) {
  return Wire{reinterpret_cast<const uint8_t*>(s.data()),
              reinterpret_cast<const uint8_t*>(s.data()) + s.size()};
}

constexpr std::string_view kSpaceMarker = "\xe2\x96\x81";  // U+2581

// Model files are a few MB; a stream that goes on past this is not one.
constexpr size_t kMaxModelBytes = size_t{1} << 30;

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string FileKind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

// Reads a model file or stream once. Opening never blocks: O_NONBLOCK makes open() return at
// once on a FIFO without a writer (which then reads as empty) and is cleared before reading.
std::string ReadModelBytes(const std::string& path) {
  const Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
  if (fd.get() < 0)
    throw TokenizerError(ErrorCode::kIo, {.file = path},
                         std::string("cannot open tokenizer model: ") + std::strerror(errno));
  struct stat st;
  if (::fstat(fd.get(), &st) != 0)
    throw TokenizerError(ErrorCode::kIo, {.file = path},
                         std::string("cannot stat tokenizer model: ") + std::strerror(errno));
  const bool stream = S_ISFIFO(st.st_mode);
  if (!S_ISREG(st.st_mode) && !stream)
    throw TokenizerError(ErrorCode::kIo, {.file = path},
                         "is " + FileKind(st.st_mode) +
                         ", not a tokenizer file (a SentencePiece .model, a tokenizer.json, or "
                         "a folder holding tokenizer.json)");
  if (!stream && static_cast<uint64_t>(st.st_size) > kMaxModelBytes)
    throw TokenizerError(ErrorCode::kTokenizer, {.file = path},
                         std::to_string(st.st_size) +
                         " bytes, larger than any tokenizer model (limit 1 GiB)");
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0)
    throw TokenizerError(ErrorCode::kIo, {.file = path},
                         std::string("cannot read tokenizer model: ") + std::strerror(errno));
  std::string bytes;
  if (!stream) bytes.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  for (;;) {
    const ssize_t got = ::read(fd.get(), buffer, sizeof(buffer));
    if (got == 0) break;
    if (got < 0) {
      if (errno == EINTR) continue;
      throw TokenizerError(ErrorCode::kIo, {.file = path},
                         std::string("cannot read tokenizer model: ") + std::strerror(errno));
    }
    if (bytes.size() + static_cast<size_t>(got) > kMaxModelBytes)
      throw TokenizerError(ErrorCode::kTokenizer, {.file = path},
                         "more than 1 GiB, larger than any tokenizer model");
    bytes.append(buffer, static_cast<size_t>(got));
  }
  if (bytes.empty())
    throw TokenizerError(ErrorCode::kTokenizer, {.file = path},
                         (stream ? "empty stream (a FIFO with no writer reads as "
                                          "empty), not a tokenizer model"
                                        : "empty file, not a tokenizer model"));
  return bytes;
}

// tokenizer_config.json beside a tokenizer.json (BOS and EOS), or "" when there is none.
std::string ReadConfigBeside(const std::filesystem::path& json_path) {
  std::error_code ec;
  const std::filesystem::path config = json_path.parent_path() / "tokenizer_config.json";
  if (!std::filesystem::is_regular_file(config, ec)) return "";
  return ReadModelBytes(config.string());
}

bool LooksLikeJson(std::string_view bytes) {
  const size_t first = bytes.find_first_not_of(" \t\r\n");
  return first != std::string_view::npos && bytes[first] == '{';
}

}  // namespace

struct Tokenizer::Impl {
  std::unique_ptr<internal::HfTokenizer> hf;  // set for a tokenizer.json
  sentencepiece::SentencePieceProcessor sp;
  std::string path;
  format::Sha256Digest sha{};
  bool cache_exact = false;
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::Load(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    const std::filesystem::path json_path = std::filesystem::path(path) / "tokenizer.json";
    if (!std::filesystem::exists(json_path, ec))
      throw TokenizerError(ErrorCode::kIo, {.file = path},
                           "is a directory without tokenizer.json (a tokenizer is a SentencePiece "
                           ".model, a tokenizer.json, or a folder holding tokenizer.json)");
    const std::string bytes = ReadModelBytes(json_path.string());
    auto impl = std::make_unique<Impl>();
    impl->path = path;
    impl->hf = internal::HfTokenizer::Parse(json_path.string(), bytes, ReadConfigBeside(json_path),
                                           true);
    impl->sha = impl->hf->fingerprint();
    impl->cache_exact = true;
    return Tokenizer(std::move(impl));
  }
  const std::string bytes = ReadModelBytes(path);
  auto impl = std::make_unique<Impl>();
  impl->path = path;
  if (LooksLikeJson(bytes)) {
    std::string config;
    if (std::filesystem::is_regular_file(path, ec)) config = ReadConfigBeside(path);
    const bool named_json = std::filesystem::path(path).extension() == ".json";
    impl->hf = internal::HfTokenizer::Parse(path, bytes, config, named_json);
    impl->sha = impl->hf->fingerprint();
    impl->cache_exact = true;
    return Tokenizer(std::move(impl));
  }
  const auto status = impl->sp.LoadFromSerializedProto(bytes);
  if (!status.ok())
    throw TokenizerError(ErrorCode::kTokenizer, {.file = path},
                         "not a SentencePiece model (" + status.ToString() + ")");
  impl->sha = format::Sha256(bytes.data(), bytes.size());

  // Segment caching is exact for a BPE model with the identity normaliser,
  // a dummy prefix, kept whitespace, whitespace as prefix, and no piece in
  // which the whitespace marker follows another character.
  int model_type = 1;  // UNIGRAM is the proto default
  bool suffix_ws = false, dummy_prefix = true, remove_extra = true, escape_ws = true;
  std::string norm_name;
  bool charsmap = false;
  Wire top = WireOf(bytes);
  top.ForEach([&](uint32_t field, uint32_t type, uint64_t, std::string_view sub) {
    if (type != 2) return;
    if (field == 2) {  // TrainerSpec
      Wire w = WireOf(sub);
      w.ForEach([&](uint32_t f, uint32_t t, uint64_t v, std::string_view) {
        if (t != 0) return;
        if (f == 3) model_type = static_cast<int>(v);
        if (f == 24) suffix_ws = v != 0;
      });
    } else if (field == 3) {  // NormalizerSpec
      Wire w = WireOf(sub);
      w.ForEach([&](uint32_t f, uint32_t t, uint64_t v, std::string_view s) {
        if (f == 1 && t == 2) norm_name = std::string(s);
        if (f == 2 && t == 2) charsmap = !s.empty();
        if (f == 3 && t == 0) dummy_prefix = v != 0;
        if (f == 4 && t == 0) remove_extra = v != 0;
        if (f == 5 && t == 0) escape_ws = v != 0;
      });
    }
  });
  bool exact = top.ok && model_type == 2 && !suffix_ws && dummy_prefix && !remove_extra &&
               escape_ws && norm_name == "identity" && !charsmap;
  for (int i = 0; exact && i < impl->sp.GetPieceSize(); ++i) {
    const std::string piece = impl->sp.IdToPiece(i);
    for (size_t k = piece.find(kSpaceMarker, 1); k != std::string::npos;
         k = piece.find(kSpaceMarker, k + kSpaceMarker.size())) {
      if (k < kSpaceMarker.size() ||
          piece.compare(k - kSpaceMarker.size(), kSpaceMarker.size(), kSpaceMarker) != 0) {
        exact = false;
        break;
      }
    }
  }
  impl->cache_exact = exact;
  return Tokenizer(std::move(impl));
}

uint32_t Tokenizer::vocab_size() const {
  if (impl_->hf) return impl_->hf->vocab_size();
  return static_cast<uint32_t>(impl_->sp.GetPieceSize());
}
uint32_t Tokenizer::bos_id() const {
  if (impl_->hf) return impl_->hf->bos_id();
  const int id = impl_->sp.bos_id();
  return id < 0 ? format::kNoToken : static_cast<uint32_t>(id);
}
uint32_t Tokenizer::eos_id() const {
  if (impl_->hf) return impl_->hf->eos_id();
  const int id = impl_->sp.eos_id();
  return id < 0 ? format::kNoToken : static_cast<uint32_t>(id);
}
const format::Sha256Digest& Tokenizer::sha256() const { return impl_->sha; }
const std::string& Tokenizer::path() const { return impl_->path; }
bool Tokenizer::segment_cache_exact() const { return impl_->cache_exact; }
TokenizerKind Tokenizer::kind() const {
  return impl_->hf ? TokenizerKind::kHuggingFace : TokenizerKind::kSentencePiece;
}

std::vector<std::string> Tokenizer::Pieces() const {
  if (impl_->hf) return impl_->hf->Pieces();
  std::vector<std::string> pieces(vocab_size());
  for (uint32_t i = 0; i < pieces.size(); ++i) pieces[i] = impl_->sp.IdToPiece(static_cast<int>(i));
  return pieces;
}

void Tokenizer::EncodeWhole(std::string_view text, std::vector<uint32_t>* out) const {
  std::vector<int> ids;
  const auto status = impl_->sp.Encode(text, &ids);
  if (!status.ok())
    throw TokenizerError(ErrorCode::kTokenizer, {.file = impl_->path},
                         "encoding failed: " + status.ToString());
  out->insert(out->end(), ids.begin(), ids.end());
}

void Tokenizer::Encode(std::string_view text, std::vector<uint32_t>* out, Cache* cache) const {
  if (impl_->hf) return impl_->hf->Encode(text, out, cache);
  if (!cache || !impl_->cache_exact) {
    EncodeWhole(text, out);
    return;
  }
  constexpr size_t kMaxCachedIds = size_t{1} << 26;
  const size_t out_start = out->size();
  size_t begin = 0;
  while (begin < text.size()) {
    // The segment runs to the next space that follows a non-space.
    size_t end = begin + 1;
    while (end < text.size() && !(text[end] == ' ' && text[end - 1] != ' ')) ++end;
    const std::string_view seg = text.substr(begin, end - begin);
    if (begin > 0 && seg.find_first_not_of(' ') == std::string_view::npos) {
      // Trailing spaces: SentencePiece encodes "" as nothing, not as the
      // marker, so this rare case is encoded whole.
      out->resize(out_start);
      EncodeWhole(text, out);
      return;
    }
    if (begin == 0 && seg[0] == ' ') {
      // The first segment gets SentencePiece's dummy prefix; one that starts
      // with a space would share its key with a later segment that does not.
      EncodeWhole(seg, out);
      begin = end;
      continue;
    }
    auto it = cache->index.find(seg);
    if (it != cache->index.end()) {
      ++cache->hits;
      out->insert(out->end(), cache->ids.begin() + it->second.first,
                  cache->ids.begin() + it->second.first + it->second.second);
    } else {
      ++cache->misses;
      std::vector<uint32_t> ids;
      // SentencePiece adds the dummy prefix itself: a segment that starts
      // with its boundary space is encoded without that space.
      EncodeWhole(begin == 0 ? seg : seg.substr(1), &ids);
      if (cache->ids.size() + ids.size() > kMaxCachedIds) {
        cache->index.clear();
        cache->ids.clear();
      }
      cache->index.emplace(std::string(seg),
                           std::make_pair(static_cast<uint32_t>(cache->ids.size()),
                                          static_cast<uint32_t>(ids.size())));
      cache->ids.insert(cache->ids.end(), ids.begin(), ids.end());
      out->insert(out->end(), ids.begin(), ids.end());
    }
    begin = end;
  }
}

std::string Tokenizer::Decode(std::span<const uint32_t> ids) const {
  if (impl_->hf) return impl_->hf->Decode(ids);
  std::vector<int> v(ids.begin(), ids.end());
  std::string text;
  impl_->sp.Decode(v, &text);
  return text;
}

}  // namespace sam::indexer
