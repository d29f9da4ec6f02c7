/* cli_common.c - helpers shared by subcommands: model resolution, option
 * value parsing, reading a whole file. */
#include "cli/cli.h"

#include "base/error.h"
#include "store/store.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* The default model, tried in this order inside a ../shared/models folder. */
static const char *k_default_models[] = {"codelm-py-Q8_0.gguf", "syn-qwen2-Q4_K_M.gguf",
                                         "syn-llama3-Q8_0.gguf"};

static const char *try_dir(const char *dir) {
  static char path[PATH_MAX + 64];
  for (size_t i = 0; i < sizeof k_default_models / sizeof k_default_models[0]; i++) {
    snprintf(path, sizeof path, "%s/%s", dir, k_default_models[i]);
    if (access(path, R_OK) == 0) return path;
  }
  return NULL;
}

/* A --model value: an existing file wins; else a store name (its blob);
 * else the value itself when it looks like a path, for the loader to name
 * what is wrong with it. Blob paths live in a small ring of static buffers
 * so a command may hold a few (model and draft model) at once. */
static const char *resolve_ref(const char *ref, char *err, size_t errlen) {
  struct stat st;
  if (stat(ref, &st) == 0) return ref;
  static char ring[4][STORE_PATH_MAX];
  static int next;
  char e[PW_ERRMAX], norm[STORE_NAME_MAX + 1];
  int looks_like_path = strchr(ref, '/') || (strlen(ref) > 5 && !strcasecmp(ref + strlen(ref) - 5, ".gguf"));
  if (store_name_check(ref, norm, e)) {
    if (looks_like_path) return ref;
    snprintf(err, errlen, "model '%s': no such file, and %s", ref, e);
    return NULL;
  }
  store *s = NULL;
  int rc = store_open(NULL, 0, &s, e);
  char *out = ring[next];
  if (!rc) rc = store_resolve(s, norm, out, e);
  const char *home = s ? store_home(s) : getenv("POWER_HOME");
  if (rc == PW_ENOTFOUND && looks_like_path) {
    store_destroy(s);
    return ref;
  }
  if (rc == PW_ENOTFOUND)
    snprintf(err, errlen, "model '%s': no such file, and no such name in the model store%s%s (see power list)", ref,
             home ? " at " : "", home ? home : "");
  else if (rc)
    snprintf(err, errlen, "%s", e);
  store_destroy(s);
  if (rc) return NULL;
  next = (next + 1) % 4;
  return out;
}

const char *cli_resolve_model(const char *explicit_path, char *err, size_t errlen) {
  if (explicit_path && *explicit_path) return resolve_ref(explicit_path, err, errlen);
  const char *env = getenv("POWER_MODEL");
  if (env && *env) return resolve_ref(env, err, errlen);
  const char *p = try_dir("../shared/models");
  if (p) return p;
  /* Relative to the executable: <repo>/build/power -> <repo>/../shared/models. */
  char exe[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    exe[n] = 0;
    char dir[PATH_MAX + 32];
    char *slash = strrchr(exe, '/');
    if (slash) *slash = 0;
    snprintf(dir, sizeof dir, "%s/../../shared/models", exe);
    if ((p = try_dir(dir))) return p;
  }
  snprintf(err, errlen,
           "no model given: pass --model PATH.gguf, set POWER_MODEL, or put models in ../shared/models");
  return NULL;
}

int cli_parse_long(const char *cmd, const char *opt, const char *v, long lo, long hi, long *out) {
  char *end;
  errno = 0;
  long x = v ? strtol(v, &end, 10) : 0;
  if (!v || !*v || *end || errno || x < lo || x > hi) {
    fprintf(stderr, "power %s: invalid value for %s: '%s' (expected an integer in %ld..%ld)\n", cmd, opt,
            v ? v : "", lo, hi);
    return -1;
  }
  *out = x;
  return 0;
}

int cli_parse_double(const char *cmd, const char *opt, const char *v, double lo, double hi, double *out) {
  char *end;
  errno = 0;
  double x = v ? strtod(v, &end) : 0;
  if (!v || !*v || *end || errno || isnan(x) || x < lo || x > hi) {
    fprintf(stderr, "power %s: invalid value for %s: '%s' (expected a number in %g..%g)\n", cmd, opt,
            v ? v : "", lo, hi);
    return -1;
  }
  *out = x;
  return 0;
}

char *cli_slurp(const char *path, long max, size_t *len, char *err) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    pw_seterr(err, PW_EIO, "cannot open %s", path);
    return NULL;
  }
  char *buf = NULL;
  long n = -1;
  if (fseek(f, 0, SEEK_END) == 0) n = ftell(f);
  if (n < 0 || n > max || fseek(f, 0, SEEK_SET) != 0) {
    pw_seterr(err, PW_EIO, "cannot read %s%s", path, n > max ? " (too large)" : "");
  } else if (!(buf = malloc((size_t)n + 1))) {
    pw_seterr(err, PW_ENOMEM, "out of memory reading %s", path);
  } else if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
    pw_seterr(err, PW_EIO, "cannot read %s", path);
    free(buf);
    buf = NULL;
  } else {
    buf[n] = 0;
    *len = (size_t)n;
  }
  fclose(f);
  return buf;
}

int cli_once(const char *cmd, cli_seen *seen, const char *opt) {
  for (int i = 0; i < seen->n; i++)
    if (!strcmp(seen->name[i], opt)) {
      fprintf(stderr, "power %s: %s given more than once\n", cmd, opt);
      return -1;
    }
  if (seen->n < CLI_SEEN_MAX) seen->name[seen->n++] = opt;
  return 0;
}
