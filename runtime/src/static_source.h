// Internal: one static source of a session (an attached index, or one shard
// of a shard set, or the response cache's compiled index for one proposal)
// with its matching cursor and the last proposal's peek.
#ifndef SAM_RUNTIME_SRC_STATIC_SOURCE_H_
#define SAM_RUNTIME_SRC_STATIC_SOURCE_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "sam/format/index.h"
#include "sam/runtime/static_index.h"
#include "sam/runtime/static_match.h"

namespace sam::runtime::internal {

struct StaticSource {
  // Its matching cursor, over `index`: the one transition path (the index's
  // accelerators, child records followed from record to record, are the
  // cursor's; StaticCursor).
  StaticCursor cursor;
  // Its StaticIndex (hub tables, child records), never null: a Bare() one
  // for a bare view.
  std::shared_ptr<const StaticIndex> index;
  // The first source of its shard set (itself for an index of its own).
  size_t group = 0;
  // The last proposal's match with its start token, and that state's record
  // (StaticIndex::kNoRecord: unknown).
  uint32_t peeked_record = StaticIndex::kNoRecord;
  StaticMatch peeked;

  const format::IndexView& view() const { return *cursor.view(); }
  bool has_records() const { return index->has_records(); }
};

}  // namespace sam::runtime::internal

#endif  // SAM_RUNTIME_SRC_STATIC_SOURCE_H_
