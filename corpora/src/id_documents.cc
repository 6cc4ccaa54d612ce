#include <string>
#include <utility>
#include <vector>

#include "json_records.h"
#include "sam/corpora/corpora.h"

namespace sam::corpora {
namespace {

using internal::RecordProblem;
using simdjson::dom::element;

// The JSON text of `value`, shortened for messages.
std::string Quote(element value) {
  constexpr size_t kMaxChars = 40;
  std::string text = simdjson::to_string(value);
  if (text.size() > kMaxChars) text = text.substr(0, kMaxChars) + "...";
  return text;
}

// Throws the problem with `value`, which is not a valid token id, naming element `index`.
[[noreturn]] void ThrowBadId(element value, uint64_t index, uint32_t vocab_size) {
  const std::string where = "element " + std::to_string(index) + ": value " + Quote(value);
  int64_t signed_value;
  if (value.get_int64().get(signed_value) == simdjson::SUCCESS && signed_value < 0) {
    throw RecordProblem(CorpusError::Code::kBadValue, where + " is negative");
  }
  if (value.is_int64() || value.is_uint64()) {
    throw RecordProblem(CorpusError::Code::kBadValue,
                        where + " is out of range (vocab size " + std::to_string(vocab_size) + ")");
  }
  throw RecordProblem(CorpusError::Code::kBadRecord, where + " is not an integer token id");
}

// `value` as a token id; throws when it is not an integer in [0, vocab_size).
uint32_t TokenId(element value, uint64_t index, uint32_t vocab_size) {
  int64_t id;
  if (value.get_int64().get(id) != simdjson::SUCCESS || id < 0 ||
      static_cast<uint64_t>(id) >= vocab_size) {
    ThrowBadId(value, index, vocab_size);
  }
  return static_cast<uint32_t>(id);
}

}  // namespace

ReadStats ReadIdDocuments(const std::string& path, uint32_t vocab_size, bool skip_bad,
                          const std::function<void(std::vector<uint32_t>&& ids)>& sink) {
  if (vocab_size == 0) {
    throw CorpusError(CorpusError::Code::kInvalidArgument, ErrorContext{.file = path},
                      "vocab size must be positive to read token ids");
  }
  Input input = Input::Open(path);
  return ReadIdDocuments(input, vocab_size, skip_bad, sink);
}

ReadStats ReadIdDocuments(Input& input, uint32_t vocab_size, bool skip_bad,
                          const std::function<void(std::vector<uint32_t>&& ids)>& sink) {
  if (vocab_size == 0) {
    throw CorpusError(CorpusError::Code::kInvalidArgument,
                      input.path() + ": vocab size must be positive to read token ids");
  }
  ReadStats stats;
  std::vector<uint32_t> ids;
  // Always JSONL: a line of ids starts with '[' too, so the layout cannot be detected.
  internal::ForEachJsonRecord(
      input, internal::JsonLayout::kLines, skip_bad, stats, [&](element record) {
        simdjson::dom::array array;
        if (record.get_array().get(array)) {
          throw RecordProblem(CorpusError::Code::kBadRecord,
                              "record is " + std::string(internal::DescribeType(record)) +
                                  ", expected an array of token ids");
        }
        ids.clear();  // also makes a moved-from vector usable again
        uint64_t index = 0;
        for (element value : array) ids.push_back(TokenId(value, index++, vocab_size));
        if (ids.empty()) return;
        ++stats.documents;
        sink(std::move(ids));
      });
  return stats;
}

}  // namespace sam::corpora
