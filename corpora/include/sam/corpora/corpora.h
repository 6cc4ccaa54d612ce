// Dataset readers: corpus files -> rendered text documents, or pre-tokenized id documents.
//
// Usage:
//   namespace corpora = sam::corpora;
//   corpora::ReadOptions options;
//   options.templ = corpora::Template::kVicuna;
//   corpora::ReadStats stats = corpora::ReadCorpus(
//       corpora::ParseKind("alpaca"), "data/alpaca/alpaca_data.json", options,
//       [&](std::string&& document) { tokenize_and_append(document); });
//   // stats.records == 52002, stats.documents == 52002
//
// Record schemas (see corpora/README.md for the sources):
//   alpaca     {instruction, input, output}; `input` may be empty or absent. Extra fields are
//              ignored (CodeAlpaca files use this kind; one has an extra "response").
//   python18k  {instruction, input, output, prompt}: as alpaca; `prompt` (a ready-made
//              Alpaca-style prompt) may be absent, must be a string when present, and is not
//              rendered.
//   gsm8k      {question, answer}
//   hagrid     {query_id, query, quotes: [{idx, docid, text}],
//               answers: [{answer, attributable, informative, sentences}]}: one document per
//              answer (a query without answers gives none). Only query, quotes[].idx (an
//              integer), quotes[].text and answers[].answer are read and checked.
//   jsonl      any object; the document is the string field ReadOptions::text_field.
//   text       plain text: a file, or a directory of *.txt files read in sorted name order.
// Every kind reads UTF-8 only: invalid UTF-8 (overlong forms, surrogates, stray bytes) is a
// malformed record (JSON: kInvalidJson, as the JSON grammar requires; text: kBadValue, naming the
// line and column), skipped with skip_bad like any other.
// JSON kinds accept a JSON array of records (when the first character other than whitespace
// and a UTF-8 BOM is '[') or JSONL (one record per line; blank lines ignored).
//
// Rendering (prompt / response; see templates.h):
//   alpaca, python18k  JoinNonEmpty(instruction, input) / output
//   gsm8k              question / answer
//   hagrid             JoinNonEmpty(quotes block, query) / answer, where the quotes block has
//                      one line "[idx] text" per quote in file order
//   Template::kRaw joins prompt and response with "\n" (empty parts left out);
//   Template::kVicuna renders RenderVicuna(prompt, response). jsonl and text documents are
//   taken verbatim: the template does not apply to them. Empty documents are never emitted.
//
// Thread safety: the functions share no state; concurrent calls are safe. Memory: a JSON array
// file is loaded whole (simdjson DOM; files over 4 GiB are refused with kInvalidArgument: use
// JSONL); JSONL and text are streamed line by line (memory bounded by the longest line, or the
// longest file in text per-file mode).
#ifndef SAM_CORPORA_CORPORA_H_
#define SAM_CORPORA_CORPORA_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sam/corpora/error.h"
#include "sam/corpora/templates.h"

namespace sam::corpora {

// The corpus formats ReadCorpus understands (schemas above).
enum class Kind { kAlpaca, kPython18k, kGsm8k, kHagrid, kJsonl, kText };

// Every Kind, in the order error messages list them.
std::span<const Kind> AllKinds();

// How Kind::kText cuts its input into documents.
enum class TextSplit {
  kPerFile,    // each file is one document (trailing line breaks removed)
  kBlankLine,  // blocks separated by blank (whitespace-only) lines; lines joined by "\n"
};

// Parses the name of one of AllKinds() (exact, lower case). Throws CorpusError (code
// kInvalidArgument) listing every valid name (KindNames()) otherwise.
Kind ParseKind(std::string_view name);

// The name ParseKind accepts for `kind`.
std::string_view KindName(Kind kind);

// The names of AllKinds() joined by ", ", as error messages list them.
std::string KindNames();

struct ReadOptions {
  Template templ = Template::kRaw;
  std::string text_field = "text";  // Kind::kJsonl: the string field that holds the document
  TextSplit text_split = TextSplit::kPerFile;
  // Count and skip malformed records instead of throwing. A JSON array file that does not
  // parse is still an error (its record boundaries are unknown), as are I/O errors.
  bool skip_bad = false;
};

struct ReadStats {
  uint64_t records = 0;    // records seen, including skipped ones (text: files or blocks)
  uint64_t documents = 0;  // documents passed to the sink
  uint64_t skipped = 0;    // malformed records skipped (only with skip_bad)
  // The skipped records by reason (kInvalidJson, kBadRecord, kBadValue); the counts sum to
  // `skipped`.
  std::map<CorpusError::Code, uint64_t> skipped_by_code;
  // The first (at most kMaxSkipExamples) skip messages, in CorpusError::what() format.
  std::vector<std::string> skip_examples;

  static constexpr size_t kMaxSkipExamples = 5;
};

// A short name of a skip reason for messages: "invalid JSON", "bad record", "bad value", ...
std::string_view ReasonName(CorpusError::Code code);

// Why records were skipped, for messages; "" when none was. For example:
//   "skipped 7 of 9 records (bad record: 4, invalid JSON: 3), e.g.
//    f.jsonl: line 2: field 'answer' missing; f.jsonl: line 3: invalid JSON at ...; and 5 more"
// (one line; every kept example is listed, then how many skipped records it leaves out).
std::string DescribeSkips(const ReadStats& stats);

class Input;
namespace internal {
struct InputState;
InputState& StateOf(Input& input);
}  // namespace internal

// A corpus input, opened once. Open classifies `path` with one open(2) and fstat(2):
//   kFile       a regular file, read from disk (parsing may read it more than once);
//   kDirectory  a directory (only Kind::kText reads one; the other kinds refuse it by name);
//   kStream     a pipe, FIFO or socket: read once, sequentially, to its end into memory by
//               Open, so its bytes can be hashed and then parsed without reading it again.
// Opening a FIFO waits for a writer, as every reader of a FIFO does; once open, a stream is
// read until its writer closes it. Character and block devices are refused.
class Input {
 public:
  enum class Type { kFile, kDirectory, kStream };

  // Throws CorpusError (kIo) naming the path when it is missing or unreadable, is a device, or
  // a read error occurs.
  static Input Open(const std::string& path);

  Input(Input&&) noexcept;
  Input& operator=(Input&&) noexcept;
  ~Input();

  const std::string& path() const;
  Type type() const;
  // A stream's bytes (kStream); empty for the other types.
  std::string_view stream_bytes() const;

 private:
  friend internal::InputState& internal::StateOf(Input& input);
  explicit Input(std::unique_ptr<internal::InputState> state);

  std::unique_ptr<internal::InputState> state_;
};

// Reads the corpus at `path` (for Kind::kText, a file or a directory of *.txt files) and calls
// sink(document) once per document, in file order. Returns the counts. Throws CorpusError on a
// missing or unreadable file (kIo), and, unless options.skip_bad, on the first malformed record
// (kInvalidJson, kBadRecord, kBadValue). Exceptions thrown by `sink` propagate unchanged; the
// documents of a record are all validated before the first of them reaches the sink. Time:
// linear in the file size. Same as ReadCorpus(kind, Input::Open(path), ...).
ReadStats ReadCorpus(Kind kind, const std::string& path, const ReadOptions& options,
                     const std::function<void(std::string&& document)>& sink);
// As above, on an input already opened (for example a stream whose bytes were hashed).
ReadStats ReadCorpus(Kind kind, Input& input, const ReadOptions& options,
                     const std::function<void(std::string&& document)>& sink);

// Reads pre-tokenized documents: JSONL with one JSON array of token ids per line, one document
// per line (blank lines ignored); empty arrays give no document. Every
// id must be an integer in [0, vocab_size). Errors name the file, the line, the element index
// and the offending value: kInvalidJson, kBadRecord (not an array, not an integer), kBadValue
// (negative or >= vocab_size), kInvalidArgument (vocab_size == 0), kIo. With `skip_bad`, bad
// lines are counted in the stats and skipped instead.
ReadStats ReadIdDocuments(const std::string& path, uint32_t vocab_size, bool skip_bad,
                          const std::function<void(std::vector<uint32_t>&& ids)>& sink);
ReadStats ReadIdDocuments(Input& input, uint32_t vocab_size, bool skip_bad,
                          const std::function<void(std::vector<uint32_t>&& ids)>& sink);

}  // namespace sam::corpora

#endif  // SAM_CORPORA_CORPORA_H_
