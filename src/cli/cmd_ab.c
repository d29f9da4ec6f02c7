/* cmd_ab.c - `power ab`: evidence for speed claims about engine features.
 *
 *   power ab --model M --workload W.jsonl --baseline CFG --candidate CFG
 *            [--rounds 4] [--threads 2] [--ctx N] [-o md|json]
 *   power ab --verify-curve --model M [--kmax 16] [--reps 5]
 *            [--prompt-len 256] [--threads 2] [-o md|json]
 *
 * A/B. A configuration is comma-separated key=value:
 *   spec=off|prompt-lookup|ngram|draft|mtp   speculation mode (default off)
 *   draft=PATH                           draft model (spec=draft)
 *   k=N                                  most proposals per round (0 = engine default)
 *   cache=on|off                         keyed prefix cache (default off); only
 *                                        requests with a cache_key use it
 *   parallel=N                           requests in flight at once (default 1)
 * One engine per configuration is created before any timing and reused for
 * every run, so load time never counts and both engines see the same warm
 * page cache. Each round runs baseline then candidate, then candidate then
 * baseline: every configuration runs once in each position per round, so
 * drift (thermal, other tenants of the machine) hits both sides alike, and
 * the per-order figures show whether position itself matters. A run is the
 * whole workload, in order (parallel=1) or from N worker threads each taking
 * the next request. Cache keys are salted per run, so every run starts cold
 * for its keys and the first turn of a conversation is a real miss.
 *
 * Per request the clock reads: submit, first TOKEN event (time to first
 * token = queueing + prompt evaluation + first sample), DONE; event times
 * are when the engine queued them (engine_event.time_s), so a client thread
 * that gets the CPU late does not bunch them up. Per run:
 *   decode tok/s = sum(completion - 1) / sum(DONE - first token), i.e. the
 *                  per-stream generation rate after the first token;
 *   e2e tok/s    = sum(completion) / wall time of the run (first submit to
 *                  last DONE), i.e. throughput including prompt work.
 * Per request, over all runs of a configuration: TTFT and latency (submit
 * to DONE), median and 99th percentile (nearest rank).
 * Figures are medians over runs: per order (baseline-first rounds,
 * candidate-first rounds) and pooled; ratios are candidate / baseline. The
 * paired ratio is the median over adjacent (baseline, candidate) pairs; the
 * self ratio (median of a configuration's later half of runs over its
 * earlier half) shows how much a configuration differs from itself, i.e.
 * the noise floor a ratio has to clear. The gain is the lower of the two
 * per-order decode ratios. The report names the model and the workload by
 * the SHA-256 of their bytes; with -o json each run is listed under
 * "samples".
 *
 * Parity: every request's generated token ids and finish reason must be
 * identical in every run of both configurations (the first baseline run is
 * the reference). Sampled requests keep their seed (a request without one
 * gets 1 + its line index), so sampled output is compared too. A broken
 * parity makes the exit status 1 (the report is still printed).
 *
 * Workload JSONL, one request per line:
 *   {"prompt": "text"} or {"messages": [...]} (the model's chat template),
 *   "max_tokens" (default 64), optional "temperature" (default 0 = greedy),
 *   "top_p", "top_k", "seed", "cache_key" (a string: turns of one
 *   conversation share it; hashed, the engine never sees it) and "id".
 *
 * --verify-curve times ONE forward pass of 1+K entries of one sequence
 * (logits for all of them, as a speculative verification needs) after a
 * prompt of --prompt-len tokens, K = 0..kmax, median over reps (K values
 * interleaved within each rep, one uncounted warm-up rep), and prints
 * cost(K)/cost(0): how much verifying K proposals costs over plain decode.
 *
 * The statistics and the JSON report are computed in evidence/abstat.c from
 * the raw samples the report carries (per request: timings, counts and the
 * output's token-id digest), so `power verify --ab REPORT.json` recomputes
 * every figure, the parity and the report's own digest without a model.
 * This file runs the workload and prints.
 *
 * Not here: HTTP load (the server has its own tests), model throughput
 * without the engine (`power bench`). */
#include "cli/cmd_ab.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/rng.h"
#include "base/sha256.h"
#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "engine/engine.h"
#include "evidence/abstat.h"
#include "evidence/digest.h"
#include "model/model.h"
#include "chat/prompt.h"
#include "tok/tok.h"

#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AB_MAX_ROUNDS 1000
#define AB_MAX_PARALLEL 64
#define AB_MAX_REQUESTS 100000
#define AB_MAX_KMAX 64
#define AB_MAX_REPS 1000
#define AB_PREFILL_CHUNK 512 /* prompt tokens per forward call in --verify-curve */

/* ---- options and configurations ---- */

typedef struct ab_config {
  const char *text; /* as given (borrowed from argv) */
  int spec_mode;    /* ENGINE_SPEC_* */
  char draft[1024]; /* draft model path ("" = none) */
  int k;            /* spec_draft_max; 0 = engine default */
  int policy;       /* engine_spec_policy */
  bool cache;       /* prefix cache on */
  int parallel;     /* requests in flight */
} ab_config;

typedef struct ab_opts {
  const char *model, *workload;
  ab_config cfg[2]; /* [0] baseline, [1] candidate */
  long rounds, threads, n_ctx;
  bool json;
  bool verify_curve;
  long kmax, reps, prompt_len;
  cli_weights weights;
} ab_opts;

static void ab_usage(FILE *out) {
  fprintf(out,
          "usage: power ab --model M --workload W.jsonl --baseline CFG --candidate CFG [options]\n"
          "       power ab --verify-curve --model M [--kmax 16] [--reps 5] [--prompt-len 256]\n"
          "  CFG is key=value[,key=value...]: spec=off|prompt-lookup|ngram|draft|mtp, draft=PATH,\n"
          "      k=N (proposals per round), policy=cost|acceptance (speculation widths),\n"
          "      cache=on|off (prefix cache, default off),\n"
          "      parallel=N (requests in flight, default 1)\n"
          "  --rounds N       rounds, each runs both orders (default 4, at least 2)\n"
          "  -t, --threads N  kernel threads (default " CLI_STR(ENGINE_DEFAULT_THREADS) ")\n"
          "  --ctx N          context per sequence (default: model's, at most " CLI_STR(ENGINE_DEFAULT_CTX) ")\n"
          "  -o, --output FMT md (default) or json (one object)\n"
          "  --verify-curve   time one forward pass of 1+K tokens, K = 0..kmax\n"
          "  --kmax N         largest K (default 16)\n"
          "  --reps N         timed repetitions per K (default 5)\n"
          "  --prompt-len N   tokens in the cache before the timed pass (default 256)\n");
  cli_weights_usage(out);
}

/* Parses "spec=ngram,k=8,cache=on" into c. Prints one line and returns -1
 * on a bad key or value. */
static int config_parse(const char *which, const char *text, ab_config *c) {
  memset(c, 0, sizeof *c);
  c->text = text;
  c->parallel = 1;
  char buf[2048];
  if (strlen(text) >= sizeof buf) {
    fprintf(stderr, "power ab: --%s is too long\n", which);
    return -1;
  }
  strcpy(buf, text);
  bool spec_given = false;
  char *save = NULL;
  for (char *kv = strtok_r(buf, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
    char *eq = strchr(kv, '=');
    if (!eq || eq == kv || !eq[1]) {
      fprintf(stderr, "power ab: --%s: expected key=value, got '%s'\n", which, kv);
      return -1;
    }
    *eq = 0;
    const char *key = kv, *val = eq + 1;
    long l;
    if (!strcmp(key, "spec")) {
      c->spec_mode = engine_spec_parse(val);
      if (c->spec_mode < 0) {
        fprintf(stderr, "power ab: --%s: unknown spec mode '%s' (off, prompt-lookup, ngram, draft, mtp)\n", which, val);
        return -1;
      }
      spec_given = true;
    } else if (!strcmp(key, "draft")) {
      if (strlen(val) >= sizeof c->draft) {
        fprintf(stderr, "power ab: --%s: draft path too long\n", which);
        return -1;
      }
      strcpy(c->draft, val);
    } else if (!strcmp(key, "k")) {
      if (cli_parse_long("ab", "k", val, 0, 32, &l)) return -1;
      c->k = (int)l;
    } else if (!strcmp(key, "policy")) {
      c->policy = engine_spec_policy_parse(val);
      if (c->policy < 0) {
        fprintf(stderr, "power ab: --%s: policy must be cost or acceptance, got '%s'\n", which, val);
        return -1;
      }
    } else if (!strcmp(key, "cache")) {
      if (strcmp(val, "on") && strcmp(val, "off")) {
        fprintf(stderr, "power ab: --%s: cache must be on or off, got '%s'\n", which, val);
        return -1;
      }
      c->cache = !strcmp(val, "on");
    } else if (!strcmp(key, "parallel")) {
      if (cli_parse_long("ab", "parallel", val, 1, AB_MAX_PARALLEL, &l)) return -1;
      c->parallel = (int)l;
    } else {
      fprintf(stderr, "power ab: --%s: unknown key '%s' (spec, draft, k, policy, cache, parallel)\n", which, key);
      return -1;
    }
  }
  if (c->draft[0] && !spec_given) c->spec_mode = ENGINE_SPEC_DRAFT;
  if (c->spec_mode == ENGINE_SPEC_DRAFT && !c->draft[0]) {
    fprintf(stderr, "power ab: --%s: spec=draft needs draft=PATH\n", which);
    return -1;
  }
  if (c->draft[0] && c->spec_mode != ENGINE_SPEC_DRAFT) {
    fprintf(stderr, "power ab: --%s: draft=PATH is only for spec=draft\n", which);
    return -1;
  }
  return 0;
}

/* ---- workload ---- */

typedef struct ab_request {
  char id[64];
  int line;              /* 1-based line in the file */
  int32_t *prompt;       /* owned */
  int n_prompt;
  int max_tokens;
  pw_sampler_params sp;
  bool has_key;
  uint8_t key[32];       /* SHA-256 of the cache_key string */
} ab_request;

typedef struct ab_workload {
  ab_request *req; /* owned, [n] */
  int n;
  char sha256[65]; /* of the file's bytes, hex */
} ab_workload;

static void workload_free(ab_workload *w) {
  for (int i = 0; i < w->n; i++) free(w->req[i].prompt);
  free(w->req);
  memset(w, 0, sizeof *w);
}

/* Reads a number field that may be an integer or a real. */
static bool json_num(json_t *o, const char *key, double *out) {
  json_t *v = json_object_get(o, key);
  if (!v) return false;
  if (!json_is_number(v)) return false;
  *out = json_number_value(v);
  return true;
}

/* Parses and tokenizes one line into r. 0 or -1 with a message in err. */
static int request_parse(const prompt_builder *pb, json_t *o, int line, ab_request *r, char *err) {
  memset(r, 0, sizeof *r);
  r->line = line;
  pw_sampler_params_default(&r->sp);
  r->sp.temperature = 0;
  r->sp.seed = 1 + (uint64_t)line;
  r->max_tokens = 64;
  if (!json_is_object(o)) return pw_seterr(err, PW_EINVAL, "line %d: not a JSON object", line);
  json_t *id = json_object_get(o, "id");
  if (json_is_string(id)) snprintf(r->id, sizeof r->id, "%s", json_string_value(id));
  else if (json_is_integer(id)) snprintf(r->id, sizeof r->id, "%lld", (long long)json_integer_value(id));
  else snprintf(r->id, sizeof r->id, "line%d", line);
  double d;
  json_t *v = json_object_get(o, "max_tokens");
  if (v) {
    if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > (1 << 20))
      return pw_seterr(err, PW_EINVAL, "line %d: max_tokens must be an integer in [1, 1048576]", line);
    r->max_tokens = (int)json_integer_value(v);
  }
  if (json_object_get(o, "temperature")) {
    if (!json_num(o, "temperature", &d) || d < 0 || d > 100)
      return pw_seterr(err, PW_EINVAL, "line %d: temperature must be a number in [0, 100]", line);
    r->sp.temperature = (float)d;
  }
  if (json_object_get(o, "top_p")) {
    if (!json_num(o, "top_p", &d) || d <= 0 || d > 1)
      return pw_seterr(err, PW_EINVAL, "line %d: top_p must be a number in (0, 1]", line);
    r->sp.top_p = (float)d;
  }
  if ((v = json_object_get(o, "top_k"))) {
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 24))
      return pw_seterr(err, PW_EINVAL, "line %d: top_k must be a non-negative integer", line);
    r->sp.top_k = (int32_t)json_integer_value(v);
  }
  if ((v = json_object_get(o, "seed"))) {
    if (!json_is_integer(v) || json_integer_value(v) < 0)
      return pw_seterr(err, PW_EINVAL, "line %d: seed must be a non-negative integer", line);
    r->sp.seed = (uint64_t)json_integer_value(v);
  }
  if ((v = json_object_get(o, "cache_key"))) {
    if (!json_is_string(v) || !json_string_length(v))
      return pw_seterr(err, PW_EINVAL, "line %d: cache_key must be a non-empty string", line);
    pw_sha256(json_string_value(v), json_string_length(v), r->key);
    r->has_key = true;
  }
  json_t *prompt = json_object_get(o, "prompt"), *msgs = json_object_get(o, "messages");
  if (!!prompt == !!msgs) return pw_seterr(err, PW_EINVAL, "line %d: give exactly one of prompt and messages", line);
  prompt_error e;
  memset(&e, 0, sizeof e);
  int rc;
  if (prompt) {
    if (!json_is_string(prompt) || !json_string_length(prompt))
      return pw_seterr(err, PW_EINVAL, "line %d: prompt must be a non-empty string", line);
    rc = prompt_tokenize(pb, json_string_value(prompt), json_string_length(prompt), true, false, "prompt",
                         &r->prompt, &r->n_prompt, &e);
  } else {
    if (!json_is_array(msgs)) return pw_seterr(err, PW_EINVAL, "line %d: messages must be an array", line);
    rc = prompt_chat(pb, msgs, NULL, &r->prompt, &r->n_prompt, &e);
  }
  if (rc) return pw_seterr(err, PW_EINVAL, "line %d: %s", line, e.message);
  if (r->n_prompt < 1) return pw_seterr(err, PW_EINVAL, "line %d: the prompt has no tokens", line);
  return 0;
}

/* Loads the JSONL file; prompts are tokenized with pb. Stops at the first
 * bad line (a benchmark over a half-read workload would mislead). */
static int workload_load(const char *path, const prompt_builder *pb, int n_ctx, ab_workload *w, char *err) {
  memset(w, 0, sizeof *w);
  FILE *f = fopen(path, "r");
  if (!f) return pw_seterr(err, PW_EIO, "cannot open workload %s", path);
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int lineno = 0, rc = 0, cap_req = 0;
  while ((len = getline(&line, &cap, f)) >= 0) {
    lineno++;
    while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r' || line[len - 1] == ' ')) line[--len] = 0;
    if (len == 0) continue;
    if (w->n >= AB_MAX_REQUESTS) {
      rc = pw_seterr(err, PW_ELIMIT, "more than %d requests", AB_MAX_REQUESTS);
      goto fail;
    }
    json_error_t je;
    json_t *o = json_loadb(line, (size_t)len, 0, &je);
    if (!o) {
      rc = pw_seterr(err, PW_EINVAL, "line %d: invalid JSON: %s", lineno, je.text);
      goto fail;
    }
    if (w->n == cap_req) {
      cap_req = cap_req ? cap_req * 2 : 16;
      ab_request *nr = realloc(w->req, (size_t)cap_req * sizeof *nr);
      if (!nr) {
        json_decref(o);
        rc = pw_seterr(err, PW_ENOMEM, "out of memory");
        goto fail;
      }
      w->req = nr;
    }
    rc = request_parse(pb, o, lineno, &w->req[w->n], err);
    json_decref(o);
    if (rc) {
      free(w->req[w->n].prompt);
      goto fail;
    }
    ab_request *r = &w->req[w->n++];
    if (r->n_prompt > n_ctx - 1) {
      rc = pw_seterr(err, PW_ECONTEXT, "line %d: prompt of %d tokens does not fit the context of %d", lineno,
                     r->n_prompt, n_ctx);
      goto fail;
    }
  }
  if (!w->n) rc = pw_seterr(err, PW_EINVAL, "workload %s has no requests", path);
  uint8_t dig[32];
  if (!rc && !(rc = pw_sha256_file(path, dig, err))) pw_hex(dig, 32, w->sha256);
fail:
  free(line);
  fclose(f);
  if (rc) workload_free(w);
  return rc;
}

/* ---- runs ---- */

typedef struct ab_ids { /* one request's emitted ids in one run */
  int32_t *ids;         /* owned, [cap] */
  int n, cap;
} ab_ids;

typedef struct ab_run {
  ab_run_sample s;      /* s.req: owned, [n requests]; times from the run's start */
  ab_ids *ids;          /* owned, [n requests] */
} ab_run;

typedef struct ab_exec { /* one run being executed */
  engine *eng;
  const ab_workload *w;
  const ab_config *cfg;
  ab_run *run;
  uint32_t salt; /* mixed into cache keys: every run starts cold */
  atomic_int next;
  atomic_int failed;
  pthread_mutex_t mu;
  char err[PW_ERRMAX];
} ab_exec;

static void exec_fail(ab_exec *x, const char *id, const char *msg) {
  pthread_mutex_lock(&x->mu);
  if (!atomic_load(&x->failed)) snprintf(x->err, sizeof x->err, "request %s: %s", id, msg);
  atomic_store(&x->failed, 1);
  pthread_mutex_unlock(&x->mu);
}

static int finish_code(engine_finish f) {
  return f == ENGINE_FINISH_STOP     ? AB_FINISH_STOP
         : f == ENGINE_FINISH_LENGTH ? AB_FINISH_LENGTH
         : f == ENGINE_FINISH_CANCEL ? AB_FINISH_CANCEL
                                     : AB_FINISH_NONE;
}

/* Runs request i to completion, recording its clock readings (absolute,
 * pw_now_s) and ids. */
static int exec_one(ab_exec *x, int i) {
  const ab_request *q = &x->w->req[i];
  ab_req_sample *res = &x->run->s.req[i];
  ab_ids *ids = &x->run->ids[i];
  engine_params p;
  memset(&p, 0, sizeof p);
  p.prompt = q->prompt;
  p.n_prompt = q->n_prompt;
  p.max_tokens = q->max_tokens;
  p.sampling = q->sp;
  if (x->cfg->cache && q->has_key) {
    uint8_t buf[36];
    memcpy(buf, q->key, 32);
    memcpy(buf + 32, &x->salt, 4);
    pw_sha256(buf, sizeof buf, p.cache_key);
    p.has_cache_key = true;
  }
  engine_event ev;
  char err[PW_ERRMAX];
  engine_req *r;
  ids->n = 0;
  res->t_first = 0;
  res->t_submit = pw_now_s();
  int rc = engine_submit(x->eng, &p, &r, err);
  if (rc) {
    exec_fail(x, q->id, err);
    return rc;
  }
  for (;;) {
    rc = engine_next(r, &ev, -1);
    if (rc) {
      exec_fail(x, q->id, pw_strerror(rc));
      break;
    }
    if (ev.type == ENGINE_EV_TOKEN) {
      if (!ids->n) res->t_first = ev.time_s;
      if (ids->n < ids->cap) ids->ids[ids->n++] = ev.token;
    } else if (ev.type == ENGINE_EV_DONE) {
      res->t_done = ev.time_s;
      if (!res->t_first) res->t_first = res->t_done; /* ended before any emitted token */
      res->finish = finish_code(ev.finish);
      const engine_usage *u = &ev.usage;
      res->prompt_tokens = u->prompt_tokens;
      res->completion_tokens = u->completion_tokens;
      res->cached_tokens = u->cached_tokens;
      res->drafted = u->spec_drafted;
      res->accepted = u->spec_accepted;
      res->emitted = u->spec_emitted;
      res->target_passes = u->target_passes;
      break;
    } else {
      exec_fail(x, q->id, ev.message);
      rc = ev.status ? ev.status : PW_EINTERNAL;
      break;
    }
  }
  engine_release(r);
  return rc;
}

static void *exec_worker(void *arg) {
  ab_exec *x = arg;
  for (;;) {
    if (atomic_load(&x->failed)) break;
    int i = atomic_fetch_add(&x->next, 1);
    if (i >= x->w->n) break;
    if (exec_one(x, i)) break;
  }
  return NULL;
}

/* Runs the whole workload once on eng; afterwards the request times count
 * from the run's start and each request has its output digest. 0 or -1
 * with err set. */
static int run_workload(engine *eng, const ab_config *cfg, const ab_workload *w, ab_run *run, uint32_t salt,
                        char *err) {
  ab_exec x;
  memset(&x, 0, sizeof x);
  x.eng = eng;
  x.w = w;
  x.cfg = cfg;
  x.run = run;
  x.salt = salt;
  atomic_init(&x.next, 0);
  atomic_init(&x.failed, 0);
  pthread_mutex_init(&x.mu, NULL);
  int nt = cfg->parallel < w->n ? cfg->parallel : w->n;
  pthread_t th[AB_MAX_PARALLEL];
  int started = 0;
  double t0 = pw_now_s();
  if (nt <= 1) exec_worker(&x);
  else {
    for (; started < nt; started++)
      if (pthread_create(&th[started], NULL, exec_worker, &x)) {
        exec_fail(&x, "-", "cannot start a worker thread");
        break;
      }
    for (int i = 0; i < started; i++) pthread_join(th[i], NULL);
  }
  run->s.wall_s = pw_now_s() - t0;
  pthread_mutex_destroy(&x.mu);
  if (atomic_load(&x.failed)) {
    snprintf(err, PW_ERRMAX, "%s", x.err);
    return -1;
  }
  for (int i = 0; i < w->n; i++) {
    ab_req_sample *r = &run->s.req[i];
    r->t_submit -= t0;
    r->t_first -= t0;
    r->t_done -= t0;
    r->ids = run->ids[i].ids;
    r->n_ids = run->ids[i].n;
    if (ev_token_ids_sha256(r->ids, (size_t)r->n_ids, r->output_sha256)) {
      snprintf(err, PW_ERRMAX, "out of memory");
      return -1;
    }
  }
  abstat_run_rates(&run->s, w->n);
  return 0;
}

/* ---- report ---- */

static json_t *jnum(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static const char *base_name(const char *path) {
  const char *s = strrchr(path, '/');
  return s ? s + 1 : path;
}

static json_t *stats_json(const engine_stats *s) {
  json_t *o = json_object();
  json_object_set_new(o, "spec_rounds", json_integer((json_int_t)s->spec_rounds_total));
  json_object_set_new(o, "spec_fallbacks", json_integer((json_int_t)s->spec_fallbacks_total));
  json_object_set_new(o, "spec_declined", json_integer((json_int_t)s->spec_declined_total));
  json_object_set_new(o, "spec_probes", json_integer((json_int_t)s->spec_probes_total));
  json_object_set_new(o, "cache_hits", json_integer((json_int_t)s->cache_hits_total));
  json_object_set_new(o, "cache_misses", json_integer((json_int_t)s->cache_misses_total));
  json_object_set_new(o, "cache_reused_tokens", json_integer((json_int_t)s->cache_reused_tokens_total));
  json_object_set_new(o, "cache_evictions", json_integer((json_int_t)s->cache_evictions_total));
  json_object_set_new(o, "spec_rollbacks", json_integer((json_int_t)s->spec_rollbacks_total));
  json_object_set_new(o, "spec_draft_passes", json_integer((json_int_t)s->spec_draft_passes_total));
  json_object_set_new(o, "spec_draft_catchups", json_integer((json_int_t)s->spec_draft_catchup_total));
  json_object_set_new(o, "generated_tokens", json_integer((json_int_t)s->generated_tokens_total));
  json_object_set_new(o, "steps", json_integer((json_int_t)s->steps_total));
  return o;
}

/* "%.2f" or "-" for a missing figure. */
static const char *fmt(char *buf, size_t n, double x, const char *f) {
  if (isfinite(x)) snprintf(buf, n, f, x);
  else snprintf(buf, n, "-");
  return buf;
}

static void md_row(const char *metric, const char *order, double b, double c, bool with_ratio) {
  char x[32], y[32], z[32];
  printf("| %s | %s | %s | %s | %s |\n", metric, order, fmt(x, sizeof x, b, "%.2f"), fmt(y, sizeof y, c, "%.2f"),
         with_ratio ? fmt(z, sizeof z, abstat_ratio(c, b), "%.3fx") : "");
}

typedef struct ab_md {
  const ab_opts *o;
  const char *model_path, *model_sha256, *workload_sha256;
  int n_req;
  const ab_run_sample *runs;
  int n_runs;
  const ab_parity *parity;
} ab_md;

static void print_md(const ab_md *rp) {
  const ab_opts *o = rp->o;
  const ab_run_sample *runs = rp->runs;
  const int nr = rp->n_runs;
  ab_sums sums[2];
  for (int k = 0; k < 2; k++) abstat_sums(runs, nr, k, rp->n_req, &sums[k]);
  const ab_sums *b = &sums[0], *c = &sums[1];
  printf("power ab: %s, workload %s (%d requests), %ld rounds x 2 orders, %ld threads\n", base_name(rp->model_path),
         base_name(o->workload), rp->n_req, o->rounds, o->threads);
  printf("baseline:  %s\ncandidate: %s\n\n", o->cfg[0].text, o->cfg[1].text);
  printf("| metric | runs | baseline | candidate | candidate/baseline |\n");
  printf("| --- | --- | ---: | ---: | ---: |\n");
  static const char *order_names[2] = {"baseline first", "candidate first"};
  static const char *metric_names[2] = {"decode tok/s", "e2e tok/s"};
  for (int m = 0; m < 2; m++) {
    for (int ord = 0; ord < 2; ord++)
      md_row(metric_names[m], order_names[ord], abstat_runs_median(runs, nr, 0, ord, -1, m),
             abstat_runs_median(runs, nr, 1, ord, -1, m), true);
    md_row(metric_names[m], "pooled", abstat_runs_median(runs, nr, 0, -1, -1, m),
           abstat_runs_median(runs, nr, 1, -1, -1, m), true);
  }
  char x[32], y[32];
  for (int m = 0; m < 2; m++)
    printf("| %s | paired | | | %s |\n", metric_names[m], fmt(x, sizeof x, abstat_paired_ratio(runs, nr, m), "%.3fx"));
  for (int m = 0; m < 2; m++)
    printf("| %s self ratio | later/earlier half | %s | %s | |\n", metric_names[m],
           fmt(x, sizeof x,
               abstat_ratio(abstat_runs_median(runs, nr, 0, -1, 1, m), abstat_runs_median(runs, nr, 0, -1, 0, m)),
               "%.3fx"),
           fmt(y, sizeof y,
               abstat_ratio(abstat_runs_median(runs, nr, 1, -1, 1, m), abstat_runs_median(runs, nr, 1, -1, 0, m)),
               "%.3fx"));
  md_row("TTFT ms", "all requests", b->ttft_ms, c->ttft_ms, true);
  md_row("TTFT ms p99", "all requests", b->ttft_p99_ms, c->ttft_p99_ms, true);
  md_row("request latency ms", "all requests", b->latency_ms, c->latency_ms, true);
  md_row("request latency ms p99", "all requests", b->latency_p99_ms, c->latency_p99_ms, true);
  md_row("TTFT ms", "cold (nothing cached)", b->ttft_cold_ms, c->ttft_cold_ms, false);
  md_row("TTFT ms", "warm (prefix reused)", b->ttft_warm_ms, c->ttft_warm_ms, false);
  md_row("TTFT warm/cold", "medians", abstat_ratio(b->ttft_warm_ms, b->ttft_cold_ms),
         abstat_ratio(c->ttft_warm_ms, c->ttft_cold_ms), false);
  md_row("tokens per target pass", "all", abstat_tokens_per_pass(b), abstat_tokens_per_pass(c), false);
  md_row("acceptance", "all", abstat_acceptance(b), abstat_acceptance(c), false);
  int nb = b->n_runs ? b->n_runs : 1, nc = c->n_runs ? c->n_runs : 1;
  md_row("cached tokens", "per run", (double)b->cached / nb, (double)c->cached / nc, false);
  md_row("prompt tokens", "per run", (double)b->prompt / nb, (double)c->prompt / nc, false);
  md_row("completion tokens", "per run", (double)b->completion / nb, (double)c->completion / nc, false);
  printf("\ngain: %s (decode tok/s, the lower of the two order-specific ratios)\n",
         fmt(x, sizeof x, abstat_gain(runs, nr), "%.3fx"));
  printf("model sha256: %s\nworkload sha256: %s\n", rp->model_sha256, rp->workload_sha256);
  printf("parity: %s", rp->parity->mismatches ? "false" : "true");
  if (rp->parity->mismatches)
    printf(" (%ld mismatching request runs; first: %s)", rp->parity->mismatches, rp->parity->first);
  else printf(" (every request's tokens identical in all %d runs)", nr);
  printf("\n");
}

/* ---- A/B driver ---- */

static void stats_delta(const engine_stats *a, const engine_stats *b, engine_stats *d) {
  memset(d, 0, sizeof *d);
#define AB_D(f) d->f = b->f - a->f
  AB_D(spec_rounds_total);
  AB_D(spec_fallbacks_total);
  AB_D(spec_declined_total);
  AB_D(spec_probes_total);
  AB_D(cache_hits_total);
  AB_D(cache_misses_total);
  AB_D(cache_reused_tokens_total);
  AB_D(cache_evictions_total);
  AB_D(steps_total);
  AB_D(spec_rollbacks_total);
  AB_D(spec_draft_passes_total);
  AB_D(spec_draft_catchup_total);
  AB_D(generated_tokens_total);
#undef AB_D
}

static int engine_for(const ab_opts *o, const char *model_path, const ab_config *c, engine **out, char *err) {
  engine_opts eo;
  memset(&eo, 0, sizeof eo);
  eo.model_path = model_path;
  eo.n_threads = (int)o->threads;
  cli_weights_apply(&o->weights, &eo);
  eo.max_active = c->parallel;
  eo.max_queue = c->parallel > 16 ? c->parallel : 16;
  eo.n_ctx = (int)o->n_ctx;
  eo.spec_mode = c->spec_mode;
  eo.spec_draft_model = c->draft[0] ? c->draft : NULL;
  eo.spec_draft_max = c->k;
  eo.spec_policy = c->policy;
  eo.prompt_cache_entries = c->cache ? 0 : -1;
  return engine_create(&eo, out, err);
}

static void runs_free(ab_run *runs, int n_runs, int n_req) {
  if (!runs) return;
  for (int i = 0; i < n_runs; i++) {
    if (runs[i].ids)
      for (int j = 0; j < n_req; j++) free(runs[i].ids[j].ids);
    free(runs[i].ids);
    free(runs[i].s.req);
  }
  free(runs);
}

static int run_ab(const ab_opts *o) {
  char err[PW_ERRMAX];
  const char *path = cli_resolve_model(o->model, err, sizeof err);
  if (!path) {
    fprintf(stderr, "power ab: %s\n", err);
    return 2;
  }
  engine *eng[2] = {NULL, NULL};
  prompt_builder pb;
  bool have_pb = false;
  ab_workload w = {0};
  ab_run *runs = NULL;
  ab_run_sample *samples = NULL;
  const char **names = NULL;
  int n_runs = (int)o->rounds * 4, status = 1;
  for (int k = 0; k < 2; k++)
    if (engine_for(o, path, &o->cfg[k], &eng[k], err)) {
      fprintf(stderr, "power ab: %s: %s\n", k ? "candidate" : "baseline", err);
      goto fail;
    }
  if (prompt_builder_init(&pb, engine_vocab(eng[0]), engine_chat_template(eng[0]), err)) {
    fprintf(stderr, "power ab: %s: chat template: %s\n", path, err);
    goto fail;
  }
  have_pb = true;
  int n_ctx = engine_n_ctx(eng[0]) < engine_n_ctx(eng[1]) ? engine_n_ctx(eng[0]) : engine_n_ctx(eng[1]);
  if (workload_load(o->workload, &pb, n_ctx, &w, err)) {
    fprintf(stderr, "power ab: %s: %s\n", o->workload, err);
    status = 2;
    goto fail;
  }
  runs = calloc((size_t)n_runs, sizeof *runs);
  samples = calloc((size_t)n_runs, sizeof *samples);
  names = calloc((size_t)w.n, sizeof *names);
  if (!runs || !samples || !names) goto oom;
  for (int j = 0; j < w.n; j++) names[j] = w.req[j].id;
  /* All result buffers exist before the first timed run. */
  for (int i = 0; i < n_runs; i++) {
    runs[i].s.req = calloc((size_t)w.n, sizeof *runs[i].s.req);
    runs[i].ids = calloc((size_t)w.n, sizeof *runs[i].ids);
    if (!runs[i].s.req || !runs[i].ids) goto oom;
    for (int j = 0; j < w.n; j++) {
      int cap = w.req[j].max_tokens < n_ctx ? w.req[j].max_tokens : n_ctx;
      runs[i].ids[j].ids = malloc((size_t)cap * sizeof(int32_t));
      if (!runs[i].ids[j].ids) goto oom;
      runs[i].ids[j].cap = cap;
    }
  }
  /* Warm-up: the first request, shortened, once per engine (faults in the
   * weights and starts the threads); not counted. */
  {
    ab_workload one = {.req = w.req, .n = 1};
    ab_request warm = w.req[0];
    warm.max_tokens = warm.max_tokens < 8 ? warm.max_tokens : 8;
    one.req = &warm;
    ab_req_sample res = {0};
    int32_t ids[8];
    ab_ids wi = {ids, 0, 8};
    ab_run wr = {.s = {.req = &res}, .ids = &wi};
    for (int k = 0; k < 2; k++)
      if (run_workload(eng[k], &o->cfg[k], &one, &wr, 0xffffffffu - (uint32_t)k, err)) {
        fprintf(stderr, "power ab: warm-up (%s): %s\n", k ? "candidate" : "baseline", err);
        goto fail;
      }
  }
  engine_stats before[2], after, delta[2];
  for (int k = 0; k < 2; k++) engine_get_stats(eng[k], &before[k]);
  int seq[2] = {0, 0};
  for (int round = 0; round < o->rounds; round++) {
    for (int ord = 0; ord < 2; ord++) {
      for (int pos = 0; pos < 2; pos++) {
        int idx = round * 4 + ord * 2 + pos;
        int cfg = ord == 0 ? pos : 1 - pos;
        ab_run_sample *r = &runs[idx].s;
        r->cfg = cfg;
        r->round = round;
        r->order = ord;
        r->seq = seq[cfg]++;
        if (run_workload(eng[cfg], &o->cfg[cfg], &w, &runs[idx], (uint32_t)idx, err)) {
          fprintf(stderr, "power ab: round %d, %s: %s\n", round + 1, cfg ? "candidate" : "baseline", err);
          goto fail;
        }
      }
      const ab_run_sample *rb = &runs[round * 4 + ord * 2 + (ord == 0 ? 0 : 1)].s;
      const ab_run_sample *rc = &runs[round * 4 + ord * 2 + (ord == 0 ? 1 : 0)].s;
      fprintf(stderr, "power ab: round %d/%ld %s first: decode %.2f vs %.2f tok/s, e2e %.2f vs %.2f tok/s\n",
              round + 1, o->rounds, ord ? "candidate" : "baseline", rb->decode_tok_s, rc->decode_tok_s,
              rb->e2e_tok_s, rc->e2e_tok_s);
    }
  }
  for (int k = 0; k < 2; k++) {
    engine_get_stats(eng[k], &after);
    stats_delta(&before[k], &after, &delta[k]);
  }
  for (int k = 0; k < 2; k++) {
    /* what speculation did, per 100 generated tokens: the figures a wall
     * clock too noisy to read still shows */
    const engine_stats *d = &delta[k];
    const double per = d->generated_tokens_total ? 100.0 / (double)d->generated_tokens_total : 0;
    fprintf(stderr,
            "power ab: %s per 100 generated tokens: %.2f verification rounds, %.2f probes, %.2f rollbacks, "
            "%.2f drafter passes, %.2f drafter catch-up passes, %.1f declined steps\n",
            k ? "candidate" : "baseline", (double)d->spec_rounds_total * per, (double)d->spec_probes_total * per,
            (double)d->spec_rollbacks_total * per, (double)d->spec_draft_passes_total * per,
            (double)d->spec_draft_catchup_total * per, (double)d->spec_declined_total * per);
  }
  for (int i = 0; i < n_runs; i++) samples[i] = runs[i].s;
  ab_parity parity;
  abstat_parity(samples, n_runs, w.n, names, true, &parity);
  if (o->json) {
    ab_report_head h = {base_name(path), engine_model_sha256(eng[0]), base_name(o->workload), w.sha256,
                        o->rounds,       o->threads,                  o->cfg[0].text,         o->cfg[1].text,
                        names,           w.n};
    json_t *st = json_object();
    json_object_set_new(st, "baseline", stats_json(&delta[0]));
    json_object_set_new(st, "candidate", stats_json(&delta[1]));
    json_t *root = abstat_report(&h, samples, n_runs, st, err);
    if (!root) {
      fprintf(stderr, "power ab: report: %s\n", err);
      goto fail;
    }
    /* Full precision: `power verify --ab` recomputes every figure from the
     * printed samples. */
    char *txt = json_dumps(root, JSON_COMPACT);
    if (txt) printf("%s\n", txt);
    free(txt);
    json_decref(root);
  } else {
    ab_md md = {o, path, engine_model_sha256(eng[0]), w.sha256, w.n, samples, n_runs, &parity};
    print_md(&md);
  }
  status = parity.mismatches ? 1 : 0;
  if (parity.mismatches) fprintf(stderr, "power ab: parity broken: %s\n", parity.first);
  goto fail;
oom:
  fprintf(stderr, "power ab: out of memory\n");
fail:
  runs_free(runs, n_runs, w.n);
  free(samples);
  free(names);
  workload_free(&w);
  if (have_pb) prompt_builder_free(&pb);
  engine_destroy(eng[0]);
  engine_destroy(eng[1]);
  return status;
}

/* ---- verification-cost curve ---- */

static int run_curve(const ab_opts *o) {
  char err[PW_ERRMAX];
  const char *path = cli_resolve_model(o->model, err, sizeof err);
  if (!path) {
    fprintf(stderr, "power ab: %s\n", err);
    return 2;
  }
  int kmax = (int)o->kmax, reps = (int)o->reps, plen = (int)o->prompt_len, status = 1;
  model *m = NULL;
  model_kv *kv = NULL;
  model_ctx *ctx = NULL;
  model_entry *ent = NULL;
  float *logits = NULL;
  double *ms = NULL, *tmp = NULL;
  void *snap = NULL;
  model_opts mo = {.n_threads = (int)o->threads};
  cli_weights_model_opts(&o->weights, &mo.weights);
  if (model_load(path, &mo, &m, err)) {
    fprintf(stderr, "power ab: %s: %s\n", path, err);
    return 1;
  }
  const model_hparams *hp = model_hp(m);
  int n_ctx = plen + kmax + 1;
  if (hp->n_ctx_train > 0 && n_ctx > hp->n_ctx_train) {
    fprintf(stderr, "power ab: --prompt-len %d + --kmax %d + 1 exceeds the model's context of %d\n", plen, kmax,
            hp->n_ctx_train);
    status = 2;
    goto done;
  }
  int max_batch = plen < AB_PREFILL_CHUNK ? plen : AB_PREFILL_CHUNK;
  if (max_batch < kmax + 1) max_batch = kmax + 1;
  if (model_kv_create(m, 1, n_ctx, &kv, err) || model_ctx_create(m, max_batch, n_ctx, &ctx, err)) {
    fprintf(stderr, "power ab: %s\n", err);
    goto done;
  }
  ent = malloc((size_t)max_batch * sizeof *ent);
  logits = malloc((size_t)(kmax + 1) * (size_t)hp->n_vocab * sizeof *logits);
  ms = malloc((size_t)(kmax + 1) * (size_t)reps * sizeof *ms);
  tmp = malloc((size_t)reps * sizeof *tmp);
  if (!ent || !logits || !ms || !tmp) {
    fprintf(stderr, "power ab: out of memory\n");
    goto done;
  }
  /* The token values do not change the cost of a pass; seeded ids keep the
   * run reproducible. */
  pw_rng rng;
  pw_rng_seed(&rng, 1);
  for (int i = 0; i < plen; i += AB_PREFILL_CHUNK) {
    int nb = plen - i < AB_PREFILL_CHUNK ? plen - i : AB_PREFILL_CHUNK;
    for (int j = 0; j < nb; j++)
      ent[j] = (model_entry){0, i + j, (int32_t)(pw_rng_next(&rng) % (uint64_t)hp->n_vocab), i + j == plen - 1};
    if (model_forward(ctx, kv, ent, nb, logits, NULL, err)) {
      fprintf(stderr, "power ab: prompt: %s\n", err);
      goto done;
    }
  }
  /* a recurrent state goes back to the prompt's from a snapshot */
  if (model_kv_state_bytes(kv)) {
    snap = malloc(model_kv_state_bytes(kv));
    if (!snap) {
      fprintf(stderr, "power ab: out of memory\n");
      goto done;
    }
    model_kv_state_save(kv, 0, snap);
  }
  for (int rep = -1; rep < reps; rep++) {
    for (int k = 0; k <= kmax; k++) {
      for (int j = 0; j <= k; j++)
        ent[j] = (model_entry){0, plen + j, (int32_t)(pw_rng_next(&rng) % (uint64_t)hp->n_vocab), true};
      double t0 = pw_now_s();
      int rc = model_forward(ctx, kv, ent, k + 1, logits, NULL, err);
      double dt = pw_now_s() - t0;
      if (snap) rc = rc ? rc : model_kv_state_restore(kv, 0, snap, err);
      else model_kv_truncate(kv, 0, plen);
      if (rc) {
        fprintf(stderr, "power ab: verify pass of %d: %s\n", k + 1, err);
        goto done;
      }
      if (rep >= 0) ms[(size_t)k * (size_t)reps + (size_t)rep] = dt * 1e3;
    }
  }
  /* The minimum is reported beside the median: on a shared machine noise
   * only ever adds time, so the minimum is the closer estimate of the pass's
   * own cost; the median is the figure to quote. */
  double *med = malloc((size_t)(kmax + 1) * 2 * sizeof *med);
  if (!med) goto done;
  double *mn = med + kmax + 1;
  for (int k = 0; k <= kmax; k++) {
    memcpy(tmp, ms + (size_t)k * (size_t)reps, (size_t)reps * sizeof *tmp);
    med[k] = abstat_median(tmp, reps);
    mn[k] = tmp[0]; /* median() sorted tmp */
  }
  if (o->json) {
    json_t *root = json_object(), *arr = json_array();
    json_object_set_new(root, "model", json_string(base_name(path)));
    json_object_set_new(root, "arch", json_string(hp->arch_name));
    json_object_set_new(root, "prompt_len", json_integer(plen));
    json_object_set_new(root, "reps", json_integer(reps));
    json_object_set_new(root, "threads", json_integer(o->threads));
    for (int k = 0; k <= kmax; k++) {
      json_t *x = json_object();
      json_object_set_new(x, "k", json_integer(k));
      json_object_set_new(x, "ms", jnum(med[k]));
      json_object_set_new(x, "ratio", jnum(abstat_ratio(med[k], med[0])));
      json_object_set_new(x, "min_ms", jnum(mn[k]));
      json_object_set_new(x, "min_ratio", jnum(abstat_ratio(mn[k], mn[0])));
      json_array_append_new(arr, x);
    }
    json_object_set_new(root, "curve", arr);
    if (kmax >= 8) {
      json_object_set_new(root, "ratio_k8", jnum(abstat_ratio(med[8], med[0])));
      json_object_set_new(root, "min_ratio_k8", jnum(abstat_ratio(mn[8], mn[0])));
    }
    char *txt = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(6));
    if (txt) printf("%s\n", txt);
    free(txt);
    json_decref(root);
  } else {
    printf("power ab --verify-curve: %s (%s), one pass of 1+K tokens after %d cached, median of %d, %ld threads\n\n",
           base_name(path), hp->arch_name, plen, reps, o->threads);
    printf("| K | tokens in pass | ms (median) | cost(K)/cost(0) | ms (min) | min ratio |\n"
           "| ---: | ---: | ---: | ---: | ---: | ---: |\n");
    for (int k = 0; k <= kmax; k++)
      printf("| %d | %d | %.3f | %.3f | %.3f | %.3f |\n", k, k + 1, med[k], abstat_ratio(med[k], med[0]), mn[k],
             abstat_ratio(mn[k], mn[0]));
  }
  free(med);
  status = 0;
done:
  free(ent);
  free(logits);
  free(ms);
  free(tmp);
  free(snap);
  model_ctx_destroy(ctx);
  model_kv_destroy(kv);
  model_destroy(m);
  return status;
}

/* ---- entry ---- */

int cmd_ab(int argc, char **argv) {
  ab_opts o;
  memset(&o, 0, sizeof o);
  o.rounds = 4;
  o.threads = 2;
  o.kmax = 16;
  o.reps = 5;
  o.prompt_len = 256;
  const char *base = NULL, *cand = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      ab_usage(stdout);
      return 0;
    }
    if (!strcmp(a, "--verify-curve")) {
      o.verify_curve = true;
      continue;
    }
    if (cli_weights_is_flag(a)) {
      cli_weights_parse("ab", &o.weights, a, NULL);
      continue;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "power ab: %s option %s\n", a[0] == '-' ? "unknown or value-less" : "unexpected argument", a);
      return 2;
    }
    const char *v = argv[++i];
    int wc = cli_weights_parse("ab", &o.weights, a, v);
    if (wc < 0) return 2;
    if (wc > 0) continue;
    if (!strcmp(a, "--model") || !strcmp(a, "-m")) o.model = v;
    else if (!strcmp(a, "--workload")) o.workload = v;
    else if (!strcmp(a, "--baseline")) base = v;
    else if (!strcmp(a, "--candidate")) cand = v;
    else if (!strcmp(a, "--rounds")) {
      if (cli_parse_long("ab", a, v, 0, AB_MAX_ROUNDS, &o.rounds)) return 2;
    } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
      if (cli_parse_long("ab", a, v, 1, ENGINE_MAX_THREADS, &o.threads)) return 2;
    } else if (!strcmp(a, "--ctx")) {
      if (cli_parse_long("ab", a, v, ENGINE_MIN_CTX, ENGINE_MAX_CTX, &o.n_ctx)) return 2;
    } else if (!strcmp(a, "--kmax")) {
      if (cli_parse_long("ab", a, v, 0, AB_MAX_KMAX, &o.kmax)) return 2;
    } else if (!strcmp(a, "--reps")) {
      if (cli_parse_long("ab", a, v, 1, AB_MAX_REPS, &o.reps)) return 2;
    } else if (!strcmp(a, "--prompt-len")) {
      if (cli_parse_long("ab", a, v, 1, 1 << 20, &o.prompt_len)) return 2;
    } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
      if (strcmp(v, "json") && strcmp(v, "md")) {
        fprintf(stderr, "power ab: -o must be md or json, got '%s'\n", v);
        return 2;
      }
      o.json = !strcmp(v, "json");
    } else {
      fprintf(stderr, "power ab: unknown option %s (try --help)\n", a);
      return 2;
    }
  }
  if (cli_weights_finish("ab", &o.weights)) return 2;
  if (o.verify_curve) return run_curve(&o);
  if (!o.workload || !base || !cand) {
    fprintf(stderr, "power ab: --workload, --baseline and --candidate are required (try --help)\n");
    return 2;
  }
  if (o.rounds < 2) {
    fprintf(stderr, "power ab: --rounds must be at least 2 (each round runs both orders; noise needs repeats)\n");
    return 2;
  }
  if (config_parse("baseline", base, &o.cfg[0]) || config_parse("candidate", cand, &o.cfg[1])) return 2;
  return run_ab(&o);
}
