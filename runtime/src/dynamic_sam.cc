#include "sam/runtime/dynamic_sam.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "sam/error.h"

namespace sam::runtime {

// One transition: (state, token) -> target, chained with the state's other
// transitions through `next` (slot index, kNone at the end) so that a clone can
// copy them. state == kNone marks an empty slot.
struct DynamicSam::Slot {
  uint32_t state;
  uint32_t token;
  uint32_t target;
  uint32_t next;
};

namespace {

constexpr size_t kMinCapacity = 4;
constexpr size_t kMaxCapacity = size_t{1} << 30;
// The table's size after construction and Reset (1 KiB of slots): it doubles
// as the text's transitions need it.
constexpr size_t kMinTableSlots = 64;

size_t StatesFor(size_t capacity) { return 2 * capacity + 1; }
size_t TextBytes(size_t capacity) { return capacity * sizeof(uint32_t); }

// A suffix automaton over n >= 3 tokens has at most 3n - 4 transitions and
// at least n + 1 states, every one of which but the last holds its first
// transition inline (two when it has them), so the table holds at most 2n;
// it keeps the load factor at or below 3/4 even then. (The tighter bound of
// states + n - 2 transitions leaves at most n - 1 in the table, which half
// of it holds at that load: Grow uses the other half as room.)
size_t SlotsFor(size_t capacity) {
  size_t slots = 16;
  while (slots < (8 * capacity + 2) / 3) slots *= 2;
  return slots;
}

inline size_t HashSlot(uint32_t state, uint32_t token, size_t mask) {
  uint64_t x = (uint64_t{state} << 32 | token) * 0x9E3779B97F4A7C15ull;
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return static_cast<size_t>(x) & mask;
}

}  // namespace

size_t DynamicSam::BytesForCapacity(size_t capacity_tokens) {
  size_t cap = std::max(capacity_tokens, kMinCapacity);
  return TextBytes(cap) + StatesFor(cap) * sizeof(State) + SlotsFor(cap) * sizeof(Slot);
}

size_t DynamicSam::CapacityForBytes(size_t bytes) {
  size_t lo = kMinCapacity, hi = kMaxCapacity;
  if (BytesForCapacity(hi) <= bytes) return hi;
  while (lo + 1 < hi) {  // largest capacity whose footprint fits
    size_t mid = lo + (hi - lo) / 2;
    if (BytesForCapacity(mid) <= bytes) lo = mid; else hi = mid;
  }
  return lo;
}

DynamicSam::DynamicSam(size_t capacity_tokens) {
  if (capacity_tokens > kMaxCapacity)
    throw Error(ErrorCode::kInvalidArgument, "DynamicSam: capacity " +
                                                 std::to_string(capacity_tokens) +
                                                 " tokens exceeds the maximum of 2^30");
  capacity_ = std::max(capacity_tokens, kMinCapacity);
  const size_t states = StatesFor(capacity_);
  const size_t slots = SlotsFor(capacity_);
  // Slots first (16-byte aligned at the block's start), then states, then text.
  memory_ = std::make_unique<format::HugeBuffer>(BytesForCapacity(capacity_));
  auto* base = static_cast<uint8_t*>(memory_->data());
  slots_ = reinterpret_cast<Slot*>(base);
  states_ = reinterpret_cast<State*>(base + slots * sizeof(Slot));
  text_ = reinterpret_cast<uint32_t*>(base + slots * sizeof(Slot) + states * sizeof(State));
  max_slots_ = slots;
  // Only the table's first slots are in use (and so touched) at first: it
  // grows with the text (Grow), so that a short request keeps a few
  // kilobytes of table resident and in the caches rather than the
  // capacity's worst case.
  slot_mask_ = std::min(slots, kMinTableSlots) - 1;
  for (size_t i = 0; i <= slot_mask_; ++i) slots_[i].state = kNone;
  num_states_ = 0;
  NewState(0, kNone, 0);  // root
  last_ = kRoot;
}

DynamicSam::DynamicSam(DynamicSam&&) noexcept = default;
DynamicSam& DynamicSam::operator=(DynamicSam&&) noexcept = default;
DynamicSam::~DynamicSam() = default;

void DynamicSam::Reset() {
  // Clear only the slots in use: O(transitions), not O(table).
  for (size_t v = 0; v < num_states_; ++v) {
    for (uint32_t s = states_[v].first_edge; s != kNone;) {
      uint32_t next = slots_[s].next;
      slots_[s].state = kNone;
      s = next;
    }
  }
  // Every slot of the table is free again; it starts small again.
  slot_mask_ = std::min(max_slots_, kMinTableSlots) - 1;
  num_hashed_ = 0;
  num_states_ = 0;
  num_edges_ = 0;
  n_ = 0;
  total_ = 0;
  NewState(0, kNone, 0);
  last_ = kRoot;
}

uint32_t DynamicSam::NewState(uint32_t len, uint32_t link, uint32_t min_endpos) {
  uint32_t v = static_cast<uint32_t>(num_states_++);
  states_[v] = State{len, link, min_endpos, kNone, 0, kNone, 0, kNone};
  return v;
}

uint32_t* DynamicSam::Find(uint32_t v, uint32_t token) const {
  State& st = states_[v];
  if (st.target0 == kNone) return nullptr;  // no transitions at all
  if (st.token0 == token) return &st.target0;
  if (st.target1 == kNone) return nullptr;  // only the first inline one
  if (st.token1 == token) return &st.target1;
  if (st.first_edge == kNone) return nullptr;  // only the inline ones
  for (size_t i = HashSlot(v, token, slot_mask_);; i = (i + 1) & slot_mask_) {
    Slot& s = slots_[i];
    if (s.state == kNone) return nullptr;
    if (s.state == v && s.token == token) return &s.target;
  }
}

void DynamicSam::Insert(uint32_t v, uint32_t token, uint32_t target) {
  ++num_edges_;
  State& st = states_[v];
  if (st.target0 == kNone) {
    st.token0 = token;
    st.target0 = target;
    return;
  }
  if (st.target1 == kNone) {
    st.token1 = token;
    st.target1 = target;
    return;
  }
  if ((num_hashed_ + 1) * 2 > slot_mask_ + 1) ReserveHashed(1);
  Place(Slot{v, token, target, kNone});
}

// Puts a transition into the table at the first free slot of its probe
// sequence, first in its state's chain. Requires a free slot.
void DynamicSam::Place(Slot slot) {
  size_t i = HashSlot(slot.state, slot.token, slot_mask_);
  while (slots_[i].state != kNone) i = (i + 1) & slot_mask_;
  uint32_t& first = states_[slot.state].first_edge;
  slot.next = first;
  slots_[i] = slot;
  first = static_cast<uint32_t>(i);
  ++num_hashed_;
}

void DynamicSam::ReserveHashed(size_t more) {
  // Load factor at most 1/2: a probe for an absent transition (the climbs
  // of Lookup and Extend make many) then reads two slots on average, not the
  // eight of a load of 3/4.
  while ((num_hashed_ + more) * 2 > slot_mask_ + 1 && Grow()) {
  }
}

// Doubles the table and places every transition again (their slots, and so
// the chains, change; what Find returns does not). The table takes at most
// half the reserved slots, and the transitions wait in the other half
// while they are placed again. Even at half, the load stays at or below 3/4:
// a suffix automaton over n tokens has at most states + n - 2 transitions,
// and every state but the last holds one or two inline, so at most n - 1 <
// capacity are in the table, and SlotsFor reserves 8/3 slots a token.
bool DynamicSam::Grow() {
  const size_t old_slots = slot_mask_ + 1, new_slots = 2 * old_slots;
  if (new_slots > max_slots_ / 2) return false;
  Slot* saved = slots_ + new_slots;
  size_t k = 0;
  for (size_t i = 0; i < old_slots; ++i) {
    if (slots_[i].state == kNone) continue;
    states_[slots_[i].state].first_edge = kNone;
    saved[k++] = slots_[i];
  }
  for (size_t i = 0; i < new_slots; ++i) slots_[i].state = kNone;
  slot_mask_ = new_slots - 1;
  num_hashed_ = 0;
  for (size_t j = 0; j < k; ++j) Place(saved[j]);
  return true;
}

uint32_t DynamicSam::Next(uint32_t v, uint32_t token) const {
  const uint32_t* target = Find(v, token);
  return target ? *target : kNone;
}

void DynamicSam::Extend(uint32_t token) {
  if (n_ == capacity_) Rebuild();
  text_[n_] = token;
  Append(token);
}

void DynamicSam::Extend(std::span<const uint32_t> tokens) {
  // A long span (a prompt) would double the table several times on the way;
  // grow it once, up front, to what the text it makes can need: at most
  // n - 1 transitions hashed over n tokens (see Grow), n bounded by the
  // capacity (a rebuild on the way starts the table small again).
  if (tokens.size() > kMinTableSlots) {
    const size_t n = std::min(n_ + tokens.size(), capacity_);
    if (n > num_hashed_ + 1) ReserveHashed(n - 1 - num_hashed_);
  }
  for (uint32_t t : tokens) Extend(t);
}

// Blumer et al.: add one state for the new whole text, walk the suffix links of
// the previous whole text adding transitions, and split (clone) the first state
// whose longest string is longer than the suffix we arrived through.
void DynamicSam::Append(uint32_t c) {
  const uint32_t pos = static_cast<uint32_t>(++n_);
  ++total_;
  const uint32_t cur = NewState(states_[last_].len + 1, kRoot, pos);
  // The state of the whole text (last_) never has transitions: add c to it
  // without searching, then walk its suffix links.
  uint32_t p = last_;
  Insert(p, c, cur);
  p = states_[p].link;
  uint32_t* edge = nullptr;
  while (p != kNone && (edge = Find(p, c)) == nullptr) {
    Insert(p, c, cur);
    p = states_[p].link;
  }
  if (p != kNone) {
    const uint32_t q = *edge;
    if (states_[p].len + 1 == states_[q].len) {
      states_[cur].link = q;
    } else {
      const uint32_t clone = NewState(states_[p].len + 1, states_[q].link, states_[q].min_endpos);
      if (states_[q].target0 != kNone) Insert(clone, states_[q].token0, states_[q].target0);
      if (states_[q].target1 != kNone) Insert(clone, states_[q].token1, states_[q].target1);
      // The copies below walk q's chain by slot: the table must not grow
      // (and move them) on the way.
      size_t hashed = 0;
      for (uint32_t s = states_[q].first_edge; s != kNone; s = slots_[s].next) ++hashed;
      ReserveHashed(hashed);
      for (uint32_t s = states_[q].first_edge; s != kNone; s = slots_[s].next)
        Insert(clone, slots_[s].token, slots_[s].target);
      while (p != kNone) {
        uint32_t* e = Find(p, c);
        if (e == nullptr || *e != q) break;
        *e = clone;
        p = states_[p].link;
      }
      states_[q].link = clone;
      states_[cur].link = clone;
    }
  }
  last_ = cur;
}

void DynamicSam::Rebuild() {
  const size_t keep = capacity_ / 2;
  const size_t drop = n_ - keep;
  const uint64_t total = total_;
  std::memmove(text_, text_ + drop, keep * sizeof(uint32_t));
  Reset();
  for (size_t i = 0; i < keep; ++i) {
    text_[n_] = text_[i];  // n_ == i: the token stays where it is
    Append(text_[i]);
  }
  total_ = total;
}

void DynamicSam::PrefetchLookup(uint32_t token) const {
  const uint32_t v = states_[last_].link;
  if (v != kNone) __builtin_prefetch(&slots_[HashSlot(v, token, slot_mask_)]);
}

DynamicSam::Match DynamicSam::Lookup(uint32_t token) const {
  // The state of the whole text has no transitions; climbing from its
  // suffix link finds the longest suffix that continues with `token`.
  uint32_t v = states_[last_].link;
  while (v != kNone) {
    if (const uint32_t* target = Find(v, token)) return Match{*target, states_[v].len + 1};
    v = states_[v].link;
  }
  return Match{kRoot, 0};
}

size_t DynamicSam::Continuation(Match match, size_t want, bool climb_links, uint32_t* out,
                                uint32_t* used_state) const {
  uint32_t v = match.state;
  if (v == kRoot || want == 0) {
    if (used_state) *used_state = v;
    return 0;
  }
  // A shorter suffix occurs at least wherever a longer one does, so its first
  // end position is never later: climbing can only lengthen the continuation.
  while (climb_links && n_ - states_[v].min_endpos < want && states_[v].link != kRoot &&
         states_[v].link != kNone && states_[states_[v].link].len >= kMinClimbLength)
    v = states_[v].link;
  const size_t begin = states_[v].min_endpos;  // 1-based end = 0-based index of the next token
  const size_t count = std::min(want, n_ - begin);
  std::copy(text_ + begin, text_ + begin + count, out);
  if (used_state) *used_state = v;
  return count;
}

}  // namespace sam::runtime
