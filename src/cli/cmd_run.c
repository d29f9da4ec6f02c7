/* cmd_run.c - `power run`: one generation on the command line.
 *   power run [--model M] --prompt-ids "1,2,3" -n 32   ids in, ids out
 *   power run [--model M] --prompt TEXT                 raw completion
 *   power run [--model M] --chat MESSAGE [--system S]   through the chat template
 * Text streams to stdout as it is generated (never invalid UTF-8); with
 * --prompt-ids only the generated ids are printed, space-separated.
 *
 * --receipt FILE writes the run's receipt (evidence/receipt.h) as the
 * server would give it for the equivalent API request, and that request to
 * FILE.request.json: chat runs as /v1/chat/completions with the messages,
 * text and id prompts as /v1/completions with the prompt's token ids (so a
 * replay tokenizes nothing differently), the effective sampling settings
 * and the seed (drawn from the CSPRNG when none was given) spelled out.
 * `power verify FILE --request FILE.request.json [--replay --model M]`
 * checks it.
 * Diagnostics go to stderr; exit 0 on success, non-zero with one line. */
#include "base/error.h"
#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "evidence/receipt.h"
#include "tok/tok.h"

#include <openssl/rand.h>
#include <stdlib.h>
#include <string.h>

#define RUN_MAX_PROMPT 1048576

static void run_usage(FILE *out) {
  fprintf(out, "usage: power run (--prompt-ids \"1,2,3\" | --prompt TEXT | --chat MESSAGE [--system S]) [options]\n"
               "  --receipt FILE        write the run's receipt to FILE and its request to FILE.request.json\n");
  gen_opts_usage(out);
}

/* The API request equivalent to this run (see the head comment). */
static json_t *run_request(const char *model, const json_t *msgs, const int32_t *ids, int n, const gen_opts *o) {
  json_t *r = json_object();
  if (!r) return NULL;
  json_object_set_new(r, "model", json_string(model));
  if (msgs) {
    json_object_set(r, "messages", (json_t *)msgs);
  } else {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) json_array_append_new(a, json_integer(ids[i]));
    json_object_set_new(r, "prompt", a);
  }
  if (o->n_predict > 0) json_object_set_new(r, "max_tokens", json_integer(o->n_predict));
  json_object_set_new(r, "temperature", json_real(o->sp.temperature));
  json_object_set_new(r, "top_k", json_integer(o->sp.top_k));
  json_object_set_new(r, "top_p", json_real(o->sp.top_p));
  json_object_set_new(r, "min_p", json_real(o->sp.min_p));
  json_object_set_new(r, "repeat_penalty", json_real(o->sp.repeat_penalty));
  json_object_set_new(r, "seed", json_integer((json_int_t)o->sp.seed));
  if (o->n_stop > 0) {
    json_t *s = json_array();
    for (int i = 0; i < o->n_stop; i++) json_array_append_new(s, json_string(o->stop[i]));
    json_object_set_new(r, "stop", s);
  }
  return r;
}

static int write_json(const char *path, const json_t *j) {
  FILE *f = fopen(path, "w");
  if (!f) return PW_EIO;
  int rc = json_dumpf(j, f, JSON_INDENT(2) | JSON_SORT_KEYS | JSON_REAL_PRECISION(17)) == 0 ? 0 : PW_EIO;
  if (fputc('\n', f) == EOF) rc = PW_EIO;
  if (fclose(f)) rc = PW_EIO;
  return rc;
}

/* Parses "1,2,3" (commas and/or spaces) into ids. Returns count or -1. */
static int parse_ids(const char *s, int32_t *out, int cap) {
  int n = 0;
  while (*s) {
    while (*s == ',' || *s == ' ') s++;
    if (!*s) break;
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || v < 0 || v > 0x7fffffff || n >= cap) return -1;
    out[n++] = (int32_t)v;
    s = end;
    if (*s && *s != ',' && *s != ' ') return -1;
  }
  return n;
}

int cmd_run(int argc, char **argv) {
  gen_opts o;
  gen_opts_default(&o);
  const char *ids = NULL, *text = NULL, *chat = NULL, *system = NULL, *receipt = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    int c = gen_opts_parse("run", &o, argc, argv, &i);
    if (c < 0) return 2;
    if (c) continue;
    const char **dst = !strcmp(a, "--prompt-ids") ? &ids
                       : !strcmp(a, "--prompt")   ? &text
                       : !strcmp(a, "--chat")     ? &chat
                       : !strcmp(a, "--system")   ? &system
                       : !strcmp(a, "--receipt")  ? &receipt
                                                  : NULL;
    if (dst) {
      if (i + 1 >= argc) {
        fprintf(stderr, "power run: option %s needs a value\n", a);
        return 2;
      }
      *dst = argv[++i];
    } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      run_usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "power run: unknown option '%s' (see power run --help)\n", a);
      return 2;
    }
  }
  if (gen_opts_check("run", &o)) return 2;
  if (!!ids + !!text + !!chat != 1) {
    fprintf(stderr, "power run: give exactly one of --prompt-ids, --prompt or --chat\n");
    return 2;
  }
  if (system && !chat) {
    fprintf(stderr, "power run: --system goes with --chat\n");
    return 2;
  }
  char err[PW_ERRMAX];
  bool seed_generated = false;
  if (receipt && !o.seed_given) { /* replayable: the seed is drawn now and recorded */
    uint64_t x = 0;
    if (RAND_bytes((unsigned char *)&x, sizeof x) != 1) {
      fprintf(stderr, "power run: cannot draw a seed from the CSPRNG\n");
      return 1;
    }
    o.sp.seed = x >> 11; /* 53 bits: exact in any JSON reader */
    o.seed_given = seed_generated = true;
  }
  if (receipt && ids) {
    fprintf(stderr, "power run: --receipt goes with --prompt or --chat (id runs ignore end-of-generation tokens, "
                    "which the API does not)\n");
    return 2;
  }
  if (receipt && o.sp.temperature > 2) {
    fprintf(stderr, "power run: --receipt: the API takes temperatures up to 2, this run has %g\n",
            (double)o.sp.temperature);
    return 2;
  }
  if (pw_sampler_params_validate(&o.sp, err)) {
    fprintf(stderr, "power run: %s\n", err);
    return 2;
  }
  int32_t *prompt = NULL;
  int n_prompt = 0;
  if (ids) {
    prompt = malloc(RUN_MAX_PROMPT * sizeof *prompt);
    n_prompt = prompt ? parse_ids(ids, prompt, RUN_MAX_PROMPT) : -1;
    if (n_prompt <= 0) {
      fprintf(stderr, "power run: --prompt-ids must be a non-empty list of token ids like \"1,2,3\"\n");
      free(prompt);
      return 2;
    }
    if (o.n_predict < 0) o.n_predict = 32;
  }
  gen_session s;
  if (gen_session_open("run", &o, &s)) {
    free(prompt);
    return 1;
  }
  int status = 1;
  json_t *msgs = NULL, *req = NULL;
  char *rendered = NULL;
  size_t rendered_len = 0;
  ev_model_info mi;
  ev_gen g;
  bool have_gen = false;
  const tok_vocab *v = engine_vocab(s.eng);
  if (ids) {
    for (int i = 0; i < n_prompt; i++)
      if (prompt[i] >= tok_n_vocab(v)) {
        fprintf(stderr, "power run: prompt token %d is outside the vocabulary (%d tokens)\n", prompt[i],
                tok_n_vocab(v));
        goto done;
      }
  } else if (text) {
    /* Raw completion: BOS as the vocabulary says, special-token text kept
     * as text (as llama.cpp tokenized the reference prompts). */
    prompt_error e;
    if (prompt_tokenize(&s.pb, text, strlen(text), true, false, "prompt", &prompt, &n_prompt, &e)) {
      fprintf(stderr, "power run: %s\n", e.message);
      goto done;
    }
  } else {
    if (!s.have_pb) {
      fprintf(stderr, "power run: the model's chat template does not parse\n");
      goto done;
    }
    msgs = json_array();
    if (system) json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "system", "content", system));
    json_array_append_new(msgs, json_pack("{s:s,s:s}", "role", "user", "content", chat));
    prompt_error e;
    prompt_chat_opts po = {.rendered = &rendered, .rendered_len = &rendered_len};
    int rc = prompt_chat(&s.pb, msgs, &po, &prompt, &n_prompt, &e);
    if (rc) {
      fprintf(stderr, "power run: %s\n", e.message);
      goto done;
    }
  }
  if (receipt) {
    const tok_vocab *voc = engine_vocab(s.eng);
    if (ev_model_info_init(&mi, engine_model_id(s.eng), engine_model_sha256(s.eng), engine_model_size(s.eng),
                           s.pb.template_src, tok_kind(voc), tok_pre(voc), tok_n_vocab(voc), err) ||
        ev_gen_init(&g, msgs ? "chat.completions" : "completions", &mi)) {
      fprintf(stderr, "power run: --receipt: %s\n", err);
      goto done;
    }
    have_gen = true;
    req = run_request(engine_model_id(s.eng), msgs, prompt, n_prompt, &o);
    char *body = req ? json_dumps(req, JSON_COMPACT | JSON_REAL_PRECISION(17)) : NULL;
    int rc = body ? ev_request_sha256(body, strlen(body), g.request_sha256, err) : PW_ENOMEM;
    free(body);
    if (rc) {
      fprintf(stderr, "power run: --receipt: %s\n", rc == PW_ENOMEM ? "out of memory" : err);
      goto done;
    }
    g.template_used = msgs != NULL;
    g.seed_generated = seed_generated;
    ev_gen_prompt(&g, rendered, rendered_len, prompt, n_prompt);
    s.rec = &g;
  }
  engine_finish fin = ENGINE_FINISH_NONE;
  if (gen_stream("run", &s, &o, prompt, n_prompt, ids != NULL, ids != NULL, NULL, NULL, &fin, NULL) == 0) {
    printf("\n");
    status = 0;
  }
  if (status == 0 && receipt) {
    ev_receipt rr = {0};
    char rpath[4096];
    snprintf(rpath, sizeof rpath, "%s.request.json", receipt);
    json_t *doc = NULL;
    if (ev_gen_receipt(&g, NULL, &rr, err)) {
      fprintf(stderr, "power run: --receipt: %s\n", err);
      status = 1;
    } else if (!(doc = json_pack("{s:O,s:s}", "receipt", rr.obj, "receipt_sha256", rr.sha256)) ||
               write_json(receipt, doc) || write_json(rpath, req)) {
      fprintf(stderr, "power run: --receipt: cannot write %s or %s\n", receipt, rpath);
      status = 1;
    }
    json_decref(doc);
    ev_receipt_free(&rr);
  }
done:
  if (have_gen) ev_gen_free(&g);
  json_decref(req);
  json_decref(msgs);
  free(rendered);
  free(prompt);
  gen_session_close(&s);
  return status;
}
