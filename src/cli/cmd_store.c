/* cmd_store.c - the model store commands: `power pull`, `list`, `show`,
 * `rm`, `cp`, `import`. Wiring and display only: the store and the
 * downloads are src/store. */
#include "cli/cmd_store.h"

#include "base/error.h"
#include "cli/cli.h"
#include "gguf/gguf.h"
#include "store/pull.h"
#include "store/store.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t g_cancel;

static void on_sigint(int sig) {
  (void)sig;
  g_cancel = 1;
}

static int open_store(const char *cmd, int create, store **s) {
  char err[PW_ERRMAX];
  int rc = store_open(NULL, create, s, err);
  if (rc == PW_ENOTFOUND && !create) return 1; /* empty: no store yet */
  if (rc) {
    fprintf(stderr, "power %s: %s\n", cmd, err);
    return -1;
  }
  return 0;
}

static void human(uint64_t b, char *out, size_t cap) {
  const char *u[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = (double)b;
  int i = 0;
  while (v >= 1024 && i < 4) v /= 1024, i++;
  if (i == 0) snprintf(out, cap, "%llu B", (unsigned long long)b);
  else snprintf(out, cap, "%.1f %s", v, u[i]);
}

/* ---- pull ---- */

typedef struct pull_view {
  int tty;         /* stderr is a terminal: one redrawn line */
  double t_line;   /* plain mode: time of the last line */
  int drawn;       /* tty: a partial line is on screen */
} pull_view;

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void on_progress(void *ud, const store_progress *p) {
  pull_view *v = ud;
  char done[32], total[32], rate[32], part[32] = "", eta[32] = "";
  human(p->done, done, sizeof done);
  human(p->total, total, sizeof total);
  /* no rate until one has been measured (half a second into a transfer) */
  if (p->rate > 0) {
    char r[24];
    human((uint64_t)p->rate, r, sizeof r);
    snprintf(rate, sizeof rate, " %s/s", r);
  } else {
    rate[0] = 0;
  }
  if (p->n_parts > 1) snprintf(part, sizeof part, " [%d/%d]", p->part, p->n_parts);
  double pct = p->total ? 100.0 * (double)p->done / (double)p->total : 0;
  if (p->total && p->rate > 0 && p->done < p->total) {
    long s = (long)((double)(p->total - p->done) / p->rate);
    snprintf(eta, sizeof eta, " ETA %ld:%02ld", s / 60, s % 60);
  }
  const char *what = p->waiting ? "waiting for another pull of" : p->finished ? "pulled" : "pulling";
  if (v->tty) {
    char bar[31];
    int fill = p->total ? (int)(pct * 30 / 100) : 0;
    for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '.';
    bar[30] = 0;
    if (p->total)
      fprintf(stderr, "\r\033[K%s %s%s [%s] %5.1f%% %s / %s%s%s", what, p->file, part, bar, pct, done, total, rate,
              eta);
    else
      fprintf(stderr, "\r\033[K%s %s%s %s%s", what, p->file, part, done, rate);
    v->drawn = 1;
    if (p->finished) {
      fputc('\n', stderr);
      v->drawn = 0;
    }
    fflush(stderr);
    return;
  }
  /* Not a terminal: a line every 2 s, and one when a file is done. */
  if (!p->finished && !p->waiting && p->done == 0) return;
  double t = mono_s();
  if (!p->finished && t - v->t_line < 2.0) return;
  v->t_line = t;
  if (p->total)
    fprintf(stderr, "%s %s%s: %s of %s (%.0f%%)%s%s\n", what, p->file, part, done, total, pct, rate, eta);
  else
    fprintf(stderr, "%s %s%s: %s\n", what, p->file, part, done);
}

static void pull_usage(FILE *out) {
  fprintf(out,
          "usage: power pull SOURCE [--name NAME] [--token T] [--quiet] [--retries N]\n"
          "  SOURCE   https://.../model.gguf, or hf.co/ORG/REPO[:QUANT] (Hugging Face; the\n"
          "           GGUF of that quantization, default Q4_K_M or the only one);\n"
          "           either may end in @sha256:HEX to pin the digest\n"
          "  --name NAME   store name (default from the repository or file name)\n"
          "  --token T     bearer token for that host (default $HF_TOKEN for Hugging Face)\n"
          "  --quiet       no progress\n"
          "  --retries N   attempts after a failed one (default 5, with backoff)\n"
          "An interrupted pull keeps what it fetched; pulling again resumes.\n"
          "$POWER_HOME is the store (default ~/.power); $POWER_HF_ENDPOINT the Hugging Face URL.\n");
}

int cmd_pull(int argc, char **argv) {
  const char *source = NULL, *name = NULL, *token = NULL;
  int quiet = 0;
  long retries = -1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      pull_usage(stdout);
      return 0;
    } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
      quiet = 1;
    } else if (!strcmp(a, "--name") || !strcmp(a, "--token") || !strcmp(a, "--retries")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "power pull: %s needs a value\n", a);
        return 2;
      }
      const char *v = argv[++i];
      if (!strcmp(a, "--name")) name = v;
      else if (!strcmp(a, "--token")) token = v;
      else if (cli_parse_long("pull", a, v, 0, 100, &retries)) return 2;
    } else if (a[0] == '-') {
      fprintf(stderr, "power pull: unknown option '%s' (try --help)\n", a);
      return 2;
    } else if (source) {
      fprintf(stderr, "power pull: one SOURCE at a time\n");
      return 2;
    } else {
      source = a;
    }
  }
  if (!source) {
    pull_usage(stderr);
    return 2;
  }
  char err[PW_ERRMAX];
  char norm[STORE_NAME_MAX + 1];
  if (name && store_name_check(name, norm, err)) {
    fprintf(stderr, "power pull: %s\n", err);
    return 2;
  }
  store *s;
  if (open_store("pull", 1, &s)) return 1;
  struct sigaction sa, old_int, old_term;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
  pull_view view = {isatty(2), -1e9, 0};
  store_pull_opts o = {.source = source,
                       .name = name,
                       .token = token,
                       .retries = (int)retries,
                       .progress = quiet ? NULL : on_progress,
                       .progress_ud = &view,
                       .cancel = &g_cancel};
  store_manifest m;
  int rc = store_pull(s, &o, &m, err);
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
  if (view.drawn) fputc('\n', stderr);
  store_destroy(s);
  if (rc) {
    fprintf(stderr, "power pull: %s\n", err);
    return rc == PW_ECANCELED ? 130 : 1;
  }
  if (!quiet) {
    char sz[32];
    human(m.size, sz, sizeof sz);
    printf("%s  sha256:%.12s  %s  %s%s%s\n", m.name, m.blobs[0].digest, sz, m.architecture,
           m.quantization[0] ? " " : "", m.quantization);
  }
  return 0;
}

/* ---- list ---- */

int cmd_list(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: power list   (models in $POWER_HOME, default ~/.power)\n");
      return 0;
    }
    fprintf(stderr, "power list: unexpected argument '%s'\n", argv[i]);
    return 2;
  }
  store *s;
  int o = open_store("list", 0, &s);
  if (o < 0) return 1;
  printf("%-40s %-14s %10s %-8s %-10s %s\n", "NAME", "DIGEST", "SIZE", "QUANT", "ARCH", "ADDED");
  if (o > 0) return 0;
  store_manifest *v;
  size_t n;
  char err[PW_ERRMAX];
  int rc = store_list(s, &v, &n, err);
  store_destroy(s);
  if (rc) {
    fprintf(stderr, "power list: %s\n", err);
    return 1;
  }
  for (size_t i = 0; i < n; i++) {
    char sz[32];
    human(v[i].size, sz, sizeof sz);
    printf("%-40s %-14.12s %10s %-8s %-10s %s\n", v[i].name, v[i].blobs[0].digest, sz,
           v[i].quantization[0] ? v[i].quantization : "-", v[i].architecture[0] ? v[i].architecture : "-",
           v[i].added);
  }
  free(v);
  return 0;
}

/* ---- show ---- */

static void show_u32(const gguf_file *f, const char *arch, const char *suffix, const char *label) {
  char key[128];
  snprintf(key, sizeof key, "%s.%s", arch, suffix);
  uint32_t v;
  if (gguf_get_u32(f, key, &v)) printf("  %-20s %u\n", label, v);
}

int cmd_show(int argc, char **argv) {
  const char *name = NULL;
  int template_only = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: power show NAME [--template]   (--template prints only the chat template)\n");
      return 0;
    } else if (!strcmp(argv[i], "--template")) {
      template_only = 1;
    } else if (argv[i][0] == '-' || name) {
      fprintf(stderr, "power show: unexpected argument '%s'\n", argv[i]);
      return 2;
    } else {
      name = argv[i];
    }
  }
  if (!name) {
    fprintf(stderr, "usage: power show NAME\n");
    return 2;
  }
  store *s;
  char err[PW_ERRMAX];
  int rc = store_open(NULL, 0, &s, err);
  store_manifest m;
  char blob[STORE_PATH_MAX];
  if (!rc) rc = store_get(s, name, &m, err);
  if (!rc) store_blob_path(s, m.blobs[0].digest, blob);
  store_destroy(s);
  if (rc) {
    fprintf(stderr, "power show: %s\n", err);
    return 1;
  }
  gguf_file *f = NULL;
  if (gguf_open(blob, &f, err)) {
    fprintf(stderr, "power show: %s: %s\n", m.name, err);
    return 1;
  }
  gguf_str tmpl = {0};
  int have_tmpl = gguf_get_str(f, "tokenizer.chat_template", &tmpl);
  if (template_only) {
    if (have_tmpl) fwrite(tmpl.ptr, 1, tmpl.len, stdout);
    gguf_close(f);
    if (!have_tmpl) {
      fprintf(stderr, "power show: %s has no chat template\n", m.name);
      return 1;
    }
    return 0;
  }
  char sz[32];
  human(m.size, sz, sizeof sz);
  printf("name:          %s\n", m.name);
  printf("digest:        sha256:%s\n", m.blobs[0].digest);
  for (int i = 1; i < m.n_blobs; i++) printf("               sha256:%s (part %d)\n", m.blobs[i].digest, i + 1);
  printf("size:          %llu bytes (%s)\n", (unsigned long long)m.size, sz);
  printf("source:        %s\n", m.source);
  printf("added:         %s\n", m.added);
  printf("architecture:  %s\n", m.architecture[0] ? m.architecture : "-");
  printf("quantization:  %s\n", m.quantization[0] ? m.quantization : "-");
  printf("blob:          %s\n", blob);
  char buf[256] = "";
  if (gguf_get_cstr(f, "general.name", buf, sizeof buf)) printf("model name:    %s\n", buf);
  if (gguf_get_cstr(f, "general.license", buf, sizeof buf)) printf("license:       %s\n", buf);
  uint64_t params = 0;
  for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
    const gguf_tensor *t = gguf_tensor_at(f, i);
    uint64_t ne = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) ne *= t->ne[d];
    params += ne;
  }
  printf("parameters:    %llu (%.2fB)%s\n", (unsigned long long)params, (double)params / 1e9,
         m.n_blobs > 1 ? " in the first part" : "");
  printf("hyperparameters:\n");
  const char *arch = m.architecture[0] ? m.architecture : "llama";
  show_u32(f, arch, "context_length", "context_length");
  show_u32(f, arch, "embedding_length", "embedding_length");
  show_u32(f, arch, "block_count", "block_count");
  show_u32(f, arch, "attention.head_count", "head_count");
  show_u32(f, arch, "attention.head_count_kv", "head_count_kv");
  if (have_tmpl) {
    printf("template:      %llu bytes (power show %s --template prints it)\n", (unsigned long long)tmpl.len, m.name);
    /* The first lines, enough to recognise the format. */
    size_t off = 0;
    for (int line = 0; line < 6 && off < tmpl.len; line++) {
      const char *p = tmpl.ptr + off;
      size_t rest = tmpl.len - off, len = 0;
      while (len < rest && p[len] != '\n') len++;
      printf("  %.*s%s\n", (int)(len > 100 ? 100 : len), p, len > 100 ? "..." : "");
      off += len + 1;
    }
    if (off < tmpl.len) printf("  ...\n");
  } else {
    printf("template:      none (ChatML is used)\n");
  }
  gguf_close(f);
  return 0;
}

/* ---- rm, cp, import ---- */

int cmd_rm(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    fprintf(argc < 2 ? stderr : stdout,
            "usage: power rm NAME...   (a blob goes when no other name refers to it)\n");
    return argc < 2 ? 2 : 0;
  }
  store *s;
  char err[PW_ERRMAX];
  int o = open_store("rm", 0, &s);
  if (o) {
    if (o > 0) fprintf(stderr, "power rm: model '%s' not found (the store is empty)\n", argv[1]);
    return 1;
  }
  int status = 0;
  for (int i = 1; i < argc; i++) {
    if (store_rm(s, argv[i], err)) {
      fprintf(stderr, "power rm: %s\n", err);
      status = 1;
    } else {
      printf("deleted %s\n", argv[i]);
    }
  }
  store_destroy(s);
  return status;
}

int cmd_cp(int argc, char **argv) {
  if (argc != 3) {
    fprintf(argc == 2 && !strcmp(argv[1], "--help") ? stdout : stderr, "usage: power cp SRC DST\n");
    return argc == 2 && !strcmp(argv[1], "--help") ? 0 : 2;
  }
  store *s;
  char err[PW_ERRMAX];
  int o = open_store("cp", 0, &s);
  if (o) {
    if (o > 0) fprintf(stderr, "power cp: model '%s' not found (the store is empty)\n", argv[1]);
    return 1;
  }
  int rc = store_cp(s, argv[1], argv[2], err);
  store_destroy(s);
  if (rc) {
    fprintf(stderr, "power cp: %s\n", err);
    return 1;
  }
  return 0;
}

int cmd_import(int argc, char **argv) {
  const char *file = NULL, *name = NULL;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: power import FILE.gguf --name NAME   (hard link when possible, else a copy; hashed)\n");
      return 0;
    } else if (!strcmp(argv[i], "--name") && i + 1 < argc) {
      name = argv[++i];
    } else if (argv[i][0] == '-' || file) {
      fprintf(stderr, "power import: unexpected argument '%s'\n", argv[i]);
      return 2;
    } else {
      file = argv[i];
    }
  }
  if (!file || !name) {
    fprintf(stderr, "usage: power import FILE.gguf --name NAME\n");
    return 2;
  }
  char err[PW_ERRMAX], norm[STORE_NAME_MAX + 1];
  if (store_name_check(name, norm, err)) {
    fprintf(stderr, "power import: %s\n", err);
    return 2;
  }
  store *s;
  if (open_store("import", 1, &s)) return 1;
  store_manifest m;
  int rc = store_import(s, file, name, &m, err);
  store_destroy(s);
  if (rc) {
    fprintf(stderr, "power import: %s\n", err);
    return 1;
  }
  char sz[32];
  human(m.size, sz, sizeof sz);
  printf("%s  sha256:%.12s  %s  %s%s%s\n", m.name, m.blobs[0].digest, sz, m.architecture,
         m.quantization[0] ? " " : "", m.quantization);
  return 0;
}
