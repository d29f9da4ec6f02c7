/* models.c - store serving: the registry's loader (a store name becomes an
 * engine with its prompt builder), name resolution, the store's listings,
 * per-model metrics, delete, and pulls streamed as progress lines. See
 * models.h. Every call on the shared store handle holds store_mu; a pull
 * opens its own handle (it runs for minutes and takes the store's file
 * lock only to commit). */
#include "server/models.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "store/pull.h"
#include "store/store.h"
#include "tok/tok.h"

#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#define DEFAULT_LOAD_WAIT_S 60.0
#define MMAP_THRESHOLD (256 << 10) /* bytes: blocks this large are mapped on their own */

/* ---- one model ---------------------------------------------------------- */

int srv_model_init(srv_model *m, engine *e, const char *chat_template, char *err) {
  memset(m, 0, sizeof *m);
  m->e = e;
  m->created = (long long)time(NULL);
  const tok_vocab *voc = engine_vocab(e);
  int rc = prompt_builder_init(&m->pb, voc, chat_template ? chat_template : engine_chat_template(e), err);
  if (rc) return rc;
  tc_detect(m->pb.template_src, voc, &m->tc);
  if ((rc = ev_model_info_init(&m->evm, engine_model_id(e), engine_model_sha256(e), engine_model_size(e),
                               m->pb.template_src, tok_kind(voc), tok_pre(voc), tok_n_vocab(voc), err))) {
    prompt_builder_free(&m->pb);
    return rc;
  }
  return 0;
}

void srv_model_free(srv_model *m) {
  if (m) prompt_builder_free(&m->pb);
}

/* ---- the store's models --------------------------------------------------- */

struct srv_models {
  srv_models_opts o;
  engine_opts eo;
  char home[STORE_PATH_MAX];
  store *st;                /* owned; calls under store_mu */
  pthread_mutex_t store_mu;
  registry *reg;            /* owned */
  pthread_mutex_t stats_mu;
  engine_stats retired;     /* counters of engines already unloaded */
  int n_pulls;              /* pulls running (under store_mu) */
};

/* Every field of engine_stats, summed: a new field changes the size and
 * stops the build here until it is added below. */
_Static_assert(sizeof(engine_stats) == 360, "engine_stats changed: sum the new fields in stats_add");
static void stats_add(engine_stats *a, const engine_stats *b) {
  a->active += b->active;
  a->queued += b->queued;
  a->max_active += b->max_active;
  a->max_queue += b->max_queue;
  a->requests_total += b->requests_total;
  a->requests_rejected += b->requests_rejected;
  a->requests_timeout += b->requests_timeout;
  a->requests_cancelled += b->requests_cancelled;
  a->prompt_tokens_total += b->prompt_tokens_total;
  a->generated_tokens_total += b->generated_tokens_total;
  a->steps_total += b->steps_total;
  a->batch_entries_total += b->batch_entries_total;
  for (int i = 0; i <= ENGINE_BATCH_BUCKETS; i++) a->batch_steps_by_size[i] += b->batch_steps_by_size[i];
  a->kv_bytes_in_use += b->kv_bytes_in_use;
  a->kv_bytes_total += b->kv_bytes_total;
  a->kv_bytes_f16 += b->kv_bytes_f16;
  /* every engine of a server gets the same KV types (serve --kv-type) */
  if (!a->kv_type_k) a->kv_type_k = b->kv_type_k;
  if (!a->kv_type_v) a->kv_type_v = b->kv_type_v;
  a->spec_drafted_total += b->spec_drafted_total;
  a->spec_accepted_total += b->spec_accepted_total;
  a->spec_emitted_total += b->spec_emitted_total;
  a->spec_target_passes_total += b->spec_target_passes_total;
  a->spec_rounds_total += b->spec_rounds_total;
  a->spec_fallbacks_total += b->spec_fallbacks_total;
  a->spec_declined_total += b->spec_declined_total;
  a->spec_probes_total += b->spec_probes_total;
  a->spec_rollbacks_total += b->spec_rollbacks_total;
  a->spec_draft_passes_total += b->spec_draft_passes_total;
  a->spec_draft_catchup_total += b->spec_draft_catchup_total;
  a->cache_requests_total += b->cache_requests_total;
  a->cache_hits_total += b->cache_hits_total;
  a->cache_misses_total += b->cache_misses_total;
  a->cache_reused_tokens_total += b->cache_reused_tokens_total;
  a->cache_evaluated_tokens_total += b->cache_evaluated_tokens_total;
  a->cache_evictions_total += b->cache_evictions_total;
  a->cache_entries += b->cache_entries;
  a->cache_bytes += b->cache_bytes;
}

static int load_model(void *ctx, const char *name, bool (*abandoned)(void *arg), void *abandoned_arg, void **model,
                      uint64_t *bytes, char *err) {
  srv_models *sm = ctx;
  char path[STORE_PATH_MAX];
  store_manifest *man = malloc(sizeof *man);
  if (!man) return pw_seterr(err, PW_ENOMEM, "out of memory");
  pthread_mutex_lock(&sm->store_mu);
  int rc = store_resolve(sm->st, name, path, err);
  if (!rc) rc = store_get(sm->st, name, man, err);
  pthread_mutex_unlock(&sm->store_mu);
  const uint64_t file_bytes = man->size; /* a split's parts together */
  free(man);
  if (rc) return rc;
  engine_opts eo = sm->eo;
  eo.model_path = path;
  eo.model_id = name;
  eo.load_cancel = abandoned; /* between pieces of the weights' read */
  eo.load_cancel_arg = abandoned_arg;
  /* A model larger than the whole budget streams its layers within it
   * (its KV cache comes on top). */
  bool streamed = sm->o.mem_budget && file_bytes > sm->o.mem_budget;
  if (streamed) eo.weights_mem_budget = sm->o.mem_budget;
  engine *e = NULL;
  double t0 = pw_now_s();
  if ((rc = engine_create(&eo, &e, err))) return rc;
  srv_model *m = calloc(1, sizeof *m);
  if (!m) {
    engine_destroy(e);
    return pw_seterr(err, PW_ENOMEM, "out of memory");
  }
  /* srv_model_init hashes the file: receipts and fingerprints name it. */
  if ((rc = srv_model_init(m, e, NULL, err))) {
    free(m);
    engine_destroy(e);
    return rc;
  }
  *model = m;
  *bytes = (streamed ? sm->o.mem_budget : engine_model_size(e)) + engine_kv_bytes(e);
  pw_log_notice("loaded %s in %.2f s (%.1f MiB with KV)", name, pw_now_s() - t0, (double)*bytes / (1 << 20));
  return 0;
}

static void unload_model(void *ctx, void *model) {
  srv_models *sm = ctx;
  srv_model *m = model;
  engine_stats st;
  engine_get_stats(m->e, &st);
  st.active = st.queued = st.max_active = st.max_queue = 0; /* gauges of a gone engine */
  st.kv_bytes_in_use = 0;
  st.cache_entries = 0;
  st.cache_bytes = 0;
  pthread_mutex_lock(&sm->stats_mu);
  stats_add(&sm->retired, &st);
  pthread_mutex_unlock(&sm->stats_mu);
  char id[REGISTRY_NAME_MAX + 1];
  snprintf(id, sizeof id, "%s", engine_model_id(m->e));
  engine *e = m->e;
  srv_model_free(m);
  free(m);
  engine_destroy(e);
  malloc_trim(0); /* the engine's buffers go back to the system, not to this process's free lists */
  pw_log_notice("unloaded %s", id);
}

int srv_models_create(const srv_models_opts *o, srv_models **out, char *err) {
  *out = NULL;
  srv_models *sm = calloc(1, sizeof *sm);
  if (!sm) return pw_seterr(err, PW_ENOMEM, "out of memory");
  sm->o = *o;
  sm->eo = *o->engine;
  sm->eo.model_path = NULL;
  sm->eo.model_id = NULL;
  if (sm->o.load_wait_s <= 0) sm->o.load_wait_s = DEFAULT_LOAD_WAIT_S;
  /* Models come and go here, loaded and freed by whichever request thread
   * needed them. glibc raises its mmap threshold after each large free, so
   * the next model's buffers (vocabulary tables, scratch) land in that
   * thread's arena, where freed pages stay resident: measured, the resident
   * size after unloading grew by 8-14 MB over a dozen load/unload cycles of
   * three small models, and stayed flat with a fixed threshold. A fixed
   * threshold maps every block of MMAP_THRESHOLD or more on its own and
   * gives it back on free; the token path allocates nothing that large. */
  mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD);
  pthread_mutex_init(&sm->store_mu, NULL);
  pthread_mutex_init(&sm->stats_mu, NULL);
  int rc = store_open(o->home, 1, &sm->st, err);
  if (rc) goto fail;
  snprintf(sm->home, sizeof sm->home, "%s", store_home(sm->st));
  registry_opts ro = {o->max_loaded, o->mem_budget, o->keep_alive_s, false};
  registry_ops ops = {sm, load_model, unload_model, NULL};
  if ((rc = registry_create(&ro, &ops, &sm->reg, err))) goto fail;
  *out = sm;
  return 0;
fail:
  srv_models_destroy(sm);
  return rc;
}

void srv_models_destroy(srv_models *sm) {
  if (!sm) return;
  registry_destroy(sm->reg);
  store_destroy(sm->st);
  pthread_mutex_destroy(&sm->store_mu);
  pthread_mutex_destroy(&sm->stats_mu);
  free(sm);
}

registry *srv_models_registry(srv_models *sm) { return sm->reg; }
double srv_models_load_wait(const srv_models *sm) { return sm->o.load_wait_s; }
uint64_t srv_models_mem_budget(const srv_models *sm) { return sm->o.mem_budget; }

/* ---- names ---------------------------------------------------------------- */

static int not_found(const char *name, oai_error *e) {
  return oai_seterr(e, 404, "model_not_found", "model",
                    "The model '%.100s' does not exist in this server's store (GET /v1/models lists them)", name);
}

int srv_models_resolve(srv_models *sm, const char *name, char *canon, uint64_t *size, oai_error *e) {
  if (!name || !*name)
    return oai_seterr(e, 400, "missing_field", "model",
                      "'model' is required: this server serves the models of its store (GET /v1/models lists them)");
  char norm[STORE_NAME_MAX + 1], err[PW_ERRMAX];
  if (strlen(name) > STORE_NAME_MAX || store_name_check(name, norm, err)) return not_found(name, e);
  store_manifest *m = malloc(sizeof *m);
  if (!m) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  int rc = 0;
  pthread_mutex_lock(&sm->store_mu);
  int g = store_get(sm->st, norm, m, err);
  if (g == PW_ENOTFOUND) {
    size_t n = strlen(norm);
    if (n > 7 && !strcmp(norm + n - 7, ":latest")) {
      /* Ollama's clients add ":latest" to a name given without a tag. */
      norm[n - 7] = 0;
      g = store_get(sm->st, norm, m, err);
    } else if (!strchr(norm, ':')) {
      /* A name without its tag, when exactly one tag exists. */
      store_manifest *all = NULL;
      size_t na = 0;
      if (store_list(sm->st, &all, &na, err) == 0) {
        int hits = 0;
        char first[2][STORE_NAME_MAX + 1] = {"", ""};
        for (size_t i = 0; i < na; i++)
          if (!strncmp(all[i].name, norm, n) && all[i].name[n] == ':') {
            if (hits < 2) snprintf(first[hits], sizeof first[hits], "%s", all[i].name);
            if (hits < 2 && !hits) *m = all[i];
            hits++;
          }
        if (hits == 1) {
          g = 0;
        } else if (hits > 1) {
          rc = oai_seterr(e, 400, "model_ambiguous", "model",
                          "'%.100s' names %d models ('%s', '%s'%s): give the tag", name, hits, first[0], first[1],
                          hits > 2 ? ", ..." : "");
        }
      }
      free(all);
    }
  }
  pthread_mutex_unlock(&sm->store_mu);
  if (!rc && g == PW_ENOTFOUND) rc = not_found(name, e);
  else if (!rc && g) rc = oai_seterr(e, 500, "internal_error", NULL, "%s", err);
  if (!rc) {
    snprintf(canon, STORE_NAME_MAX + 1, "%s", m->name);
    if (size) *size = m->size;
  }
  free(m);
  return rc;
}

/* ---- metrics -------------------------------------------------------------- */

static void sum_loaded(void *arg, const char *name, void *model) {
  (void)name;
  engine_stats st;
  engine_get_stats(((srv_model *)model)->e, &st);
  stats_add(arg, &st);
}

void srv_models_engine_stats(srv_models *sm, engine_stats *st) {
  memset(st, 0, sizeof *st);
  pthread_mutex_lock(&sm->stats_mu);
  *st = sm->retired;
  pthread_mutex_unlock(&sm->stats_mu);
  registry_each(sm->reg, sum_loaded, st);
}

static void series(sbuf *out, const char *name, const char *type, const char *help) {
  sbuf_printf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void srv_models_metrics(srv_models *sm, sbuf *out) {
  registry_info *v = NULL;
  size_t n = 0;
  int loaded = 0, loading = 0;
  uint64_t bytes = 0;
  registry_counts(sm->reg, &loaded, &loading, &bytes);
  series(out, "power_models_loaded", "gauge", "Models loaded now (serving the store).");
  sbuf_printf(out, "power_models_loaded %d\n", loaded);
  series(out, "power_models_loading", "gauge", "Model loads in progress.");
  sbuf_printf(out, "power_models_loading %d\n", loading);
  series(out, "power_models_bytes", "gauge", "Bytes (weights + KV) held by loaded and loading models.");
  sbuf_printf(out, "power_models_bytes %llu\n", (unsigned long long)bytes);
  series(out, "power_models_max_loaded", "gauge", "Most models held at once (--max-loaded).");
  sbuf_printf(out, "power_models_max_loaded %d\n", sm->o.max_loaded);
  if (registry_list(sm->reg, &v, &n)) return;
  /* Store names are [a-z0-9._:-]: nothing to escape in a label. */
  static const struct {
    const char *name, *type, *help;
  } k[] = {
      {"power_model_loaded", "gauge", "1 when the model is loaded."},
      {"power_model_in_flight", "gauge", "Requests using the model now."},
      {"power_model_loads_total", "counter", "Completed loads of the model."},
      {"power_model_load_failures_total", "counter", "Failed loads of the model."},
      {"power_model_evictions_total", "counter", "Unloads of the idle model to make room for another."},
      {"power_model_unloads_total", "counter", "Unloads after its keep-alive, keep_alive 0, or a request."},
      {"power_model_load_seconds_total", "counter", "Seconds spent loading the model."},
  };
  for (size_t s = 0; s < sizeof k / sizeof k[0]; s++) {
    series(out, k[s].name, k[s].type, k[s].help);
    for (size_t i = 0; i < n; i++) {
      sbuf_printf(out, "%s{model=\"%s\"} ", k[s].name, v[i].name);
      switch (s) {
      case 0: sbuf_printf(out, "%d\n", v[i].loaded ? 1 : 0); break;
      case 1: sbuf_printf(out, "%d\n", v[i].in_flight); break;
      case 2: sbuf_printf(out, "%llu\n", (unsigned long long)v[i].loads); break;
      case 3: sbuf_printf(out, "%llu\n", (unsigned long long)v[i].load_failures); break;
      case 4: sbuf_printf(out, "%llu\n", (unsigned long long)v[i].evictions); break;
      case 5: sbuf_printf(out, "%llu\n", (unsigned long long)v[i].unloads); break;
      default: sbuf_printf(out, "%.6f\n", v[i].load_seconds); break;
      }
    }
  }
  free(v);
}

/* ---- listings ------------------------------------------------------------- */

static long long iso_to_unix(const char *iso) {
  struct tm tm;
  memset(&tm, 0, sizeof tm);
  if (!strptime(iso, "%Y-%m-%dT%H:%M:%S", &tm)) return 0;
  return (long long)timegm(&tm);
}

static void put_iso(sbuf *out, const char *key, double unix_s) {
  time_t t = (time_t)unix_s;
  struct tm tm;
  gmtime_r(&t, &tm);
  char d[40];
  strftime(d, sizeof d, "%Y-%m-%dT%H:%M:%SZ", &tm);
  sbuf_printf(out, ",\"%s\":\"%s\"", key, d);
}

/* The store's manifests (sorted) and the registry's view of each. */
static int snapshot(srv_models *sm, store_manifest **ms, size_t *nm, registry_info **ri, size_t *nr) {
  char err[PW_ERRMAX];
  *ms = NULL;
  *ri = NULL;
  *nm = *nr = 0;
  pthread_mutex_lock(&sm->store_mu);
  int rc = store_list(sm->st, ms, nm, err);
  pthread_mutex_unlock(&sm->store_mu);
  if (rc) pw_log(PW_LOG_WARN, "listing the store: %s", err);
  if (registry_list(sm->reg, ri, nr)) *nr = 0;
  return 0;
}

static const registry_info *info_for(const registry_info *ri, size_t n, const char *name) {
  for (size_t i = 0; i < n; i++)
    if (!strcmp(ri[i].name, name)) return &ri[i];
  return NULL;
}

static void put_json_str(sbuf *out, const char *key, const char *v) {
  sbuf_printf(out, ",\"%s\":", key);
  sbuf_json_str(out, v, strlen(v));
}

/* The OpenAI model object with the store's facts and the registry's state. */
static void put_oai_model(const store_manifest *m, const registry_info *in, sbuf *out) {
  sbuf_puts(out, "{\"id\":");
  sbuf_json_str(out, m->name, strlen(m->name));
  sbuf_printf(out, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"power\"", iso_to_unix(m->added));
  sbuf_printf(out, ",\"loaded\":%s,\"size\":%llu", in && in->loaded ? "true" : "false", (unsigned long long)m->size);
  put_json_str(out, "architecture", m->architecture);
  put_json_str(out, "quantization", m->quantization);
  sbuf_printf(out, ",\"digest\":\"sha256:%s\"", m->blobs[0].digest);
  if (in && in->loaded) {
    sbuf_printf(out, ",\"in_flight\":%d,\"bytes\":%llu", in->in_flight, (unsigned long long)in->bytes);
    if (in->expires_in_s < 0) sbuf_puts(out, ",\"expires_in_s\":null");
    else sbuf_printf(out, ",\"expires_in_s\":%.3f", in->expires_in_s);
  }
  sbuf_puts(out, "}");
}

void srv_models_render_list(srv_models *sm, sbuf *out) {
  store_manifest *ms;
  registry_info *ri;
  size_t nm, nr;
  snapshot(sm, &ms, &nm, &ri, &nr);
  sbuf_puts(out, "{\"object\":\"list\",\"data\":[");
  for (size_t i = 0; i < nm; i++) {
    if (i) sbuf_puts(out, ",");
    put_oai_model(&ms[i], info_for(ri, nr, ms[i].name), out);
  }
  sbuf_puts(out, "]}");
  free(ms);
  free(ri);
}

int srv_models_render_one(srv_models *sm, const char *name, sbuf *out, oai_error *e) {
  char canon[STORE_NAME_MAX + 1];
  if (srv_models_resolve(sm, name, canon, NULL, e)) return PW_EINVAL;
  store_manifest *m = malloc(sizeof *m);
  char err[PW_ERRMAX];
  if (!m) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  pthread_mutex_lock(&sm->store_mu);
  int rc = store_get(sm->st, canon, m, err);
  pthread_mutex_unlock(&sm->store_mu);
  if (rc) {
    free(m);
    return not_found(name, e);
  }
  registry_info in;
  bool have = registry_get(sm->reg, canon, &in) == 0;
  put_oai_model(m, have ? &in : NULL, out);
  free(m);
  return 0;
}

static void put_ollama_name(const char *id, sbuf *out) {
  char name[STORE_NAME_MAX + 8];
  snprintf(name, sizeof name, strchr(id, ':') ? "%s" : "%s:latest", id);
  sbuf_puts(out, "\"name\":");
  sbuf_json_str(out, name, strlen(name));
  sbuf_puts(out, ",\"model\":");
  sbuf_json_str(out, name, strlen(name));
}

static void put_ollama_details(const store_manifest *m, sbuf *out) {
  sbuf_puts(out, ",\"details\":{\"parent_model\":\"\",\"format\":\"gguf\"");
  put_json_str(out, "family", m ? m->architecture : "");
  if (m && m->architecture[0]) {
    sbuf_puts(out, ",\"families\":[");
    sbuf_json_str(out, m->architecture, strlen(m->architecture));
    sbuf_puts(out, "]");
  } else {
    sbuf_puts(out, ",\"families\":null");
  }
  sbuf_puts(out, ",\"parameter_size\":\"\"");
  put_json_str(out, "quantization_level", m ? m->quantization : "");
  sbuf_puts(out, "}");
}

void srv_models_render_tags(srv_models *sm, sbuf *out) {
  store_manifest *ms;
  registry_info *ri;
  size_t nm, nr;
  snapshot(sm, &ms, &nm, &ri, &nr);
  sbuf_puts(out, "{\"models\":[");
  for (size_t i = 0; i < nm; i++) {
    sbuf_puts(out, i ? ",{" : "{");
    put_ollama_name(ms[i].name, out);
    sbuf_printf(out, ",\"modified_at\":\"%s\",\"size\":%llu,\"digest\":\"%s\"", ms[i].added,
                (unsigned long long)ms[i].size, ms[i].blobs[0].digest);
    put_ollama_details(&ms[i], out);
    sbuf_puts(out, "}");
  }
  sbuf_puts(out, "]}");
  free(ms);
  free(ri);
}

typedef struct ps_ctx {
  const registry_info *ri;
  size_t nr;
  const store_manifest *ms;
  size_t nm;
  bool ollama;
  int n;
  double now;
  sbuf *out;
} ps_ctx;

static void put_ps(void *arg, const char *name, void *model) {
  ps_ctx *x = arg;
  const srv_model *m = model;
  const registry_info *in = info_for(x->ri, x->nr, name);
  const store_manifest *mf = NULL;
  for (size_t i = 0; i < x->nm; i++)
    if (!strcmp(x->ms[i].name, name)) mf = &x->ms[i];
  if (!in) return; /* loaded after the snapshot: the next listing has it */
  sbuf *out = x->out;
  sbuf_puts(out, x->n++ ? ",{" : "{");
  if (x->ollama) {
    put_ollama_name(name, out);
    sbuf_printf(out, ",\"size\":%llu,\"digest\":\"%s\"", (unsigned long long)in->bytes, engine_model_sha256(m->e));
    put_ollama_details(mf, out);
    /* Forever: a far date, as Ollama shows a negative keep_alive. */
    if (in->expires_in_s < 0) sbuf_puts(out, ",\"expires_at\":\"2318-01-01T00:00:00Z\"");
    else put_iso(out, "expires_at", x->now + in->expires_in_s);
    sbuf_printf(out, ",\"size_vram\":0,\"context_length\":%d}", engine_n_ctx(m->e));
    return;
  }
  sbuf_puts(out, "\"id\":");
  sbuf_json_str(out, name, strlen(name));
  sbuf_printf(out, ",\"object\":\"model\",\"loaded\":true,\"in_flight\":%d,\"bytes\":%llu,\"file_bytes\":%llu",
              in->in_flight, (unsigned long long)in->bytes, (unsigned long long)engine_model_size(m->e));
  sbuf_printf(out, ",\"kv_bytes\":%llu,\"context_length\":%d,\"sha256\":\"%s\"",
              (unsigned long long)engine_kv_bytes(m->e), engine_n_ctx(m->e), engine_model_sha256(m->e));
  if (in->expires_in_s < 0) sbuf_puts(out, ",\"expires_in_s\":null,\"expires_at\":null");
  else {
    sbuf_printf(out, ",\"expires_in_s\":%.3f", in->expires_in_s);
    put_iso(out, "expires_at", x->now + in->expires_in_s);
  }
  if (in->keep_alive_s < 0) sbuf_puts(out, ",\"keep_alive_s\":-1");
  else sbuf_printf(out, ",\"keep_alive_s\":%.3f", in->keep_alive_s);
  sbuf_printf(out, ",\"loads\":%llu,\"evictions\":%llu,\"load_seconds\":%.6f,\"loaded_at\":%lld}",
              (unsigned long long)in->loads, (unsigned long long)in->evictions, in->load_seconds, m->created);
}

void srv_models_render_ps(srv_models *sm, bool ollama, sbuf *out) {
  store_manifest *ms;
  registry_info *ri;
  size_t nm, nr;
  snapshot(sm, &ms, &nm, &ri, &nr);
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ps_ctx x = {ri, nr, ms, nm, ollama, 0, (double)ts.tv_sec, out};
  sbuf_puts(out, ollama ? "{\"models\":[" : "{\"object\":\"list\",\"data\":[");
  registry_each(sm->reg, put_ps, &x);
  sbuf_puts(out, "]");
  if (!ollama) {
    int loaded = 0, loading = 0;
    uint64_t bytes = 0;
    registry_counts(sm->reg, &loaded, &loading, &bytes);
    sbuf_printf(out, ",\"loading\":%d,\"bytes\":%llu,\"max_loaded\":%d,\"mem_budget\":%llu", loading,
                (unsigned long long)bytes, sm->o.max_loaded, (unsigned long long)sm->o.mem_budget);
  }
  sbuf_puts(out, "}");
  free(ms);
  free(ri);
}

int srv_models_unload(srv_models *sm, const char *name, oai_error *e) {
  char canon[STORE_NAME_MAX + 1];
  if (srv_models_resolve(sm, name, canon, NULL, e)) return PW_EINVAL;
  registry_unload(sm->reg, canon);
  return 0;
}

/* ---- admin ---------------------------------------------------------------- */

int srv_models_admin_check(srv_models *sm, const char *what, oai_error *e) {
  if (sm->o.allow_admin) return 0;
  return oai_seterr(e, 403, "admin_disabled", NULL,
                    "%s is disabled on this server: start it with --allow-pull to let clients pull and delete models",
                    what);
}

int srv_models_delete(srv_models *sm, const char *name, oai_error *e) {
  char norm[STORE_NAME_MAX + 1], err[PW_ERRMAX];
  if (!name || !*name) return oai_seterr(e, 400, "missing_field", "model", "'model' is required");
  if (strlen(name) > STORE_NAME_MAX || store_name_check(name, norm, err)) return not_found(name, e);
  /* Unload first: a request in flight keeps its mapping of the file. */
  registry_unload(sm->reg, norm);
  pthread_mutex_lock(&sm->store_mu);
  int rc = store_rm(sm->st, norm, err);
  pthread_mutex_unlock(&sm->store_mu);
  if (rc == PW_ENOTFOUND) return not_found(name, e);
  if (rc) return oai_seterr(e, 500, "internal_error", NULL, "%s", err);
  pw_log_notice("deleted %s from the store", norm);
  return 0;
}

/* ---- pull ----------------------------------------------------------------- */

struct srv_pull {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  sbuf lines;          /* written by the pull thread, taken by the reader */
  bool done;
  int rc;
  char msg[PW_ERRMAX];
  volatile sig_atomic_t cancel;
  pthread_t th;
  bool th_on;
  store *st;           /* the pull's own handle */
  srv_models *sm;      /* counted in sm->n_pulls until freed */
  char source[2048];
  char name[STORE_NAME_MAX + 1];
};

static void pull_line(srv_pull *p, sbuf *line) {
  sbuf_puts(line, "\n");
  pthread_mutex_lock(&p->mu);
  if (!line->oom) sbuf_put(&p->lines, line->data, line->len);
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  sbuf_free(line);
}

static void pull_progress(void *ud, const store_progress *pr) {
  srv_pull *p = ud;
  sbuf l = {0};
  char status[256];
  snprintf(status, sizeof status, "%s %s", pr->waiting ? "waiting for another pull of" : "pulling", pr->file);
  sbuf_puts(&l, "{\"status\":");
  sbuf_json_str(&l, status, strlen(status));
  if (pr->digest) sbuf_printf(&l, ",\"digest\":\"sha256:%.64s\"", pr->digest);
  sbuf_printf(&l, ",\"total\":%llu,\"completed\":%llu", (unsigned long long)pr->total, (unsigned long long)pr->done);
  if (pr->n_parts > 1) sbuf_printf(&l, ",\"part\":%d,\"parts\":%d", pr->part, pr->n_parts);
  sbuf_puts(&l, "}");
  pull_line(p, &l);
}

static void *pull_main(void *arg) {
  srv_pull *p = arg;
  store_pull_opts o;
  memset(&o, 0, sizeof o);
  o.source = p->source;
  o.name = p->name[0] ? p->name : NULL;
  o.retries = -1;
  o.progress = pull_progress;
  o.progress_ud = p;
  o.cancel = &p->cancel;
  store_manifest *m = malloc(sizeof *m);
  char err[PW_ERRMAX] = "";
  int rc = m ? store_pull(p->st, &o, m, err) : pw_seterr(err, PW_ENOMEM, "out of memory");
  sbuf l = {0};
  if (rc) {
    sbuf_puts(&l, "{\"error\":");
    sbuf_json_str(&l, err, strlen(err));
    sbuf_puts(&l, "}");
    if (rc == PW_ECANCELED) pw_log_notice("pull of %.200s: %s", p->source, err);
    else pw_log(PW_LOG_WARN, "pull of %.200s: %s", p->source, err);
  } else {
    sbuf_puts(&l, "{\"status\":\"success\",\"model\":");
    sbuf_json_str(&l, m->name, strlen(m->name));
    sbuf_printf(&l, ",\"digest\":\"sha256:%s\",\"total\":%llu,\"completed\":%llu", m->blobs[0].digest,
                (unsigned long long)m->size, (unsigned long long)m->size);
    if (m->n_blobs > 1) {
      sbuf_puts(&l, ",\"digests\":[");
      for (int i = 0; i < m->n_blobs; i++) sbuf_printf(&l, "%s\"sha256:%s\"", i ? "," : "", m->blobs[i].digest);
      sbuf_puts(&l, "]");
    }
    sbuf_puts(&l, "}");
    pw_log_notice("pulled %s into the store", m->name);
  }
  free(m);
  pthread_mutex_lock(&p->mu);
  p->rc = rc;
  snprintf(p->msg, sizeof p->msg, "%s", err);
  pthread_mutex_unlock(&p->mu);
  pull_line(p, &l);
  pthread_mutex_lock(&p->mu);
  p->done = true;
  pthread_cond_broadcast(&p->cv);
  pthread_mutex_unlock(&p->mu);
  return NULL;
}

int srv_pull_start(srv_models *sm, const char *source, const char *name, srv_pull **out, oai_error *e) {
  *out = NULL;
  char err[PW_ERRMAX];
  if (!source || !*source) return oai_seterr(e, 400, "missing_field", "model", "'model' (the source to pull) is required");
  if (strlen(source) >= 2048) return oai_seterr(e, 400, "invalid_value", "model", "the source is too long");
  store_source ss;
  if (store_parse_source(source, &ss, err)) return oai_seterr(e, 400, "invalid_value", "model", "%s", err);
  char norm[STORE_NAME_MAX + 1];
  if (name && (strlen(name) > STORE_NAME_MAX || store_name_check(name, norm, err)))
    return oai_seterr(e, 400, "invalid_value", "name", "invalid model name: %s", err);
  /* each pull holds a connection's thread and a download: bounded */
  pthread_mutex_lock(&sm->store_mu);
  const bool room = sm->n_pulls < SRV_MAX_PULLS;
  if (room) sm->n_pulls++;
  pthread_mutex_unlock(&sm->store_mu);
  if (!room)
    return oai_seterr(e, 429, "too_many_pulls", NULL, "%d pulls are running (the limit): try again when one ends",
                      SRV_MAX_PULLS);
  srv_pull *p = calloc(1, sizeof *p);
  if (!p) {
    pthread_mutex_lock(&sm->store_mu);
    sm->n_pulls--;
    pthread_mutex_unlock(&sm->store_mu);
    return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  }
  p->sm = sm;
  pthread_mutex_init(&p->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&p->cv, &ca);
  pthread_condattr_destroy(&ca);
  snprintf(p->source, sizeof p->source, "%s", source);
  if (name) snprintf(p->name, sizeof p->name, "%s", norm);
  if (store_open(sm->home, 1, &p->st, err)) {
    srv_pull_free(p);
    return oai_seterr(e, 500, "internal_error", NULL, "%s", err);
  }
  sbuf l = {0};
  sbuf_puts(&l, "{\"status\":\"pulling manifest\"}");
  pull_line(p, &l);
  if (pthread_create(&p->th, NULL, pull_main, p)) {
    srv_pull_free(p);
    return oai_seterr(e, 500, "internal_error", NULL, "cannot start the pull");
  }
  p->th_on = true;
  *out = p;
  return 0;
}

int srv_pull_read(srv_pull *p, sbuf *out, int wait_ms) {
  pthread_mutex_lock(&p->mu);
  if (!p->lines.len && !p->done && wait_ms > 0) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += wait_ms / 1000;
    ts.tv_nsec += (long)(wait_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
    pthread_cond_timedwait(&p->cv, &p->mu, &ts);
  }
  if (p->lines.len) {
    sbuf_put(out, p->lines.data, p->lines.len);
    sbuf_clear(&p->lines);
  }
  int ended = p->done && !p->lines.len;
  pthread_mutex_unlock(&p->mu);
  return ended;
}

int srv_pull_status(srv_pull *p, char *msg) {
  pthread_mutex_lock(&p->mu);
  int rc = p->rc;
  snprintf(msg, PW_ERRMAX, "%s", p->msg);
  pthread_mutex_unlock(&p->mu);
  return rc;
}

void srv_pull_free(srv_pull *p) {
  if (!p) return;
  p->cancel = 1;
  if (p->th_on) pthread_join(p->th, NULL);
  pthread_mutex_lock(&p->sm->store_mu);
  p->sm->n_pulls--;
  pthread_mutex_unlock(&p->sm->store_mu);
  store_destroy(p->st);
  sbuf_free(&p->lines);
  pthread_mutex_destroy(&p->mu);
  pthread_cond_destroy(&p->cv);
  free(p);
}
