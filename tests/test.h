/* test.h - minimal assertion macros for unit tests. Each test binary is one
 * CTest test; a failed CHECK prints file:line and makes main return 1. */
#ifndef PW_TEST_H
#define PW_TEST_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_failures = 0;
static int t_checks = 0;

#define CHECK(c)                                                              \
  do {                                                                        \
    t_checks++;                                                               \
    if (!(c)) {                                                               \
      t_failures++;                                                           \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c);   \
    }                                                                         \
  } while (0)

#define CHECK_MSG(c, ...)                                                     \
  do {                                                                        \
    t_checks++;                                                               \
    if (!(c)) {                                                               \
      t_failures++;                                                           \
      fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #c);   \
      fprintf(stderr, __VA_ARGS__);                                           \
      fputc('\n', stderr);                                                    \
    }                                                                         \
  } while (0)

#define CHECK_EQ_INT(a, b) CHECK_MSG((long long)(a) == (long long)(b), "%lld != %lld", (long long)(a), (long long)(b))
#define CHECK_STR(a, b) CHECK_MSG(strcmp((a), (b)) == 0, "\"%s\" != \"%s\"", (a), (b))
#define CHECK_NEAR(a, b, tol) CHECK_MSG(fabs((double)(a) - (double)(b)) <= (tol), "%g vs %g (tol %g)", (double)(a), (double)(b), (double)(tol))

/* A whole file as a NUL-terminated string (free()), or NULL when it cannot
 * be read. */
static inline char *t_read_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  char *buf = NULL;
  long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
  if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
    if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
      free(buf);
      buf = NULL;
    } else {
      buf[n] = 0;
    }
  }
  fclose(f);
  return buf;
}

/* Path to ../shared from the source tree, set by CMake as POWER_SHARED_DIR. */
#ifndef POWER_SHARED_DIR
#define POWER_SHARED_DIR "../shared"
#endif

#define TEST_DONE()                                                           \
  do {                                                                        \
    fprintf(stderr, "%d checks, %d failures\n", t_checks, t_failures);        \
    return t_failures ? 1 : 0;                                                \
  } while (0)

#endif
