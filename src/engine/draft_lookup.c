/* draft_lookup.c - the n-gram drafters: prompt-lookup (matches in the
 * prompt only) and ngram (matches in the prompt and the generated text).
 * They keep no state and no KV. */
#include "engine/engine_int.h"

#include <string.h>

/* Prompt-lookup / n-gram proposals: find the sequence's last n-gram
 * (n = SPEC_NGRAM_MAX down to 1) in the prompt (prompt-lookup) or in
 * everything before it (n-gram), latest occurrence first, and copy up to k
 * tokens that followed it. Allocation-free; O(n * length). */
static int lookup(engine_req *r, int k, bool prompt_only) {
  int len = r->n_prompt + r->n_gen; /* toks[len - 1] = last */
  int end = prompt_only ? r->n_prompt : len;
  const int32_t *t = r->toks;
  for (int n = len < SPEC_NGRAM_MAX ? len : SPEC_NGRAM_MAX; n >= 1; n--) {
    const int32_t *suf = t + len - n;
    /* i + n < end: at least one token follows the match; this also keeps
     * the suffix from matching itself. */
    for (int i = end - n - 1; i >= 0; i--) {
      if (t[i] != suf[0] || memcmp(t + i, suf, (size_t)n * sizeof *t) != 0) continue;
      int c = end - (i + n);
      if (c > k) c = k;
      memcpy(r->prop, t + i + n, (size_t)c * sizeof *t);
      return c;
    }
  }
  return 0;
}


static int propose_prompt(engine *e, engine_req *r, int k) {
  (void)e;
  return lookup(r, k, true);
}

static int propose_all(engine *e, engine_req *r, int k) {
  (void)e;
  return lookup(r, k, false);
}

const drafter_ops eng_draft_prompt_lookup = {
    .mode = ENGINE_SPEC_PROMPT_LOOKUP, .name = "prompt-lookup", .propose = propose_prompt};
const drafter_ops eng_draft_ngram = {.mode = ENGINE_SPEC_NGRAM, .name = "ngram", .propose = propose_all};
