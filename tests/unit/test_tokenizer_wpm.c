/* test_tokenizer_wpm.c - the WordPiece (BERT) tokenizer against llama.cpp:
 * its conformance vectors for the bert-bge vocabulary (taken from llama.cpp's
 * source as node-llama-cpp ships it, by the peer_assets fixture), [CLS] and
 * [SEP] with add_special, special-token parsing, the normalizer's cases
 * (accents, case, CJK, punctuation, controls), [UNK] words, detokenized
 * pieces, and hostile inputs. */
#include "test.h"

#include "base/error.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "tok/tok.h"

#include <unistd.h>

#include <stdint.h>
#include <string.h>

#define VOCAB POWER_PEER_ASSETS "/ggml-vocab-bert-bge.gguf"

static char *read_all(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  if (b) {
    b[n] = 0;
    *len = (size_t)n;
  }
  return b;
}

static size_t enc(const tok_vocab *v, const char *s, size_t len, bool add, bool parse, int32_t *out, size_t cap) {
  char err[PW_ERRMAX];
  size_t n = 0;
  int rc = tok_encode(v, s, len, add, parse, out, cap, &n, err);
  CHECK_MSG(rc == 0, "encode: %s", err);
  return rc == 0 ? n : 0;
}

static void test_conformance(const tok_vocab *v) {
  size_t lin, lout;
  char *inp = read_all(VOCAB ".inp", &lin), *outp = read_all(VOCAB ".out", &lout);
  CHECK_MSG(inp && outp, "missing %s.inp/.out (the peer_assets fixture extracts them)", VOCAB);
  if (!inp || !outp) {
    free(inp);
    free(outp);
    return;
  }
  const char *sep = "\n__ggml_vocab_test__\n";
  char *ip = inp, *op = outp;
  int pass = 0, total = 0;
  for (int guard = 0; guard < 10000; guard++) {
    char *e = strstr(ip, sep);
    if (!e) break;
    char *nl = strchr(op, '\n');
    CHECK_MSG(nl != NULL, ".out has fewer lines than .inp");
    if (!nl) break;
    *nl = 0;
    int32_t expect[4096], got[4096];
    size_t ne = 0;
    for (char *q = op; *q && ne < 4096;) {
      char *end;
      long x = strtol(q, &end, 10);
      if (end == q) break;
      expect[ne++] = (int32_t)x;
      q = end;
    }
    size_t ng = enc(v, ip, (size_t)(e - ip), false, false, got, 4096);
    total++;
    if (ng == ne && memcmp(got, expect, ne * sizeof *got) == 0) {
      pass++;
    } else {
      fprintf(stderr, "  mismatch on \"%.*s\":\n    expected", (int)(e - ip), ip);
      for (size_t i = 0; i < ne; i++) fprintf(stderr, " %d", expect[i]);
      fprintf(stderr, "\n    got     ");
      for (size_t i = 0; i < ng && i < 4096; i++) fprintf(stderr, " %d", got[i]);
      fputc('\n', stderr);
    }
    ip = e + strlen(sep);
    op = nl + 1;
  }
  fprintf(stderr, "bert-bge conformance: %d/%d vectors pass\n", pass, total);
  CHECK_MSG(pass == total && total >= 30, "%d of %d vectors pass", pass, total);
  free(inp);
  free(outp);
}

static void test_shape(const tok_vocab *v) {
  CHECK(strcmp(tok_kind(v), "wpm") == 0);
  CHECK(tok_bos(v) == 101 && tok_sep(v) == 102 && tok_unk(v) == 100);
  int32_t ids[64];
  /* [CLS] text [SEP] with add_special */
  size_t n = enc(v, "Hello world", 11, true, false, ids, 64);
  CHECK(n == 4 && ids[0] == 101 && ids[n - 1] == 102);
  int32_t hello = ids[1], world = ids[2];
  /* case and accents fold: "HÉLLO Wörld" is "hello world" */
  n = enc(v, "H\xC3\x89LLO W\xC3\xB6rld", 13, false, false, ids, 64);
  CHECK(n == 2 && ids[0] == hello && ids[1] == world);
  /* a decomposed accent (e + U+0301) is dropped as a mark */
  int32_t a[8], b[8];
  size_t na = enc(v, "cafe\xCC\x81", 6, false, false, a, 8), nb = enc(v, "cafe", 4, false, false, b, 8);
  CHECK(na == nb && na > 0 && memcmp(a, b, na * sizeof *a) == 0);
  /* punctuation is a word of its own; controls and NUL vanish */
  n = enc(v, "hello,world", 11, false, false, ids, 64);
  CHECK(n == 3 && ids[0] == hello && ids[2] == world);
  n = enc(v, "hel\x01lo\0", 7, false, false, ids, 64);
  CHECK(n == 1 && ids[0] == hello);
  /* invalid UTF-8 is dropped (U+FFFD), never a crash */
  n = enc(v, "\xFF\xFEhello\xC3", 8, false, false, ids, 64);
  CHECK(n == 1 && ids[0] == hello);
  /* a word no piece covers is one [UNK] */
  n = enc(v, "\xF0\x9F\xA6\x99\xF0\x9F\xA6\x99", 8, false, false, ids, 64);
  CHECK(n == 1 && ids[0] == 100);
  /* CJK ideographs split one by one */
  n = enc(v, "\xE4\xB8\xAD\xE6\x96\x87", 6, false, false, ids, 64);
  CHECK(n == 2);
  /* special tokens in the text: with parse_special they are the tokens */
  n = enc(v, "[CLS] hello [SEP]", 17, false, true, ids, 64);
  CHECK(n == 3 && ids[0] == 101 && ids[1] == hello && ids[2] == 102);
  n = enc(v, "[CLS]", 5, false, false, ids, 64);
  CHECK(n >= 3 && ids[0] != 101 && ids[n - 1] != 102); /* "[", pieces of "cls", "]" */
  /* an empty text is [CLS] [SEP] */
  n = enc(v, "", 0, true, false, ids, 64);
  CHECK(n == 2 && ids[0] == 101 && ids[1] == 102);
  /* pieces: word-initial ones start with a space, continuations do not */
  char buf[64];
  int l = tok_piece(v, hello, false, buf, sizeof buf);
  CHECK(l == 6 && memcmp(buf, " hello", 6) == 0);
  n = enc(v, "tokenization", 12, false, false, ids, 64);
  CHECK(n >= 2);
  if (n >= 2) {
    l = tok_piece(v, ids[1], false, buf, sizeof buf);
    CHECK(l > 0 && buf[0] != ' ');
  }
  /* the cap: PW_ERANGE with the count needed */
  char err[PW_ERRMAX];
  size_t need = 0;
  CHECK(tok_encode(v, "hello world again", 17, true, false, ids, 2, &need, err) == PW_ERANGE && need == 5);
}

static void test_hostile(const tok_vocab *v) {
  /* one long word and many short ones: bounded work, exact counts */
  size_t len = 200000;
  char *s = malloc(len);
  for (size_t i = 0; i < len; i++) s[i] = 'a' + (char)(i % 26);
  int32_t *ids = malloc((len + 2) * sizeof *ids);
  size_t n = enc(v, s, len, true, false, ids, len + 2);
  CHECK(n >= 3 && ids[0] == 101 && ids[n - 1] == 102);
  for (size_t i = 0; i < len; i++) s[i] = (i % 2) ? ' ' : '.';
  n = enc(v, s, len, false, false, ids, len + 2);
  CHECK(n == len / 2);
  for (size_t i = 0; i < len; i++) s[i] = (char)(0x80 + i % 64); /* stray continuation bytes */
  n = enc(v, s, len, false, false, ids, len + 2);
  CHECK(n == 0);
  free(s);
  free(ids);
}

/* The normalizer's metadata: a cased vocabulary (lowercase false, and so
 * no accent stripping unless asked) keeps case and accents. */
static void test_normalizer_keys(const gguf_file *g, const tok_vocab *uncased) {
  char err[PW_ERRMAX], path[] = "/tmp/power-wpm-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd < 0) return;
  close(fd);
  gguf_writer *w = gguf_writer_create();
  CHECK(w && gguf_writer_copy_kvs_prefix(w, g, "tokenizer.", err) > 0);
  CHECK(gguf_writer_set_bool(w, "tokenizer.ggml.normalizer.lowercase", false, err) == 0);
  CHECK(gguf_writer_write(w, path, NULL, NULL, err) == 0);
  gguf_writer_destroy(w);
  gguf_file *g2 = NULL;
  tok_vocab *cased = NULL;
  CHECK(gguf_open(path, &g2, err) == 0);
  if (g2) CHECK(tok_vocab_load(g2, &cased, err) == 0);
  if (cased) {
    int32_t a[16], b[16];
    size_t na = enc(cased, "hello", 5, false, false, a, 16), nb = enc(uncased, "hello", 5, false, false, b, 16);
    CHECK(na == nb && na == 1 && a[0] == b[0]);
    na = enc(cased, "HELLO", 5, false, false, a, 16);
    CHECK(na >= 1 && a[0] != b[0]); /* no "hello" from "HELLO" */
    na = enc(cased, "caf\xC3\xA9", 5, false, false, a, 16);
    nb = enc(cased, "cafe", 4, false, false, b, 16);
    CHECK(na != nb || memcmp(a, b, na * sizeof *a) != 0); /* the accent stays */
  }
  tok_vocab_destroy(cased);
  gguf_close(g2);
  unlink(path);
}

int main(void) {
  char err[PW_ERRMAX];
  gguf_file *g = NULL;
  tok_vocab *v = NULL;
  CHECK_MSG(gguf_open(VOCAB, &g, err) == 0, "%s: %s (the peer_assets fixture extracts it)", VOCAB, err);
  if (g) CHECK_MSG(tok_vocab_load(g, &v, err) == 0, "load: %s", err);
  if (v) {
    test_conformance(v);
    test_shape(v);
    test_hostile(v);
    test_normalizer_keys(g, v);
  }
  tok_vocab_destroy(v);
  gguf_close(g);
  TEST_DONE();
}
