/* abstat.c - A/B report statistics and the model-free recomputation of a
 * report. See abstat.h. */
#include "evidence/abstat.h"

#include "base/error.h"
#include "base/sha256.h"
#include "evidence/digest.h"
#include "evidence/jcs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define AB_MAX_RUNS 100000     /* runs accepted in a report to verify */
#define AB_MAX_REQ 100000      /* requests per run accepted in a report to verify */

/* ---- statistics ---- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* Sorts the finite values of v to its front; returns their count. */
static int sort_finite(double *v, int n) {
  int m = 0;
  for (int i = 0; i < n; i++)
    if (isfinite(v[i])) v[m++] = v[i];
  qsort(v, (size_t)m, sizeof *v, cmp_double);
  return m;
}

double abstat_median(double *v, int n) {
  const int m = sort_finite(v, n);
  if (!m) return NAN;
  return m % 2 ? v[m / 2] : 0.5 * (v[m / 2 - 1] + v[m / 2]);
}

/* The smallest value with at least p% of the values at or below it. */
double abstat_percentile(double *v, int n, double p) {
  const int m = sort_finite(v, n);
  if (!m) return NAN;
  int k = (int)ceil(p / 100.0 * m);
  return v[k < 1 ? 0 : k > m ? m - 1 : k - 1];
}

double abstat_ratio(double num, double den) { return isfinite(num) && isfinite(den) && den > 0 ? num / den : NAN; }

void abstat_run_rates(ab_run_sample *run, int n_req) {
  long tokens = 0, dec_tokens = 0;
  double dec_s = 0;
  for (int i = 0; i < n_req; i++) {
    const ab_req_sample *r = &run->req[i];
    tokens += r->completion_tokens;
    if (r->completion_tokens >= 2) {
      dec_tokens += r->completion_tokens - 1;
      dec_s += r->t_done - r->t_first;
    }
  }
  run->tokens = tokens;
  run->decode_tok_s = dec_s > 0 ? (double)dec_tokens / dec_s : NAN;
  run->e2e_tok_s = run->wall_s > 0 ? (double)tokens / run->wall_s : NAN;
}

static double run_metric(const ab_run_sample *r, int metric) {
  return metric == AB_DECODE ? r->decode_tok_s : r->e2e_tok_s;
}

double abstat_runs_median(const ab_run_sample *runs, int n_runs, int cfg, int order, int half, int metric) {
  double *v = malloc((size_t)(n_runs ? n_runs : 1) * sizeof *v);
  if (!v) return NAN;
  int n_cfg = 0, m = 0;
  for (int i = 0; i < n_runs; i++) n_cfg += runs[i].cfg == cfg;
  for (int i = 0; i < n_runs; i++) {
    const ab_run_sample *r = &runs[i];
    if (r->cfg != cfg || (order >= 0 && r->order != order)) continue;
    if (half >= 0 && (r->seq < n_cfg / 2) != (half == 0)) continue;
    v[m++] = run_metric(r, metric);
  }
  double med = abstat_median(v, m);
  free(v);
  return med;
}

double abstat_paired_ratio(const ab_run_sample *runs, int n_runs, int metric) {
  double *v = malloc((size_t)(n_runs ? n_runs : 1) * sizeof *v);
  if (!v) return NAN;
  int m = 0;
  for (int i = 0; i + 1 < n_runs; i += 2) {
    const ab_run_sample *b = runs[i].cfg == 0 ? &runs[i] : &runs[i + 1];
    const ab_run_sample *c = runs[i].cfg == 0 ? &runs[i + 1] : &runs[i];
    v[m++] = abstat_ratio(run_metric(c, metric), run_metric(b, metric));
  }
  double med = abstat_median(v, m);
  free(v);
  return med;
}

/* A drift that favours whichever configuration runs second cannot make the
 * lower of the two order-specific ratios. */
double abstat_gain(const ab_run_sample *runs, int n_runs) {
  double g[2];
  for (int ord = 0; ord < 2; ord++)
    g[ord] = abstat_ratio(abstat_runs_median(runs, n_runs, 1, ord, -1, AB_DECODE),
                          abstat_runs_median(runs, n_runs, 0, ord, -1, AB_DECODE));
  return isfinite(g[0]) && isfinite(g[1]) ? (g[0] < g[1] ? g[0] : g[1]) : NAN;
}

void abstat_sums(const ab_run_sample *runs, int n_runs, int cfg, int n_req, ab_sums *s) {
  memset(s, 0, sizeof *s);
  size_t cap = (size_t)n_runs * (size_t)n_req + 1;
  double *all = malloc(cap * sizeof *all), *cold = malloc(cap * sizeof *cold), *warm = malloc(cap * sizeof *warm);
  double *lat = malloc(cap * sizeof *lat);
  int n_all = 0;
  for (int i = 0; all && cold && warm && lat && i < n_runs; i++) {
    if (runs[i].cfg != cfg) continue;
    s->n_runs++;
    for (int j = 0; j < n_req; j++) {
      const ab_req_sample *r = &runs[i].req[j];
      s->completion += r->completion_tokens;
      s->prompt += r->prompt_tokens;
      s->cached += r->cached_tokens;
      s->drafted += r->drafted;
      s->accepted += r->accepted;
      s->emitted += r->emitted;
      s->passes += r->target_passes;
      double ms = (r->t_first - r->t_submit) * 1e3;
      lat[n_all] = (r->t_done - r->t_submit) * 1e3;
      all[n_all++] = ms;
      if (r->cached_tokens > 0) warm[s->n_warm++] = ms;
      else cold[s->n_cold++] = ms;
    }
  }
  bool ok = all && cold && warm && lat;
  s->ttft_ms = ok ? abstat_median(all, n_all) : NAN;
  s->ttft_p99_ms = ok ? abstat_percentile(all, n_all, 99) : NAN;
  s->latency_ms = ok ? abstat_median(lat, n_all) : NAN;
  s->latency_p99_ms = ok ? abstat_percentile(lat, n_all, 99) : NAN;
  s->ttft_cold_ms = ok ? abstat_median(cold, s->n_cold) : NAN;
  s->ttft_warm_ms = ok ? abstat_median(warm, s->n_warm) : NAN;
  free(lat);
  free(all);
  free(cold);
  free(warm);
}

double abstat_tokens_per_pass(const ab_sums *s) { return s->passes > 0 ? (double)s->completion / s->passes : NAN; }
double abstat_acceptance(const ab_sums *s) { return s->drafted > 0 ? (double)s->accepted / s->drafted : NAN; }

void abstat_parity(const ab_run_sample *runs, int n_runs, int n_req, const char *const *names, bool use_ids,
                   ab_parity *p) {
  memset(p, 0, sizeof *p);
  const ab_run_sample *ref = NULL;
  for (int i = 0; i < n_runs && !ref; i++)
    if (runs[i].cfg == 0) ref = &runs[i];
  if (!ref) return;
  for (int i = 0; i < n_runs; i++) {
    if (&runs[i] == ref) continue;
    for (int j = 0; j < n_req; j++) {
      const ab_req_sample *a = &ref->req[j], *b = &runs[i].req[j];
      if (!memcmp(a->output_sha256, b->output_sha256, 32) && a->finish == b->finish) continue;
      if (p->mismatches++) continue;
      const char *who = runs[i].cfg ? "candidate" : "baseline";
      if (use_ids && a->ids && b->ids) {
        int pos = 0, n = a->n_ids < b->n_ids ? a->n_ids : b->n_ids;
        while (pos < n && a->ids[pos] == b->ids[pos]) pos++;
        snprintf(p->first, sizeof p->first,
                 "request %s, %s run %d (round %d): first difference at token %d (%d vs %d tokens)", names[j], who,
                 runs[i].seq + 1, runs[i].round + 1, pos, a->n_ids, b->n_ids);
      } else {
        snprintf(p->first, sizeof p->first, "request %s, %s run %d (round %d): output digest or finish differs",
                 names[j], who, runs[i].seq + 1, runs[i].round + 1);
      }
    }
  }
}

const char *abstat_finish_name(int f) {
  return f == AB_FINISH_STOP ? "stop" : f == AB_FINISH_LENGTH ? "length" : f == AB_FINISH_CANCEL ? "cancel" : "none";
}

static int finish_code(const char *s) {
  if (!s) return -1;
  for (int f = AB_FINISH_NONE; f <= AB_FINISH_CANCEL; f++)
    if (!strcmp(s, abstat_finish_name(f))) return f;
  return -1;
}

/* ---- the report ---- */

static json_t *jnum(double x) { return isfinite(x) ? json_real(x) : json_null(); }

static json_t *trio(double b, double c) {
  json_t *o = json_object();
  json_object_set_new(o, "baseline", jnum(b));
  json_object_set_new(o, "candidate", jnum(c));
  json_object_set_new(o, "ratio", jnum(abstat_ratio(c, b)));
  return o;
}

static json_t *pair(double b, double c) {
  json_t *o = json_object();
  json_object_set_new(o, "baseline", jnum(b));
  json_object_set_new(o, "candidate", jnum(c));
  return o;
}

static json_t *metric_json(const ab_run_sample *runs, int n_runs, int order, int metric) {
  return trio(abstat_runs_median(runs, n_runs, 0, order, -1, metric),
              abstat_runs_median(runs, n_runs, 1, order, -1, metric));
}

static const char *const k_cfg_names[2] = {"baseline", "candidate"};
static const char *const k_order_names[2] = {"baseline_first", "candidate_first"};

static json_t *sample_json(const ab_run_sample *r, int n_req, const char *const *names) {
  json_t *x = json_object();
  json_object_set_new(x, "config", json_string(k_cfg_names[r->cfg]));
  json_object_set_new(x, "round", json_integer(r->round + 1));
  json_object_set_new(x, "order", json_string(k_order_names[r->order]));
  json_object_set_new(x, "decode_tok_s", jnum(r->decode_tok_s));
  json_object_set_new(x, "e2e_tok_s", jnum(r->e2e_tok_s));
  json_object_set_new(x, "wall_s", jnum(r->wall_s));
  json_object_set_new(x, "tokens", json_integer(r->tokens));
  json_t *arr = json_array();
  for (int j = 0; j < n_req; j++) {
    const ab_req_sample *q = &r->req[j];
    json_t *o = json_object();
    char hex[65];
    pw_hex(q->output_sha256, 32, hex);
    json_object_set_new(o, "id", json_string(names[j]));
    json_object_set_new(o, "output_sha256", json_string(hex));
    json_object_set_new(o, "finish", json_string(abstat_finish_name(q->finish)));
    json_object_set_new(o, "prompt_tokens", json_integer(q->prompt_tokens));
    json_object_set_new(o, "completion_tokens", json_integer(q->completion_tokens));
    json_object_set_new(o, "cached_tokens", json_integer(q->cached_tokens));
    json_object_set_new(o, "drafted", json_integer(q->drafted));
    json_object_set_new(o, "accepted", json_integer(q->accepted));
    json_object_set_new(o, "emitted", json_integer(q->emitted));
    json_object_set_new(o, "target_passes", json_integer(q->target_passes));
    json_object_set_new(o, "t_submit_s", jnum(q->t_submit));
    json_object_set_new(o, "t_first_s", jnum(q->t_first));
    json_object_set_new(o, "t_done_s", jnum(q->t_done));
    json_array_append_new(arr, o);
  }
  json_object_set_new(x, "per_request", arr);
  return x;
}

json_t *abstat_report(const ab_report_head *h, ab_run_sample *runs, int n_runs, json_t *engine_stats, char *err) {
  for (int i = 0; i < n_runs; i++) abstat_run_rates(&runs[i], h->n_req);
  ab_sums sums[2];
  for (int k = 0; k < 2; k++) abstat_sums(runs, n_runs, k, h->n_req, &sums[k]);
  const ab_sums *b = &sums[0], *c = &sums[1];
  ab_parity par;
  abstat_parity(runs, n_runs, h->n_req, h->names, false, &par);
  json_t *root = json_object();
  json_object_set_new(root, "model", json_string(h->model));
  json_object_set_new(root, "model_sha256", json_string(h->model_sha256));
  json_object_set_new(root, "workload", json_string(h->workload));
  json_object_set_new(root, "workload_sha256", json_string(h->workload_sha256));
  json_object_set_new(root, "requests", json_integer(h->n_req));
  json_object_set_new(root, "rounds", json_integer(h->rounds));
  json_object_set_new(root, "threads", json_integer(h->threads));
  json_object_set_new(root, "baseline", json_string(h->baseline));
  json_object_set_new(root, "candidate", json_string(h->candidate));
  json_object_set_new(root, "gain", jnum(abstat_gain(runs, n_runs)));
  json_object_set_new(root, "parity", json_boolean(par.mismatches == 0));
  json_object_set_new(root, "parity_mismatches", json_integer(par.mismatches));
  if (par.mismatches) json_object_set_new(root, "parity_first_mismatch", json_string(par.first));
  json_object_set_new(root, "tokens_per_target_pass",
                      pair(abstat_tokens_per_pass(b), abstat_tokens_per_pass(c)));
  json_object_set_new(root, "acceptance", pair(abstat_acceptance(b), abstat_acceptance(c)));
  json_object_set_new(root, "decode_tok_s", metric_json(runs, n_runs, -1, AB_DECODE));
  json_object_set_new(root, "e2e_tok_s", metric_json(runs, n_runs, -1, AB_E2E));
  json_t *paired = json_object();
  json_object_set_new(paired, "decode", jnum(abstat_paired_ratio(runs, n_runs, AB_DECODE)));
  json_object_set_new(paired, "e2e", jnum(abstat_paired_ratio(runs, n_runs, AB_E2E)));
  json_object_set_new(root, "paired_ratio", paired);
  json_t *po = json_object();
  for (int ord = 0; ord < 2; ord++) {
    json_t *x = json_object();
    json_object_set_new(x, "decode_tok_s", metric_json(runs, n_runs, ord, AB_DECODE));
    json_object_set_new(x, "e2e_tok_s", metric_json(runs, n_runs, ord, AB_E2E));
    json_object_set_new(po, k_order_names[ord], x);
  }
  json_object_set_new(root, "per_order", po);
  json_t *self = json_object();
  for (int k = 0; k < 2; k++) {
    json_t *x = json_object();
    json_object_set_new(x, "decode", jnum(abstat_ratio(abstat_runs_median(runs, n_runs, k, -1, 1, AB_DECODE),
                                                       abstat_runs_median(runs, n_runs, k, -1, 0, AB_DECODE))));
    json_object_set_new(x, "e2e", jnum(abstat_ratio(abstat_runs_median(runs, n_runs, k, -1, 1, AB_E2E),
                                                    abstat_runs_median(runs, n_runs, k, -1, 0, AB_E2E))));
    json_object_set_new(self, k_cfg_names[k], x);
  }
  json_object_set_new(root, "self_ratio", self);
  json_t *ttft = json_object(), *tok = json_object(), *spec = json_object();
  for (int k = 0; k < 2; k++) {
    const ab_sums *s = &sums[k];
    json_t *x = json_object();
    json_object_set_new(x, "median", jnum(s->ttft_ms));
    json_object_set_new(x, "p99", jnum(s->ttft_p99_ms));
    json_object_set_new(x, "cold", jnum(s->ttft_cold_ms));
    json_object_set_new(x, "warm", jnum(s->ttft_warm_ms));
    json_object_set_new(x, "n_cold", json_integer(s->n_cold));
    json_object_set_new(x, "n_warm", json_integer(s->n_warm));
    json_object_set_new(x, "warm_over_cold", jnum(abstat_ratio(s->ttft_warm_ms, s->ttft_cold_ms)));
    json_object_set_new(ttft, k_cfg_names[k], x);
    /* Token counts per run: every run does the same work. */
    int nr = s->n_runs ? s->n_runs : 1;
    json_t *t = json_object();
    json_object_set_new(t, "prompt", json_integer(s->prompt / nr));
    json_object_set_new(t, "cached", json_integer(s->cached / nr));
    json_object_set_new(t, "completion", json_integer(s->completion / nr));
    json_object_set_new(tok, k_cfg_names[k], t);
    json_t *sp = json_object();
    json_object_set_new(sp, "drafted", json_integer(s->drafted / nr));
    json_object_set_new(sp, "accepted", json_integer(s->accepted / nr));
    json_object_set_new(sp, "emitted", json_integer(s->emitted / nr));
    json_object_set_new(sp, "target_passes", json_integer(s->passes / nr));
    json_object_set_new(spec, k_cfg_names[k], sp);
  }
  json_object_set_new(root, "ttft_ms", ttft);
  json_t *lat = json_object();
  for (int k = 0; k < 2; k++) {
    json_t *x = json_object();
    json_object_set_new(x, "median", jnum(sums[k].latency_ms));
    json_object_set_new(x, "p99", jnum(sums[k].latency_p99_ms));
    json_object_set_new(lat, k_cfg_names[k], x);
  }
  json_object_set_new(root, "latency_ms", lat);
  json_object_set_new(root, "cached_tokens", pair((double)b->cached / (b->n_runs ? b->n_runs : 1),
                                                  (double)c->cached / (c->n_runs ? c->n_runs : 1)));
  json_object_set_new(root, "tokens_per_run", tok);
  json_object_set_new(root, "spec_per_run", spec);
  json_object_set_new(root, "engine_stats", engine_stats ? engine_stats : json_object());
  json_t *arr = json_array();
  for (int i = 0; i < n_runs; i++) json_array_append_new(arr, sample_json(&runs[i], h->n_req, h->names));
  json_object_set_new(root, "samples", arr);
  char hex[65];
  if (jcs_sha256_hex(root, hex, err)) {
    json_decref(root);
    return NULL;
  }
  json_object_set_new(root, "report_sha256", json_string(hex));
  return root;
}

/* ---- verification ---- */

typedef struct vctx {
  char *lines;
  size_t len;
  char *err;
} vctx;

static void ok_line(vctx *v, const char *fmt, const char *arg) {
  char buf[512];
  int n = snprintf(buf, sizeof buf, fmt, arg);
  if (n < 0) return;
  if ((size_t)n >= sizeof buf) n = (int)sizeof buf - 1;
  char *p = realloc(v->lines, v->len + (size_t)n + 2);
  if (!p) return;
  v->lines = p;
  memcpy(p + v->len, buf, (size_t)n);
  v->len += (size_t)n;
  p[v->len++] = '\n';
  p[v->len] = 0;
}

/* Numbers agree when equal or within a relative 1e-9 (the report prints
 * 17 significant digits, so they should be bit-equal; the margin only
 * forgives a reader that parses the last digit differently). */
static bool num_eq(double a, double b) {
  if (a == b) return true;
  double m = fabs(a) > fabs(b) ? fabs(a) : fabs(b);
  return fabs(a - b) <= 1e-9 * m;
}

/* Compares a recomputed value with the reported one; path names the field. */
static bool same(const json_t *want, const json_t *got, char *path, size_t cap, size_t plen) {
  if (json_is_number(want) && json_is_number(got)) return num_eq(json_number_value(want), json_number_value(got));
  if (json_typeof(want) != json_typeof(got)) return false;
  if (json_is_object(want)) {
    if (json_object_size(want) != json_object_size(got)) return false;
    const char *k;
    json_t *w;
    json_object_foreach((json_t *)want, k, w) {
      int n = snprintf(path + plen, cap - plen, ".%s", k);
      size_t nl = n > 0 && (size_t)n < cap - plen ? plen + (size_t)n : plen;
      if (!same(w, json_object_get(got, k), path, cap, nl)) return false;
      path[plen] = 0;
    }
    return true;
  }
  if (json_is_array(want)) {
    if (json_array_size(want) != json_array_size(got)) return false;
    for (size_t i = 0; i < json_array_size(want); i++) {
      int n = snprintf(path + plen, cap - plen, "[%zu]", i);
      size_t nl = n > 0 && (size_t)n < cap - plen ? plen + (size_t)n : plen;
      if (!same(json_array_get(want, i), json_array_get(got, i), path, cap, nl)) return false;
      path[plen] = 0;
    }
    return true;
  }
  return json_equal((json_t *)want, (json_t *)got);
}

static const char *str_of(const json_t *o, const char *k) { return json_string_value(json_object_get(o, k)); }

static int get_int(const json_t *o, const char *k, int *out) {
  json_t *v = json_object_get(o, k);
  if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > (1 << 30)) return -1;
  *out = (int)json_integer_value(v);
  return 0;
}

static int get_time(const json_t *o, const char *k, double *out) {
  json_t *v = json_object_get(o, k);
  if (json_is_null(v)) {
    *out = NAN;
    return 0;
  }
  if (!json_is_number(v)) return -1;
  *out = json_number_value(v);
  return 0;
}

int abstat_verify(const json_t *rep, char **lines, char *err) {
  vctx v = {NULL, 0, err};
  if (lines) *lines = NULL;
  int rc = PW_EINVAL;
  ab_run_sample *runs = NULL;
  ab_req_sample *reqs = NULL;
  const char **names = NULL;
  json_t *again = NULL, *copy = NULL;
  int n_runs = 0, n_req = 0;
  if (!json_is_object(rep)) {
    pw_seterr(err, PW_EINVAL, "the report is not a JSON object");
    goto done;
  }
  const char *given = str_of(rep, "report_sha256");
  if (!given) {
    pw_seterr(err, PW_EINVAL, "report_sha256: missing");
    goto done;
  }
  /* the digest first: a report whose bytes changed fails here, naming it */
  copy = json_deep_copy(rep);
  if (!copy) {
    rc = pw_seterr(err, PW_ENOMEM, "out of memory");
    goto done;
  }
  json_object_del(copy, "report_sha256");
  char hex[65];
  if ((rc = jcs_sha256_hex(copy, hex, err))) goto done;
  rc = PW_EINVAL;
  json_t *samples = json_object_get(rep, "samples");
  if (!json_is_array(samples) || json_array_size(samples) < 2 || json_array_size(samples) > AB_MAX_RUNS) {
    pw_seterr(err, PW_EINVAL, "samples: missing or not an array of runs");
    goto done;
  }
  n_runs = (int)json_array_size(samples);
  if (get_int(rep, "requests", &n_req) || n_req < 1 || n_req > AB_MAX_REQ) {
    pw_seterr(err, PW_EINVAL, "requests: missing or out of range");
    goto done;
  }
  runs = calloc((size_t)n_runs, sizeof *runs);
  reqs = calloc((size_t)n_runs * (size_t)n_req, sizeof *reqs);
  names = calloc((size_t)n_req, sizeof *names);
  if (!runs || !reqs || !names) {
    rc = pw_seterr(err, PW_ENOMEM, "out of memory");
    goto done;
  }
  int seq[2] = {0, 0};
  for (int i = 0; i < n_runs; i++) {
    json_t *s = json_array_get(samples, (size_t)i);
    ab_run_sample *r = &runs[i];
    const char *cfg = str_of(s, "config"), *ord = str_of(s, "order");
    json_t *pr = json_object_get(s, "per_request");
    r->cfg = cfg && !strcmp(cfg, "baseline") ? 0 : cfg && !strcmp(cfg, "candidate") ? 1 : -1;
    r->order = ord && !strcmp(ord, "baseline_first") ? 0 : ord && !strcmp(ord, "candidate_first") ? 1 : -1;
    int round = 0;
    if (r->cfg < 0 || r->order < 0 || get_int(s, "round", &round) || round < 1 || get_time(s, "wall_s", &r->wall_s) ||
        !json_is_array(pr) || json_array_size(pr) != (size_t)n_req) {
      pw_seterr(err, PW_EINVAL, "samples[%d]: malformed run (config, order, round, wall_s, per_request)", i);
      goto done;
    }
    r->round = round - 1;
    r->seq = seq[r->cfg]++;
    r->req = reqs + (size_t)i * (size_t)n_req;
    for (int j = 0; j < n_req; j++) {
      json_t *q = json_array_get(pr, (size_t)j);
      ab_req_sample *x = &r->req[j];
      const char *id = str_of(q, "id");
      x->finish = finish_code(str_of(q, "finish"));
      if (!id || x->finish < 0 || ev_unhex32(str_of(q, "output_sha256"), x->output_sha256) ||
          get_int(q, "prompt_tokens", &x->prompt_tokens) || get_int(q, "completion_tokens", &x->completion_tokens) ||
          get_int(q, "cached_tokens", &x->cached_tokens) || get_int(q, "drafted", &x->drafted) ||
          get_int(q, "accepted", &x->accepted) || get_int(q, "emitted", &x->emitted) ||
          get_int(q, "target_passes", &x->target_passes) || get_time(q, "t_submit_s", &x->t_submit) ||
          get_time(q, "t_first_s", &x->t_first) || get_time(q, "t_done_s", &x->t_done)) {
        pw_seterr(err, PW_EINVAL, "samples[%d].per_request[%d]: malformed request sample", i, j);
        goto done;
      }
      if (i == 0) names[j] = id;
      else if (strcmp(names[j], id)) {
        pw_seterr(err, PW_EINVAL, "samples[%d].per_request[%d].id: '%s' where the first run has '%s'", i, j, id,
                  names[j]);
        goto done;
      }
    }
  }
  ok_line(&v, "ok: %s", "samples: well-formed runs with per-request timings and output digests");
  long rounds = 0, threads = 0;
  json_t *jr = json_object_get(rep, "rounds"), *jt = json_object_get(rep, "threads");
  if (json_is_integer(jr)) rounds = (long)json_integer_value(jr);
  if (json_is_integer(jt)) threads = (long)json_integer_value(jt);
  ab_report_head h = {str_of(rep, "model"),    str_of(rep, "model_sha256"), str_of(rep, "workload"),
                      str_of(rep, "workload_sha256"), rounds, threads,     str_of(rep, "baseline"),
                      str_of(rep, "candidate"), names,  n_req};
  json_t *es = json_object_get(rep, "engine_stats");
  again = abstat_report(&h, runs, n_runs, es ? json_deep_copy(es) : NULL, err);
  if (!again) goto done;
  /* Every member the recomputation produces, in its order; the digest last. */
  const char *k;
  json_t *want;
  json_object_foreach(again, k, want) {
    if (!strcmp(k, "report_sha256")) continue;
    char path[256];
    snprintf(path, sizeof path, "%s", k);
    json_t *got = json_object_get(rep, k);
    if (!got || !same(want, got, path, sizeof path, strlen(path))) {
      pw_seterr(err, PW_EINVAL, "%s: the report's value differs from the one recomputed from its samples", path);
      goto done;
    }
    ok_line(&v, "ok: %s recomputed from the samples", k);
  }
  if (json_object_size(rep) != json_object_size(again)) {
    pw_seterr(err, PW_EINVAL, "the report has members a report does not have");
    goto done;
  }
  if (strcmp(given, hex)) {
    pw_seterr(err, PW_EINVAL, "report_sha256: %s, but the report's canonical JSON hashes to %s", given, hex);
    goto done;
  }
  ok_line(&v, "ok: report_sha256 %s", hex);
  rc = 0;
done:
  if (lines && !rc) *lines = v.lines;
  else free(v.lines);
  json_decref(again);
  json_decref(copy);
  free(names);
  free(reqs);
  free(runs);
  return rc;
}
