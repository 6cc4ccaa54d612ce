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

// Opens `path` for reading. Throws CorpusError (kIo) naming the file and the reason when it is
// missing, unreadable or a directory.
FilePtr OpenForReading(const std::string& path);

// The whole content of `path`, padded. Throws CorpusError (kIo).
simdjson::padded_string ReadWholeFile(const std::string& path);

// The first byte of `path` that is neither whitespace nor part of a leading UTF-8 BOM, or '\0'
// for a file with no such byte. Reads only as far as that byte. Throws CorpusError (kIo).
char FirstSignificantByte(const std::string& path);

// Streams the lines of a file with bounded memory (one block plus the longest line).
//   LineReader reader(path);
//   std::string_view line;
//   while (reader.Next(line)) Use(reader.line_number(), line);
class LineReader {
 public:
  // Opens `path`; throws CorpusError (kIo).
  explicit LineReader(const std::string& path);

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
  FilePtr file_;
  std::unique_ptr<char[]> buffer_;
  size_t capacity_ = 0;  // usable bytes; kPadding more are allocated behind them
  size_t begin_ = 0;     // first unread byte
  size_t end_ = 0;       // one past the last byte read
  size_t scanned_ = 0;   // bytes after begin_ known to hold no '\n'
  bool eof_ = false;
  uint64_t line_number_ = 0;
};

}  // namespace sam::corpora::internal

#endif  // SAM_CORPORA_SRC_FILE_IO_H_
