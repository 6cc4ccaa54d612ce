#include "sam/runtime/response_cache.h"

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <new>
#include <optional>
#include <string>
#include <thread>

#include "sam/error.h"
#include "sam/format/blob_file.h"
#include "sam/format/packed.h"
#include "sam/format/response_cache_file.h"
#include "sam/format/sha256.h"
#include "sam/automaton/builder.h"

namespace sam::runtime {

// One tenant: its automaton (readers hold mu shared), and the writer's
// bookkeeping (guarded by the cache's write_mu_).
struct ResponseCache::Cursor::Tenant {
  explicit Tenant(std::string k) : key(std::move(k)) {}
  const std::string key;
  mutable std::shared_mutex mu;
  std::unique_ptr<DynamicSam> sam;  // guarded by mu
  uint64_t generation = 0;          // guarded by mu; changes with the automaton
  std::deque<Response> responses;   // write_mu_
  size_t used = 0;                  // tokens in the automaton (separators included); write_mu_
  size_t capacity = 0;              // write_mu_
  // CompileOptions: the compiled index (guarded by mu), and when it is due
  // again (write_mu_): tokens inserted since the last compile, and the
  // tokens compiled then.
  ResponseCache::Compiled compiled;
  size_t inserted_since = 0;
  size_t compiled_tokens = 0;
  bool compile_queued = false;  // CompileOptions::background: in the worker's queue
};

namespace {

constexpr size_t kMaxResponseTokens = size_t{1} << 29;
constexpr size_t kMaxTenantCapacity = size_t{1} << 30;

size_t TenantBytes(size_t key_size, size_t capacity, size_t responses) {
  return ResponseCache::kBytesPerTenant + key_size + DynamicSam::BytesForCapacity(capacity) +
         ResponseCache::kBytesPerResponse * responses;
}

// The matching step of a cursor: the longest suffix of (matched text + token)
// that occurs. The separator never matches, so matches stay inside responses.
inline void Transfer(const DynamicSam& sam, uint32_t token, uint32_t* state, uint32_t* len) {
  if (token == ResponseCache::kSeparator) {
    *state = DynamicSam::kRoot;
    *len = 0;
    return;
  }
  uint32_t v = *state;
  uint32_t l = *len;
  uint32_t next;
  while ((next = sam.Next(v, token)) == DynamicSam::kNone) {
    if (v == DynamicSam::kRoot) {
      *state = DynamicSam::kRoot;
      *len = 0;
      return;
    }
    v = sam.Link(v);
    l = sam.Len(v);
  }
  *state = next;
  *len = l + 1;
}

// Tokens after the first occurrence of state v's strings, up to the end of that
// response (the separator) and at most `want`.
inline size_t FollowingTokens(const DynamicSam& sam, uint32_t v, size_t want) {
  const size_t begin = sam.MinEndpos(v);
  const size_t end = std::min(sam.size(), begin + want);
  size_t p = begin;
  while (p < end && sam.Token(p + 1) != ResponseCache::kSeparator) ++p;
  return p - begin;
}

// The draft after a match (state v): its continuation, or with climb_links
// the longest continuation among v and its suffix-link ancestors (a shorter
// suffix's first occurrence may lie in another response).
size_t Continue(const DynamicSam& sam, uint32_t v, size_t want, bool climb_links, uint32_t* out) {
  if (v == DynamicSam::kRoot || want == 0) return 0;
  uint32_t best = v;
  size_t best_count = FollowingTokens(sam, v, want);
  for (uint32_t u = sam.Link(v); climb_links && best_count < want && u != DynamicSam::kRoot &&
                                 u != DynamicSam::kNone;
       u = sam.Link(u)) {
    const size_t count = FollowingTokens(sam, u, want);
    if (count > best_count) best = u, best_count = count;
  }
  const size_t begin = sam.MinEndpos(best);
  for (size_t k = 0; k < best_count; ++k) out[k] = sam.Token(begin + k + 1);
  return best_count;
}

}  // namespace

namespace {

size_t CompileBudget(size_t max_bytes, const ResponseCache::CompileOptions& c) {
  if (!c.enabled) return 0;
  return c.max_bytes != 0 ? c.max_bytes : max_bytes / 4;
}

// An index compiled in memory: its bytes and the file over them (the view
// handed out aliases this, so the bytes live as long as any view).
struct CompiledHolder {
  std::vector<uint8_t> bytes;
  std::optional<format::IndexFile> file;
};

}  // namespace

ResponseCache::ResponseCache(size_t max_bytes) : ResponseCache(max_bytes, CompileOptions{}) {}

ResponseCache::ResponseCache(size_t max_bytes, const CompileOptions& compile)
    : max_bytes_(max_bytes),
      compile_(compile),
      automata_bytes_(max_bytes - std::min(max_bytes, CompileBudget(max_bytes, compile))) {
  if (max_bytes == 0)
    throw Error(ErrorCode::kInvalidArgument, "ResponseCache: max_bytes must be positive");
  if (compile.enabled) {
    const size_t budget = CompileBudget(max_bytes, compile);
    if (budget == 0 || budget >= max_bytes)
      throw Error(ErrorCode::kInvalidArgument,
                  "ResponseCache: the compile budget must be positive and below max_bytes (" +
                      std::to_string(max_bytes) + "), got " + std::to_string(budget));
    if (!(compile.growth > 0.0) || !std::isfinite(compile.growth))
      throw Error(ErrorCode::kInvalidArgument,
                  "ResponseCache: CompileOptions::growth must be positive and finite");
    if (compile.background) worker_ = std::make_unique<CompileWorker>();  // thread: on first use
  }
}

void ResponseCache::DropCompiled(Tenant& t) {
  if (t.compiled.index == nullptr) return;
  compiled_bytes_ -= t.compiled.bytes;
  compiled_order_.erase(std::find(compiled_order_.begin(), compiled_order_.end(), &t));
  std::unique_lock lock(t.mu);
  t.compiled = Compiled{};
}

namespace {

// A tenant automaton's whole text (positions 1..size()).
std::vector<uint32_t> TextOf(const DynamicSam& sam) {
  std::vector<uint32_t> text(sam.size());
  for (size_t p = 1; p <= text.size(); ++p) text[p - 1] = sam.Token(p);
  return text;
}

// A tenant's text (its responses, each followed by the separator) compiled:
// the builder's index in memory and its StaticIndex (hub tables, no filter).
// Null index when the text holds ids no vocabulary has (2^31 and above: the
// builder refuses such a vocabulary), when the index cannot fit `budget`
// bytes (below), or when memory ran out: the automaton alone drafts for that
// tenant until the next compile.
//
// The index's vocabulary is the largest id plus one, and its root table
// (FORMAT.md, ROOT) holds a state id per vocabulary entry, of at least
// BitsFor(tokens) bits: a lower bound on the index's bytes that Publish
// compares with the same budget after the build. Checking it first spares a
// build whose time and memory grow with the largest id, not with the text:
// one stray id near 2^31 would cost seconds and gigabytes per compile.
// Once the cache knows its sessions' vocabulary (`vocab_size` > 0), an id at
// or above it (inserted before the vocabulary was known) ends the piece of
// response before it, like a separator: no session drafts it, and it never
// sizes the index.
ResponseCache::Compiled BuildCompiled(const std::string& key, std::vector<uint32_t> text,
                                      size_t budget, uint32_t vocab_size) {
  ResponseCache::Compiled out;
  uint32_t max_id = 0;
  uint64_t tokens = 0;
  size_t responses = 0;
  for (uint32_t& id : text) {
    if (id == ResponseCache::kSeparator) {
      ++responses;
      continue;
    }
    if (vocab_size > 0 && id >= vocab_size) {
      id = ResponseCache::kSeparator;
      continue;
    }
    max_id = std::max(max_id, id);
    ++tokens;
  }
  if (format::PackedBytes(uint64_t{max_id} + 1, format::BitsFor(tokens)) > budget) return out;
  auto holder = std::make_shared<CompiledHolder>();
  try {
    automaton::SuffixAutomatonBuilder builder(max_id + 1, text.size());
    const std::span<const uint32_t> all(text);
    size_t begin = 0;
    for (size_t p = 0; p < all.size(); ++p) {
      if (all[p] != ResponseCache::kSeparator) continue;
      if (p > begin) builder.AddDocument(all.subspan(begin, p - begin));
      begin = p + 1;
    }
    out.responses = responses;
    const std::string name = "response cache tenant '" + key + "'";
    builder.WriteToMemory({}, &holder->bytes, name);
    holder->file.emplace(
        format::IndexFile::FromBuffer(holder->bytes.data(), holder->bytes.size(), name));
    StaticIndex::Options options;
    options.filter_bits_per_edge = 0;  // small indexes: the hub tables are what trees need
    out.index = StaticIndex::Create(
        std::shared_ptr<const format::IndexView>(holder, &holder->file->view()), options);
    out.bytes = holder->bytes.size() + out.index->memory_bytes();
  } catch (const std::exception&) {
    return {};
  }
  return out;
}

}  // namespace

// The compile thread of CompileOptions::background: a queue of tenants whose
// compile is due, worked off one at a time.
struct ResponseCache::CompileWorker {
  struct Item {
    std::weak_ptr<Tenant> tenant;
    uint64_t epoch;  // the cache's clear_epoch_ when queued
  };
  std::mutex mu;  // after write_mu_ when both are held
  std::condition_variable cv;
  std::deque<Item> queue;
  size_t in_flight = 0;
  bool stop = false;
  std::thread thread;
};

bool ResponseCache::CompileDue(Tenant& t) {
  if (!compile_.enabled || t.used < compile_.min_tokens || t.inserted_since == 0) return false;
  if (t.compiled_tokens > 0 && static_cast<double>(t.inserted_since) <
                                   compile_.growth * static_cast<double>(t.compiled_tokens))
    return false;
  t.inserted_since = 0;
  t.compiled_tokens = t.used;
  return true;
}

void ResponseCache::MaybeCompile(const std::shared_ptr<Tenant>& t) {
  if (!CompileDue(*t)) return;
  if (!compile_.background) {
    // Only this writer changes t's automaton: read it without its lock.
    Publish(*t, BuildCompiled(t->key, TextOf(*t->sam), compile_budget(),
                               vocab_size_.load(std::memory_order_relaxed)));
    return;
  }
  if (t->compile_queued) return;  // the queued compile will read the newer text
  t->compile_queued = true;
  {
    std::lock_guard lock(worker_->mu);
    worker_->queue.push_back({t, clear_epoch_});
    if (!worker_->thread.joinable()) worker_->thread = std::thread([this] { CompileLoop(); });
  }
  worker_->cv.notify_one();
}

void ResponseCache::CompileLoop() {
  CompileWorker& w = *worker_;
  std::unique_lock lock(w.mu);
  for (;;) {
    w.cv.wait(lock, [&] { return w.stop || !w.queue.empty(); });
    if (w.stop) return;
    const CompileWorker::Item item = w.queue.front();
    w.queue.pop_front();
    ++w.in_flight;
    lock.unlock();
    if (const std::shared_ptr<Tenant> t = item.tenant.lock()) {
      // The text as it is now (it may have grown since the compile was
      // queued), copied under the tenant's lock; built without any lock.
      std::vector<uint32_t> text;
      {
        std::shared_lock read(t->mu);
        text = TextOf(*t->sam);
      }
      Compiled built = BuildCompiled(t->key, std::move(text), compile_budget(),
                                     vocab_size_.load(std::memory_order_relaxed));
      std::lock_guard write(write_mu_);
      t->compile_queued = false;
      // Not for a tenant that Clear() or eviction removed meanwhile.
      auto it = tenants_.find(t->key);
      if (item.epoch == clear_epoch_ && it != tenants_.end() && it->second == t)
        Publish(*t, std::move(built));
    }
    lock.lock();
    --w.in_flight;
    if (w.queue.empty() && w.in_flight == 0) w.cv.notify_all();
  }
}

void ResponseCache::WaitForCompiles() {
  if (worker_ == nullptr) return;
  std::unique_lock lock(worker_->mu);
  worker_->cv.wait(lock, [&] { return worker_->queue.empty() && worker_->in_flight == 0; });
}

void ResponseCache::Publish(Tenant& t, Compiled built) {
  const size_t budget = compile_budget();
  if (built.index == nullptr || built.bytes > budget) return;
  // t's old index goes, then other tenants' ones, oldest first, until it fits.
  DropCompiled(t);
  while (compiled_bytes_ + built.bytes > budget) DropCompiled(*compiled_order_.front());
  compiled_order_.push_back(&t);  // first: if it throws, t has none
  ++compiles_;
  compiled_bytes_ += built.bytes;
  std::unique_lock lock(t.mu);
  t.compiled = std::move(built);
}

ResponseCache::Compiled ResponseCache::CompiledIndex(std::string_view tenant) const {
  const std::shared_ptr<Tenant> t = Find(tenant);
  if (t == nullptr) return {};
  std::shared_lock lock(t->mu);
  return t->compiled;
}

size_t ResponseCache::compiled_bytes() const {
  std::lock_guard write(write_mu_);
  return compiled_bytes_;
}

uint64_t ResponseCache::num_compiles() const {
  std::lock_guard write(write_mu_);
  return compiles_;
}

ResponseCache::~ResponseCache() {
  if (worker_ == nullptr) return;
  {
    std::lock_guard lock(worker_->mu);
    worker_->stop = true;
  }
  worker_->cv.notify_all();
  if (worker_->thread.joinable()) worker_->thread.join();
}

std::shared_ptr<ResponseCache::Tenant> ResponseCache::Find(std::string_view tenant) const {
  std::shared_lock lock(map_mu_);
  auto it = tenants_.find(tenant);
  return it == tenants_.end() ? nullptr : it->second;
}

void ResponseCache::Rebuild(Tenant& t, size_t skip_tokens, std::span<const uint32_t> extra,
                            size_t capacity) {
  // Built outside the tenant's lock (readers keep drafting from the old one);
  // only this writer modifies t.sam, so reading it here is safe.
  auto sam = std::make_unique<DynamicSam>(capacity);
  for (size_t p = skip_tokens + 1; p <= t.used; ++p) sam->Extend(t.sam->Token(p));
  if (!extra.empty()) {
    sam->Extend(extra);
    sam->Extend(kSeparator);
  }
  std::unique_lock lock(t.mu);
  t.sam = std::move(sam);
  ++t.generation;
}

bool ResponseCache::Insert(std::string_view tenant, std::span<const uint32_t> tokens) {
  return InsertFrom(tenant, tokens, nullptr);
}

// `origin` names a loaded response (file, response number) for the error of a
// later RequireVocabulary; null for an inserted one.
bool ResponseCache::InsertFrom(std::string_view tenant, std::span<const uint32_t> tokens,
                               const std::string* origin) {
  if (tokens.empty()) return false;
  if (tokens.size() > kMaxResponseTokens)
    throw Error(ErrorCode::kInvalidArgument,
                "ResponseCache::Insert: a response of " + std::to_string(tokens.size()) +
                    " tokens exceeds the limit of 2^29");
  if (std::find(tokens.begin(), tokens.end(), kSeparator) != tokens.end())
    throw Error(ErrorCode::kInvalidArgument,
                "ResponseCache::Insert: the response holds token 4294967295, the cache's "
                "separator, which no tokenizer produces");
  const size_t need_new = tokens.size() + 1;
  if (TenantBytes(tenant.size(), need_new, 1) > automata_bytes_) return false;

  std::lock_guard write(write_mu_);
  const uint32_t largest = *std::max_element(tokens.begin(), tokens.end());
  const uint32_t vocab_size = vocab_size_.load(std::memory_order_relaxed);
  if (vocab_size > 0 && largest >= vocab_size) return false;  // an id no session knows
  if (origin != nullptr && (!has_loaded_ids_ || largest > loaded_max_id_)) {
    has_loaded_ids_ = true;
    loaded_max_id_ = largest;
    loaded_max_id_origin_ = *origin;
  }
  std::shared_ptr<Tenant> t;
  if (auto it = tenants_.find(tenant); it != tenants_.end()) t = it->second;
  const uint64_t sequence = next_sequence_++;
  const Response response{sequence, static_cast<uint32_t>(tokens.size())};

  // In place: the reserved capacity holds it and one more record fits.
  if (t != nullptr && t->used + need_new <= t->capacity &&
      bytes_ + kBytesPerResponse <= automata_bytes_) {
    {
      std::unique_lock lock(t->mu);
      t->sam->Extend(tokens);
      t->sam->Extend(kSeparator);
      ++t->generation;
    }
    t->used += need_new;
    t->responses.push_back(response);
    order_.emplace_back(sequence, t.get());
    bytes_ += kBytesPerResponse;
    ++responses_;
    t->inserted_since += need_new;
    MaybeCompile(t);
    return true;
  }

  // Plan: evict the oldest responses until everything fits, with the
  // inserting tenant at exactly the capacity it needs and every other tenant
  // that loses responses rebuilt at exactly its remaining need.
  struct Plan {
    size_t drops = 0;
    size_t dropped_tokens = 0;
  };
  std::map<Tenant*, Plan> plans;
  size_t t_responses = t ? t->responses.size() : 0;
  size_t t_used = t ? t->used : 0;
  size_t others = bytes_ - (t ? TenantBytes(t->key.size(), t->capacity, t_responses) : 0);
  auto t_fixed = [&] { return kBytesPerTenant + tenant.size() + kBytesPerResponse * (t_responses + 1); };
  size_t evict = 0;
  while (others + t_fixed() + DynamicSam::BytesForCapacity(t_used + need_new) > automata_bytes_ ||
         t_used + need_new > kMaxTenantCapacity) {
    // Terminates: with everything evicted, others == 0 and the response fits
    // alone (checked above).
    Tenant* u = order_[evict++].second;
    Plan& plan = plans[u];
    const size_t length = u->responses[plan.drops].length + 1;
    if (u == t.get()) {
      --t_responses;
      t_used -= length;
    } else {
      const size_t remaining = u->responses.size() - plan.drops;
      const size_t old_cost = TenantBytes(
          u->key.size(), plan.drops == 0 ? u->capacity : u->used - plan.dropped_tokens, remaining);
      const size_t new_cost =
          remaining == 1 ? 0
                         : TenantBytes(u->key.size(), u->used - plan.dropped_tokens - length,
                                       remaining - 1);
      others = others - old_cost + new_cost;
    }
    ++plan.drops;
    plan.dropped_tokens += length;
  }
  const size_t t_need = t_used + need_new;
  const size_t budget = automata_bytes_ - others - t_fixed();
  const size_t capacity = std::clamp(
      std::min(2 * t_need, DynamicSam::CapacityForBytes(budget)), t_need, kMaxTenantCapacity);

  // Apply: other tenants first (rebuilt smaller or removed), then this one.
  const Plan own = t != nullptr && plans.count(t.get()) ? plans[t.get()] : Plan{};
  std::vector<std::shared_ptr<Tenant>> removed;  // freed after the loop, not during it
  bool map_changed = false;
  for (auto& [u, plan] : plans) {
    if (u == t.get()) continue;
    if (plan.drops == u->responses.size()) {
      DropCompiled(*u);  // (takes u's lock: not under map_mu_)
      std::unique_lock map_lock(map_mu_);
      auto it = tenants_.find(u->key);
      removed.push_back(std::move(it->second));  // cursors holding it re-resolve
      tenants_.erase(it);
      map_changed = true;
      continue;
    }
    const size_t remaining = u->used - plan.dropped_tokens;
    Rebuild(*u, plan.dropped_tokens, {}, remaining);
    u->responses.erase(u->responses.begin(), u->responses.begin() + plan.drops);
    u->used = remaining;
    u->capacity = remaining;
  }
  if (t == nullptr) {
    t = std::make_shared<Tenant>(std::string(tenant));
    t->sam = std::make_unique<DynamicSam>(4);
    std::unique_lock map_lock(map_mu_);
    tenants_.emplace(t->key, t);
    map_changed = true;
  }
  Rebuild(*t, own.dropped_tokens, tokens, capacity);
  t->responses.erase(t->responses.begin(), t->responses.begin() + own.drops);
  t->responses.push_back(response);
  t->used = t_need;
  t->capacity = capacity;
  order_.erase(order_.begin(), order_.begin() + evict);
  order_.emplace_back(sequence, t.get());
  bytes_ = others + TenantBytes(t->key.size(), capacity, t->responses.size());
  responses_ = responses_ - evict + 1;
  evicted_ += evict;
  if (map_changed) map_version_.fetch_add(1, std::memory_order_acq_rel);
  t->inserted_since += need_new;
  MaybeCompile(t);
  return true;
}

void ResponseCache::Clear() {
  std::lock_guard write(write_mu_);
  {
    std::unique_lock map_lock(map_mu_);
    tenants_.clear();
  }
  map_version_.fetch_add(1, std::memory_order_acq_rel);
  order_.clear();
  compiled_order_.clear();
  ++clear_epoch_;  // compiles in flight are for tenants that are gone
  bytes_ = 0;
  compiled_bytes_ = 0;
  responses_ = 0;
  evicted_ = 0;
  has_loaded_ids_ = false;
  loaded_max_id_ = 0;
  loaded_max_id_origin_.clear();
}

void ResponseCache::RequireVocabulary(uint32_t vocab_size) {
  std::lock_guard write(write_mu_);
  if (has_loaded_ids_ && loaded_max_id_ >= vocab_size)
    throw Error(ErrorCode::kInvalidArgument,
                loaded_max_id_origin_ + " holds id " + std::to_string(loaded_max_id_) +
                    ", at or above the vocabulary size " + std::to_string(vocab_size) +
                    " of the session's indexes (a cache of another vocabulary)");
  const uint32_t known = vocab_size_.load(std::memory_order_relaxed);
  if (known == 0 || vocab_size < known) vocab_size_.store(vocab_size, std::memory_order_relaxed);
}

uint32_t ResponseCache::Draft(std::string_view tenant, std::span<const uint32_t> context,
                              size_t want, bool climb_links, uint32_t* out,
                              size_t* count) const {
  *count = 0;
  const std::shared_ptr<Tenant> t = Find(tenant);
  if (t == nullptr) return 0;
  std::shared_lock lock(t->mu);
  uint32_t state = DynamicSam::kRoot, len = 0;
  for (uint32_t token : context) Transfer(*t->sam, token, &state, &len);
  *count = Continue(*t->sam, state, want, climb_links, out);
  return len;
}

size_t ResponseCache::bytes() const {
  std::lock_guard write(write_mu_);
  return bytes_ + compiled_bytes_;
}

size_t ResponseCache::num_tenants() const {
  std::lock_guard write(write_mu_);
  return tenants_.size();
}

size_t ResponseCache::num_responses() const {
  std::lock_guard write(write_mu_);
  return responses_;
}

uint64_t ResponseCache::num_evicted() const {
  std::lock_guard write(write_mu_);
  return evicted_;
}

std::vector<std::vector<uint32_t>> ResponseCache::Responses(std::string_view tenant) const {
  std::lock_guard write(write_mu_);
  std::vector<std::vector<uint32_t>> out;
  auto it = tenants_.find(tenant);
  if (it == tenants_.end()) return out;
  const Tenant& t = *it->second;
  size_t p = 1;
  for (const Response& r : t.responses) {
    std::vector<uint32_t>& text = out.emplace_back(r.length);
    for (uint32_t k = 0; k < r.length; ++k) text[k] = t.sam->Token(p + k);
    p += r.length + 1;
  }
  return out;
}

std::vector<std::string> ResponseCache::Tenants() const {
  std::lock_guard write(write_mu_);
  std::vector<std::string> keys;
  for (const auto& [key, t] : tenants_) keys.push_back(key);
  return keys;
}

size_t ResponseCache::Capacity(std::string_view tenant) const {
  std::lock_guard write(write_mu_);
  auto it = tenants_.find(tenant);
  return it == tenants_.end() ? 0 : it->second->capacity;
}

namespace {


void Put32(std::vector<uint8_t>& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

}  // namespace

static_assert(ResponseCache::kSeparator == format::kResponseCacheSeparator);

// The payload: sam/format/response_cache_file.h (whose reader Load uses).
void ResponseCache::Save(const std::string& path,
                         const format::Sha256Digest& tokenizer_sha256) const {
  std::vector<uint8_t> payload(tokenizer_sha256.begin(), tokenizer_sha256.end());
  {
    std::lock_guard write(write_mu_);
    const uint64_t n = order_.size();
    for (int i = 0; i < 8; ++i) payload.push_back(static_cast<uint8_t>(n >> (8 * i)));
    // Each tenant's responses lie in its text in order: walk them in step.
    std::map<const Tenant*, std::pair<size_t, size_t>> next;  // response index, position
    for (const auto& [sequence, t] : order_) {
      auto& [index, position] = next.try_emplace(t, 0, 1).first->second;
      const Response& r = t->responses[index++];
      Put32(payload, static_cast<uint32_t>(t->key.size()));
      payload.insert(payload.end(), t->key.begin(), t->key.end());
      Put32(payload, r.length);
      for (uint32_t k = 0; k < r.length; ++k) Put32(payload, t->sam->Token(position + k));
      position += r.length + 1;
    }
  }
  format::WriteBlobFile(path, format::kResponseCacheMagic, format::kResponseCacheFileVersion,
                        payload);
}

void ResponseCache::Load(const std::string& path, const format::Sha256Digest& tokenizer_sha256) {
  const format::ResponseCacheFile file = format::ReadResponseCacheFile(path);
  if (file.tokenizer_sha256 != tokenizer_sha256)
    throw Error(ErrorCode::kTokenizerMismatch, ErrorContext{.file = path},
                "the cache was saved with tokenizer " + format::DigestToHex(file.tokenizer_sha256) +
                    ", this deployment uses " + format::DigestToHex(tokenizer_sha256));
  const uint32_t vocab_size = vocab_size_.load(std::memory_order_relaxed);
  if (vocab_size > 0) {
    for (size_t i = 0; i < file.responses.size(); ++i)
      for (uint32_t id : file.responses[i].tokens)
        if (id >= vocab_size)
          throw Error(ErrorCode::kInvalidArgument, ErrorContext{.file = path},
                      "response " + std::to_string(i + 1) + " (tenant '" +
                          file.responses[i].tenant + "') holds id " + std::to_string(id) +
                          ", at or above the vocabulary size " + std::to_string(vocab_size) +
                          " of the sessions drafting from this cache");
  }
  std::string origin;
  for (size_t i = 0; i < file.responses.size(); ++i) {
    origin = path + ", response " + std::to_string(i + 1);
    InsertFrom(file.responses[i].tenant, file.responses[i].tokens, &origin);
  }
}

ResponseCache::Cursor ResponseCache::OpenCursor(std::string_view tenant) const {
  Cursor c;
  c.cache_ = this;
  c.key_ = std::string(tenant);
  c.recent_.reserve(2 * kRematchTokens);
  return c;
}

void ResponseCache::Cursor::Reset() {
  recent_.clear();
  state_ = DynamicSam::kRoot;
  len_ = 0;
}

// With the tenant's shared lock held by the caller: re-matches the recent
// tokens when the tenant's automaton changed since the cursor last looked.
void ResponseCache::Cursor::Sync() {
  const DynamicSam& sam = *tenant_->sam;
  if (generation_ == tenant_->generation) return;
  generation_ = tenant_->generation;
  state_ = DynamicSam::kRoot;
  len_ = 0;
  const size_t from = recent_.size() > kRematchTokens ? recent_.size() - kRematchTokens : 0;
  for (size_t i = from; i < recent_.size(); ++i) Transfer(sam, recent_[i], &state_, &len_);
}

// The tenant again after the cache's key set changed (a tenant created, or
// removed when its last response was evicted).
void ResponseCache::Cursor::Resolve() {
  const uint64_t now = cache_->map_version_.load(std::memory_order_acquire);
  if (now == map_version_) return;
  map_version_ = now;
  tenant_ = cache_->Find(key_);
  generation_ = ~uint64_t{0};
}

void ResponseCache::Cursor::Advance(std::span<const uint32_t> tokens) {
  if (cache_ == nullptr) return;
  Resolve();
  if (tenant_ != nullptr) {
    std::shared_lock lock(tenant_->mu);
    Sync();
    for (uint32_t token : tokens) Transfer(*tenant_->sam, token, &state_, &len_);
  }
  recent_.insert(recent_.end(), tokens.begin(), tokens.end());
  if (recent_.size() > 2 * kRematchTokens)
    recent_.erase(recent_.begin(), recent_.end() - kRematchTokens);
}

uint32_t ResponseCache::Cursor::Peek(uint32_t token, size_t want, bool climb_links,
                                     uint32_t* out, size_t* count) {
  *count = 0;
  if (cache_ == nullptr) return 0;
  Resolve();
  if (tenant_ == nullptr) return 0;
  std::shared_lock lock(tenant_->mu);
  Sync();
  uint32_t state = state_, len = len_;
  Transfer(*tenant_->sam, token, &state, &len);
  *count = Continue(*tenant_->sam, state, want, climb_links, out);
  for (size_t i = 0; i < *count; ++i)
    if (out[i] >= vocab_limit_) *count = i;  // (ends the loop)
  return len;
}

ResponseCache::Compiled ResponseCache::Cursor::compiled() {
  if (cache_ == nullptr) return {};
  Resolve();
  if (tenant_ == nullptr) return {};
  std::shared_lock lock(tenant_->mu);
  return tenant_->compiled;
}

uint32_t ResponseCache::Cursor::length() {
  if (cache_ == nullptr) return 0;
  Resolve();
  if (tenant_ == nullptr) return 0;
  std::shared_lock lock(tenant_->mu);
  Sync();
  return len_;
}

}  // namespace sam::runtime
