// File access for the readers: whole-file loads, a streaming line reader and format sniffing.
// Every buffer handed out is followed by at least kPadding readable bytes, so simdjson can parse
// it in place without copying.
#ifndef SAM_CORPORA_SRC_FILE_IO_H_
#define SAM_CORPORA_SRC_FILE_IO_H_

#include <simdjson.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "sam/corpora/corpora.h"

namespace sam::corpora::internal {

inline constexpr size_t kPadding = simdjson::SIMDJSON_PADDING;

// `text` without a leading UTF-8 byte order mark.
std::string_view StripBom(std::string_view text);

// True for ' ', '\t', '\r', '\n', '\f', '\v'.
bool IsSpace(char c);

// True when `text` is empty or only whitespace.
bool IsBlank(std::string_view text);

struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};
using FilePtr = std::unique_ptr<std::FILE, FileCloser>;

// What Input::Open found (see corpora.h). `file` is open for a regular file; `bytes` holds a
// stream's content (padded) for a stream.
struct InputState {
  std::string path;
  Input::Type type = Input::Type::kFile;
  FilePtr file;
  simdjson::padded_string bytes;
};

// The state behind `input`.
InputState& StateOf(Input& input);

// `input` as a file (a regular file or a stream); throws CorpusError (kIo) "is a directory,
// expected a file" for a directory.
InputState& ExpectFile(Input& input);

// The whole content of `input` (not a directory), padded: read from disk into `storage` for a
// regular file, the stream's bytes otherwise. The view is followed by at least kPadding readable
// bytes and is valid while `input` and `storage` are. Throws CorpusError (kIo).
std::string_view WholeContent(Input& input, simdjson::padded_string& storage);

// The first byte of `input` that is neither whitespace nor part of a leading UTF-8 BOM, or '\0'
// for an input with no such byte. Reads a regular file only as far as that byte and rewinds it.
// Throws CorpusError (kIo).
char FirstSignificantByte(Input& input);

// The 0-based offset of the first byte of `text` that does not start or continue a valid UTF-8
// sequence (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF), or npos when
// `text` is valid UTF-8.
size_t InvalidUtf8Offset(std::string_view text);

// Streams the lines of an input with bounded memory (one block plus the longest line) for a
// regular file; a stream's lines are views into its bytes.
//   LineReader reader(input);
//   std::string_view line;
//   while (reader.Next(line)) Use(reader.line_number(), line);
class LineReader {
 public:
  // Reads `input` (not a directory; throws CorpusError (kIo) otherwise) from its start.
  // `input` must outlive the reader.
  explicit LineReader(Input& input);

  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // Sets `line` to the next line, without its "\n" or "\r\n", and returns true; returns false
  // at the end of the file. A UTF-8 BOM at the start of the file is not part of line 1; a last
  // line without "\n" is still a line. `line` stays valid until the next call and is followed
  // by at least kPadding readable bytes. Throws CorpusError (kIo) on a read error.
  bool Next(std::string_view& line);

  // The 1-based number of the line last returned by Next (0 before the first call).
  uint64_t line_number() const { return line_number_; }

 private:
  // Moves the unread bytes to the front of the buffer, grows it when it is full, and reads
  // another block. Sets eof_ at the end of the file.
  void Refill();

  std::string path_;
  std::FILE* file_ = nullptr;       // null for a stream
  std::unique_ptr<char[]> buffer_;  // a regular file's read buffer
  const char* base_ = nullptr;      // buffer_ or the stream's bytes
  size_t capacity_ = 0;  // usable bytes; kPadding more are allocated behind them
  size_t begin_ = 0;     // first unread byte
  size_t end_ = 0;       // one past the last byte read
  size_t scanned_ = 0;   // bytes after begin_ known to hold no '\n'
  bool eof_ = false;
  uint64_t line_number_ = 0;
};

}  // namespace sam::corpora::internal

#endif  // SAM_CORPORA_SRC_FILE_IO_H_
