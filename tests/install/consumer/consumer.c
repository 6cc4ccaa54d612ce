/* An outside C program over the installed runtime (sam/sam.h):
 *
 *   consumer_c INDEX
 *
 * Opens INDEX (the C example's index, tests/capi/make_index.cc), prefills
 * 1 10 11 12, proposes after 13, prints the draft, then opens a missing file
 * and prints the status name. Exit status 0 on success, 1 on a runtime
 * error, 2 on bad usage. */
#include <stdio.h>

#include "sam/sam.h"

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: consumer_c INDEX\n");
    return 2;
  }
  sam_index* index = NULL;
  if (sam_index_open_ex(argv[1], NULL, SAM_OPEN_PREPARE, &index) != SAM_OK) {
    fprintf(stderr, "consumer_c: %s\n", sam_last_error());
    return 1;
  }
  sam_session* session = NULL;
  const uint32_t prompt[] = {1, 10, 11, 12};
  sam_draft draft;
  if (sam_session_new(NULL, &session) != SAM_OK ||
      sam_session_attach_index(session, index) != SAM_OK ||
      sam_session_prefill(session, prompt, 4) != SAM_OK ||
      sam_session_propose(session, 13, &draft) != SAM_OK) {
    fprintf(stderr, "consumer_c: %s\n", sam_last_error());
    sam_session_free(session);
    sam_index_close(index);
    return 1;
  }
  printf("consumer_c: draft from %s:", draft.source == SAM_SOURCE_STATIC ? "static" : "other");
  for (size_t i = 0; i < draft.count; ++i) printf(" %u", (unsigned)draft.tokens[i]);
  printf("\n");
  sam_session_free(session);
  sam_index_close(index);

  sam_index* missing = NULL;
  const int status = sam_index_open("/nonexistent/missing.sam", NULL, &missing);
  printf("consumer_c: missing index: %s\n", sam_status_name(status));
  return 0;
}
