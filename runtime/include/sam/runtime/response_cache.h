// A cross-request response cache: a drafter over the earlier responses of the
// same deployment, kept apart from each request's own dynamic automaton.
//
//   auto cache = std::make_shared<sam::runtime::ResponseCache>(size_t{64} << 20);
//   // a finished request's output (or prompt + output), under its tenant key:
//   cache->Insert("team-a", output_ids);
//   // a session drafts from it (session.h: Session::AttachCache):
//   session.AttachCache(cache, "team-a");
//   // or directly: the longest suffix of a context found in team-a's responses
//   uint32_t draft[15];
//   auto m = cache->Draft("team-a", context_ids, 15, /*climb_links=*/false, draft);
//
// Structure. Per tenant, one suffix automaton (DynamicSam) over the
// concatenation of that tenant's retained responses, each followed by the
// separator kSeparator (a token id no tokenizer uses; responses holding it are
// refused). A match never crosses a separator (the query's separator resets
// it), and a draft stops at one, so every match and draft lies inside one
// response. A new response extends the automaton in place when its reserved
// capacity suffices (amortised O(1) per token); otherwise the tenant's
// automaton is rebuilt from its retained text with twice the tokens needed
// when the byte bound allows (O(retained tokens of that tenant)).
//
// Tenants. Every insert and lookup names a tenant key (any string, empty
// included). A tenant's automaton holds only its own responses: text cached
// under one key can never draft for another.
//
// Memory. Bounded by max_bytes with this accounting, exact (bytes() returns it
// and it never exceeds max_bytes after any call):
//   bytes() = sum over tenants holding responses of
//               kBytesPerTenant + key length
//             + DynamicSam::BytesForCapacity(capacity)   (text, states, transitions)
//             + kBytesPerResponse * retained responses
//             (+ with compiling on: the bytes of every compiled index)
// where capacity >= the tenant's retained tokens + one separator per response.
// With compiling on, the automata's part is bounded by max_bytes minus the
// compile budget and the compiled indexes by that budget.
// The automaton block is the real allocation (DynamicSam reserves exactly
// BytesForCapacity); the two constants cover the bookkeeping (tenant record,
// map node, per-response length and sequence number) as a fixed charge.
//
// Eviction: oldest first, by insertion order across all tenants. When an
// insert does not fit, the oldest responses (of any tenant) are evicted until
// it fits; a tenant that loses responses is rebuilt at exactly the capacity
// its remaining responses need (or removed when none remain). A response that
// could not fit even in an empty cache is not cached (Insert returns false).
//
// Compiled tenants (CompileOptions, off by default). The cache can also
// compile each tenant's retained responses into a static index in memory (the
// automaton builder, sam/automaton/builder.h: counts per state, the same
// automaton as an index built from those responses), so that sam-cal drafts
// count-weighted trees from them as from a shipped index (Session: a unit of its own, with its own
// calibration cells), where the automaton above offers one continuation. A
// tenant is compiled on the inserting thread once it holds min_tokens tokens,
// and again whenever the tokens inserted into it since its last compile reach
// growth times the tokens compiled then (amortised O(1/growth) builder work
// per inserted token). Responses inserted since are drafted by the automaton;
// responses evicted since stay in the compiled index until the next compile.
// Compiled indexes have a byte budget of their own, max_bytes (counted in
// bytes(); the automata then get the cache's bound minus it): a compile that
// does not fit drops the oldest compiled indexes of other tenants first, and
// is skipped when it does not fit alone. The index's vocabulary is the
// largest cached id plus one, and its root table holds an entry per id: a
// compile whose root table alone cannot fit is skipped before building (one
// stray id near 2^31 would otherwise cost gigabytes). The builder's working
// memory (about 60 bytes a token, and 4 bytes per id up to the largest;
// freed at the end) is outside the bound.
//
// Threads. Any number of threads may read (Draft, Match, cursors, inspection)
// while others Insert/Clear/Save/Load: inserts are serialised by one writer
// mutex; each tenant's automaton is guarded by a shared_mutex (readers share,
// a writer holds it only to extend or swap in a rebuilt automaton, which is
// built outside it). Cursors (below) belong to one thread each.
#ifndef SAM_RUNTIME_RESPONSE_CACHE_H_
#define SAM_RUNTIME_RESPONSE_CACHE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "sam/export.h"
#include "sam/format/index.h"  // Sha256Digest
#include "sam/runtime/dynamic_sam.h"
#include "sam/runtime/static_index.h"

namespace sam::runtime {

class SAM_API ResponseCache {
 public:
  // Separates responses in a tenant's text; never part of a match or a draft.
  static constexpr uint32_t kSeparator = 0xFFFFFFFFu;
  static constexpr size_t kBytesPerTenant = 256;
  static constexpr size_t kBytesPerResponse = 32;
  // After the cache changes, a cursor re-matches the last kRematchTokens
  // tokens it was fed (so a match found after a change is at most this long
  // plus the tokens fed since).
  static constexpr size_t kRematchTokens = 256;

  struct CompileOptions {
    bool enabled = false;
    size_t min_tokens = 512;   // a tenant is first compiled once it holds this many tokens
    double growth = 0.25;      // recompiled when its new tokens reach this share of the last
    size_t max_bytes = 0;      // budget of the compiled indexes (0: a quarter of the bound)
    // Compile on a thread of the cache's own instead of the inserting thread,
    // which then only queues the compile (for servers: a compile, about 30
    // ms for 200K tokens, would delay the request that just finished). The
    // compile reads the tenant's text as it is when it starts, and the new
    // index appears when it ends; WaitForCompiles() waits for the queue.
    bool background = false;
  };
  // A tenant's compiled index, prepared for drafting (a StaticIndex with hub
  // tables and no edge filter); it keeps its view alive.
  struct Compiled {
    std::shared_ptr<const StaticIndex> index;
    size_t responses = 0;  // the tenant's responses it holds (its documents)
    size_t bytes = 0;      // the index's bytes and the StaticIndex's memory
  };

  // Throws sam::Error (kInvalidArgument) for max_bytes == 0, and for a
  // compile budget that is not below max_bytes or a growth that is not
  // positive and finite.
  explicit ResponseCache(size_t max_bytes);
  ResponseCache(size_t max_bytes, const CompileOptions& compile);
  ~ResponseCache();
  ResponseCache(const ResponseCache&) = delete;
  ResponseCache& operator=(const ResponseCache&) = delete;

  // Adds one response under `tenant`, evicting the oldest responses when the
  // bound requires it. Returns false (nothing changes) for an empty response or
  // one too large for the bound alone. Throws sam::Error (kInvalidArgument)
  // for a response holding kSeparator, or longer than 2^29 tokens.
  bool Insert(std::string_view tenant, std::span<const uint32_t> tokens);
  // Forgets every response.
  void Clear();

  // Persistence (FORMAT.md "Response cache files"): Save writes every
  // retained response, oldest first, with its tenant key and the fingerprint
  // of the tokenizer its ids come from, atomically (a blob file: versioned,
  // checksummed). Load reads such a file and inserts its responses in order
  // (so a smaller bound keeps the newest). Errors (sam::Error, the file named):
  // kIo, kTruncated, kBadMagic, kUnsupportedVersion, kChecksumMismatch,
  // kCorruptStructure, and kTokenizerMismatch when the file's tokenizer is not
  // `tokenizer_sha256`; on error, nothing is inserted. Save holds the writer
  // lock while it collects the responses (readers go on).
  void Save(const std::string& path, const format::Sha256Digest& tokenizer_sha256) const;
  void Load(const std::string& path, const format::Sha256Digest& tokenizer_sha256);

  // Vocabulary. The cache file records no vocabulary, so the cache learns it
  // from the sessions that draft from it: RequireVocabulary(v) (called by
  // Session::AttachCache and AttachIndex with the indexes' vocabulary) throws
  // sam::Error (kInvalidArgument) when a response loaded from a file holds an
  // id >= v, naming the file, the response (counted from 1), the id and v;
  // otherwise the cache keeps the smallest such v. From then on Load refuses
  // a file holding an id >= v the same way (nothing inserted), Insert does
  // not cache a response holding one (returns false), and a compile treats
  // such an id (inserted before) as a response boundary, so that no
  // out-of-vocabulary id sizes a compiled index. Sessions never draft such
  // an id (Cursor::set_vocab_limit).
  void RequireVocabulary(uint32_t vocab_size);

  // The longest suffix of `context` that occurs inside one of the tenant's
  // responses (length 0: none, or unknown tenant), and up to `want` tokens
  // that follow its first occurrence in the tenant's text (oldest response
  // first), stopping at the response's end. With climb_links, while fewer than
  // `want` tokens follow, shorter suffixes (suffix links) are tried, whose first
  // occurrence may have a longer continuation. Returns the match length; *count
  // receives the number of tokens written to out. O(context + want).
  uint32_t Draft(std::string_view tenant, std::span<const uint32_t> context, size_t want,
                 bool climb_links, uint32_t* out, size_t* count) const;

  size_t max_bytes() const { return max_bytes_; }
  size_t bytes() const;          // accounted bytes (formula above, compiled indexes included)
  size_t compiled_bytes() const;  // of the compiled indexes (part of bytes())
  uint64_t num_compiles() const;  // tenants compiled since construction
  const CompileOptions& compile_options() const { return compile_; }
  // The tenant's compiled index (index null: none yet, or compiling is off).
  Compiled CompiledIndex(std::string_view tenant) const;
  // CompileOptions::background: returns once every compile queued before
  // (and since) the call is done. Immediate otherwise.
  void WaitForCompiles();
  size_t num_tenants() const;    // tenants holding responses
  size_t num_responses() const;  // retained responses, all tenants
  uint64_t num_evicted() const;  // responses evicted since construction or Clear
  // The tenant's retained responses, oldest first (tests, tools, Save).
  std::vector<std::vector<uint32_t>> Responses(std::string_view tenant) const;
  // Every tenant key holding responses, sorted.
  std::vector<std::string> Tenants() const;
  // The reserved automaton capacity (tokens) of a tenant, 0 if absent.
  size_t Capacity(std::string_view tenant) const;

  // A session's matching position in one tenant's responses: the longest
  // suffix of the tokens fed so far that occurs in them. A cursor is used by
  // one thread at a time, holds the tenant alive, and follows the cache as it
  // changes (re-matching its last kRematchTokens tokens).
  class SAM_API Cursor {
   public:
    Cursor() = default;
    // Forgets the tokens fed (a new request); keeps the tenant.
    void Reset();
    // Feeds tokens (prompt, committed tokens).
    void Advance(std::span<const uint32_t> tokens);
    // The match after also feeding `token`, without feeding it, and up to
    // `want` tokens that follow (as Draft); returns the match length.
    uint32_t Peek(uint32_t token, size_t want, bool climb_links, uint32_t* out,
                  size_t* count);
    // The match length of the tokens fed so far.
    uint32_t length();
    // The tenant's compiled index now (its index is null when there is none).
    Compiled compiled();
    const std::string& tenant() const { return key_; }
    bool attached() const { return cache_ != nullptr; }
    // Peek's continuation stops before the first id >= `vocab_size` (a cache
    // file's responses may hold ids of another vocabulary): the session
    // sets its indexes' vocabulary. Default: no limit.
    void set_vocab_limit(uint32_t vocab_size) { vocab_limit_ = vocab_size; }

   private:
    friend class ResponseCache;
    struct Tenant;
    void Resolve();  // finds the tenant again after the cache's key set changed
    void Sync();     // under the tenant's shared lock: re-match after a change
    const ResponseCache* cache_ = nullptr;
    uint32_t vocab_limit_ = UINT32_MAX;
    std::string key_;
    std::shared_ptr<Tenant> tenant_;
    uint64_t map_version_ = ~uint64_t{0};
    uint64_t generation_ = ~uint64_t{0};
    uint32_t state_ = DynamicSam::kRoot;
    uint32_t len_ = 0;
    std::vector<uint32_t> recent_;  // last tokens fed (at most 2 * kRematchTokens)
  };
  // A cursor over `tenant` (which need not hold responses yet).
  Cursor OpenCursor(std::string_view tenant) const;

 private:
  struct Response {
    uint64_t sequence;  // insertion order, for eviction
    uint32_t length;    // tokens, separator excluded
  };
  using Tenant = Cursor::Tenant;
  std::shared_ptr<Tenant> Find(std::string_view tenant) const;
  bool InsertFrom(std::string_view tenant, std::span<const uint32_t> tokens,
                  const std::string* origin);
  // Rebuilds t's automaton over its text after the first skip_tokens tokens,
  // followed by `extra` and a separator when extra is not empty, with the
  // given capacity; swaps it in (write_mu_ held).
  static void Rebuild(Tenant& t, size_t skip_tokens, std::span<const uint32_t> extra,
                      size_t capacity);
  struct CompileWorker;
  // CompileOptions: whether t's compile is due (then counted as started),
  // the compile (now, or queued for the worker), the worker's loop, and the
  // swap of a compiled index into t within the budget (write_mu_ held but
  // in CompileLoop).
  bool CompileDue(Tenant& t);
  void MaybeCompile(const std::shared_ptr<Tenant>& t);
  void CompileLoop();
  void Publish(Tenant& t, Compiled built);
  // The compiled indexes' byte budget (CompileOptions::max_bytes or its default).
  size_t compile_budget() const { return max_bytes_ - automata_bytes_; }
  // Drops t's compiled index (write_mu_ held).
  void DropCompiled(Tenant& t);

  const size_t max_bytes_;
  const CompileOptions compile_;
  const size_t automata_bytes_;  // the bound of the automata: max_bytes_ minus the compile budget
  mutable std::mutex write_mu_;        // serialises writers; guards the fields below
  mutable std::shared_mutex map_mu_;   // guards tenants_ (readers resolve keys)
  std::map<std::string, std::shared_ptr<Tenant>, std::less<>> tenants_;
  std::atomic<uint64_t> map_version_{0};  // changes when tenants_ gains or loses a key
  std::deque<std::pair<uint64_t, Tenant*>> order_;  // (sequence, tenant), oldest first
  uint64_t next_sequence_ = 0;
  std::atomic<uint32_t> vocab_size_{0};  // learnt by RequireVocabulary (0: none yet)
  uint32_t loaded_max_id_ = 0;   // largest id loaded from a file since construction or Clear
  bool has_loaded_ids_ = false;
  std::string loaded_max_id_origin_;  // its file and response (for the error)
  size_t bytes_ = 0;  // the automata's, formula above
  size_t responses_ = 0;
  uint64_t evicted_ = 0;
  size_t compiled_bytes_ = 0;
  uint64_t compiles_ = 0;
  std::deque<Tenant*> compiled_order_;  // tenants with a compiled index, oldest compile first
  uint64_t clear_epoch_ = 0;  // Clear() calls: a compile queued before one is dropped
  std::unique_ptr<CompileWorker> worker_;  // CompileOptions::background; joined by ~ResponseCache
};

}  // namespace sam::runtime

#endif  // SAM_RUNTIME_RESPONSE_CACHE_H_
