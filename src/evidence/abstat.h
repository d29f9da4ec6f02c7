/* abstat.h - the statistics of `power ab` reports, and the report itself,
 * computed from plain samples so that a report can be recomputed from its
 * own raw data without a model (`power verify --ab`).
 *
 * What it is: medians and nearest-rank percentiles over finite values,
 * per-run rates, per-order and pooled medians, paired and self ratios, the
 * gain (the lower of the two order-specific decode ratios), output parity
 * by token-id digests, and the JSON report with its own digest.
 * What it is not: running the workload (the CLI drives the engine), the
 * Markdown rendering (the CLI prints it from these figures).
 *
 * Definitions (all times in seconds from the run's start):
 *   decode tok/s of a run = sum(completion - 1) / sum(done - first) over
 *                           its requests with >= 2 completion tokens;
 *   e2e tok/s of a run    = sum(completion) / wall;
 *   TTFT = first - submit; latency = done - submit (per request, over all
 *   runs of a configuration: median and 99th percentile, nearest rank).
 * A run belongs to configuration cfg (0 baseline, 1 candidate), to a round,
 * to an order (0 = baseline-first half of the round, 1 = candidate-first)
 * and has a position seq among its configuration's runs in time order.
 * Runs are stored in execution order, so runs 2i and 2i+1 form the pair
 * that ran back to back. */
#ifndef PW_EVIDENCE_ABSTAT_H
#define PW_EVIDENCE_ABSTAT_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

/* Finish codes compared for parity and named in reports. */
enum { AB_FINISH_NONE = 0, AB_FINISH_STOP = 1, AB_FINISH_LENGTH = 2, AB_FINISH_CANCEL = 3 };

typedef struct ab_req_sample { /* one request in one run */
  double t_submit, t_first, t_done; /* seconds from the run's start */
  int prompt_tokens, completion_tokens, cached_tokens;
  int drafted, accepted, emitted, target_passes;
  int finish;                 /* AB_FINISH_* */
  uint8_t output_sha256[32];  /* evidence_token_ids digest of the emitted ids */
  const int32_t *ids;         /* borrowed, may be NULL: the emitted ids (for the
                               * position of a parity break) */
  int n_ids;
} ab_req_sample;

typedef struct ab_run_sample {
  int cfg, round, order, seq;
  double wall_s;              /* first submit to last done */
  ab_req_sample *req;         /* borrowed, [n_req] */
  /* derived by abstat_run_rates */
  double decode_tok_s, e2e_tok_s;
  long tokens;
} ab_run_sample;

enum { AB_DECODE = 0, AB_E2E = 1 };

/* Median of the finite values of v[0..n) (v is reordered); NAN if none. */
double abstat_median(double *v, int n);
/* Nearest-rank p-th percentile of the finite values (v reordered); NAN if none. */
double abstat_percentile(double *v, int n, double p);
/* num / den when both are finite and den > 0, else NAN. */
double abstat_ratio(double num, double den);
/* Fills r's decode_tok_s, e2e_tok_s and tokens from its requests. */
void abstat_run_rates(ab_run_sample *r, int n_req);
/* Median of a metric over the runs of cfg; order -1 = both orders; half -1
 * = all runs, 0 = the earlier, 1 = the later half of cfg's runs. */
double abstat_runs_median(const ab_run_sample *runs, int n_runs, int cfg, int order, int half, int metric);
/* Median over back-to-back (baseline, candidate) pairs of candidate/baseline. */
double abstat_paired_ratio(const ab_run_sample *runs, int n_runs, int metric);
/* The lower of the two order-specific decode ratios; NAN if either is missing. */
double abstat_gain(const ab_run_sample *runs, int n_runs);

typedef struct ab_sums { /* per configuration, over all its runs */
  long completion, prompt, cached, drafted, accepted, emitted, passes;
  int n_runs;
  double ttft_ms, ttft_cold_ms, ttft_warm_ms; /* medians; warm = some prompt tokens reused */
  double ttft_p99_ms, latency_ms, latency_p99_ms;
  int n_cold, n_warm;
} ab_sums;
void abstat_sums(const ab_run_sample *runs, int n_runs, int cfg, int n_req, ab_sums *s);
double abstat_tokens_per_pass(const ab_sums *s);
double abstat_acceptance(const ab_sums *s);

/* Parity against the reference run (the first baseline run): a request's
 * output digest and finish must be the same in every run. */
typedef struct ab_parity {
  long mismatches;   /* (run, request) pairs that differ */
  char first[256];   /* the first one, described */
} ab_parity;
/* names[j]: request j's id for messages (borrowed). use_ids: describe the
 * first mismatch by its first differing token position (needs ids); the
 * report itself uses the digest-only description, which its samples can
 * reproduce. */
void abstat_parity(const ab_run_sample *runs, int n_runs, int n_req, const char *const *names, bool use_ids,
                   ab_parity *p);

/* What a report says besides its samples. */
typedef struct ab_report_head {
  const char *model, *model_sha256;       /* file name, hex */
  const char *workload, *workload_sha256; /* file name, hex */
  long rounds, threads;
  const char *baseline, *candidate;       /* configuration texts */
  const char *const *names;               /* [n_req] request ids */
  int n_req;
} ab_report_head;

/* The JSON report (new reference, caller decrefs): the figures, then
 * "samples" (each run with its raw per-request timings, counts and output
 * digests), then "report_sha256" = SHA-256 of the canonical JSON (RFC 8785)
 * of the report without that member. engine_stats (may be NULL; stolen) is
 * set as "engine_stats": counters not derivable from the samples, covered
 * by the digest but not recomputed. NULL on out of memory or a
 * non-canonicalizable value (err set). */
json_t *abstat_report(const ab_report_head *h, ab_run_sample *runs, int n_runs, json_t *engine_stats, char *err);

/* Recomputes a report (parsed from its JSON) from its samples: every
 * figure, the parity and the digest. 0 when all agree; PW_EINVAL with err
 * naming the first field that differs or is malformed. lines (may be NULL)
 * gets one "ok: ..." line per check passed, '\n'-separated, malloc'ed. */
int abstat_verify(const json_t *report, char **lines, char *err);

const char *abstat_finish_name(int finish);

#endif
