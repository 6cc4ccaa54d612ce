#include "text_corpus.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "file_io.h"
#include "json_records.h"

namespace sam::corpora::internal {
namespace {

using Sink = std::function<void(std::string&& document)>;

// "invalid UTF-8 at column C (byte 0xNN)" for the bad byte at `offset` in `line`.
std::string Utf8Problem(std::string_view line, size_t offset) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  const auto byte = static_cast<unsigned char>(line[offset]);
  return "invalid UTF-8 at column " + std::to_string(offset + 1) + " (byte 0x" +
         kHex[byte >> 4] + kHex[byte & 15] + ")";
}

void ReadWholeFileDocument(Input& input, bool skip_bad, ReadStats& stats, const Sink& sink) {
  simdjson::padded_string storage;
  std::string_view text = StripBom(WholeContent(input, storage));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  ++stats.records;
  if (const size_t bad = InvalidUtf8Offset(text); bad != std::string_view::npos) {
    const std::string_view before = text.substr(0, bad);
    const size_t line_start = before.rfind('\n') + 1;  // npos + 1 == 0
    const auto line = 1 + std::count(before.begin(), before.end(), '\n');
    HandleProblem(input.path(), "line " + std::to_string(line), CorpusError::Code::kBadValue,
                  Utf8Problem(text.substr(line_start), bad - line_start), skip_bad, stats);
    return;
  }
  if (IsBlank(text)) return;
  ++stats.documents;
  sink(std::string(text));
}

void ReadBlankLineDocuments(Input& input, bool skip_bad, ReadStats& stats, const Sink& sink) {
  LineReader reader(input);
  std::string block;
  bool block_bad = false;  // the block has an invalid line, already reported
  auto flush = [&] {
    if (block.empty() && !block_bad) return;
    ++stats.records;
    if (!block_bad) {
      ++stats.documents;
      sink(std::move(block));
    }
    block.clear();  // a moved-from string is valid but unspecified
    block_bad = false;
  };
  std::string_view line;
  while (reader.Next(line)) {
    if (IsBlank(line)) {
      flush();
      continue;
    }
    if (block_bad) continue;
    if (const size_t bad = InvalidUtf8Offset(line); bad != std::string_view::npos) {
      // Throws unless skip_bad; then the whole block is one skipped record.
      HandleProblem(input.path(), "line " + std::to_string(reader.line_number()),
                    CorpusError::Code::kBadValue, Utf8Problem(line, bad), skip_bad, stats);
      block_bad = true;
      block.clear();
      continue;
    }
    if (!block.empty()) block.push_back('\n');
    block.append(line);
  }
  flush();
}

void ReadTextFile(Input& input, TextSplit split, bool skip_bad, ReadStats& stats,
                  const Sink& sink) {
  switch (split) {
    case TextSplit::kPerFile:
      ReadWholeFileDocument(input, skip_bad, stats, sink);
      return;
    case TextSplit::kBlankLine:
      ReadBlankLineDocuments(input, skip_bad, stats, sink);
      return;
  }
}

[[noreturn]] void ThrowListError(const std::string& path, const std::error_code& error) {
  throw CorpusError(CorpusError::Code::kIo, ErrorContext{.file = path},
                    "cannot list directory: " + error.message());
}

// The regular *.txt files directly in `directory`, sorted by name.
std::vector<std::string> ListTextFiles(const std::string& directory) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  std::error_code error;
  fs::directory_iterator it(directory, error);
  if (error) ThrowListError(directory, error);
  for (; it != fs::directory_iterator(); it.increment(error)) {
    if (error) ThrowListError(directory, error);
    std::error_code status_error;  // an entry that vanished or cannot be stat'ed is not listed
    if (it->path().extension() == ".txt" && it->is_regular_file(status_error)) {
      files.push_back(it->path().string());
    }
  }
  if (error) ThrowListError(directory, error);
  // Same directory prefix everywhere, so this is byte-wise order of the names.
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

ReadStats ReadTextCorpus(Input& input, TextSplit split, bool skip_bad, const Sink& sink) {
  ReadStats stats;
  if (input.type() != Input::Type::kDirectory) {
    ReadTextFile(input, split, skip_bad, stats, sink);
    return stats;
  }
  const std::string& path = input.path();
  const std::vector<std::string> files = ListTextFiles(path);
  if (files.empty()) {
    throw CorpusError(CorpusError::Code::kInvalidArgument, ErrorContext{.file = path},
                      "directory contains no *.txt files");
  }
  for (const std::string& file : files) {
    Input file_input = Input::Open(file);
    ReadTextFile(file_input, split, skip_bad, stats, sink);
  }
  return stats;
}

}  // namespace sam::corpora::internal
