/* replay.c - runs a fuzz harness over files instead of under libFuzzer: each
 * argument is a file or a directory of files, each file one input. This is
 * how the test suite runs the harnesses over their seed corpora with the
 * ordinary compiler and sanitizers: deterministic and quick. Exits 1 when an
 * input cannot be read or a directory holds no inputs (a corpus that went
 * missing must not pass as empty). */
#include "fuzz.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "replay: cannot open %s\n", path);
    return -1;
  }
  size_t cap = 1 << 16, n = 0;
  uint8_t *buf = malloc(cap);
  for (;;) {
    if (!buf) break;
    n += fread(buf + n, 1, cap - n, f);
    if (n < cap) break;
    uint8_t *nb = realloc(buf, cap * 2);
    if (!nb) {
      free(buf);
      buf = NULL;
      break;
    }
    buf = nb;
    cap *= 2;
  }
  fclose(f);
  if (!buf) return -1;
  /* an exact-size copy, so ASan sees reads past the input's end */
  uint8_t *in = malloc(n ? n : 1);
  if (!in) {
    free(buf);
    return -1;
  }
  memcpy(in, buf, n);
  free(buf);
  LLVMFuzzerTestOneInput(in, n);
  free(in);
  return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static int run_path(const char *path, int *count) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "replay: %s does not exist\n", path);
    return -1;
  }
  if (!S_ISDIR(st.st_mode)) {
    (*count)++;
    return run_file(path);
  }
  DIR *d = opendir(path);
  if (!d) return -1;
  char **names = NULL;
  size_t n = 0, cap = 0;
  struct dirent *e;
  while ((e = readdir(d))) {
    if (e->d_name[0] == '.') continue;
    if (n == cap) {
      cap = cap ? cap * 2 : 64;
      char **nn = realloc(names, cap * sizeof *nn);
      if (!nn) break;
      names = nn;
    }
    size_t len = strlen(path) + strlen(e->d_name) + 2;
    names[n] = malloc(len);
    if (!names[n]) break;
    snprintf(names[n], len, "%s/%s", path, e->d_name);
    n++;
  }
  closedir(d);
  /* sorted: the same order on every machine */
  if (n) qsort(names, n, sizeof *names, cmp_str);
  int rc = n ? 0 : -1;
  if (!n) fprintf(stderr, "replay: %s holds no inputs\n", path);
  for (size_t i = 0; i < n; i++) {
    if (rc == 0) {
      (*count)++;
      rc = run_file(names[i]);
    }
    free(names[i]);
  }
  free(names);
  return rc;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
    return 2;
  }
  LLVMFuzzerInitialize(&argc, &argv);
  int count = 0;
  for (int i = 1; i < argc; i++)
    if (run_path(argv[i], &count) != 0) return 1;
  printf("replayed %d inputs\n", count);
  return 0;
}
