#include "text_corpus.h"

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>
#include <vector>

#include "file_io.h"

namespace sam::corpora::internal {
namespace {

using Sink = std::function<void(std::string&& document)>;

void ReadWholeFileDocument(const std::string& path, ReadStats& stats, const Sink& sink) {
  const simdjson::padded_string content = ReadWholeFile(path);
  std::string_view text = StripBom(std::string_view(content.data(), content.size()));
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  ++stats.records;
  if (IsBlank(text)) return;
  ++stats.documents;
  sink(std::string(text));
}

void ReadBlankLineDocuments(const std::string& path, ReadStats& stats, const Sink& sink) {
  LineReader reader(path);
  std::string block;
  auto flush = [&] {
    if (block.empty()) return;
    ++stats.records;
    ++stats.documents;
    sink(std::move(block));
    block.clear();  // a moved-from string is valid but unspecified
  };
  std::string_view line;
  while (reader.Next(line)) {
    if (IsBlank(line)) {
      flush();
      continue;
    }
    if (!block.empty()) block.push_back('\n');
    block.append(line);
  }
  flush();
}

void ReadTextFile(const std::string& path, TextSplit split, ReadStats& stats, const Sink& sink) {
  switch (split) {
    case TextSplit::kPerFile:
      ReadWholeFileDocument(path, stats, sink);
      return;
    case TextSplit::kBlankLine:
      ReadBlankLineDocuments(path, stats, sink);
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

ReadStats ReadTextCorpus(const std::string& path, TextSplit split, const Sink& sink) {
  ReadStats stats;
  std::error_code error;
  if (!std::filesystem::is_directory(path, error)) {
    ReadTextFile(path, split, stats, sink);
    return stats;
  }
  const std::vector<std::string> files = ListTextFiles(path);
  if (files.empty()) {
    throw CorpusError(CorpusError::Code::kInvalidArgument, ErrorContext{.file = path},
                      "directory contains no *.txt files");
  }
  for (const std::string& file : files) ReadTextFile(file, split, stats, sink);
  return stats;
}

}  // namespace sam::corpora::internal
