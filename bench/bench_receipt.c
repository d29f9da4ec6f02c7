/* bench_receipt.c - what a receipt costs a request: the work the server
 * adds per generation (request digest over the canonical body, prompt and
 * output digests token by token, rendering and hashing the receipt), timed
 * over many repetitions, beside what a generation of the same size takes.
 *
 *   bench_receipt [PROMPT_TOKENS [OUTPUT_TOKENS [REPS]]]   (default 512 256 2000)
 *
 * Prints microseconds per receipt; divide by a request's latency (power
 * bench gives tokens/s) for the share. No model is loaded. */
#include "base/clock.h"
#include "base/error.h"
#include "evidence/receipt.h"
#include "sample/sample.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  int np = argc > 1 ? atoi(argv[1]) : 512, no = argc > 2 ? atoi(argv[2]) : 256, reps = argc > 3 ? atoi(argv[3]) : 2000;
  if (np < 1 || no < 1 || reps < 1) {
    fprintf(stderr, "usage: bench_receipt [PROMPT_TOKENS [OUTPUT_TOKENS [REPS]]]\n");
    return 2;
  }
  char err[PW_ERRMAX];
  ev_model_info mi;
  if (ev_model_info_init(&mi, "bench", "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", 1u << 30,
                         "{{ messages }}", "bpe", "qwen2", 151936, err)) {
    fprintf(stderr, "%s\n", err);
    return 1;
  }
  /* a chat request body of about the prompt's size in text */
  size_t blen = (size_t)np * 5 + 256;
  char *body = malloc(blen), *text = malloc((size_t)np * 5 + 1);
  int32_t *ids = malloc((size_t)np * sizeof *ids);
  if (!body || !text || !ids) return 1;
  for (int i = 0; i < np * 5; i++) text[i] = "abcd "[i % 5];
  text[np * 5] = 0;
  snprintf(body, blen,
           "{\"model\":\"bench\",\"messages\":[{\"role\":\"user\",\"content\":\"%s\"}],\"max_tokens\":%d,"
           "\"temperature\":0.7,\"seed\":42,\"prompt_cache_key\":\"k\"}",
           text, no);
  for (int i = 0; i < np; i++) ids[i] = (i * 7919) % 151936;
  pw_sampler_params sp;
  pw_sampler_params_default(&sp);
  double t0 = pw_now_s();
  size_t total = 0;
  for (int r = 0; r < reps; r++) {
    ev_gen g;
    if (ev_gen_init(&g, "chat.completions", &mi) || ev_request_sha256(body, strlen(body), g.request_sha256, err) ||
        ev_gen_decoding(&g, &sp, NULL, 0, err)) {
      fprintf(stderr, "%s\n", err);
      return 1;
    }
    g.template_used = true;
    ev_gen_prompt(&g, text, (size_t)np * 5, ids, np);
    for (int i = 0; i < no; i++) ev_gen_token(&g, ids[i % np], " word", 5);
    g.finish = "length";
    g.completion_tokens = no;
    ev_receipt rc = {0};
    if (ev_gen_receipt(&g, NULL, &rc, err)) {
      fprintf(stderr, "%s\n", err);
      return 1;
    }
    total += rc.json_len;
    ev_receipt_free(&rc);
    ev_gen_free(&g);
  }
  double us = (pw_now_s() - t0) / reps * 1e6;
  printf("receipt for %d prompt tokens (%zu-byte body) and %d output tokens: %.1f us (%zu-byte receipt)\n", np,
         strlen(body), no, us, total / (size_t)reps);
  free(body);
  free(text);
  free(ids);
  return 0;
}
