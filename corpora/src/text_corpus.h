// Kind::kText: plain-text files or directories of them -> documents.
#ifndef SAM_CORPORA_SRC_TEXT_CORPUS_H_
#define SAM_CORPORA_SRC_TEXT_CORPUS_H_

#include <functional>
#include <string>

#include "sam/corpora/corpora.h"

namespace sam::corpora::internal {

// Reads `input`, a text file, a stream, or a directory whose regular *.txt files are read in
// byte-wise sorted name order (not recursively), and calls sink(document) per non-blank document
// cut according to `split`. stats.records counts files (kPerFile) or blocks (kBlankLine). A file
// or block with invalid UTF-8 is a malformed record (kBadValue, naming the line and column):
// thrown, or skipped with `skip_bad`. Throws CorpusError: kIo for an unreadable path,
// kInvalidArgument for a directory without *.txt files.
ReadStats ReadTextCorpus(Input& input, TextSplit split, bool skip_bad,
                         const std::function<void(std::string&& document)>& sink);

}  // namespace sam::corpora::internal

#endif  // SAM_CORPORA_SRC_TEXT_CORPUS_H_
