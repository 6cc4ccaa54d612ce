/* An outside C program over the installed runtime (sam/sam.h):
 *
 *   consumer_c INDEX
 *
 * Prints the header's and the library's versions, opens INDEX (the C
 * example's index, tests/capi/make_index.cc), prefills 1 10 11 12 in a
 * session made from a sam_session_config, proposes after 13, prints the
 * draft, verifies it against a "model" that counts up (every draft token is
 * accepted), commits and prints the statistics' step count, then opens a
 * missing file and prints the status name. Exit status 0 on success, 1 on a runtime
 * error, 2 on bad usage. */
#include <stdio.h>

#include "sam/sam.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: consumer_c INDEX\n");
    return 2;
  }
  printf("consumer_c: header %s (%d, abi %d), library %s (%d, abi %d)\n", SAM_VERSION_STRING,
         SAM_VERSION, SAM_ABI_VERSION, sam_version_string(), sam_version(), sam_abi_version());
  if (sam_version() < SAM_VERSION || sam_abi_version() != SAM_ABI_VERSION) {
    fprintf(stderr, "consumer_c: the library is older than the header or of another ABI\n");
    return 1;
  }
  sam_index* index = NULL;
  if (sam_index_open(argv[1], NULL, SAM_OPEN_PREPARE, &index) != SAM_OK) {
    fprintf(stderr, "consumer_c: %s\n", sam_last_error());
    return 1;
  }
  sam_session* session = NULL;
  const uint32_t prompt[] = {1, 10, 11, 12};
  sam_draft draft;
  sam_session_config config;
  sam_session_config_init(&config);
  config.collect_timing = 1;
  if (sam_session_new(&config, &session) != SAM_OK ||
      sam_session_attach_index(session, index) != SAM_OK ||
      sam_session_prefill(session, prompt, 4) != SAM_OK ||
      sam_session_propose(session, 13, 0, &draft) != SAM_OK) {
    fprintf(stderr, "consumer_c: %s\n", sam_last_error());
    sam_session_free(session);
    sam_index_close(index);
    return 1;
  }
  printf("consumer_c: draft from %s:", draft.source == SAM_SOURCE_STATIC ? "static" : "other");
  for (size_t i = 0; i < draft.count; ++i) printf(" %u", (unsigned)draft.tokens[i]);
  printf("\n");

  uint32_t argmax[SAM_MAX_DRAFT_SIZE];
  for (size_t i = 0; i < draft.count; ++i) argmax[i] = draft.tokens[i] + 1;
  sam_verify_result result;
  const char* stats = NULL;
  if (sam_session_verify_greedy(session, argmax, draft.count, &result) != SAM_OK ||
      sam_session_commit(session, result.commit_tokens, result.accepted_count + 1) != SAM_OK ||
      (stats = sam_session_stats_json(session)) == NULL) {
    fprintf(stderr, "consumer_c: %s\n", sam_last_error());
    sam_session_free(session);
    sam_index_close(index);
    return 1;
  }
  printf("consumer_c: accepted %u, bonus %u\n", (unsigned)result.accepted_count,
         (unsigned)result.bonus_token);
  printf("consumer_c: stats %.11s\n", stats);
  sam_session_free(session);
  sam_index_close(index);

  sam_index* missing = NULL;
  const int status = sam_index_open("/nonexistent/missing.sam", NULL, 0, &missing);
  printf("consumer_c: missing index: %s\n", sam_status_name(status));
  return 0;
}
