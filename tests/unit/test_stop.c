/* test_stop.c - streaming stop-string matcher: stops split across pieces,
 * overlapping prefixes, several stops, no stops, flush, limits, and a
 * randomized comparison with a whole-text reference. */
#include "chat/stop.h"
#include "test.h"

#include "power.h"

#include <stdbool.h>

/* Feeds pieces; returns everything emitted (flushed at the end when no
 * stop matched) in got, and whether a stop matched. */
static bool run(const char *const *stops, int ns, const char *const *pieces, int np, char *got, size_t *gn) {
  stop_matcher m;
  char err[PW_ERRMAX];
  int rc = stop_init(&m, stops, NULL, ns, err);
  CHECK_MSG(rc == 0, "%s", err);
  char out[1024];
  *gn = 0;
  bool stopped = false;
  for (int i = 0; i < np && !stopped; i++) {
    size_t n = strlen(pieces[i]);
    size_t k = stop_feed(&m, pieces[i], n, out, &stopped);
    CHECK(k <= STOP_OUT_CAP(n));
    memcpy(got + *gn, out, k);
    *gn += k;
  }
  if (!stopped) {
    size_t k = stop_flush(&m, out);
    memcpy(got + *gn, out, k);
    *gn += k;
  }
  got[*gn] = 0;
  return stopped;
}

#define RUN(stops, pieces, want, want_stop)                                                                        \
  do {                                                                                                             \
    char got_[4096];                                                                                               \
    size_t gn_;                                                                                                    \
    bool st_ = run(stops, (int)(sizeof stops / sizeof stops[0]), pieces, (int)(sizeof pieces / sizeof pieces[0]), \
                   got_, &gn_);                                                                                    \
    CHECK_STR(got_, want);                                                                                         \
    CHECK_EQ_INT(st_, want_stop);                                                                                  \
  } while (0)

/* Reference: the text before the earliest-completing stop in the whole
 * text, as a streaming matcher fed byte by byte sees it. */
static size_t reference(const char *const *stops, int ns, const char *text, size_t n, bool *stopped) {
  for (size_t end = 1; end <= n; end++) {
    size_t best = end;
    for (int i = 0; i < ns; i++) {
      size_t l = strlen(stops[i]);
      if (l <= end && memcmp(text + end - l, stops[i], l) == 0 && end - l < best) best = end - l;
    }
    if (best < end) {
      *stopped = true;
      return best;
    }
  }
  *stopped = false;
  return n;
}

int main(void) {
  {
    const char *stops[] = {"</s>"};
    const char *pieces[] = {"Hello", " wor", "ld<", "/", "s>", "tail"};
    RUN(stops, pieces, "Hello world", true);
  }
  {
    /* a held prefix that turns out not to be a stop is released */
    const char *stops[] = {"</s>"};
    const char *pieces[] = {"a<", "/x", "b"};
    RUN(stops, pieces, "a</xb", false);
  }
  {
    /* stop inside a single piece with text after it */
    const char *stops[] = {"STOP"};
    const char *pieces[] = {"abcSTOPdef"};
    RUN(stops, pieces, "abc", true);
  }
  {
    /* overlapping prefixes: "aab" in "aaab" */
    const char *stops[] = {"aab"};
    const char *pieces[] = {"a", "a", "a", "b", "c"};
    RUN(stops, pieces, "a", true);
  }
  {
    /* multiple stops: the first to complete wins */
    const char *stops[] = {"\n\n", "User:", "###"};
    const char *pieces[] = {"x Use", "r", ":", " y"};
    RUN(stops, pieces, "x ", true);
  }
  {
    /* "bc" completes before "abcd", whatever the split */
    const char *stops[] = {"abcd", "bc"};
    const char *pieces[] = {"xa", "b", "c", "d"};
    RUN(stops, pieces, "xa", true);
    const char *one[] = {"xabcd"};
    RUN(stops, one, "xa", true);
  }
  {
    /* no match: everything comes out after flush, in order */
    const char *stops[] = {"<|im_end|>"};
    const char *pieces[] = {"one <|im", "_start|> two <|im_en"};
    RUN(stops, pieces, "one <|im_start|> two <|im_en", false);
  }
  {
    /* stop at the very start */
    const char *stops[] = {"<"};
    const char *pieces[] = {"<x"};
    RUN(stops, pieces, "", true);
  }
  {
    /* no stop strings: pass-through, nothing held */
    stop_matcher m;
    char err[PW_ERRMAX], out[64];
    CHECK_EQ_INT(stop_init(&m, NULL, NULL, 0, err), 0);
    bool st;
    CHECK_EQ_INT(stop_feed(&m, "abc", 3, out, &st), 3);
    CHECK(!st && memcmp(out, "abc", 3) == 0);
    CHECK_EQ_INT(stop_flush(&m, out), 0);
  }
  {
    /* held bytes are withheld exactly; after a stop nothing more comes out */
    const char *stops[] = {"END"};
    stop_matcher m;
    char err[PW_ERRMAX], out[64];
    CHECK_EQ_INT(stop_init(&m, stops, NULL, 1, err), 0);
    bool st;
    CHECK_EQ_INT(stop_feed(&m, "xxE", 3, out, &st), 2);
    CHECK_EQ_INT(stop_feed(&m, "N", 1, out, &st), 0);
    CHECK_EQ_INT(stop_feed(&m, "D!", 2, out, &st), 0);
    CHECK(st);
    CHECK_EQ_INT(stop_feed(&m, "more", 4, out, &st), 0);
    CHECK(st);
    CHECK_EQ_INT(stop_flush(&m, out), 0);
    stop_reset(&m);
    CHECK_EQ_INT(stop_feed(&m, "ok", 2, out, &st), 2);
    CHECK(!st);
  }
  {
    /* limits */
    stop_matcher m;
    char err[PW_ERRMAX];
    const char *nine[9] = {"a", "b", "c", "d", "e", "f", "g", "h", "i"};
    CHECK_EQ_INT(stop_init(&m, nine, NULL, 9, err), PW_EINVAL);
    const char *empty[] = {""};
    CHECK_EQ_INT(stop_init(&m, empty, NULL, 1, err), PW_EINVAL);
    static char big[STOP_MAX_LEN + 2];
    memset(big, 'z', STOP_MAX_LEN + 1);
    const char *bigs[] = {big};
    CHECK_EQ_INT(stop_init(&m, bigs, NULL, 1, err), PW_EINVAL);
    big[STOP_MAX_LEN] = 0; /* exactly the maximum is fine, also split into single bytes */
    CHECK_EQ_INT(stop_init(&m, bigs, NULL, 1, err), 0);
    char out[STOP_OUT_CAP(1)];
    bool st = false;
    size_t emitted = 0;
    for (int i = 0; i < STOP_MAX_LEN && !st; i++) emitted += stop_feed(&m, "z", 1, out, &st);
    CHECK(st);
    CHECK_EQ_INT(emitted, 0);
    /* a NUL byte inside a stop string, given with explicit lengths */
    const char *nul[] = {"a\0b"};
    size_t lens[] = {3};
    CHECK_EQ_INT(stop_init(&m, nul, lens, 1, err), 0);
    CHECK_EQ_INT(stop_feed(&m, "xa", 2, out, &st), 1);
    CHECK_EQ_INT(stop_feed(&m, "\0", 1, out, &st), 0);
    CHECK_EQ_INT(stop_feed(&m, "b", 1, out, &st), 0);
    CHECK(st);
  }
  {
    /* randomized: random texts over a small alphabet, random piece splits,
     * compared with the whole-text reference */
    const char *stops[] = {"aba", "bb", "cab", "abcabc", "xabcab"};
    uint64_t s = 12345;
    int bad = 0;
    for (int iter = 0; iter < 3000; iter++) {
      char text[64];
      size_t n = 0;
      s = s * 6364136223846793005ULL + 1442695040888963407ULL;
      size_t len = (size_t)(s >> 59) + 1;
      for (; n < len; n++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        text[n] = "abcx"[(s >> 60) & 3];
      }
      int ns = 1 + iter % 5;
      bool want_stop;
      size_t want = reference(stops, ns, text, n, &want_stop);
      stop_matcher m;
      char err[PW_ERRMAX], out[128], got[128];
      stop_init(&m, stops, NULL, ns, err);
      size_t gn = 0, i = 0;
      bool st = false;
      while (i < n && !st) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        size_t k = (size_t)(s >> 61) + 1;
        if (k > n - i) k = n - i;
        size_t e = stop_feed(&m, text + i, k, out, &st);
        memcpy(got + gn, out, e);
        gn += e;
        i += k;
      }
      if (!st) gn += stop_flush(&m, got + gn);
      if (st != want_stop || gn != want || memcmp(got, text, gn) != 0) {
        if (bad++ < 5) fprintf(stderr, "mismatch on '%.*s' (stops %d): got %zu/%d want %zu/%d\n", (int)n, text, ns, gn, st, want, want_stop);
      }
    }
    CHECK_EQ_INT(bad, 0);
  }
  /* which: the index of the string that matched (the first to complete;
   * -1 before any match and after a reset). */
  {
    stop_matcher m;
    char serr[PW_ERRMAX], out[STOP_OUT_CAP(64)];
    bool st = false;
    const char *stops[] = {"zzz", "lo w", "o"};
    CHECK_EQ_INT(stop_init(&m, stops, NULL, 3, serr), 0);
    CHECK_EQ_INT(m.which, -1);
    stop_feed(&m, "hel", 3, out, &st);
    CHECK(!st);
    CHECK_EQ_INT(m.which, -1);
    stop_feed(&m, "lo world", 8, out, &st);
    CHECK(st);
    CHECK_EQ_INT(m.which, 2); /* "o" completes before "lo w" */
    stop_reset(&m);
    CHECK_EQ_INT(m.which, -1);
    const char *two[] = {"abc", "b"};
    CHECK_EQ_INT(stop_init(&m, two, NULL, 2, serr), 0);
    stop_feed(&m, "xab", 3, out, &st);
    CHECK(st);
    CHECK_EQ_INT(m.which, 1);
  }
  TEST_DONE();
}
