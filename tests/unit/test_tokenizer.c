/* test_tokenizer.c - tokenizer conformance against llama.cpp's vectors
 * (every ggml-vocab-*.gguf in shared/tokenizer with .inp/.out files, and
 * Qwen3.5's from llama.cpp's source in the peer package), parity
 * with the prompt tokens llama.cpp produced for the shared models, round
 * trips, the streaming detokenizer, hostile inputs, and a timing of 100 KB
 * of mixed text. */
#include "test.h"

#include "base/error.h"
#include "gguf/gguf.h"
#include "tok/tok.h"
#include "tok/tok_internal.h"

#include <dirent.h>
#include <jansson.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

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

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct loaded {
  gguf_file *g;
  tok_vocab *v;
} loaded;

static int load(const char *path, loaded *l) {
  char err[PW_ERRMAX];
  l->g = NULL;
  l->v = NULL;
  if (gguf_open(path, &l->g, err) < 0) {
    fprintf(stderr, "open %s: %s\n", path, err);
    return -1;
  }
  if (tok_vocab_load(l->g, &l->v, err) < 0) {
    fprintf(stderr, "load %s: %s\n", path, err);
    gguf_close(l->g);
    l->g = NULL;
    return -1;
  }
  return 0;
}

static void unload(loaded *l) {
  tok_vocab_destroy(l->v);
  gguf_close(l->g);
}

/* Tokenizes into a growing buffer; returns count or -1. */
static int32_t *encode(const tok_vocab *v, const char *s, size_t len, bool add, bool parse, size_t *n) {
  char err[PW_ERRMAX];
  size_t cap = len + 8;
  int32_t *ids = malloc(cap * sizeof *ids);
  int rc = tok_encode(v, s, len, add, parse, ids, cap, n, err);
  if (rc == PW_ERANGE) {
    free(ids);
    cap = *n;
    ids = malloc((cap ? cap : 1) * sizeof *ids);
    rc = tok_encode(v, s, len, add, parse, ids, cap, n, err);
  }
  if (rc < 0) {
    fprintf(stderr, "encode failed: %s\n", err);
    free(ids);
    return NULL;
  }
  return ids;
}

static void print_ids(const char *label, const int32_t *ids, size_t n) {
  fprintf(stderr, "    %s (%zu):", label, n);
  for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
  fputc('\n', stderr);
}

/* ---- (1) conformance -------------------------------------------------------- */

static int conformance_one(const char *dir, const char *name, int *n_pass, int *n_total) {
  char path[4096], pin[4200], pout[4200];
  snprintf(path, sizeof path, "%.3800s/%.250s", dir, name);
  snprintf(pin, sizeof pin, "%s.inp", path);
  snprintf(pout, sizeof pout, "%s.out", path);
  size_t lin, lout;
  char *inp = read_all(pin, &lin), *outp = read_all(pout, &lout);
  if (!inp || !outp) {
    free(inp);
    free(outp);
    return 0; /* no vectors for this vocab */
  }
  loaded l;
  CHECK_MSG(load(path, &l) == 0, "%s", name);
  if (!l.v) {
    free(inp);
    free(outp);
    return 1;
  }
  const char *sep = "\n__ggml_vocab_test__\n";
  size_t seplen = strlen(sep);
  char *ip = inp, *op = outp;
  int pass = 0, total = 0;
  bool shown = false;
  for (;;) {
    char *e = strstr(ip, sep);
    if (!e) break; /* the final piece after the last separator is empty */
    char *nl = strchr(op, '\n');
    if (!nl) {
      CHECK_MSG(0, "%s: .out has fewer lines than .inp", name);
      break;
    }
    *nl = 0;
    int32_t expect[4096];
    size_t ne = 0;
    for (char *q = op; *q;) {
      char *end;
      long x = strtol(q, &end, 10);
      if (end == q) break;
      expect[ne++] = (int32_t)x;
      q = end;
    }
    size_t ng;
    int32_t *got = encode(l.v, ip, (size_t)(e - ip), false, false, &ng);
    bool ok = got && ng == ne && memcmp(got, expect, ne * sizeof *got) == 0;
    total++;
    if (ok) {
      pass++;
    } else if (!shown) {
      shown = true;
      fprintf(stderr, "  %s: first mismatch, input \"%.*s\"\n", name, (int)(e - ip), ip);
      print_ids("expected", expect, ne);
      if (got) print_ids("got     ", got, ng);
    }
    free(got);
    ip = e + seplen;
    op = nl + 1;
  }
  fprintf(stderr, "  %-32s %3d/%3d vectors pass\n", name, pass, total);
  CHECK_MSG(pass == total && total > 0, "%s: %d of %d vectors pass", name, pass, total);
  *n_pass += pass;
  *n_total += total;
  unload(&l);
  free(inp);
  free(outp);
  return 1;
}

static void test_conformance(void) {
  const char *dir = POWER_SHARED_DIR "/tokenizer";
  DIR *d = opendir(dir);
  CHECK_MSG(d != NULL, "cannot open %s", dir);
  if (!d) return;
  struct dirent *de;
  char names[64][256];
  int nn = 0;
  while ((de = readdir(d)) && nn < 64) {
    size_t l = strlen(de->d_name);
    if (strncmp(de->d_name, "ggml-vocab-", 11) == 0 && l > 5 && strcmp(de->d_name + l - 5, ".gguf") == 0)
      snprintf(names[nn++], sizeof names[0], "%s", de->d_name);
  }
  closedir(d);
  int vocabs = 0, pass = 0, total = 0;
  for (int i = 0; i < nn; i++) vocabs += conformance_one(dir, names[i], &pass, &total);
  fprintf(stderr, "conformance: %d vocabularies, %d/%d vectors pass\n", vocabs, pass, total);
  CHECK_MSG(vocabs > 0, "no ggml-vocab-*.gguf with .inp/.out in %s", dir);
}

/* Vocabularies whose vectors are not in shared/tokenizer but in llama.cpp's
 * source as node-llama-cpp ships it (a git bundle in tests/peer's
 * node_modules): taken out with git into a temporary directory. Fails
 * with a message when the peer's node_modules are missing. */
static void test_bundle_conformance(void) {
  static const char *const names[] = {"ggml-vocab-qwen35.gguf"};
  char dir[4096], bundle[4096], tmp[64], cmd[12288];
  snprintf(dir, sizeof dir, "%s", __FILE__);
  char *slash = strrchr(dir, '/');
  if (slash) *slash = 0;
  snprintf(bundle, sizeof bundle, "%.3900s/../peer/node_modules/node-llama-cpp/llama/gitRelease.bundle", dir);
  FILE *f = fopen(bundle, "rb");
  CHECK_MSG(f != NULL, "%s is missing: run scripts/install-node-deps.sh", bundle);
  if (!f) return;
  fclose(f);
  snprintf(tmp, sizeof tmp, "/tmp/pw_tok_bundle_%d", (int)getpid());
  int off = snprintf(cmd, sizeof cmd, "git init -q --bare '%s' && git -C '%s' fetch -q '%s' HEAD", tmp, tmp, bundle);
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    for (int k = 0; k < 3; k++) {
      const char *ext = k == 0 ? "" : k == 1 ? ".inp" : ".out";
      off += snprintf(cmd + off, sizeof cmd - (size_t)off, " && git -C '%s' show 'FETCH_HEAD:models/%s%s' > '%s/%s%s'",
                      tmp, names[i], ext, tmp, names[i], ext);
    }
  int rc = system(cmd);
  CHECK_MSG(rc == 0, "could not take the vocabularies out of %s", bundle);
  int pass = 0, total = 0;
  for (size_t i = 0; rc == 0 && i < sizeof names / sizeof names[0]; i++)
    CHECK_MSG(conformance_one(tmp, names[i], &pass, &total) == 1, "%s: no vectors", names[i]);
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  CHECK(system(cmd) == 0);
}

/* ---- (1b) parity with llama.cpp's prompt tokens for the shared models ------- */

static void test_parity(void) {
  static const char *const models[] = {"syn-llama-Q4_0", "syn-llama3-Q8_0", "syn-qwen2-Q4_K_M",
                                       "llama2-tiny-random", "syn-qwen3-Q8_0"};
  int checked = 0;
  for (size_t m = 0; m < sizeof models / sizeof models[0]; m++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/models/%s.gguf", POWER_SHARED_DIR, models[m]);
    loaded l;
    CHECK_MSG(load(path, &l) == 0, "%s", path);
    if (!l.v) continue;
    for (int p = 1; p <= 3; p++) {
      snprintf(path, sizeof path, "%s/parity/%s.p%d.json", POWER_SHARED_DIR, models[m], p);
      json_error_t je;
      json_t *j = json_load_file(path, 0, &je);
      CHECK_MSG(j != NULL, "%s: %s", path, je.text);
      if (!j) continue;
      const char *prompt = json_string_value(json_object_get(j, "prompt"));
      json_t *toks = json_object_get(j, "tokens");
      size_t np = (size_t)json_integer_value(json_object_get(j, "n_prompt"));
      size_t n;
      int32_t *ids = prompt ? encode(l.v, prompt, strlen(prompt), true, false, &n) : NULL;
      bool ok = ids && n == np;
      for (size_t i = 0; ok && i < np; i++) ok = ids[i] == (int32_t)json_integer_value(json_array_get(toks, i));
      CHECK_MSG(ok, "%s: prompt tokens differ from llama.cpp", path);
      checked++;
      free(ids);
      json_decref(j);
    }
    unload(&l);
  }
  fprintf(stderr, "parity: %d prompts tokenized as llama.cpp did\n", checked);
}

/* ---- (2) round trips -------------------------------------------------------- */

static const char *const k_texts[] = {
    "Hello world",
    "  leading spaces and trailing   ",
    "caf\xC3\xA9 na\xC3\xAFve \xC3\x85ngstr\xC3\xB6m \xC3\x9F",
    "\xE6\x9D\xB1\xE4\xBA\xAC\xE3\x81\xAF\xE6\x97\xA5\xE6\x9C\xAC\xE3\x81\xAE\xE9\xA6\x96\xE9\x83\xBD",
    "emoji \xF0\x9F\xA6\x99\xF0\x9F\x9A\x80 \xF0\x9F\x98\xB6\xE2\x80\x8D\xF0\x9F\x8C\xAB\xEF\xB8\x8F!",
    "tabs\tand\nnewlines\n\n\r\n  \n",
    "def f(x):\n    return x ** 2  # square\n\nfor i in range(10):\n\tprint(f(i))\n",
    "int main(void) { return printf(\"%d\\n\", 42) < 0; }",
    "\xD0\xBD\xD0\xB5\xD1\x89\xD0\xBE \xD0\xBD\xD0\xB0 \xD0\x91\xD1\x8A\xD0\xBB\xD0\xB3\xD0\xB0\xD1\x80\xD1\x81\xD0\xBA\xD0\xB8 1234567",
    "   ",
    "\n",
    "x",
};

static void test_roundtrip_vocab(const char *path) {
  loaded l;
  CHECK_MSG(load(path, &l) == 0, "%s", path);
  if (!l.v) return;
  int ok = 0, n_texts = (int)(sizeof k_texts / sizeof k_texts[0]);
  for (int i = 0; i < n_texts; i++) {
    const char *s = k_texts[i];
    size_t n, dl;
    char err[PW_ERRMAX];
    int32_t *ids = encode(l.v, s, strlen(s), false, false, &n);
    CHECK(ids != NULL);
    if (!ids) continue;
    /* SPM prefixes the text with one space; STRIP_SPACE removes exactly it */
    char *buf = malloc(strlen(s) * 4 + 64);
    int rc = tok_decode(l.v, ids, n, TOK_DETOK_STRIP_SPACE, buf, strlen(s) * 4 + 64, &dl, err);
    bool same = rc == 0 && dl == strlen(s) && memcmp(buf, s, dl) == 0;
    CHECK_MSG(same, "%s: round trip of \"%s\" gave \"%.*s\"", path, s, (int)dl, buf);
    /* without the flag an SPM decode has exactly one extra leading space */
    rc = tok_decode(l.v, ids, n, 0, buf, strlen(s) * 4 + 64, &dl, err);
    size_t extra = strcmp(tok_kind(l.v), "spm") == 0 ? 1 : 0;
    CHECK(rc == 0 && dl == strlen(s) + extra && memcmp(buf + extra, s, strlen(s)) == 0);
    if (extra) CHECK(buf[0] == ' ');
    ok += same;
    free(buf);
    free(ids);
  }
  fprintf(stderr, "  round trip %-28s %d/%d\n", strrchr(path, '/') + 1, ok, n_texts);
  unload(&l);
}

static void test_roundtrip(void) {
  static const char *const v[] = {"llama-spm", "llama-bpe", "qwen2", "gpt-2", "phi-3", "starcoder", "deepseek-llm"};
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer/ggml-vocab-%s.gguf", POWER_SHARED_DIR, v[i]);
    test_roundtrip_vocab(path);
  }
}

/* ---- (3) streaming detokenizer ---------------------------------------------- */

/* Feeds ids through a streaming detokenizer; returns the concatenated output
 * and checks every chunk is valid UTF-8 on its own. */
static size_t stream(const tok_vocab *v, const int32_t *ids, size_t n, unsigned flags, char *out) {
  tok_detok d;
  tok_detok_init(&d, v, flags);
  size_t cap = tok_detok_max_out(v), o = 0;
  char *chunk = malloc(cap);
  for (size_t i = 0; i < n; i++) {
    int k = tok_detok_feed(&d, ids[i], chunk, cap);
    CHECK(k >= 0);
    if (k < 0) break;
    /* each chunk must end on a character boundary */
    for (int j = 0; j < k;) {
      uint8_t b = (uint8_t)chunk[j];
      int l = b < 0x80 ? 1 : b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : 2;
      CHECK_MSG(b < 0x80 || (b >= 0xC2 && b <= 0xF4), "bad lead byte 0x%02X in a chunk", b);
      CHECK_MSG(j + l <= k, "chunk ends inside a character");
      j += l;
    }
    memcpy(out + o, chunk, (size_t)k);
    o += (size_t)k;
  }
  int k = tok_detok_flush(&d, chunk, cap);
  CHECK(k >= 0);
  if (k > 0) {
    memcpy(out + o, chunk, (size_t)k);
    o += (size_t)k;
  }
  free(chunk);
  return o;
}

static bool valid_utf8(const char *s, size_t n) {
  for (size_t i = 0; i < n;) {
    uint8_t b = (uint8_t)s[i];
    size_t l;
    uint32_t cp;
    if (b < 0x80) {
      i++;
      continue;
    } else if (b >= 0xC2 && b <= 0xDF) {
      l = 2;
      cp = b & 0x1F;
    } else if (b >= 0xE0 && b <= 0xEF) {
      l = 3;
      cp = b & 0x0F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      l = 4;
      cp = b & 0x07;
    } else {
      return false;
    }
    if (i + l > n) return false;
    for (size_t j = 1; j < l; j++) {
      if (((uint8_t)s[i + j] & 0xC0) != 0x80) return false;
      cp = cp << 6 | ((uint8_t)s[i + j] & 0x3F);
    }
    if ((l == 3 && cp < 0x800) || (l == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += l;
  }
  return true;
}

static void test_stream(void) {
  loaded spm, bpe;
  CHECK(load(POWER_SHARED_DIR "/tokenizer/ggml-vocab-llama-spm.gguf", &spm) == 0);
  CHECK(load(POWER_SHARED_DIR "/tokenizer/ggml-vocab-llama-bpe.gguf", &bpe) == 0);
  if (!spm.v || !bpe.v) return;
  char out[4096];
  /* SPM byte-fallback tokens split one emoji into four ids */
  int32_t b4[4];
  const char *emoji = "\xF0\x9F\xA6\x99"; /* not in the Llama 2 vocabulary: byte tokens */
  size_t n;
  int32_t *ids = encode(spm.v, emoji, 4, false, false, &n);
  CHECK(ids && n == 5); /* "▁" + 4 byte tokens */
  if (ids && n == 5) {
    for (int i = 0; i < 4; i++) CHECK_EQ_INT(tok_attr(spm.v, ids[i + 1]), TOK_ATTR_BYTE);
    tok_detok d;
    tok_detok_init(&d, spm.v, TOK_DETOK_STRIP_SPACE);
    char chunk[256];
    CHECK_EQ_INT(tok_detok_feed(&d, ids[0], chunk, sizeof chunk), 0); /* the stripped space */
    for (int i = 1; i < 4; i++) CHECK_EQ_INT(tok_detok_feed(&d, ids[i], chunk, sizeof chunk), 0); /* held back */
    CHECK_EQ_INT(tok_detok_feed(&d, ids[4], chunk, sizeof chunk), 4);
    CHECK(memcmp(chunk, emoji, 4) == 0);
    CHECK_EQ_INT(tok_detok_flush(&d, chunk, sizeof chunk), 0);
    /* an incomplete character at flush becomes U+FFFD */
    tok_detok_init(&d, spm.v, 0);
    CHECK_EQ_INT(tok_detok_feed(&d, ids[1], chunk, sizeof chunk), 0);
    CHECK_EQ_INT(tok_detok_feed(&d, ids[2], chunk, sizeof chunk), 0);
    CHECK_EQ_INT(tok_detok_flush(&d, chunk, sizeof chunk), 3);
    CHECK(memcmp(chunk, "\xEF\xBF\xBD", 3) == 0);
    /* a lead byte followed by an ASCII piece: U+FFFD then the ASCII */
    tok_detok_init(&d, spm.v, 0);
    CHECK_EQ_INT(tok_detok_feed(&d, ids[1], chunk, sizeof chunk), 0);
    int32_t hello = tok_find(spm.v, "Hello", 5);
    CHECK(hello >= 0);
    CHECK_EQ_INT(tok_detok_feed(&d, hello, chunk, sizeof chunk), 8);
    CHECK(memcmp(chunk, "\xEF\xBF\xBDHello", 8) == 0);
    for (int i = 0; i < 4; i++) b4[i] = ids[i + 1];
    /* a stray continuation byte, an overlong lead, a surrogate */
    int32_t bad[6] = {b4[2], tok_find(spm.v, "<0xC0>", 6), tok_find(spm.v, "<0xAF>", 6),
                      tok_find(spm.v, "<0xED>", 6), tok_find(spm.v, "<0xA0>", 6), tok_find(spm.v, "<0x80>", 6)};
    size_t o = stream(spm.v, bad, 6, 0, out);
    CHECK(valid_utf8(out, o));
    CHECK_EQ_INT(o, 3 * 6);
  }
  free(ids);
  /* BPE: every prefix of a multi-byte text, token by token, stays valid */
  const char *mixed = "na\xC3\xAFve \xE6\x9D\xB1\xE4\xBA\xAC \xF0\x9F\xA6\x99\xF0\x9F\x98\xB6 \xE2\x9C\x85 done";
  ids = encode(bpe.v, mixed, strlen(mixed), false, false, &n);
  CHECK(ids != NULL);
  if (ids) {
    size_t o = stream(bpe.v, ids, n, 0, out);
    CHECK(o == strlen(mixed) && memcmp(out, mixed, o) == 0);
    /* some emoji token pieces of Llama 3 end mid-character */
    bool split = false;
    for (size_t i = 0; i < n; i++) {
      const char *p;
      size_t l = tok_piece_ref(bpe.v, ids[i], false, &p);
      if (!valid_utf8(p, l)) split = true;
    }
    CHECK_MSG(split, "test text should contain a token that splits a character");
  }
  free(ids);
  /* special tokens rendered or not */
  int32_t sp[3] = {tok_bos(bpe.v), tok_find(bpe.v, "Hi", 2), tok_eos(bpe.v)};
  size_t o = stream(bpe.v, sp, 3, 0, out);
  CHECK(o == 2 && memcmp(out, "Hi", 2) == 0);
  o = stream(bpe.v, sp, 3, TOK_DETOK_SPECIAL, out);
  CHECK(o == strlen("<|begin_of_text|>Hi<|end_of_text|>") &&
        memcmp(out, "<|begin_of_text|>Hi<|end_of_text|>", o) == 0);
  /* capacity contract */
  tok_detok d;
  tok_detok_init(&d, bpe.v, 0);
  char small[2];
  CHECK_EQ_INT(tok_detok_feed(&d, sp[1], small, sizeof small), PW_ERANGE);
  CHECK_EQ_INT(tok_detok_feed(&d, -1, out, sizeof out), PW_EINVAL);
  CHECK_EQ_INT(tok_detok_feed(&d, tok_n_vocab(bpe.v), out, sizeof out), PW_EINVAL);
  unload(&spm);
  unload(&bpe);
}

/* ---- (4) hostile inputs, specials, metadata ----------------------------------- */

static void test_hostile_vocab(const char *path) {
  loaded l;
  CHECK_MSG(load(path, &l) == 0, "%s", path);
  if (!l.v) return;
  const tok_vocab *v = l.v;
  size_t n;
  char err[PW_ERRMAX];
  int32_t *ids;
  /* empty input */
  CHECK_EQ_INT(tok_encode(v, "", 0, false, false, NULL, 0, &n, err), 0);
  CHECK_EQ_INT(n, 0);
  int32_t one[4];
  CHECK_EQ_INT(tok_encode(v, "", 0, true, false, one, 4, &n, err), 0);
  CHECK_EQ_INT(n, tok_add_bos(v) ? 1 : 0);
  /* invalid UTF-8 and NUL bytes */
  static const char bad[] = "a\xFF\xFE\xC3(\xE2\x82 \xF0\x9F\x98 \xED\xA0\x80 \xC0\x80 \xF4\x90\x80\x80 z\0\0y";
  ids = encode(v, bad, sizeof bad - 1, false, false, &n);
  CHECK(ids != NULL && n > 0);
  for (size_t i = 0; ids && i < n; i++) CHECK(ids[i] >= 0 && ids[i] < tok_n_vocab(v));
  free(ids);
  /* every single byte value */
  for (int b = 0; b < 256; b++) {
    char c = (char)b;
    ids = encode(v, &c, 1, false, false, &n);
    CHECK_MSG(ids && n >= 1, "byte 0x%02X", b);
    free(ids);
  }
  /* capacity contract */
  int32_t small[2];
  CHECK_EQ_INT(tok_encode(v, "Hello world, this is a test", 27, false, false, small, 2, &n, err), PW_ERANGE);
  CHECK(n > 2);
  /* 1 MB of adversarial text: one long word, long whitespace runs, digits */
  size_t big = 1 << 20;
  char *s = malloc(big);
  for (size_t i = 0; i < big; i++) {
    size_t r = i / 65536;
    s[i] = r % 4 == 0 ? 'a' : r % 4 == 1 ? ' ' : r % 4 == 2 ? (char)('0' + i % 10) : "x y\n\t.,"[i % 7];
  }
  double t0 = now_s();
  ids = encode(v, s, big, true, true, &n);
  double dt = now_s() - t0;
  CHECK(ids != NULL && n > 0);
  fprintf(stderr, "  1 MB adversarial %-28s %zu tokens in %.3f s\n", strrchr(path, '/') + 1, n, dt);
  free(ids);
  free(s);
  unload(&l);
}

static void test_specials(void) {
  loaded q, s, p;
  CHECK(load(POWER_SHARED_DIR "/tokenizer/ggml-vocab-qwen2.gguf", &q) == 0);
  CHECK(load(POWER_SHARED_DIR "/tokenizer/ggml-vocab-llama-spm.gguf", &s) == 0);
  CHECK(load(POWER_SHARED_DIR "/tokenizer/ggml-vocab-phi-3.gguf", &p) == 0);
  if (!q.v || !s.v || !p.v) return;
  size_t n;
  int32_t *ids;
  /* Qwen2: <|im_start|> parsed as one control token only with parse_special */
  const char *chat = "<|im_start|>user\nHi<|im_end|>";
  int32_t im_start = tok_find(q.v, "<|im_start|>", 12), im_end = tok_find(q.v, "<|im_end|>", 10);
  CHECK(im_start >= 0 && im_end >= 0);
  ids = encode(q.v, chat, strlen(chat), false, true, &n);
  CHECK(ids && n >= 3 && ids[0] == im_start && ids[n - 1] == im_end);
  free(ids);
  ids = encode(q.v, chat, strlen(chat), false, false, &n);
  CHECK(ids != NULL);
  for (size_t i = 0; ids && i < n; i++) CHECK(ids[i] != im_start && ids[i] != im_end);
  free(ids);
  CHECK(tok_is_eog(q.v, im_end));
  CHECK(tok_is_eog(q.v, tok_eos(q.v)));
  CHECK(!tok_is_eog(q.v, im_start));
  CHECK(!tok_is_eog(q.v, -5) && !tok_is_eog(q.v, tok_n_vocab(q.v)));
  CHECK_EQ_INT(tok_eot(q.v), im_end);
  CHECK(tok_is_control(q.v, im_start));
  CHECK_STR(tok_kind(q.v), "bpe");
  CHECK_STR(tok_pre(q.v), "qwen2");
  CHECK(!tok_add_bos(q.v));
  /* SPM: <s> with parse_special, text after a special gets the space prefix */
  ids = encode(s.v, "<s>Hello", 8, true, true, &n);
  int32_t hello = tok_find(s.v, "\xE2\x96\x81Hello", 8);
  CHECK(ids && n == 3 && ids[0] == 1 && ids[1] == 1 && ids[2] == hello);
  free(ids);
  ids = encode(s.v, "<s>", 3, false, false, &n);
  CHECK(ids && n > 1);
  free(ids);
  CHECK_STR(tok_kind(s.v), "spm");
  CHECK(tok_add_bos(s.v) && !tok_add_eos(s.v));
  CHECK_EQ_INT(tok_bos(s.v), 1);
  CHECK_EQ_INT(tok_eos(s.v), 2);
  CHECK(tok_is_eog(s.v, 2));
  char piece[64];
  CHECK_EQ_INT(tok_piece(s.v, hello, false, piece, sizeof piece), 6);
  CHECK(memcmp(piece, " Hello", 6) == 0);
  CHECK_EQ_INT(tok_piece(s.v, 1, false, piece, sizeof piece), 0);
  CHECK_EQ_INT(tok_piece(s.v, 1, true, piece, sizeof piece), 3);
  CHECK_EQ_INT(tok_piece(s.v, hello, false, piece, 3), PW_ERANGE);
  CHECK_EQ_INT(tok_piece(s.v, 99999, false, piece, sizeof piece), PW_EINVAL);
  CHECK_EQ_INT(tok_piece(s.v, tok_find(s.v, "<0x0A>", 6), false, piece, sizeof piece), 1);
  CHECK(piece[0] == '\n');
  /* Phi-3: <|end|> is end of generation and eats whitespace after it */
  int32_t end = tok_find(p.v, "<|end|>", 7);
  CHECK(end >= 0 && tok_is_eog(p.v, end));
  ids = encode(p.v, "a<|end|>  \n b", 13, false, true, &n);
  size_t n2;
  int32_t *ids2 = encode(p.v, "a<|end|>b", 9, false, true, &n2);
  CHECK(ids && ids2 && n == n2 && memcmp(ids, ids2, n * sizeof *ids) == 0);
  free(ids);
  free(ids2);
  unload(&q);
  unload(&s);
  unload(&p);
}

/* Builds a small GGUF in memory with the given tokenizer metadata. */
typedef struct gbuf {
  char *b;
  size_t n, cap;
} gbuf;
static void gput(gbuf *g, const void *p, size_t n) {
  if (g->n + n > g->cap) {
    g->cap = (g->n + n) * 2 + 256;
    g->b = realloc(g->b, g->cap);
  }
  memcpy(g->b + g->n, p, n);
  g->n += n;
}
static void gu32(gbuf *g, uint32_t x) { gput(g, &x, 4); }
static void gu64(gbuf *g, uint64_t x) { gput(g, &x, 8); }
static void gstr(gbuf *g, const char *s) {
  gu64(g, strlen(s));
  gput(g, s, strlen(s));
}
static void gkv_str(gbuf *g, const char *k, const char *v) {
  gstr(g, k);
  gu32(g, 8);
  gstr(g, v);
}
static void gkv_u32(gbuf *g, const char *k, uint32_t v) {
  gstr(g, k);
  gu32(g, 4);
  gu32(g, v);
}
static void gkv_strs(gbuf *g, const char *k, const char *const *v, uint64_t n) {
  gstr(g, k);
  gu32(g, 9);
  gu32(g, 8);
  gu64(g, n);
  for (uint64_t i = 0; i < n; i++) gstr(g, v[i]);
}
static void gkv_i32s(gbuf *g, const char *k, const int32_t *v, uint64_t n) {
  gstr(g, k);
  gu32(g, 9);
  gu32(g, 5);
  gu64(g, n);
  for (uint64_t i = 0; i < n; i++) gu32(g, (uint32_t)v[i]);
}

/* Expects loading to fail with status st and a message containing what. */
static void expect_bad(const char *pre, const char *const *toks, int ntok, const int32_t *types, int ntypes,
                       const char *const *merges, int nmerges, uint32_t eos, int st, const char *what) {
  gbuf g = {0};
  gu32(&g, 0x46554747);
  gu32(&g, 3);
  gu64(&g, 0);
  gu64(&g, 3 + (pre != NULL) + (types != NULL) + (eos != UINT32_MAX));
  gkv_str(&g, "tokenizer.ggml.model", "gpt2");
  if (pre) gkv_str(&g, "tokenizer.ggml.pre", pre);
  gkv_strs(&g, "tokenizer.ggml.tokens", toks, (uint64_t)ntok);
  if (types) gkv_i32s(&g, "tokenizer.ggml.token_type", types, (uint64_t)ntypes);
  gkv_strs(&g, "tokenizer.ggml.merges", merges, (uint64_t)nmerges);
  if (eos != UINT32_MAX) gkv_u32(&g, "tokenizer.ggml.eos_token_id", eos);
  gkv_str(&g, "general.name", "x");
  /* general.name makes the count one more */
  uint64_t nkv = 4 + (pre != NULL) + (types != NULL) + (eos != UINT32_MAX);
  memcpy(g.b + 16, &nkv, 8);
  while (g.n % 32) gput(&g, "", 1);
  char err[PW_ERRMAX] = "";
  gguf_file *f = NULL;
  tok_vocab *v = NULL;
  int rc = gguf_open_mem(g.b, g.n, &f, err);
  CHECK_MSG(rc == 0, "%s", err);
  if (rc == 0) {
    rc = tok_vocab_load(f, &v, err);
    if (st == 0) {
      CHECK_MSG(rc == 0 && v, "expected success: %s", err);
    } else {
      CHECK_MSG(rc == st && v == NULL, "expected %d got %d (%s)", st, rc, err);
      CHECK_MSG(strstr(err, what) != NULL, "message \"%s\" should mention \"%s\"", err, what);
    }
  }
  tok_vocab_destroy(v);
  gguf_close(f);
  free(g.b);
}

static void test_malformed(void) {
  static const char *const toks[] = {"a", "b", "ab", "<|endoftext|>"};
  static const int32_t types[] = {1, 1, 1, 3};
  static const char *const merges[] = {"a b"};
  static const char *const bad_merge[] = {"a c"};
  static const char *const no_space[] = {"ab"};
  static const char *const dup[] = {"a", "b", "a"};
  expect_bad("gpt-2", toks, 4, types, 4, merges, 1, 3, 0, "");
  expect_bad("no-such-pre", toks, 4, types, 4, merges, 1, 3, PW_EUNSUPPORTED, "no-such-pre");
  expect_bad("gpt-2", toks, 4, types, 3, merges, 1, 3, PW_EFORMAT, "token_type");
  expect_bad("gpt-2", toks, 4, types, 4, bad_merge, 1, 3, PW_EFORMAT, "unknown piece 'c'");
  expect_bad("gpt-2", toks, 4, types, 4, no_space, 1, 3, PW_EFORMAT, "no space");
  expect_bad("gpt-2", toks, 4, types, 4, merges, 1, 4, PW_EFORMAT, "eos_token_id = 4");
  expect_bad("gpt-2", dup, 3, NULL, 0, merges, 1, 0, PW_EFORMAT, "duplicate");
}

/* ---- (5) timing ----------------------------------------------------------------- */

static void test_timing(void) {
  /* ~100 KB of mixed text: prose, code, accents, CJK, emoji, numbers */
  static const char *const parts[] = {
      "The quick brown fox jumps over the lazy dog. ",
      "def tokenize(text: str) -> list[int]:\n    return [ord(c) for c in text]  # 42\n",
      "Caf\xC3\xA9 cr\xC3\xA8me br\xC3\xBBl\xC3\xA9" "e, na\xC3\xAFve fa\xC3\xA7" "ade. ",
      "\xE6\x9D\xB1\xE4\xBA\xAC\xE3\x81\xAF\xE6\x97\xA5\xE6\x9C\xAC\xE3\x81\xAE\xE9\xA6\x96\xE9\x83\xBD\xE3\x81\xA7\xE3\x81\x99\xE3\x80\x82 ",
      "Emoji \xF0\x9F\xA6\x99\xF0\x9F\x9A\x80\xE2\x9C\x85 and numbers 3.14159 2718281828 1,000,000. ",
      "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82, \xD0\xBC\xD0\xB8\xD1\x80!\n\n\t  indented\n",
  };
  size_t cap = 100 * 1024, len = 0;
  char *s = malloc(cap + 256);
  for (int i = 0; len < cap; i++) {
    const char *p = parts[i % 6];
    memcpy(s + len, p, strlen(p));
    len += strlen(p);
  }
  static const char *const v[] = {"llama-bpe", "qwen2", "llama-spm"};
  for (size_t i = 0; i < 3; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer/ggml-vocab-%s.gguf", POWER_SHARED_DIR, v[i]);
    loaded l;
    CHECK_MSG(load(path, &l) == 0, "%s", path);
    if (!l.v) continue;
    size_t n = 0;
    double best = 1e9;
    for (int r = 0; r < 3; r++) {
      double t0 = now_s();
      int32_t *ids = encode(l.v, s, len, false, false, &n);
      double dt = now_s() - t0;
      CHECK(ids != NULL);
      free(ids);
      if (dt < best) best = dt;
    }
    fprintf(stderr, "timing: %zu bytes of mixed text, %-10s %zu tokens in %.2f ms (best of 3)\n", len, v[i], n,
            best * 1e3);
    unload(&l);
  }
  free(s);
}

/* The hash tables' sizes: 2^30 merges need 2^31+1 slots, whose power of two
 * (2^32) once came back as 0 through a 32-bit return. */
static void test_table_sizes(void) {
  CHECK(tok_pow2_at_least(0, SIZE_MAX) == 16);
  CHECK(tok_pow2_at_least(17, SIZE_MAX) == 32);
  CHECK(tok_pow2_at_least(64, SIZE_MAX) == 64);
  CHECK(tok_pow2_at_least(((uint64_t)1 << 31) + 1, SIZE_MAX) == (size_t)1 << 32);
  CHECK(tok_pow2_at_least(((uint64_t)1 << 63) + 1, SIZE_MAX) == 0);
  CHECK(tok_pow2_at_least(UINT64_MAX, SIZE_MAX) == 0);
  CHECK(tok_pow2_at_least(((uint64_t)1 << 31) + 1, (size_t)1 << 31) == 0);
  CHECK(tok_pow2_at_least((uint64_t)1 << 31, (size_t)1 << 31) == (size_t)1 << 31);
}

int main(void) {
  test_table_sizes();
  test_conformance();
  test_bundle_conformance();
  test_parity();
  test_roundtrip();
  test_stream();
  test_specials();
  test_malformed();
  test_hostile_vocab(POWER_SHARED_DIR "/tokenizer/ggml-vocab-llama-spm.gguf");
  test_hostile_vocab(POWER_SHARED_DIR "/tokenizer/ggml-vocab-llama-bpe.gguf");
  test_hostile_vocab(POWER_SHARED_DIR "/tokenizer/ggml-vocab-qwen2.gguf");
  test_hostile_vocab(POWER_SHARED_DIR "/tokenizer/ggml-vocab-deepseek-llm.gguf");
  test_timing();
  TEST_DONE();
}
