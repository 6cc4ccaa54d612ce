// Kind::kText: plain-text files or directories of them -> documents.
#ifndef SAM_CORPORA_SRC_TEXT_CORPUS_H_
#define SAM_CORPORA_SRC_TEXT_CORPUS_H_

#include <functional>
#include <string>

#include "sam/corpora/corpora.h"

namespace sam::corpora::internal {

// Reads `path`, a text file or a directory whose regular *.txt files are read in byte-wise
// sorted name order (not recursively), and calls sink(document) per non-blank document cut
// according to `split`. stats.records counts files (kPerFile) or blocks (kBlankLine). Throws
// CorpusError: kIo for an unreadable path, kInvalidArgument for a directory without *.txt files.
ReadStats ReadTextCorpus(const std::string& path, TextSplit split,
                         const std::function<void(std::string&& document)>& sink);

}  // namespace sam::corpora::internal

#endif  // SAM_CORPORA_SRC_TEXT_CORPUS_H_
