#include "file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
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

InputState& StateOf(Input& input) { return *input.state_; }

}  // namespace sam::corpora::internal

namespace sam::corpora {

using internal::InputState;
using internal::ReadSome;
using internal::ThrowIo;

Input::Input(std::unique_ptr<InputState> state) : state_(std::move(state)) {}
Input::Input(Input&&) noexcept = default;
Input& Input::operator=(Input&&) noexcept = default;
Input::~Input() = default;

const std::string& Input::path() const { return state_->path; }
Input::Type Input::type() const { return state_->type; }
std::string_view Input::stream_bytes() const {
  return std::string_view(state_->bytes.data(), state_->bytes.size());
}

Input Input::Open(const std::string& path) {
  auto state = std::make_unique<InputState>();
  state->path = path;
  // One open(2), then fstat(2) on what was opened: no race between the check and the read.
  // Opening a FIFO blocks until a writer opens it, like any reader.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) ThrowIo(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat info;
  if (fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    ThrowIo(path, std::string("cannot stat: ") + std::strerror(error));
  }
  if (S_ISDIR(info.st_mode)) {
    ::close(fd);
    state->type = Input::Type::kDirectory;
    return Input(std::move(state));
  }
  if (S_ISCHR(info.st_mode) || S_ISBLK(info.st_mode)) {
    ::close(fd);
    ThrowIo(path, std::string("is a ") + (S_ISCHR(info.st_mode) ? "character" : "block") +
                      " device, expected a file or a pipe");
  }
  state->file.reset(::fdopen(fd, "rb"));
  if (!state->file) {
    const int error = errno;
    ::close(fd);
    ThrowIo(path, std::string("cannot open: ") + std::strerror(error));
  }
  if (S_ISREG(info.st_mode)) {
    state->type = Input::Type::kFile;
    return Input(std::move(state));
  }
  // A pipe, FIFO or socket: read once, to its end, now.
  state->type = Input::Type::kStream;
  std::string content;
  char block[1 << 16];
  while (size_t got = ReadSome(state->file.get(), path, block, sizeof(block))) {
    content.append(block, got);
  }
  state->file.reset();
  state->bytes = simdjson::padded_string(content);
  return Input(std::move(state));
}

}  // namespace sam::corpora

namespace sam::corpora::internal {

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

size_t InvalidUtf8Offset(std::string_view text) {
  // simdjson's vectorised check first (the common case: valid); the scalar scan only locates
  // the first bad byte.
  if (simdjson::validate_utf8(text.data(), text.size())) return std::string_view::npos;
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const size_t size = text.size();
  size_t i = 0;
  while (i < size) {
    const unsigned char lead = bytes[i];
    if (lead < 0x80) {
      ++i;
      continue;
    }
    size_t length;
    unsigned char low = 0x80, high = 0xBF;  // the valid range of the second byte
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
      if (lead == 0xE0) low = 0xA0;   // no overlong forms
      if (lead == 0xED) high = 0x9F;  // no surrogates
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
      if (lead == 0xF0) low = 0x90;   // no overlong forms
      if (lead == 0xF4) high = 0x8F;  // nothing above U+10FFFF
    } else {
      return i;
    }
    for (size_t k = 1; k < length; ++k) {
      if (i + k >= size) return i;
      const unsigned char next = bytes[i + k];
      if (k == 1 ? (next < low || next > high) : (next < 0x80 || next > 0xBF)) return i;
    }
    i += length;
  }
  return std::string_view::npos;
}

InputState& ExpectFile(Input& input) {
  InputState& state = StateOf(input);
  if (state.type == Input::Type::kDirectory) {
    ThrowIo(state.path, "is a directory, expected a file");
  }
  return state;
}

std::string_view WholeContent(Input& input, simdjson::padded_string& storage) {
  InputState& state = ExpectFile(input);
  if (state.type == Input::Type::kStream) {
    return std::string_view(state.bytes.data(), state.bytes.size());
  }
  std::FILE* file = state.file.get();
  std::rewind(file);
  struct stat info;
  if (fstat(fileno(file), &info) != 0) ThrowIo(state.path, std::string("cannot stat: ") +
                                                               std::strerror(errno));
  const size_t size = static_cast<size_t>(info.st_size);
  storage = simdjson::padded_string(size);
  const size_t got = ReadSome(file, state.path, storage.data(), size);
  if (got != size) ThrowIo(state.path, "file shrank while being read");
  return std::string_view(storage.data(), size);
}

char FirstSignificantByte(Input& input) {
  InputState& state = ExpectFile(input);
  if (state.type == Input::Type::kStream) {
    for (char c : StripBom(std::string_view(state.bytes.data(), state.bytes.size()))) {
      if (!IsSpace(c)) return c;
    }
    return '\0';
  }
  std::FILE* file = state.file.get();
  std::rewind(file);
  char block[4096];
  bool first_block = true;
  char found = '\0';
  while (size_t got = ReadSome(file, state.path, block, sizeof(block))) {
    std::string_view text(block, got);
    if (first_block) text = StripBom(text);
    first_block = false;
    const auto it = std::find_if(text.begin(), text.end(), [](char c) { return !IsSpace(c); });
    if (it != text.end()) {
      found = *it;
      break;
    }
  }
  std::rewind(file);
  return found;
}

LineReader::LineReader(Input& input) {
  InputState& state = ExpectFile(input);
  path_ = state.path;
  if (state.type == Input::Type::kStream) {
    // The stream's bytes are already in memory, padded: lines are views into them.
    base_ = state.bytes.data();
    end_ = state.bytes.size();
    eof_ = true;
  } else {
    file_ = state.file.get();
    std::rewind(file_);
    buffer_ = std::make_unique<char[]>(kBlockSize + kPadding);
    base_ = buffer_.get();
    capacity_ = kBlockSize;
    while (end_ < kBom.size() && !eof_) Refill();
  }
  if (StripBom(std::string_view(base_, end_)).size() != end_) begin_ = kBom.size();
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
    base_ = buffer_.get();
    capacity_ = new_capacity;
  }
  end_ += ReadSome(file_, path_, buffer_.get() + end_, capacity_ - end_);
  if (std::feof(file_)) eof_ = true;
}

bool LineReader::Next(std::string_view& line) {
  for (;;) {
    const char* start = base_ + begin_;
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
