/* A C program using the SAM-Decoding runtime: open an index, run a session,
 * print the drafts.
 *
 *   capi_example INDEX [PROMPT_ID ... START_ID]
 *
 * Prefills the session with the prompt ids, proposes a draft after START_ID,
 * "accepts" the first half of the draft (a real program verifies it with the
 * model), commits, proposes the next draft and prints the statistics. Exit status 0 on success, 1
 * on a runtime error (with its message on stderr), 2 on bad usage. */
#include <stdio.h>
#include <stdlib.h>

#include "sam/sam.h"

static const char* SourceName(int source) {
  switch (source) {
    case SAM_SOURCE_STATIC:
      return "static";
    case SAM_SOURCE_DYNAMIC:
      return "dynamic";
    case SAM_SOURCE_RECYCLING:
      return "recycling";
    case SAM_SOURCE_MODEL:
      return "model";
    case SAM_SOURCE_CACHE:
      return "cache";
    case SAM_SOURCE_NONE:
      return "none";
    default:
      return "other";
  }
}

static void PrintDraft(const sam_draft* d) {
  size_t i;
  printf("draft from %s (match %u, %zu nodes):", SourceName(d->source), (unsigned)d->match_len,
         d->count);
  for (i = 0; i < d->count; ++i) printf(" %u", (unsigned)d->tokens[i]);
  printf("\nparents:");
  for (i = 0; i < d->count; ++i) printf(" %d", (int)d->parents[i]);
  printf("\n");
}

static int Check(int status, const char* what) {
  if (status != SAM_OK)
    fprintf(stderr, "%s failed: %s: %s\n", what, sam_status_name(status), sam_last_error());
  return status == SAM_OK;
}

int main(int argc, char** argv) {
  uint32_t ids[256], bonus;
  size_t n = 0, i, half;
  int ok, a;
  sam_index* index = NULL;
  sam_session* session = NULL;
  sam_session_config config;
  sam_draft draft;
  const char* stats;

  if (argc < 2 || argc - 2 > 256) {
    fprintf(stderr, "usage: capi_example INDEX [PROMPT_ID ... START_ID]\n");
    return 2;
  }
  for (a = 2; a < argc; ++a) ids[n++] = (uint32_t)strtoul(argv[a], NULL, 10);
  if (n == 0) ids[n++] = 1;

  if (!Check(sam_index_open(argv[1], NULL, 0, &index), "sam_index_open")) return 1;
  printf("index: %u ids, %llu tokens, %llu documents\n", (unsigned)sam_index_vocab_size(index),
         (unsigned long long)sam_index_num_tokens(index),
         (unsigned long long)sam_index_num_documents(index));

  sam_session_config_init(&config); /* defaults; config.struct_size */
  ok = Check(sam_session_new(&config, &session), "sam_session_new") &&
       Check(sam_session_attach_index(session, index), "sam_session_attach_index") &&
       Check(sam_session_prefill(session, ids, n - 1), "sam_session_prefill") &&
       Check(sam_session_propose(session, ids[n - 1], 0, &draft), "sam_session_propose");
  if (ok) {
    PrintDraft(&draft);
    /* A real program verifies the draft with the model here. Pretend the
     * model accepted the first half of this (linear) draft and then produced
     * the next draft token as its bonus token. */
    half = (draft.count - 1) / 2;
    for (i = 0; i <= half; ++i) ids[i] = draft.tokens[i]; /* start + accepted */
    bonus = draft.tokens[half + 1 < draft.count ? half + 1 : half];
    ok = Check(sam_session_commit(session, ids, half + 1), "sam_session_commit") &&
         Check(sam_session_propose(session, bonus, 0, &draft), "sam_session_propose");
  }
  if (ok) {
    PrintDraft(&draft);
    stats = sam_session_stats_json(session);
    ok = stats != NULL;
    if (ok) printf("stats: %s\n", stats);
  }
  sam_session_free(session);
  sam_index_close(index);
  return ok ? 0 : 1;
}
