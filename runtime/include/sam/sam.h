/* The SAM-Decoding runtime's C API: open index files, run drafting sessions.
 *
 * Usage (C):
 *
 *   sam_index* idx = NULL;
 *   if (sam_index_open("general.sam", NULL, 0, &idx) != SAM_OK) {
 *     fprintf(stderr, "%s\n", sam_last_error());
 *     return 1;
 *   }
 *   if (sam_abi_version() != SAM_ABI_VERSION || sam_version() < SAM_VERSION)
 *     return 1;                              // not the library this was built for
 *   sam_session_config config;
 *   sam_session_config_init(&config);        // defaults; config.struct_size
 *   sam_session* sess = NULL;
 *   sam_session_new(&config, &sess);
 *   sam_session_attach_index(sess, idx);
 *   sam_session_prefill(sess, prompt_ids, prompt_len);
 *   uint32_t start = first_token_from_prefill;
 *   while (!done) {
 *     sam_draft d;
 *     sam_session_propose(sess, start, 0, &d);  // d.tokens[0] == start
 *     ... run the model on d.tokens / d.parents: argmax[i] after node i ...
 *     sam_verify_result r;
 *     sam_session_verify_greedy(sess, argmax, d.count, &r);
 *     sam_session_commit(sess, r.commit_tokens, r.accepted_count + 1);  // start first
 *     start = r.bonus_token;
 *   }
 *   puts(sam_session_stats_json(sess));       // this request and the totals
 *   sam_session_free(sess);
 *   sam_index_close(idx);
 *
 * Sampling instead of greedy: rows processed by sam_sampling_apply, then
 * sam_session_verify_sampling with a caller-seeded sam_rng.
 *
 * Link with sam::runtime (CMake: find_package(sam CONFIG REQUIRED)) or with
 * `pkg-config --cflags --libs sam-runtime`: libsam_runtime.so.1.
 *
 * Usage (Python ctypes; libsam_runtime.so is the shared runtime library that
 * `cmake --install` puts in PREFIX/lib, see docs/embedding.md: put that folder
 * on LD_LIBRARY_PATH or give CDLL the full path):
 *
 *   import ctypes as C
 *   lib = C.CDLL("libsam_runtime.so")
 *   class Draft(C.Structure):
 *       _fields_ = [("tokens", C.POINTER(C.c_uint32)), ("parents", C.POINTER(C.c_int32)),
 *                   ("depths", C.POINTER(C.c_uint16)), ("count", C.c_size_t),
 *                   ("source", C.c_int), ("match_len", C.c_uint32)]
 *   lib.sam_last_error.restype = C.c_char_p
 *   idx, sess = C.c_void_p(), C.c_void_p()
 *   if lib.sam_index_open(b"general.sam", None, 0, C.byref(idx)) != 0:
 *       raise RuntimeError(lib.sam_last_error().decode())
 *   lib.sam_session_new(None, C.byref(sess))   # the defaults
 *   lib.sam_session_attach_index(sess, idx)
 *   prompt = (C.c_uint32 * 3)(1, 450, 4996)
 *   lib.sam_session_prefill(sess, prompt, C.c_size_t(3))
 *   d = Draft(); lib.sam_session_propose(sess, C.c_uint32(263), C.c_size_t(0), C.byref(d))
 *   print([d.tokens[i] for i in range(d.count)], [d.parents[i] for i in range(d.count)])
 *   lib.sam_session_free(sess); lib.sam_index_close(idx)
 *
 * Errors: every function that can fail returns a sam_status; SAM_OK (0) is
 * success. On failure the output arguments are left unchanged and
 * sam_last_error() describes the failure (file, field, value found and
 * expected). No C++ exception ever crosses this interface; nothing prints
 * or aborts.
 *
 * Lifetime: an index handle is reference counted internally: a session that
 * attached it keeps the mapping (and its drafting tables) alive, so
 * sam_index_close and sam_session_free may be called in any order. Pointers
 * returned in a sam_draft or a sam_verify_result, or by
 * sam_session_stats_json, point into the session and stay valid until the
 * next call on that session (a sam_verify_result's commit_tokens may be
 * passed to sam_session_commit). A sam_rng is the caller's, freed with
 * sam_rng_free.
 *
 * Threads: an index may be attached to any number of sessions in any
 * threads. A session must be used by one thread at a time. sam_last_error()
 * is per thread.
 */
#ifndef SAM_SAM_H_
#define SAM_SAM_H_

#include <stddef.h>
#include <stdint.h>

#include "sam/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Versions ----------------------------------------------------------- */

/* The version of this header: the CMake project version (the build refuses
 * to configure when they differ). Compare with sam_version() at run time to
 * detect a header / library mismatch. */
#define SAM_VERSION_MAJOR 0
#define SAM_VERSION_MINOR 2
#define SAM_VERSION_PATCH 0
#define SAM_VERSION_STRING "0.2.0"
/* Packs a version into one int: major * 10000 + minor * 100 + patch. */
#define SAM_MAKE_VERSION(major, minor, patch) ((major) * 10000 + (minor) * 100 + (patch))
#define SAM_VERSION SAM_MAKE_VERSION(SAM_VERSION_MAJOR, SAM_VERSION_MINOR, SAM_VERSION_PATCH)
/* The ABI version: the number of the shared library's soname
 * (libsam_runtime.so.1). It changes only when the ABI breaks; a program
 * built against this header runs with any library of the same ABI version
 * whose sam_version() is at least SAM_VERSION. */
#define SAM_ABI_VERSION 1

/* The library's version, packed as SAM_VERSION (e.g. 200 for 0.2.0). */
SAM_API int sam_version(void);
/* The library's version as "MAJOR.MINOR.PATCH"; static storage. */
SAM_API const char* sam_version_string(void);
/* The library's ABI version (SAM_ABI_VERSION of the header it was built with). */
SAM_API int sam_abi_version(void);

/* Stable status codes; values never change meaning, new ones are appended. */
typedef enum sam_status {
  SAM_OK = 0,
  SAM_ERR_IO = 1,                 /* cannot open or read the file */
  SAM_ERR_FORMAT = 2,             /* not a valid index (truncated, corrupt, version) */
  SAM_ERR_TOKENIZER_MISMATCH = 3, /* index built with another tokenizer */
  SAM_ERR_INVALID_ARGUMENT = 4,   /* NULL pointer, bad option, id out of range */
  SAM_ERR_OUT_OF_MEMORY = 5,      /* allocation failed */
  SAM_ERR_INTERNAL = 6            /* anything else: a bug, please report the message */
} sam_status;

/* Short stable name of a status, e.g. "tokenizer_mismatch" ("unknown" for
 * values outside the enum). Never NULL; static storage. */
SAM_API const char* sam_status_name(int status);

/* Message of the most recent failed call in this thread ("" if none). Valid
 * until the next failing call in this thread. */
SAM_API const char* sam_last_error(void);

/* ---- Index files -------------------------------------------------------- */

typedef struct sam_index sam_index;

/* Flags of sam_index_open (bitwise or). 0: map the file, check its header,
 * and draft with the drafting sections the file holds (sam-build writes
 * them: hub tables and an edge filter, and child records with
 * sam-build --child-records), mapped and shared by every process that opens
 * the file, in O(1); a file without them (format 1.0, or written with
 * sam-build --no-accelerators) drafts from its automaton alone. */
enum {
  /* Read the file into private memory on 2 MiB pages where the system has
   * them, instead of mapping it: O(file size) to open (tens of ms for
   * 80 MB) and a private copy, but drafting touches the index randomly and
   * runs markedly faster without 4 KiB-page TLB misses. */
  SAM_OPEN_READ = 1,
  /* Also compute the drafting tables (hub tables and an edge filter,
   * sam/runtime/static_index.h) for a file written without them, once,
   * shared by every session that attaches the index: O(index size) (about
   * 0.8 s and 34 MiB for a 6.8M-token index), after which every
   * Propose/Commit is about twice as fast. A file that holds them (what
   * sam-build writes) needs no flag: this one then changes nothing. */
  SAM_OPEN_PREPARE = 2,
  /* Deep-check the file at open, as sam_index_verify. */
  SAM_OPEN_VERIFY = 4,
  /* Implies SAM_OPEN_PREPARE, and also uses child records: the heaviest
   * children of every state that occurs at least twice stored together,
   * with its length, count and suffix link's record. Matching and
   * SAM_POLICY_CALIBRATED's (and SAM_POLICY_TREE's) lookups of branching
   * states then read one record instead of a chain of four or five cache
   * misses, about half the calibrated policy's step time. A file built
   * with them (sam-build --child-records) holds them, and any open already
   * maps and uses them (this flag then changes nothing); for
   * a file without them they are computed at open, in private memory:
   * about 23 bytes per corpus token (157 MiB for a 6.8M-token index) and
   * about 1 s. Drafts are the same. */
  SAM_OPEN_CHILD_RECORDS = 8
};
/* Memory-maps a static index file and checks its header and sections
 * (O(1) in the index size). expected_tokenizer_sha256: NULL to accept any
 * index, or 64 hex digits (sam_tokenizer_sha256's fingerprint; for a
 * SentencePiece model, the SHA-256 of its file): an index built with another
 * tokenizer, or from raw ids, is then refused with SAM_ERR_TOKENIZER_MISMATCH.
 * flags: SAM_OPEN_* (0: none); unknown bits
 * are SAM_ERR_INVALID_ARGUMENT. Drafts are identical whatever the flags. On
 * success *out receives a new handle. */
SAM_API int sam_index_open(const char* path, const char* expected_tokenizer_sha256,
                           unsigned flags, sam_index** out);
/* Releases the handle (NULL is a no-op). Sessions that attached the index
 * keep it open until they are freed. */
SAM_API void sam_index_close(sam_index* index);
/* Deep check: every checksum, every stored value, the self-test samples
 * (O(file size)). SAM_ERR_FORMAT names the first problem. */
SAM_API int sam_index_verify(const sam_index* index);
/* Vocabulary size, corpus tokens (document ends included) and documents;
 * 0 for a NULL handle. */
SAM_API uint32_t sam_index_vocab_size(const sam_index* index);
SAM_API uint64_t sam_index_num_tokens(const sam_index* index);
SAM_API uint64_t sam_index_num_documents(const sam_index* index);
/* What the index's sessions draft with besides the automaton, as returned by
 * sam_index_accelerators: a bitwise OR of these. */
enum {
  /* Hub tables and an edge filter (about twice as fast a step). */
  SAM_INDEX_HUB_TABLES = 1,
  /* Child records (about half the calibrated policy's step time again). */
  SAM_INDEX_CHILD_RECORDS = 2,
  /* Some of them were computed at open into this process's private memory
   * (SAM_OPEN_PREPARE or SAM_OPEN_CHILD_RECORDS on a file without them)
   * rather than mapped from the file and shared by every process. */
  SAM_INDEX_COMPUTED = 4
};
/* SAM_INDEX_* bits; 0 for a NULL handle, or for a file written without
 * drafting sections (format 1.0, sam-build --no-accelerators) opened
 * without SAM_OPEN_PREPARE: the same drafts at about twice the step cost.
 * A service can check this at start and log, as the tools print, that
 * `sam-build --upgrade FILE` adds them (or that SAM_INDEX_COMPUTED costs
 * every process its own copy). */
SAM_API unsigned sam_index_accelerators(const sam_index* index);

/* ---- Shard sets ---------------------------------------------------------- */

/* A corpus built as shards (sam-build --max-memory writes NAME.samset and its
 * shards, format/FORMAT.md section 10), drafted from as one index over all
 * their documents (sam/runtime/shard_set.h). */
typedef struct sam_shard_set sam_shard_set;

/* Opens the manifest and every shard, and prepares each shard's drafting
 * tables (as SAM_OPEN_PREPARE). flags: 0, SAM_OPEN_VERIFY (also every
 * shard's SHA-256 and deep checks) and/or SAM_OPEN_CHILD_RECORDS (each
 * shard's tables with child records of up to 32 children, which single and
 * merged lookups read; shards built with sam-build --child-records hold
 * them, and are read with them whatever the flags); other bits are
 * SAM_ERR_INVALID_ARGUMENT.
 * expected_tokenizer_sha256 as in sam_index_open. A missing, corrupted or
 * foreign shard is refused (SAM_ERR_IO or SAM_ERR_FORMAT), sam_last_error()
 * naming the shard file. On success *out receives a new handle. */
SAM_API int sam_shard_set_open(const char* path, const char* expected_tokenizer_sha256,
                               unsigned flags, sam_shard_set** out);
/* Releases the handle (NULL is a no-op); sessions that attached it keep the
 * shards open until they are freed. */
SAM_API void sam_shard_set_close(sam_shard_set* set);
/* Shards, corpus tokens (document ends included) and documents over all
 * shards; 0 for a NULL handle. */
SAM_API size_t sam_shard_set_num_shards(const sam_shard_set* set);
SAM_API uint64_t sam_shard_set_num_tokens(const sam_shard_set* set);
SAM_API uint64_t sam_shard_set_num_documents(const sam_shard_set* set);
/* What the set's sessions draft with besides the shards' automata, as
 * sam_index_accelerators says it of one index: SAM_INDEX_HUB_TABLES and
 * SAM_INDEX_CHILD_RECORDS when every shard has them, SAM_INDEX_COMPUTED when
 * some shard's were computed at open into this process's private memory
 * (shards written without them, such as format 1.0 shards). 0 for a NULL
 * handle. */
SAM_API unsigned sam_shard_set_accelerators(const sam_shard_set* set);

/* ---- Sessions ----------------------------------------------------------- */

typedef struct sam_session sam_session;

/* Draft selection policies (see sam/runtime/selection.h), with their names
 * in the naming scheme that the tools and the docs use. */
typedef enum sam_policy {
  SAM_POLICY_PAPER = 0,       /* "sam": SAM-Decoding's rule */
  SAM_POLICY_STATIC_ONLY = 1, /* "static" */
  SAM_POLICY_DYNAMIC_ONLY = 2, /* "dynamic" */
  SAM_POLICY_TREE = 3,        /* "sam-tree" */
  SAM_POLICY_CALIBRATED = 4   /* "sam-cal" (default) */
} sam_policy;

/* The name of a sam_policy ("sam", "static", "dynamic", "sam-tree",
 * "sam-cal"); "unknown" for other values. Never NULL; static storage. */
SAM_API const char* sam_policy_name(int policy);
/* The policy named `name` (the names of sam_policy_name, plus "sam-rec":
 * the paper rule with a Token Recycling fallback). On success *policy
 * receives the sam_policy and, if recycling_fallback is not NULL,
 * *recycling_fallback 1 when the name asks for a Token Recycling fallback
 * (set sam_session_config.recycling_vocab_size), else 0. An unknown name is
 * SAM_ERR_INVALID_ARGUMENT; sam_last_error() lists every valid name. */
SAM_API int sam_policy_from_name(const char* name, int* policy, int* recycling_fallback);

/* The largest draft_size (nodes per draft, start token included) a session
 * accepts; sam_session_new refuses a larger one with SAM_ERR_INVALID_ARGUMENT.
 * A draft's count never exceeds it, and its depths are below it. */
enum { SAM_MAX_DRAFT_SIZE = 4096 };

/* Which drafter produced a draft (stable values). */
typedef enum sam_draft_source {
  SAM_SOURCE_NONE = 0, /* no draft: the start token alone */
  SAM_SOURCE_STATIC = 1,
  SAM_SOURCE_DYNAMIC = 2,
  SAM_SOURCE_RECYCLING = 3,
  SAM_SOURCE_PLD = 4,
  SAM_SOURCE_MERGED = 5,
  SAM_SOURCE_OTHER = 6,
  SAM_SOURCE_MODEL = 7, /* a draft model (C++ torch backend only) */
  SAM_SOURCE_CACHE = 8, /* the cross-request response cache (sam_cache_*) */
  SAM_SOURCE_SDSAT = 9  /* SDSAT adaptive tokens (C++ torch backend only) */
} sam_draft_source;

/* sam_session_config.shape. */
typedef enum sam_draft_shape {
  SAM_SHAPE_TREE = 0,  /* the policy's tree (default) */
  SAM_SHAPE_CHAIN = 1  /* one root-to-node path of it */
} sam_draft_shape;

/* A session's options (sam/runtime/options.h: the same names and defaults
 * as the C++ SessionOptions, Python's Session(**options) and the tools'
 * flags). Always initialise with sam_session_config_init(), then change
 * fields:
 *
 *   sam_session_config c;
 *   sam_session_config_init(&c);   // defaults, and c.struct_size = sizeof c
 *   c.draft_size = 64;
 *   sam_session_new(&c, &sess);
 *
 * The struct can grow without breaking old callers: new fields are only
 * ever appended, and struct_size tells the library which fields the caller
 * knows. The library reads a field only if the caller's struct_size covers
 * it whole (offset + size <= struct_size); a field it does not cover takes
 * its default, so a program compiled against an older, shorter struct gets
 * the defaults of the fields added since. A struct_size larger than the
 * library's struct (a caller compiled against a newer header) is accepted
 * when every byte past the library's struct is zero (a newer field left at
 * zero) and refused with SAM_ERR_INVALID_ARGUMENT otherwise: the caller
 * asked for something this library cannot do. A struct_size smaller than
 * the first option's end is SAM_ERR_INVALID_ARGUMENT. */
typedef struct sam_session_config {
  size_t struct_size;            /* sizeof(sam_session_config) of the caller */
  size_t draft_size;             /* nodes per draft, start token included (40);
                                    1..SAM_MAX_DRAFT_SIZE; every policy but
                                    SAM_POLICY_TREE (tree_nodes) */
  int policy;                    /* a sam_policy (SAM_POLICY_CALIBRATED) */
  int shape;                     /* a sam_draft_shape (SAM_SHAPE_TREE):
                                    SAM_SHAPE_CHAIN drafts one path of the
                                    policy's tree, for verifiers that take one
                                    sequence per request (the path of most
                                    expected accepted tokens; docs/runtime.md,
                                    "Chains") */
  /* The verification cost curve of SAM_POLICY_CALIBRATED and of chains
   * (docs/runtime.md, "Budgets from the cost of verification").
   * cost_curve[i] is the time of one verification pass over i + 1 tokens, in
   * any unit, for i < cost_curve_size (<= SAM_MAX_DRAFT_SIZE; beyond it the
   * cost grows in proportion to the tokens); each step then drafts only the
   * nodes that pay for their verification. NULL and 0 (default): no curve.
   * The array is copied by sam_session_new. A value that is not positive and
   * finite, or a NULL array with a nonzero size, is SAM_ERR_INVALID_ARGUMENT. */
  const double* cost_curve;
  size_t cost_curve_size;
  size_t max_dynamic_bytes;      /* memory bound of the dynamic automaton (64 MiB;
                                    0: the default): reserved, touched as the
                                    text needs it (about 6 MiB resident for a
                                    1K-token request) */
  int collect_timing;            /* nonzero: measure propose, commit and prefill
                                    time into the statistics (two clock reads,
                                    about 50 ns, per call); 0 (default) leaves
                                    the *_ns figures at 0 */
  uint32_t recycling_vocab_size; /* > 0: a Token Recycling fallback over ids
                                    below this (0: none) */
  int32_t l_bias;                /* SAM_POLICY_PAPER: < 0 (-1): automatic, 5 with
                                    a fallback, 0 without */
  uint32_t l_threshold;          /* SAM_POLICY_PAPER: the rule's threshold (5) */
  size_t tree_nodes;             /* SAM_POLICY_TREE: nodes per tree, start token
                                    included (60); 0..SAM_MAX_DRAFT_SIZE */
  size_t tree_width;             /* SAM_POLICY_TREE: nodes per depth (8); 1..64 */
} sam_session_config;

/* Fills *config with the defaults and struct_size = sizeof(sam_session_config)
 * (NULL is a no-op). */
SAM_API void sam_session_config_init(sam_session_config* config);
/* Creates a session; config NULL means the defaults. An unusable option
 * (draft_size 0 or above SAM_MAX_DRAFT_SIZE, an unknown policy, ...) is
 * SAM_ERR_INVALID_ARGUMENT, with a message naming the field and its range. */
SAM_API int sam_session_new(const sam_session_config* config, sam_session** out);

/* Frees the session (NULL is a no-op). */
SAM_API void sam_session_free(sam_session* session);

/* Adds a static index (call before prefill, or any time: the index's
 * matching state is brought up to date with the session's text). */
SAM_API int sam_session_attach_index(sam_session* session, sam_index* index);
/* Adds a shard set as one index (Session::AttachShardSet): the longest match
 * over its shards, linear drafts from the lowest shard with it, tree counts
 * summed across shards. Any time, as sam_session_attach_index. */
SAM_API int sam_session_attach_shard_set(sam_session* session, sam_shard_set* set);

/* Feeds the request's prompt ids (n may be 0; ids may then be NULL). Calls
 * append: one request is prefill, then propose/commit steps, then reset.
 * With an index or shard set attached, an id at or above its vocabulary size
 * (ids of another tokenizer) is SAM_ERR_INVALID_ARGUMENT naming it, here, in
 * sam_session_propose (the start token, also batched) and in
 * sam_session_commit; the session's text and matches are then unchanged
 * (a refused propose leaves no proposal to verify). */
SAM_API int sam_session_prefill(sam_session* session, const uint32_t* ids, size_t n);

/* A draft tree. Node 0 is the start token; parents[0] = -1 and
 * parents[i] < i; node i is evaluated at position context + depths[i].
 * count <= SAM_MAX_DRAFT_SIZE, so depths[i] < SAM_MAX_DRAFT_SIZE: a depth
 * never wraps. */
typedef struct sam_draft {
  const uint32_t* tokens;
  const int32_t* parents;
  const uint16_t* depths;
  size_t count;       /* nodes, start token included (>= 1) */
  int source;         /* a sam_draft_source */
  uint32_t match_len; /* match length behind the draft (0 if none) */
} sam_draft;

/* Proposes a draft rooted at start_token (the model's last token, not yet
 * committed), of at most max_nodes nodes, the start included (0: no limit
 * but the config's draft_size, or tree_nodes for SAM_POLICY_TREE): for a
 * verifier with a per-step limit, e.g. a chain-only engine's k + 1. With SAM_SHAPE_CHAIN the chain is cut from the
 * policy's whole tree. The arrays stay valid until the next call on the
 * session. */
SAM_API int sam_session_propose(sam_session* session, uint32_t start_token, size_t max_nodes,
                                sam_draft* out);

/* Commits the tokens that joined the verified context: the start token of
 * the last proposal, then the accepted draft tokens (the bonus token is the
 * next start token and is committed with the next step). */
SAM_API int sam_session_commit(sam_session* session, const uint32_t* ids, size_t n);

/* ---- Verification -------------------------------------------------------- */

/* What one verification step accepted. The arrays point into the session and
 * stay valid until the next call on it; commit_tokens may be passed straight
 * to sam_session_commit. */
typedef struct sam_verify_result {
  const int32_t* accepted_nodes; /* accepted_count + 1 node indices, root first
                                    (node 0): keep the KV entries of these */
  const uint32_t* commit_tokens; /* accepted_count + 1 tokens: the start token,
                                    then the accepted draft tokens */
  size_t accepted_count;         /* draft tokens accepted (bonus excluded) */
  uint32_t bonus_token;          /* the model's token after the accepted path:
                                    emit it; it is the next start token */
} sam_verify_result;

/* Greedy acceptance of the session's last proposal (sam_session_propose):
 * argmax[i] is the model's most likely token after draft node i (after the
 * context, node i's ancestors and node i), n must equal the draft's count.
 * Accepts the longest root path whose every token equals the argmax at its
 * parent (sam/runtime/verify.h VerifyGreedy), so the accepted tokens and the
 * bonus token are exactly what plain greedy decoding emits. Then:
 *
 *   sam_session_commit(sess, r.commit_tokens, r.accepted_count + 1);
 *   start = r.bonus_token;
 *
 * Nothing is committed here. Without a proposal since the last commit,
 * reset, prefill or attach, or with n != count, SAM_ERR_INVALID_ARGUMENT.
 * O(count); no allocation once the session's buffers have grown. */
SAM_API int sam_session_verify_greedy(sam_session* session, const uint32_t* argmax, size_t n,
                                      sam_verify_result* out);

/* Sampling acceptance needs randomness that the caller controls: a small
 * seedable PRNG (xoshiro256**, sam/runtime/verify.h Rng); the same seed gives
 * the same draws on every platform. One generator per thread. */
typedef struct sam_rng sam_rng;
SAM_API int sam_rng_new(uint64_t seed, sam_rng** out);
/* NULL is a no-op. */
SAM_API void sam_rng_free(sam_rng* rng);

/* Turns one position's scores (vocab_size floats) into the sampling
 * distribution, in place, as sam::runtime::ApplySampling: temperature (0:
 * greedy, a one-hot distribution on the argmax), then top_k (<= 0: off), then
 * top_p (1: off), then renormalisation. scores_are_logits: nonzero for
 * logits (-inf masks a token), 0 for non-negative weights. Process every row
 * given to sam_session_verify_sampling, and the row of the first token after
 * prefill, with the same parameters. Invalid scores or parameters are
 * SAM_ERR_INVALID_ARGUMENT. O(vocab_size) (O(V log V) with top_p). */
SAM_API int sam_sampling_apply(float* scores, size_t vocab_size, float temperature, int top_k,
                               float top_p, int scores_are_logits);

/* Draws a token with probability weights[i] / sum(weights) (e.g. the first
 * token after prefill from a row processed by sam_sampling_apply). */
SAM_API int sam_sample_token(const float* weights, size_t vocab_size, sam_rng* rng,
                             uint32_t* token);

/* Sampling acceptance of the session's last proposal (lossless: the emitted
 * tokens are distributed exactly as tokens sampled one at a time from the
 * model). probs holds n rows of vocab_size floats: row i is the model's
 * distribution after draft node i, processed by sam_sampling_apply; n must
 * equal the draft's count. Recursive rejection over each node's children
 * (sam::runtime::VerifySampling, DraftMode::kDeterministic: the session's
 * drafts do not depend on the randomness), drawing from rng. The result and
 * the commit that follows are as for sam_session_verify_greedy. Draft tokens
 * >= vocab_size, invalid rows or a missing proposal are
 * SAM_ERR_INVALID_ARGUMENT. O(accepted depth * (vocab_size + count)). */
SAM_API int sam_session_verify_sampling(sam_session* session, const float* probs,
                                        size_t vocab_size, size_t n, sam_rng* rng,
                                        sam_verify_result* out);

/* Model feedback for Token Recycling: for each of the n evaluated nodes,
 * tokens[i] and its k best next tokens topk[i*k .. i*k+k), best first. A
 * no-op without a Token Recycling fallback. */
SAM_API int sam_session_observe_topk(sam_session* session, const uint32_t* tokens, size_t n,
                                     const uint32_t* topk, size_t k);

/* Ends the request: forgets its text and matches (statistics, what the
 * policy has learned, the Token Recycling table and attached indexes are
 * kept). */
SAM_API int sam_session_reset(sam_session* session);
/* Forgets what the policy has learned across requests (SAM_POLICY_CALIBRATED's
 * acceptance estimates): the next drafts are a new session's. Statistics are
 * kept (sam_session_stats_reset). */
SAM_API int sam_session_reset_calibration(sam_session* session);

/* Statistics as a JSON object, for the totals since the session was created
 * or since sam_session_stats_reset, and for the current request (since the
 * last sam_session_reset):
 *
 *   {"steps", "committed_tokens", "prefill_tokens", "commit_ns", "prefill_ns",
 *    "total": {...}, "sources": {"static": {...}, "dynamic": {...}, ...},
 *    "timing": true|false,
 *    "request": {"steps", ..., "total": {...}, "sources": {...}}}
 *
 * The top level holds the totals; "request" the same figures for the
 * current request. "total" (all sources) and each source (by name, those
 * with steps) hold "steps" (verified drafts), "draft_tokens",
 * "accepted_tokens", "mat" (mean over steps of accepted draft tokens + 1),
 * "propose_ns", "proposed_at_depth" and "accepted_at_depth" (steps whose
 * draft / accepted path reached depth d + 1), "mat_by_depth"
 * (accepted_at_depth / steps: mat = 1 + its sum), "steps_by_match_length"
 * and "accepted_by_match_length" (sam/runtime/statistics.h). "timing" says
 * whether the *_ns times are measured (sam_session_config.collect_timing);
 * otherwise they are 0. NULL on failure (see sam_last_error). */
SAM_API const char* sam_session_stats_json(sam_session* session);
/* Starts the totals of sam_session_stats_json, and the current request's
 * figures, from zero. Drafting is unaffected (what the sam-cal policy has
 * learnt is kept: sam_session_reset_calibration). */
SAM_API int sam_session_stats_reset(sam_session* session);

/* ---- Batched drafting (sam/runtime/batch.h): one call drafts for many
 * sessions on a fixed thread pool.
 *
 *   sam_draft_pool* pool = NULL;
 *   sam_draft_pool_new(0, &pool);                 // threads made once (0: all cores)
 *   int rc = sam_propose_batch(pool, sessions, starts, NULL, n, drafts, statuses);
 *   // rc == SAM_OK: drafts[i] is session i's draft when statuses[i] == SAM_OK
 *   sam_draft_pool_free(pool);
 */
typedef struct sam_draft_pool sam_draft_pool;

/* A pool drafting on num_threads threads, the caller's included (0: the
 * machine's core count; 1: no worker thread; at most 1024). */
SAM_API int sam_draft_pool_new(size_t num_threads, sam_draft_pool** out);
SAM_API void sam_draft_pool_free(sam_draft_pool* pool);
SAM_API size_t sam_draft_pool_num_threads(const sam_draft_pool* pool);

/* Proposes sessions[i]'s draft rooted at start_tokens[i], of at most
 * max_nodes[i] nodes (max_nodes NULL, or an entry 0: no limit but the
 * session's config, as in sam_session_propose), into out[i], for i < n, and returns when all are done: the
 * same drafts as sam_session_propose on each in turn. statuses[i] gets session i's status
 * (out[i] is meaningful only when it is SAM_OK); the call returns SAM_OK
 * when it ran, failed sessions or not, and sam_last_error() then names the
 * first failed session and its message. A NULL pool, array or session (when
 * n > 0), or a session that appears twice, is SAM_ERR_INVALID_ARGUMENT
 * before anything is drafted. A session must not be used elsewhere during the call;
 * concurrent calls on one pool run one after the other. The draft arrays
 * stay valid until the next call on their session. */
SAM_API int sam_propose_batch(sam_draft_pool* pool, sam_session* const* sessions,
                              const uint32_t* start_tokens, const size_t* max_nodes, size_t n,
                              sam_draft* out, int* statuses);

/* ---- Cross-request response cache (sam/runtime/response_cache.h,
 * docs/runtime.md): sessions draft from earlier responses of the same
 * tenant, a source of its own (SAM_SOURCE_CACHE).
 *
 *   sam_cache* cache = NULL;
 *   sam_cache_new(64u << 20, &cache);                 // bound in bytes
 *   sam_session_attach_cache(session, cache, "team-a");  // per request, before prefill
 *   ... prefill, propose/commit ...
 *   sam_session_cache_request(session, 0, NULL);      // add the finished output
 *   sam_session_reset(session);
 *   sam_cache_save(cache, "cache.samc", tokenizer_sha256_hex);
 *
 * A cache is thread-safe: any number of sessions in any threads read it
 * while others add responses. Text cached under one tenant key never drafts
 * for another. Memory stays within max_bytes by the documented accounting;
 * the oldest responses are evicted first. */
typedef struct sam_cache sam_cache;

/* A new empty cache bounded to max_bytes (> 0). */
SAM_API int sam_cache_new(size_t max_bytes, sam_cache** out);
/* A new empty cache that also compiles each tenant's responses into an index
 * in memory (ResponseCache::CompileOptions), which the calibrated policy
 * drafts count-weighted trees from: a tenant is compiled once it holds
 * min_tokens tokens, and again when the tokens inserted since reach `growth`
 * (> 0) times those compiled last; compile_bytes (0: max_bytes / 4, else
 * below max_bytes) bounds the compiled indexes within max_bytes. With
 * background nonzero the compiles run on a thread of the cache's own, so
 * that sam_cache_insert / sam_session_cache_request only queue them (for
 * servers); sam_cache_wait_for_compiles waits for the queue. */
SAM_API int sam_cache_new_compiling(size_t max_bytes, size_t min_tokens, double growth,
                                    size_t compile_bytes, int background, sam_cache** out);
SAM_API void sam_cache_wait_for_compiles(sam_cache* cache);
/* Bytes of the compiled indexes (part of sam_cache_bytes) and how many
 * compiles happened; 0 for NULL or a cache that does not compile. */
SAM_API size_t sam_cache_compiled_bytes(const sam_cache* cache);
SAM_API uint64_t sam_cache_num_compiles(const sam_cache* cache);
/* Releases the handle (NULL is a no-op); sessions that attached the cache
 * keep it until they detach or are freed. */
SAM_API void sam_cache_free(sam_cache* cache);
/* Adds one response (n ids) under tenant (a NUL-terminated key; NULL is "").
 * *inserted (if not NULL) is 1, or 0 when it was not cached (empty, or too
 * large for the bound alone). The id 0xFFFFFFFF is SAM_ERR_INVALID_ARGUMENT. */
SAM_API int sam_cache_insert(sam_cache* cache, const char* tenant, const uint32_t* ids, size_t n,
                             int* inserted);
/* Accounted bytes (<= max_bytes) and retained responses; 0 for NULL. */
SAM_API size_t sam_cache_bytes(const sam_cache* cache);
SAM_API size_t sam_cache_num_responses(const sam_cache* cache);
/* Saves every response with its tenant atomically (a versioned, checksummed
 * file), recording the tokenizer fingerprint: 64 hex digits (the SHA-256 of
 * the SentencePiece model), or NULL for ids from no tokenizer. */
SAM_API int sam_cache_save(const sam_cache* cache, const char* path,
                           const char* tokenizer_sha256);
/* Adds the responses of a saved file, oldest first. A file saved with
 * another tokenizer is SAM_ERR_TOKENIZER_MISMATCH; a damaged one
 * SAM_ERR_FORMAT (or SAM_ERR_IO); once a session with indexes attached the
 * cache, a file holding an id at or above their vocabulary is
 * SAM_ERR_INVALID_ARGUMENT (naming the file, response, id and vocabulary);
 * nothing is added then. */
SAM_API int sam_cache_load(sam_cache* cache, const char* path, const char* tokenizer_sha256);
/* Drafts also from `cache` under `tenant` (NULL is ""); a NULL cache
 * detaches. Call again to change the tenant, e.g. per request. A cache
 * holding a loaded response with an id at or above the vocabulary of the
 * session's indexes is SAM_ERR_INVALID_ARGUMENT (naming the file, response,
 * id and vocabulary); so is attaching such an index after the cache. */
SAM_API int sam_session_attach_cache(sam_session* session, sam_cache* cache, const char* tenant);
/* Adds the current request's text (its committed output; with
 * include_prompt, the prompt and the output as one text) to the attached
 * cache under the session's tenant; *inserted as sam_cache_insert (0 without
 * a cache). Call when the request is finished, before sam_session_reset. */
SAM_API int sam_session_cache_request(sam_session* session, int include_prompt, int* inserted);

/* ---- Tokenizers ----------------------------------------------------------
 * The tokenizer an index was built with (sam-build --tokenizer): a
 * SentencePiece model (.model), a Hugging Face tokenizer.json, or a folder
 * holding tokenizer.json; ids as the model sees them, without a Python
 * package or a call of sam-generate --print-prompt-ids.
 *
 *   sam_tokenizer* tok = NULL;
 *   if (sam_tokenizer_open("llama-32k.model", &tok) != SAM_OK) ...
 *   if (sam_tokenizer_check_index(tok, idx) != SAM_OK) ...   // the index's tokenizer?
 *   uint32_t ids[4096];
 *   size_t n = 0;
 *   sam_tokenizer_encode(tok, text, strlen(text), 1, ids, 4096, &n);  // BOS first
 *   if (n > 4096) ...                          // too small: call again with n ids
 *
 * The library loads the tokenizer's code (SentencePiece, protobuf, PCRE2, ICU)
 * from a module, libsam_tokenizer_shim.so, installed beside libsam_runtime.so,
 * in its own symbol scope: a program that also links libtorch (which carries
 * another protobuf) may use it. A tokenizer is immutable once opened: any
 * number of threads may encode and decode with it at once. */

typedef struct sam_tokenizer sam_tokenizer;

/* Opens a SentencePiece model, a tokenizer.json or a folder holding one (the
 * kind is told by content; hf_tokenizer.h in the sources lists the supported
 * tokenizer.json components). SAM_ERR_IO for a file that cannot be read,
 * SAM_ERR_FORMAT for one that is not a supported tokenizer (the message names
 * the file and the component). */
SAM_API int sam_tokenizer_open(const char* path, sam_tokenizer** out);
/* NULL is a no-op. */
SAM_API void sam_tokenizer_free(sam_tokenizer* tokenizer);
/* Vocabulary size (0 for NULL); BOS and EOS ids, SAM_NO_TOKEN when the
 * tokenizer has none. */
#define SAM_NO_TOKEN 0xFFFFFFFFu
SAM_API uint32_t sam_tokenizer_vocab_size(const sam_tokenizer* tokenizer);
SAM_API uint32_t sam_tokenizer_bos_id(const sam_tokenizer* tokenizer);
SAM_API uint32_t sam_tokenizer_eos_id(const sam_tokenizer* tokenizer);
/* The fingerprint an index records (sam-inspect's "tokenizer"): 64 lower-case
 * hex digits and a NUL into out[65]. For a SentencePiece model, the SHA-256
 * of the file; for a tokenizer.json, of its canonical model, normalizer,
 * pre-tokenizer and added tokens (formatting does not change it). Pass it as
 * sam_index_open's expected_tokenizer_sha256. */
SAM_API int sam_tokenizer_sha256(const sam_tokenizer* tokenizer, char out[65]);
/* Encodes length bytes of text (invalid UTF-8 becomes U+FFFD), BOS first
 * when add_bos is non-zero and the tokenizer has one; no EOS. Writes at most
 * capacity ids to ids (NULL when capacity is 0) and the number of ids of the
 * whole text to *count: when *count > capacity, only the first capacity ids
 * were written; call again with a buffer of *count ids. */
SAM_API int sam_tokenizer_encode(const sam_tokenizer* tokenizer, const char* text, size_t length,
                                 int add_bos, uint32_t* ids, size_t capacity, size_t* count);
/* Decodes n ids to text, as the tokenizer's own decoder does (special tokens
 * such as BOS decode to nothing for SentencePiece). Writes at most capacity
 * bytes to text, and a NUL after them when capacity > *length; *length
 * receives the decoded text's length in bytes: when *length >= capacity, call
 * again with *length + 1 bytes. An id at or above the vocabulary size is
 * SAM_ERR_INVALID_ARGUMENT naming it. */
SAM_API int sam_tokenizer_decode(const sam_tokenizer* tokenizer, const uint32_t* ids, size_t n,
                                 char* text, size_t capacity, size_t* length);
/* The tokenizer fingerprint an index records, as sam_tokenizer_sha256: 64
 * hex digits and a NUL into out[65]; an empty string for an index built
 * from ids (sam-build --corpus ids=FILE without --tokenizer), which
 * records none. */
SAM_API int sam_index_tokenizer_sha256(const sam_index* index, char out[65]);
/* SAM_OK when `index` was built with this tokenizer (equal fingerprints),
 * else SAM_ERR_TOKENIZER_MISMATCH naming both fingerprints and the
 * tokenizer's file (an index built from ids matches no tokenizer). Drafts of
 * an index used with another tokenizer are meaningless ids. */
SAM_API int sam_tokenizer_check_index(const sam_tokenizer* tokenizer, const sam_index* index);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SAM_SAM_H_ */
