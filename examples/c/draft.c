/* Drafting from C through sam.h: open an index, draft, verify, print MAT.
 *
 *   draft INDEX REFERENCE
 *
 * REFERENCE is a text file of two lines of token ids (the index's tokenizer):
 * a prompt (BOS first), then the model's greedy continuation of it. The
 * reference stands in for the model: after draft node i it "predicts" the
 * continuation's next token, as a model scoring the whole draft in one
 * forward pass would. The loop is the one a C inference engine runs; only
 * score_draft() would call the model instead.
 *
 * The session uses the default options (policy sam-cal). The sam-rec policy
 * (paper rule + Token Recycling) would also need the model's top-k after
 * every pass (sam_session_observe_topk), which a reference cannot give.
 *
 * Build: cc draft.c $(pkg-config --cflags --libs sam-runtime) -o draft
 * Exit status: 0 success, 1 runtime error, 2 usage error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sam/sam.h"

typedef struct {
  uint32_t* ids;
  size_t count;
} id_list;

/* Reads one line of whitespace-separated ids; 0 at the end of the file. */
static int read_ids(FILE* f, id_list* out) {
  char line[1 << 16];
  if (!fgets(line, sizeof line, f)) return 0;
  out->ids = malloc(sizeof(uint32_t) * (strlen(line) / 2 + 1));
  out->count = 0;
  for (char* p = line;;) {
    char* end;
    unsigned long id = strtoul(p, &end, 10);
    if (end == p) break;
    out->ids[out->count++] = (uint32_t)id;
    p = end;
  }
  return out->count > 0;
}

/* The "model": argmax[i] is the token after draft node i, the continuation's
 * token at the node's position; past the continuation's end, a token that no
 * child of the node has, so nothing beyond it is accepted. */
static void score_draft(const sam_draft* d, const id_list* text, size_t pos, uint32_t* argmax) {
  for (size_t i = 0; i < d->count; ++i) {
    size_t next = pos + d->depths[i] + 1;
    if (next < text->count) {
      argmax[i] = text->ids[next];
      continue;
    }
    uint32_t t = 0;
    for (size_t j = i + 1; j < d->count; ++j)
      if ((size_t)d->parents[j] == i && d->tokens[j] == t) ++t, j = i;
    argmax[i] = t;
  }
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: draft INDEX REFERENCE\n");
    return 2;
  }
  FILE* f = fopen(argv[2], "r");
  id_list prompt = {0}, text = {0};
  if (!f || !read_ids(f, &prompt) || !read_ids(f, &text)) {
    fprintf(stderr, "draft: %s: expected two lines of token ids (prompt, continuation)\n", argv[2]);
    return 1;
  }
  fclose(f);

  /* example-begin: c-loop */
  sam_index* index = NULL;
  sam_session* session = NULL;
  sam_session_config config;
  sam_session_config_init(&config); /* the defaults: policy sam-cal, 40-node drafts */
  if (sam_index_open(argv[1], NULL, SAM_OPEN_PREPARE, &index) != SAM_OK ||
      sam_session_new(&config, &session) != SAM_OK ||
      sam_session_attach_index(session, index) != SAM_OK ||
      sam_session_prefill(session, prompt.ids, prompt.count) != SAM_OK) {
    fprintf(stderr, "draft: %s\n", sam_last_error());
    return 1;
  }
  static uint32_t argmax[SAM_MAX_DRAFT_SIZE];
  size_t pos = 0, steps = 0, accepted = 0; /* text.ids[pos]: the model's last token */
  while (pos < text.count) {
    sam_draft d;
    sam_verify_result r;
    if (sam_session_propose(session, text.ids[pos], 0, &d) != SAM_OK) break;
    score_draft(&d, &text, pos, argmax); /* one forward pass over the draft tree */
    if (sam_session_verify_greedy(session, argmax, d.count, &r) != SAM_OK ||
        sam_session_commit(session, r.commit_tokens, r.accepted_count + 1) != SAM_OK)
      break;
    /* emit r.commit_tokens[1 .. accepted_count]; keep the KV of r.accepted_nodes */
    pos += r.accepted_count + 1; /* r.bonus_token is the next start token */
    accepted += r.accepted_count;
    steps += 1;
  }
  if (pos < text.count) {
    fprintf(stderr, "draft: %s\n", sam_last_error());
    return 1;
  }
  printf("MAT %.3f (%zu tokens in %zu steps)\n", (double)(accepted + steps) / steps, pos, steps);
  sam_session_free(session);
  sam_index_close(index);
  /* example-end: c-loop */
  free(prompt.ids);
  free(text.ids);
  return 0;
}
