#include "file_io.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "sam/corpora/error.h"

namespace sam::corpora::internal {
namespace {

constexpr std::string_view kBom = "\xEF\xBB\xBF";
constexpr size_t kBlockSize = size_t{1} << 20;

[[noreturn]] void ThrowIo(const std::string& path, const std::string& problem) {
  throw CorpusError(CorpusError::Code::kIo, ErrorContext{.file = path}, problem);
}

// Reads up to `size` bytes; throws on a read error (a short count only means end of file).
size_t ReadSome(std::FILE* file, const std::string& path, char* data, size_t size) {
  size_t got = std::fread(data, 1, size, file);
  if (got < size && std::ferror(file)) {
    ThrowIo(path, std::string("read error: ") + std::strerror(errno));
  }
  return got;
}

}  // namespace

std::string_view StripBom(std::string_view text) {
  if (text.substr(0, kBom.size()) == kBom) text.remove_prefix(kBom.size());
  return text;
}

bool IsSpace(char c) {
  return c == ' ' || c == '\t' || c == '\r' || c == '\n' || c == '\f' || c == '\v';
}

bool IsBlank(std::string_view text) {
  for (char c : text) {
    if (!IsSpace(c)) return false;
  }
  return true;
}

FilePtr OpenForReading(const std::string& path) {
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) ThrowIo(path, "is a directory, expected a file");
  FilePtr file(std::fopen(path.c_str(), "rb"));
  if (!file) ThrowIo(path, std::string("cannot open: ") + std::strerror(errno));
  return file;
}

simdjson::padded_string ReadWholeFile(const std::string& path) {
  FilePtr file = OpenForReading(path);
  struct stat info;
  if (fstat(fileno(file.get()), &info) == 0 && S_ISREG(info.st_mode)) {
    const size_t size = static_cast<size_t>(info.st_size);
    simdjson::padded_string content(size);
    const size_t got = ReadSome(file.get(), path, content.data(), size);
    if (got != size) ThrowIo(path, "file shrank while being read");
    return content;
  }
  // Not a regular file (a pipe, say): its size is unknown in advance.
  std::string content;
  char block[1 << 16];
  while (size_t got = ReadSome(file.get(), path, block, sizeof(block))) content.append(block, got);
  return simdjson::padded_string(content);
}

char FirstSignificantByte(const std::string& path) {
  FilePtr file = OpenForReading(path);
  char block[4096];
  bool first_block = true;
  while (size_t got = ReadSome(file.get(), path, block, sizeof(block))) {
    std::string_view text(block, got);
    if (first_block) text = StripBom(text);
    first_block = false;
    for (char c : text) {
      if (!IsSpace(c)) return c;
    }
  }
  return '\0';
}

LineReader::LineReader(const std::string& path)
    : path_(path),
      file_(OpenForReading(path)),
      buffer_(std::make_unique<char[]>(kBlockSize + kPadding)),
      capacity_(kBlockSize) {
  while (end_ < kBom.size() && !eof_) Refill();
  if (StripBom(std::string_view(buffer_.get(), end_)).size() != end_) begin_ = kBom.size();
}

void LineReader::Refill() {
  if (begin_ > 0) {
    std::memmove(buffer_.get(), buffer_.get() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  // Doubling when more than half is taken keeps reads large and growth amortised O(1) per byte.
  if (end_ > capacity_ / 2) {
    const size_t new_capacity = capacity_ * 2;
    // Zero-filled, so the padding simdjson reads past a line is always initialised.
    auto bigger = std::make_unique<char[]>(new_capacity + kPadding);
    std::memcpy(bigger.get(), buffer_.get(), end_);
    buffer_ = std::move(bigger);
    capacity_ = new_capacity;
  }
  end_ += ReadSome(file_.get(), path_, buffer_.get() + end_, capacity_ - end_);
  if (std::feof(file_.get())) eof_ = true;
}

bool LineReader::Next(std::string_view& line) {
  for (;;) {
    const char* start = buffer_.get() + begin_;
    const size_t available = end_ - begin_;
    const void* newline = std::memchr(start + scanned_, '\n', available - scanned_);
    size_t length;
    if (newline != nullptr) {
      length = static_cast<size_t>(static_cast<const char*>(newline) - start);
      begin_ += length + 1;
    } else if (eof_) {
      if (available == 0) return false;
      length = available;
      begin_ = end_;
    } else {
      scanned_ = available;
      Refill();
      continue;
    }
    scanned_ = 0;
    if (length > 0 && start[length - 1] == '\r') --length;
    line = std::string_view(start, length);
    ++line_number_;
    return true;
  }
}

}  // namespace sam::corpora::internal
