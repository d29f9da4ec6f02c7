/* cli_gen.c - engine-backed generation for the CLI (see cli_gen.h). */
#include "cli/cli_gen.h"

#include "evidence/receipt.h"

#include "base/clock.h"
#include "base/error.h"
#include "model/model.h"
#include "cli/cli.h"
#include "tok/tok.h"
#include "weights/weights.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

void gen_opts_default(gen_opts *o) {
  memset(o, 0, sizeof *o);
  o->threads = 2;
  o->n_predict = -1;
  pw_sampler_params_default(&o->sp);
  o->sp.temperature = 0;
}

int spec_opts_parse(const char *cmd, spec_opts *s, const char *a, const char *v) {
  if (strcmp(a, "--spec") && strcmp(a, "--spec-draft-model") && strcmp(a, "--spec-draft-max") &&
      strcmp(a, "--spec-policy"))
    return 0;
  if (!v) {
    fprintf(stderr, "power %s: option %s needs a value\n", cmd, a);
    return -1;
  }
  unsigned bit = !strcmp(a, "--spec")               ? 1u
                 : !strcmp(a, "--spec-draft-model") ? 2u
                 : !strcmp(a, "--spec-draft-max")   ? 4u
                                                    : 8u;
  if (s->given & bit) {
    fprintf(stderr, "power %s: %s given more than once\n", cmd, a);
    return -1;
  }
  s->given |= bit;
  if (!strcmp(a, "--spec")) {
    int m = engine_spec_parse(v);
    if (m < 0) {
      fprintf(stderr, "power %s: unknown --spec mode '%s' (off, prompt-lookup, ngram, draft or mtp)\n", cmd, v);
      return -1;
    }
    s->mode = m;
  } else if (!strcmp(a, "--spec-draft-model")) {
    if (!*v) {
      fprintf(stderr, "power %s: --spec-draft-model needs a GGUF file\n", cmd);
      return -1;
    }
    char err[PW_ERRMAX];
    s->draft_model = cli_resolve_model(v, err, sizeof err);
    if (!s->draft_model) {
      fprintf(stderr, "power %s: --spec-draft-model: %s\n", cmd, err);
      return -1;
    }
  } else if (bit == 8u) {
    s->policy = engine_spec_policy_parse(v);
    if (s->policy < 0) {
      fprintf(stderr, "power %s: unknown --spec-policy '%s' (cost or acceptance)\n", cmd, v);
      return -1;
    }
  } else if (cli_parse_long(cmd, a, v, 1, ENGINE_SPEC_MAX_K, &s->draft_max)) {
    return -1;
  }
  return 1;
}

int spec_opts_check(const char *cmd, const spec_opts *s) {
  if (s->mode == ENGINE_SPEC_DRAFT && !s->draft_model) {
    fprintf(stderr, "power %s: --spec draft needs --spec-draft-model M (a GGUF with the same vocabulary)\n", cmd);
    return -1;
  }
  if (s->mode == ENGINE_SPEC_OFF && (s->given & 12u)) {
    fprintf(stderr, "power %s: %s goes with --spec MODE\n", cmd, (s->given & 4u) ? "--spec-draft-max" : "--spec-policy");
    return -1;
  }
  if (s->mode != ENGINE_SPEC_DRAFT && s->draft_model) {
    fprintf(stderr, "power %s: --spec-draft-model goes with --spec draft\n", cmd);
    return -1;
  }
  return 0;
}

void spec_opts_apply(const spec_opts *s, engine_opts *eo) {
  eo->spec_mode = s->mode;
  eo->spec_draft_model = s->draft_model;
  eo->spec_draft_max = (int)s->draft_max;
  eo->spec_policy = s->policy;
}

void spec_opts_usage(FILE *out) {
  fprintf(out,
          "  --spec MODE           exact speculative decoding: off (default), prompt-lookup,\n"
          "                        ngram, draft (with --spec-draft-model), or mtp (the model's\n"
          "                        own MTP block, qwen3.5 files that have one); output is the same\n"
          "  --spec-draft-model M  draft GGUF for --spec draft (same vocabulary as the model)\n"
          "  --spec-draft-max K    most tokens proposed per round, 1.." CLI_STR(ENGINE_SPEC_MAX_K) " (default " CLI_STR(
          ENGINE_DEFAULT_SPEC_K) ")\n"
          "  --spec-policy P       cost (default: proposals only when the measured cost of\n"
          "                        verifying them is below what they are expected to save)\n"
          "                        or acceptance (widths from acceptance alone)\n");
}

bool cli_weights_is_flag(const char *a) { return !strcmp(a, "--mlock") || !strcmp(a, "--hugepages"); }

int cli_weights_parse(const char *cmd, cli_weights *w, const char *a, const char *v) {
  if (!strcmp(a, "--mlock")) {
    w->mlock = true;
    return 2;
  }
  if (!strcmp(a, "--hugepages")) {
    w->hugepages = true;
    return 2;
  }
  static const char *const with_value[] = {"--weights-io", "--weights-key-file", "--mem-budget", "--residency",
                                           "--cpu-affinity", "--priority"};
  bool ours = false;
  for (size_t k = 0; k < sizeof with_value / sizeof *with_value; k++) ours |= !strcmp(a, with_value[k]);
  if (!ours) return 0;
  if (!v || !*v) {
    fprintf(stderr, "power %s: option %s needs a value\n", cmd, a);
    return -1;
  }
  if (!strcmp(a, "--weights-io")) {
    int io = weights_io_parse(v);
    if (io < 0) {
      fprintf(stderr, "power %s: unknown --weights-io '%s' (mmap, pread or direct)\n", cmd, v);
      return -1;
    }
    w->io = io;
  } else if (!strcmp(a, "--mem-budget")) {
    char err[PW_ERRMAX];
    if (weights_budget_parse(v, &w->mem_budget, &w->mem_budget_frac, err)) {
      fprintf(stderr, "power %s: --mem-budget: %s\n", cmd, err);
      return -1;
    }
  } else if (!strcmp(a, "--residency")) {
    int p = weights_residency_parse(v);
    if (p < 0) {
      fprintf(stderr, "power %s: unknown --residency '%s' (lru or lfru)\n", cmd, v);
      return -1;
    }
    w->residency = p;
    w->residency_given = true;
  } else if (!strcmp(a, "--cpu-affinity")) {
    w->cpu_affinity = v;
  } else if (!strcmp(a, "--priority")) {
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < -20 || n > 19) {
      fprintf(stderr, "power %s: --priority '%s': expected a nice value from -20 to 19\n", cmd, v);
      return -1;
    }
    w->priority = (int)n;
    w->priority_given = true;
  } else {
    w->key_file = v;
  }
  return 1;
}

/* "0-3,6" -> the set; -1 with a message naming what is wrong. */
static int parse_cpu_list(const char *cmd, const char *s, cpu_set_t *set) {
  CPU_ZERO(set);
  const char *p = s;
  while (*p) {
    char *end;
    long lo = strtol(p, &end, 10), hi = lo;
    if (end == p || lo < 0) goto bad;
    p = end;
    if (*p == '-') {
      hi = strtol(p + 1, &end, 10);
      if (end == p + 1 || hi < lo) goto bad;
      p = end;
    }
    if (hi >= CPU_SETSIZE) {
      fprintf(stderr, "power %s: --cpu-affinity '%s': CPU %ld is beyond %d\n", cmd, s, hi, CPU_SETSIZE - 1);
      return -1;
    }
    for (long c = lo; c <= hi; c++) CPU_SET((int)c, set);
    if (*p == ',') p++;
    else if (*p) goto bad;
  }
  if (CPU_COUNT(set) > 0) return 0;
bad:
  fprintf(stderr, "power %s: --cpu-affinity '%s': expected a CPU list such as 0-3,6\n", cmd, s);
  return -1;
}

int cli_weights_finish(const char *cmd, cli_weights *w) {
  if (!w->key_file) {
    const char *env = getenv("POWER_WEIGHTS_KEY_FILE");
    if (env && *env) w->key_file = env;
  }
  if (w->residency_given && !w->mem_budget && !w->mem_budget_frac) {
    fprintf(stderr, "power %s: --residency chooses what stays resident under --mem-budget; give a budget too\n", cmd);
    return -1;
  }
  if (w->cpu_affinity) {
    cpu_set_t set;
    if (parse_cpu_list(cmd, w->cpu_affinity, &set)) return -1;
    if (sched_setaffinity(0, sizeof set, &set)) {
      fprintf(stderr, "power %s: --cpu-affinity '%s': %s (are those CPUs online and allowed here?)\n", cmd,
              w->cpu_affinity, strerror(errno));
      return -1;
    }
  }
  if (w->priority_given) {
    errno = 0;
    if (setpriority(PRIO_PROCESS, 0, w->priority)) {
      fprintf(stderr, "power %s: --priority %d: %s (a negative nice value needs CAP_SYS_NICE or RLIMIT_NICE)\n",
              cmd, w->priority, strerror(errno));
      return -1;
    }
  }
  return 0;
}

void cli_weights_apply(const cli_weights *w, engine_opts *eo) {
  eo->weights_io = w->io;
  eo->weights_key_file = w->key_file;
  eo->weights_mem_budget = w->mem_budget;
  eo->weights_mem_budget_frac = w->mem_budget_frac;
  eo->weights_residency = w->residency;
  eo->weights_mlock = w->mlock;
  eo->weights_hugepages = w->hugepages;
}

void cli_weights_model_opts(const cli_weights *w, weights_opts *wo) {
  wo->io = w->io;
  wo->key_file = w->key_file;
  wo->mem_budget = w->mem_budget;
  wo->mem_budget_frac = w->mem_budget_frac;
  wo->residency = w->residency;
  wo->mlock = w->mlock;
  wo->hugepages = w->hugepages;
}

void cli_weights_usage(FILE *out) {
  fprintf(out,
          "  --weights-io S        read weights by mmap (default), pread (owned buffers) or\n"
          "                        direct (O_DIRECT); outputs are the same with each\n"
          "  --weights-key-file K  key of an encrypted model (power encrypt); else\n"
          "                        $POWER_WEIGHTS_KEY_FILE\n"
          "  --mem-budget B        at most B bytes of the model resident (K, M, G suffixes, or\n"
          "                        P%% of the file); the other layers stream from the file\n"
          "                        while the one before computes; outputs are the same\n"
          "  --residency P         what stays under a budget after the pinned parts: lru\n"
          "                        (default) or lfru (fewest reuse hits, then most recent:\n"
          "                        suits the passes' cyclic order); see power inspect --residency\n"
          "  --mlock               lock the resident weights in memory (an error when\n"
          "                        RLIMIT_MEMLOCK does not allow it)\n"
          "  --hugepages           2 MiB pages for owned weight buffers (pread, direct); an\n"
          "                        error where transparent huge pages are off\n"
          "  --cpu-affinity LIST   run the process's threads (the kernel pool's) on these CPUs\n"
          "  --priority N          nice value of the process, -20..19\n");
}

int cli_kv_parse(const char *cmd, cli_kv *kv, const char *a, const char *v) {
  if (!strcmp(a, "--swa-full")) {
    if (kv->swa_full) {
      fprintf(stderr, "power %s: %s given more than once\n", cmd, a);
      return -1;
    }
    kv->swa_full = true;
    return 2;
  }
  static const char *const names[] = {"--kv-type", "--kv-type-k", "--kv-type-v"};
  int which = -1;
  for (int i = 0; i < 3; i++)
    if (!strcmp(a, names[i])) which = i;
  if (which < 0) return 0;
  if (!v || !*v) {
    fprintf(stderr, "power %s: option %s needs a value (f16, q8_0 or q4_0)\n", cmd, a);
    return -1;
  }
  if (kv->given & (1u << which)) {
    fprintf(stderr, "power %s: %s given more than once\n", cmd, a);
    return -1;
  }
  kv->given |= 1u << which;
  const int t = model_kv_type_parse(v);
  if (t < 0) {
    fprintf(stderr, "power %s: unknown %s '%s' (f16, q8_0 or q4_0)\n", cmd, a, v);
    return -1;
  }
  *(which == 0 ? &kv->both : which == 1 ? &kv->k : &kv->v) = (uint32_t)t;
  return 1;
}

uint32_t cli_kv_k(const cli_kv *kv) { return kv->k ? kv->k : kv->both; }
uint32_t cli_kv_v(const cli_kv *kv) { return kv->v ? kv->v : kv->both; }

void cli_kv_apply(const cli_kv *kv, engine_opts *eo) {
  eo->kv_type_k = cli_kv_k(kv);
  eo->kv_type_v = cli_kv_v(kv);
  eo->swa_full = kv->swa_full;
}

void cli_kv_usage(FILE *out) {
  fprintf(out,
          "  --kv-type T           KV cache type of K and V: f16 (default), q8_0 or q4_0\n"
          "  --kv-type-k T, --kv-type-v T   the type of K or of V alone\n"
          "  --swa-full            sliding-window layers (Gemma, gpt-oss) keep the whole\n"
          "                        context instead of their window and one pass: more\n"
          "                        memory, and a cached prompt is reused however far back a\n"
          "                        new one departs from it (else only within one pass of\n"
          "                        its end); the same outputs\n");
}

int gen_opts_check(const char *cmd, gen_opts *o) {
  if (cli_weights_finish(cmd, &o->weights)) return -1;
  return spec_opts_check(cmd, &o->spec);
}

void gen_opts_usage(FILE *out) {
  fprintf(out,
          "  --model M             GGUF file (else $POWER_MODEL, else ../shared/models)\n"
          "  -n, --n-predict N     tokens to generate\n"
          "  --temperature T       0 = greedy (default 0)\n"
          "  --top-k K, --top-p P, --min-p P, --repeat-penalty R\n"
          "  --seed S              sampling seed (default: random)\n"
          "  --stop TEXT           stop string (repeatable, up to 8)\n"
          "  --threads N           kernel threads (default " CLI_STR(ENGINE_DEFAULT_THREADS) ")\n"
          "  --ctx N               context size (default: model's, at most " CLI_STR(ENGINE_DEFAULT_CTX) ")\n"
          "  -v, --verbose         timing, prompt-cache and speculation counts on stderr\n");
  cli_weights_usage(out);
  cli_kv_usage(out);
  spec_opts_usage(out);
}

int gen_opts_parse(const char *cmd, gen_opts *o, int argc, char **argv, int *i) {
  const char *a = argv[*i];
  const char *v = *i + 1 < argc ? argv[*i + 1] : NULL;
  double d;
  long l;
  int sc = spec_opts_parse(cmd, &o->spec, a, v);
  if (!sc) sc = cli_weights_parse(cmd, &o->weights, a, v);
  if (!sc) sc = cli_kv_parse(cmd, &o->kv, a, v);
  if (sc) {
    if (sc == 1) (*i)++;
    return sc < 0 ? sc : 1;
  }
  static const char *with_value[] = {"--model", "-m", "-n", "--n-predict", "--threads", "-t", "--ctx",
                                     "--temperature", "--temp", "--top-k", "--top-p", "--min-p",
                                     "--repeat-penalty", "--seed", "--stop"};
  bool known = false;
  for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++)
    if (!strcmp(a, with_value[k])) known = true;
  if (!known) {
    if (!strcmp(a, "-v") || !strcmp(a, "--verbose")) {
      o->verbose = 1;
      return 1;
    }
    return 0;
  }
  if (!v) {
    fprintf(stderr, "power %s: option %s needs a value\n", cmd, a);
    return -1;
  }
  (*i)++;
  /* --stop repeats by design; every other option here takes one value. */
  static const char *const canon[][2] = {{"-m", "--model"}, {"-n", "--n-predict"}, {"-t", "--threads"},
                                         {"--temp", "--temperature"}};
  const char *name = a;
  for (size_t k = 0; k < sizeof canon / sizeof canon[0]; k++)
    if (!strcmp(a, canon[k][0])) name = canon[k][1];
  for (size_t k = 0; k < sizeof with_value / sizeof with_value[0]; k++)
    if (!strcmp(name, with_value[k])) name = with_value[k]; /* a static string */
  if (strcmp(name, "--stop") && cli_once(cmd, &o->seen, name)) return -1;
  if (!strcmp(a, "--model") || !strcmp(a, "-m")) o->model = v;
  else if (!strcmp(a, "-n") || !strcmp(a, "--n-predict")) {
    if (cli_parse_long(cmd, a, v, 0, 1 << 20, &o->n_predict)) return -1;
  } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
    if (cli_parse_long(cmd, a, v, 1, ENGINE_MAX_THREADS, &o->threads)) return -1;
  } else if (!strcmp(a, "--ctx")) {
    if (cli_parse_long(cmd, a, v, ENGINE_MIN_CTX, ENGINE_MAX_CTX, &o->n_ctx)) return -1;
  } else if (!strcmp(a, "--temperature") || !strcmp(a, "--temp")) {
    if (cli_parse_double(cmd, a, v, 0, 100, &d)) return -1;
    o->sp.temperature = (float)d;
  } else if (!strcmp(a, "--top-k")) {
    if (cli_parse_long(cmd, a, v, 0, 1 << 24, &l)) return -1;
    o->sp.top_k = (int32_t)l;
  } else if (!strcmp(a, "--top-p")) {
    if (cli_parse_double(cmd, a, v, 0.0001, 1, &d)) return -1;
    o->sp.top_p = (float)d;
  } else if (!strcmp(a, "--min-p")) {
    if (cli_parse_double(cmd, a, v, 0, 1, &d)) return -1;
    o->sp.min_p = (float)d;
  } else if (!strcmp(a, "--repeat-penalty")) {
    if (cli_parse_double(cmd, a, v, 0.01, 100, &d)) return -1;
    o->sp.repeat_penalty = (float)d;
  } else if (!strcmp(a, "--seed")) {
    char *end;
    o->sp.seed = strtoull(v, &end, 10);
    if (!*v || *end || *v == '-') {
      fprintf(stderr, "power %s: invalid value for --seed: '%s'\n", cmd, v);
      return -1;
    }
    o->seed_given = true;
  } else if (!strcmp(a, "--stop")) {
    if (o->n_stop >= ENGINE_MAX_STOP || !*v || strlen(v) > ENGINE_MAX_STOP_LEN) {
      fprintf(stderr, "power %s: at most %d non-empty --stop strings of up to %d bytes\n", cmd, ENGINE_MAX_STOP,
              ENGINE_MAX_STOP_LEN);
      return -1;
    }
    o->stop[o->n_stop++] = v;
  }
  return 1;
}

int gen_session_open(const char *cmd, const gen_opts *o, gen_session *s) {
  memset(s, 0, sizeof *s);
  char err[PW_ERRMAX];
  const char *path = cli_resolve_model(o->model, err, sizeof err);
  if (!path) {
    fprintf(stderr, "power %s: %s\n", cmd, err);
    return -1;
  }
  engine_opts eo = {0};
  eo.model_path = path;
  eo.n_threads = (int)o->threads;
  eo.max_active = 1;
  eo.max_queue = 1;
  eo.n_ctx = (int)o->n_ctx;
  spec_opts_apply(&o->spec, &eo);
  cli_weights_apply(&o->weights, &eo);
  cli_kv_apply(&o->kv, &eo);
  if (engine_create(&eo, &s->eng, err)) {
    fprintf(stderr, "power %s: %s: %s\n", cmd, path, err);
    return -1;
  }
  if (prompt_builder_init(&s->pb, engine_vocab(s->eng), engine_chat_template(s->eng), err) == 0) s->have_pb = true;
  else {
    /* Only chat needs the template; report it when chat is asked for. */
    prompt_builder_free(&s->pb);
  }
  return 0;
}

void gen_session_close(gen_session *s) {
  if (s->have_pb) prompt_builder_free(&s->pb);
  engine_destroy(s->eng);
  memset(s, 0, sizeof *s);
}

int gen_stream(const char *cmd, gen_session *s, const gen_opts *o, const int32_t *prompt, int n_prompt,
               bool print_ids, bool ignore_eos, volatile sig_atomic_t *cancel, engine_usage *usage,
               engine_finish *finish, char **text_out) {
  engine_params p;
  memset(&p, 0, sizeof p);
  p.prompt = prompt;
  p.n_prompt = n_prompt;
  p.max_tokens = o->n_predict < 0 ? 0 : (int)o->n_predict;
  p.sampling = o->sp;
  if (!o->seed_given) p.sampling.seed = (uint64_t)time(NULL) ^ (pw_now_ns() << 16);
  for (int i = 0; i < o->n_stop; i++) p.stop[i] = o->stop[i];
  p.n_stop = o->n_stop;
  p.ignore_eos = ignore_eos;
  p.has_cache_key = s->has_cache_key;
  memcpy(p.cache_key, s->cache_key, sizeof p.cache_key);
  char err[PW_ERRMAX];
  engine_req *r;
  if (o->n_predict == 0) return 0;
  if (s->rec) {
    if (ev_gen_decoding(s->rec, &p.sampling, p.stop, p.n_stop, err)) {
      fprintf(stderr, "power %s: %s\n", cmd, err);
      return PW_EINVAL;
    }
    int room = engine_n_ctx(s->eng) - n_prompt;
    s->rec->max_tokens = p.max_tokens > 0 && p.max_tokens < room ? p.max_tokens : room;
    s->rec->ignore_eos = ignore_eos;
    s->rec->spec_mode = engine_spec_name(o->spec.mode);
    s->rec->cache_keyed = p.has_cache_key;
  }
  int rc = engine_submit(s->eng, &p, &r, err);
  if (rc) {
    fprintf(stderr, "power %s: %s\n", cmd, err);
    return rc;
  }
  engine_event *ev = malloc(sizeof *ev);
  if (!ev) {
    engine_release(r);
    fprintf(stderr, "power %s: out of memory\n", cmd);
    return PW_ENOMEM;
  }
  size_t cap = 0, len = 0;
  char *text = NULL;
  int n = 0;
  double t0 = pw_now_s(), t_first = 0;
  rc = 0;
  for (;;) {
    if (cancel && *cancel) {
      engine_cancel(r);
      *cancel = 0;
    }
    int w = engine_next(r, ev, 100);
    if (w == PW_ETIMEOUT) continue;
    if (w) {
      rc = w;
      break;
    }
    if (ev->type == ENGINE_EV_TOKEN || (ev->type == ENGINE_EV_DONE && ev->text_len > 0 && !print_ids)) {
      /* DONE may carry text held back for a stop string that never came. */
      if (s->rec) {
        if (ev->type == ENGINE_EV_TOKEN)
          ev_gen_token(s->rec, ev->token, ev->text, (size_t)ev->text_len);
        else
          ev_gen_text(s->rec, ev->text, (size_t)ev->text_len);
      }
      if (ev->type == ENGINE_EV_TOKEN) {
        if (!n) t_first = pw_now_s();
        if (print_ids) printf(n ? " %d" : "%d", ev->token);
        n++;
      }
      if (!print_ids) fwrite(ev->text, 1, (size_t)ev->text_len, stdout);
      fflush(stdout);
      if (text_out) {
        if (len + (size_t)ev->text_len + 1 > cap) {
          cap = (len + (size_t)ev->text_len + 1) * 2;
          text = realloc(text, cap);
        }
        memcpy(text + len, ev->text, (size_t)ev->text_len);
        len += (size_t)ev->text_len;
        text[len] = 0;
      }
    }
    if (ev->type == ENGINE_EV_DONE) {
      if (s->rec) {
        const engine_usage *u = &ev->usage;
        s->rec->cached_tokens = u->cached_tokens;
        s->rec->drafted = u->spec_drafted;
        s->rec->accepted = u->spec_accepted;
        s->rec->emitted = u->spec_emitted;
        s->rec->target_passes = u->target_passes;
        s->rec->completion_tokens = u->completion_tokens;
        s->rec->finish = ev->finish == ENGINE_FINISH_LENGTH ? "length" : ev->finish == ENGINE_FINISH_CANCEL ? "cancel" : "stop";
      }
      if (usage) *usage = ev->usage;
      if (finish) *finish = ev->finish;
      break;
    } else if (ev->type == ENGINE_EV_ERROR) {
      fprintf(stderr, "%spower %s: %s\n", n ? "\n" : "", cmd, ev->message);
      rc = ev->status ? ev->status : PW_EINTERNAL;
      break;
    }
  }
  double t1 = pw_now_s();
  if (o->verbose && rc == 0) {
    const engine_usage *u = &ev->usage;
    fprintf(stderr,
            "\npower %s: prompt %d tokens (%d cached, %d evaluated), first token after %.3f s, "
            "%d generated in %.3f s (%.1f tok/s)",
            cmd, n_prompt, u->cached_tokens, n_prompt - u->cached_tokens, n ? t_first - t0 : 0.0, n, t1 - t0,
            n > 1 ? (n - 1) / (t1 - t_first) : 0.0);
    if (o->spec.mode != ENGINE_SPEC_OFF)
      fprintf(stderr, "; speculation %s: %d drafted, %d accepted, %d target passes", engine_spec_name(o->spec.mode),
              u->spec_drafted, u->spec_accepted, u->target_passes);
    fputc('\n', stderr);
  }
  free(ev);
  engine_release(r);
  if (text_out) *text_out = text ? text : calloc(1, 1);
  else free(text);
  return rc;
}
