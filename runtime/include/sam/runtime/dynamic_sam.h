// The dynamic suffix automaton of one request: prompt + generation so far.
//
//   sam::runtime::DynamicSam sam(/*capacity_tokens=*/1 << 16);   // all memory reserved here
//   sam.Extend(prompt_ids);                      // prefill
//   auto m = sam.Lookup(start_token);            // peek: start_token is not added
//   uint32_t draft[39];
//   size_t n = sam.Continuation(m, 39, /*climb_links=*/true, draft);
//   sam.Extend(accepted_ids);                    // after verification
//   sam.Reset();                                 // next request, memory kept
//
// Construction is Blumer et al.'s online algorithm with the first end position
// (min_endpos, 1-based) of every state: a new state's is its position, a clone
// copies the original's. A state's first two transitions are stored with it;
// the others live in one open-addressing hash table keyed by (state, token),
// chained per state so that clones can copy them. Memory for the worst case
// (2n states, 3n transitions) is reserved at construction, but the table in
// use grows with the text (doubling past a load of 1/2, up to half the
// reserved slots) and starts small again
// at Reset, so that memory is touched, and cache lines spread, in proportion
// to the text, not the capacity. Extend never allocates. Amortised O(1)
// expected time per token (a doubling places the table's transitions again).
//
// Capacity: when the text reaches capacity_tokens, the automaton is rebuilt
// over the most recent half of the text (positions then restart at 1), so the
// window always holds at least capacity/2 tokens and memory stays bounded in
// bytes (BytesForCapacity). The rebuild costs O(capacity) once every
// capacity/2 tokens.
//
// Thread safety: none; one DynamicSam belongs to one request.
#ifndef SAM_RUNTIME_DYNAMIC_SAM_H_
#define SAM_RUNTIME_DYNAMIC_SAM_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "sam/export.h"
#include "sam/format/huge_buffer.h"

namespace sam::runtime {

class SAM_API DynamicSam {
 public:
  static constexpr uint32_t kRoot = 0;
  static constexpr uint32_t kNone = ~uint32_t{0};

  // A matched state and the length of the match (0 with kRoot: no match).
  struct Match {
    uint32_t state = kRoot;
    uint32_t len = 0;
  };

  // Reserves memory for capacity_tokens tokens (at least 4). Throws
  // sam::Error (kInvalidArgument) for a capacity above 2^30 tokens.
  explicit DynamicSam(size_t capacity_tokens);
  DynamicSam(DynamicSam&&) noexcept;
  DynamicSam& operator=(DynamicSam&&) noexcept;
  ~DynamicSam();

  // Bytes reserved for a given capacity, and the largest capacity that fits
  // in a byte budget (at least 4).
  static size_t BytesForCapacity(size_t capacity_tokens);
  static size_t CapacityForBytes(size_t bytes);

  // Forgets the text; keeps the memory.
  void Reset();
  // Appends tokens to the text. Any uint32_t value is a valid token.
  void Extend(uint32_t token);
  void Extend(std::span<const uint32_t> tokens);

  // Longest suffix of (text + token) that occurs in the text, as a state and
  // length; {kRoot, 0} when token does not occur. Does not modify anything.
  // Same amortised cost as the Extend(token) that usually follows.
  Match Lookup(uint32_t token) const;

  // Starts loading what the next Lookup and Extend read first: the state of
  // the whole text's suffix link (a cache miss in a long context). Changes
  // nothing.
  void Prefetch() const {
    const uint32_t v = states_[last_].link;
    if (v != kNone) __builtin_prefetch(&states_[v]);
  }
  // Starts loading what Lookup(token) reads after the state that Prefetch()
  // loads: that state's hashed transition slot for `token` (its inline ones
  // are in its own line).
  void PrefetchLookup(uint32_t token) const;
  // Starts loading what Continuation(match, ...) reads first.
  void PrefetchMatch(Match match) const { __builtin_prefetch(&states_[match.state]); }

  // Copies up to `want` tokens that follow the first occurrence of the
  // match's strings (positions MinEndpos+1 ..) into out, stopping at the end
  // of the text. With climb_links, while fewer than `want` tokens follow and
  // the state's suffix link is not the root and its strings are at least
  // kMinClimbLength tokens long, moves to the link (a shorter suffix whose
  // first occurrence is earlier: a repetition's earlier rounds); *used_state
  // (if not null) receives the state the tokens come from. Returns the
  // number copied.
  //
  // A text that repeats (a loop) climbs through suffixes as long as the
  // repeated part; a suffix of a few tokens predicts little, and climbing to
  // one cost every policy accepted tokens on the dev traces.
  static constexpr uint32_t kMinClimbLength = 8;
  size_t Continuation(Match match, size_t want, bool climb_links, uint32_t* out,
                      uint32_t* used_state = nullptr) const;

  // Structure access (tests, tools).
  size_t size() const { return n_; }                // tokens in the window
  size_t capacity() const { return capacity_; }
  uint64_t total_extended() const { return total_; }  // tokens ever added since Reset
  uint64_t window_offset() const { return total_ - n_; }  // tokens dropped by rebuilds
  uint32_t Token(size_t position) const { return text_[position - 1]; }  // 1-based
  size_t num_states() const { return num_states_; }
  size_t num_transitions() const { return num_edges_; }
  // Slots of the transition table in use now (a power of two, at most half
  // of those reserved), and those that the capacity reserves.
  size_t table_slots() const { return slot_mask_ + 1; }
  size_t reserved_table_slots() const { return max_slots_; }
  uint32_t last() const { return last_; }
  uint32_t Len(uint32_t v) const { return states_[v].len; }
  uint32_t Link(uint32_t v) const { return states_[v].link; }  // kNone for the root
  uint32_t MinEndpos(uint32_t v) const { return states_[v].min_endpos; }  // 0 for the root
  uint32_t Next(uint32_t v, uint32_t token) const;                        // kNone if absent

 private:
  // A state's fields together, with its first two transitions inline (most
  // states have one or two): one cache line holds all a step reads of it,
  // and only further transitions go to the hash table (a probe there is a
  // cache miss of its own in a long context).
  struct State {
    uint32_t len;
    uint32_t link;
    uint32_t min_endpos;
    uint32_t first_edge;  // slot of its first hashed transition, kNone if none
    uint32_t token0;      // the inline transitions, in the order they were
    uint32_t target0;     // added (target0 == kNone: none; target1 == kNone:
    uint32_t token1;      // at most one); hashed ones come only after both
    uint32_t target1;     // 32 bytes: two states a cache line, none straddling
  };
  static_assert(sizeof(State) == 32);
  struct Slot;
  void Append(uint32_t token);  // Blumer step; requires n_ < capacity_
  void Rebuild();               // keep the last half of the window
  uint32_t NewState(uint32_t len, uint32_t link, uint32_t min_endpos);
  // The target field of v's transition on token (inline or hashed), or null.
  uint32_t* Find(uint32_t v, uint32_t token) const;
  void Insert(uint32_t v, uint32_t token, uint32_t target);
  void Place(Slot slot);             // into the table, first in its state's chain
  void ReserveHashed(size_t more);   // grows the table until `more` more fit at load <= 1/2
  bool Grow();                       // doubles the table; false when it cannot

  size_t capacity_ = 0;
  size_t n_ = 0;
  uint64_t total_ = 0;
  uint32_t last_ = kRoot;
  size_t num_states_ = 0;
  size_t num_edges_ = 0;
  size_t slot_mask_ = 0;   // table_slots() - 1
  size_t max_slots_ = 0;   // the reserved table's slots
  size_t num_hashed_ = 0;  // transitions in the table (the others are inline)
  // One block (format::HugeBuffer: 2 MiB pages where available) holding the
  // text, the states and the transition table.
  std::unique_ptr<format::HugeBuffer> memory_;
  uint32_t* text_ = nullptr;
  State* states_ = nullptr;
  Slot* slots_ = nullptr;
};

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_DYNAMIC_SAM_H_
