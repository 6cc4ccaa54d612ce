// Structural invariants of an index file (FORMAT.md section 6): the O(1)
// ones that every open checks, and the O(file size) ones of
// IndexFile::Verify. Both throw FormatError(kCorruptStructure) with the
// message "<path>: <sections>: <invariant>: <details>", where <sections>
// lists the tags of every section whose values the failed check read (the
// section that is wrong is among them), e.g.
//   "x.sam: LINK, CLEN: a suffix link must lead to a shorter state: state 12
//    (length 5) links to state 7 (length 6)".
#ifndef SAM_FORMAT_SRC_STRUCTURE_CHECKS_H_
#define SAM_FORMAT_SRC_STRUCTURE_CHECKS_H_

#include <string>

#include "sam/format/index.h"

namespace sam::format::internal {

// O(1) reads: the padding of every packed section and of the degree vector,
// the text's last token, the root's and state 1's links, the first and last
// clone, prefix count, stored transition and select sample, the degree bits
// of the root and of the last state, the root's transition on the first token.
void CheckOpenInvariants(const IndexView& view, const IndexHeader& header,
                         const std::string& path);

// Every structural invariant of the hot sections, the O(1) ones first:
// O(states + edges + vocabulary) time and 4 bytes per state (8 for texts of
// 2^32 tokens or more) of memory. See FORMAT.md section 6 for the list.
void VerifyStructure(const IndexView& view, const IndexHeader& header, const std::string& path);

}  // namespace sam::format::internal

#endif  // SAM_FORMAT_SRC_STRUCTURE_CHECKS_H_
