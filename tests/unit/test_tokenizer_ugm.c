/* test_tokenizer_ugm.c - tokenizers the bundle has no conformance vectors
 * for, against llama.cpp's own tokenization.
 *
 * The unigram tokenizer (tokenizer.ggml.model "t5"), on llama.cpp's nomic-bert-moe
 * vocabulary (XLM-RoBERTa's 250k pieces with a precompiled charsmap; the
 * bundle has no conformance vectors for it). The texts are llama.cpp's
 * tokenizer test strings (the bert-bge .inp file) plus cases of the
 * normalizer: runs of spaces, full-width and compatibility characters the
 * charsmap maps, control characters and a long text (valid UTF-8: the peer
 * takes JavaScript strings; invalid bytes are checked on Power alone). Each
 * goes through tests/peer/llamacpp-tokenize.mjs (node-llama-cpp's prebuilt
 * release) and Power's tok_encode (no special tokens added or parsed); the
 * ids must be equal. Then the special tokens added around a text. And the
 * tekken pre-tokenizer (Mistral) the same way, on the same texts and cased
 * words, with the Llama 3 vocabulary renamed to it (test_tekken).
 *
 * The GPT-4o (o200k) pre-tokenizer: Llama 3's byte-level BPE vocabulary
 * (the bundle ships no o200k one) relabelled tokenizer.ggml.pre = "gpt-4o",
 * so llama.cpp splits with its GPT4O expression and both sides merge with
 * the same pieces; the texts are llama-bpe's test strings and cases of the
 * expression's case-aware word split, numbers, punctuation runs with
 * slashes and newlines, and non-ASCII letters, marks and spaces.
 *
 * Needs `node` and the peer's node_modules; fails saying so when missing. */
#include "test.h"

#include "base/error.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "tok/tok.h"

#include <jansson.h>
#include <libgen.h>
#include <string.h>
#include <unistd.h>

#define VOCAB POWER_PEER_ASSETS "/ggml-vocab-nomic-bert-moe.gguf"
#define TEXTS POWER_PEER_ASSETS "/ggml-vocab-bert-bge.gguf.inp"

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

static const char *const k_extra[] = {
    "Hello world",
    "   many    spaces   between   words   ",
    "\xEF\xBC\xA8\xEF\xBD\x85\xEF\xBD\x8C\xEF\xBD\x8C\xEF\xBD\x8F full-width, \xE2\x84\x96 1, \xEF\xAC\x81 ligature",
    "caf\xC3\xA9 vs cafe\xCC\x81 (composed and decomposed)",
    "ctrl\x01\x02 chars\x7f and\ttabs\r\nlines",
    "\xE6\x9D\xB1\xE4\xBA\xAC\xE3\x81\xAF\xE6\x97\xA5\xE6\x9C\xAC\xE3\x81\xAE\xE9\xA6\x96\xE9\x83\xBD\xE3\x81\xA7\xE3\x81\x99\xE3\x80\x82",
    "\xD0\x9F\xD1\x80\xD0\xB8\xD0\xB2\xD0\xB5\xD1\x82, \xD0\xBC\xD0\xB8\xD1\x80! \xF0\x9F\xA6\x99\xF0\x9F\x98\x80",
    "<s> not special here </s> <unk> <mask>",
    "",
};

/* Tokenizes each of texts with llama.cpp (through the peer script, on the
 * vocabulary file vocab_path) and with v; counts the texts whose ids are
 * equal. */
static void compare_peer(const char *peer, const char *vocab_path, const tok_vocab *v, json_t *texts, int *pass_out,
                         int *total_out) {
  char err[PW_ERRMAX];
  char tin[] = "/tmp/power-ugm-XXXXXX";
  int fd = mkstemp(tin);
  CHECK(fd >= 0);
  char *dump = json_dumps(texts, JSON_COMPACT);
  if (fd >= 0 && dump) CHECK((size_t)write(fd, dump, strlen(dump)) == strlen(dump));
  if (fd >= 0) close(fd);
  free(dump);
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "node '%s/llamacpp-tokenize.mjs' '%s' < '%s' 2>/dev/null", peer, vocab_path, tin);
  FILE *p = popen(cmd, "r");
  json_error_t je;
  json_t *j = p ? json_loadf(p, 0, &je) : NULL;
  if (p) pclose(p);
  unlink(tin);
  json_t *ref = j ? json_object_get(j, "tokens") : NULL;
  CHECK_MSG(ref && json_array_size(ref) == json_array_size(texts), "llama.cpp did not tokenize (%s)", cmd);
  int pass = 0, total = 0;
  for (size_t i = 0; ref && i < json_array_size(ref) && i < json_array_size(texts); i++) {
    json_t *t = json_array_get(texts, i), *want = json_array_get(ref, i);
    size_t n = 0, nw = json_array_size(want);
    int32_t *got = malloc((json_string_length(t) * 2 + 8) * sizeof *got);
    int rc = tok_encode(v, json_string_value(t), json_string_length(t), false, false, got,
                        json_string_length(t) * 2 + 8, &n, err);
    bool ok = rc == 0 && n == nw;
    for (size_t k = 0; ok && k < n; k++) ok = got[k] == json_integer_value(json_array_get(want, k));
    total++;
    pass += ok;
    if (!ok) {
      fprintf(stderr, "  mismatch on \"%.80s\" (%zu bytes): llama.cpp %zu tokens, Power %zu (rc %d)\n",
              json_string_value(t), json_string_length(t), nw, n, rc);
      for (size_t k = 0; k < n && k < nw; k++)
        if (got[k] != json_integer_value(json_array_get(want, k))) {
          fprintf(stderr, "    first difference at %zu: %lld vs %d\n", k,
                  (long long)json_integer_value(json_array_get(want, k)), got[k]);
          break;
        }
    }
    free(got);
  }
  *pass_out = pass;
  *total_out = total;
  json_decref(j);
}

static const char *const k_gpt4o_extra[] = {
    "HelloWorld JSONParser iPhone McDonald's XMLHttpRequest getHTTPResponseCode",
    "DON'T I'M WE'LL they'RE You'Ve it's O'Neil 'quoted' '",
    "ABC abc Abc aBC ABCdef ABC123def A1b2C3",
    "1 12 123 1234 12345 1234567 3.14159 1,000,000 \xd9\xa3\xd9\xa4\xd9\xa5\xd9\xa6",
    "path/to/file.txt //comment\n/* block */\n!!!\n\n??? ...///\r\n",
    "  leading\tand\t\ttabs \n\n  \n trailing   ",
    "\xc3\x80\xc3\x89\xc3\x8e\xc3\xb5\xc3\xbc \xc3\x9c" "ber \xc3\xa9t\xc3\xa9 \xc3\x89T\xc3\x89 na\xc3\xafve caf\xc3\xa9s Stra\xc3\x9f" "e",
    "e\xcc\x81 A\xcc\x8a" "B x\xcc\xa3\xcc\x87y \xe0\xa4\xb9\xe0\xa4\xbf\xe0\xa4\xa8\xe0\xa5\x8d\xe0\xa4\xa6\xe0\xa5\x80",
    "\xe2\x80\x83" "em\xe2\x80\x83space\xc2\xa0nbsp \xe3\x80\x80ideographic",
    "\xf0\x9f\x98\x80\xf0\x9f\xa6\x99 emoji\xf0\x9f\x98\x80word \xe2\x82\xac" "5 $5 \xc2\xa9 2024",
    "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82 \xd0\x9c\xd0\x98\xd0\xa0 \xce\x9a\xce\xb1\xce\xbb\xce\xb7\xce\xbc\xce\xad\xcf\x81\xce\xb1 \xe6\x9d\xb1\xe4\xba\xac\xe3\x81\xaf",
    "<|start|>user<|message|>hi<|end|> not special here",
    "x=1;y=2\n\tif(x<y){return -x;}\r\n",
    "",
};

/* The GPT-4o pre-tokenizer on Llama 3's vocabulary relabelled (see the
 * top of the file). */
static void gpt4o(const char *peer) {
  char err[PW_ERRMAX], path[] = "/tmp/power-gpt4o-XXXXXX";
  gguf_file *src = NULL, *g = NULL;
  tok_vocab *v = NULL;
  gguf_writer *w = gguf_writer_create();
  const char *vocab = POWER_SHARED_DIR "/tokenizer/ggml-vocab-llama-bpe.gguf";
  const char *texts_path = POWER_SHARED_DIR "/tokenizer/ggml-vocab-llama-bpe.gguf.inp";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  if (fd >= 0) close(fd);
  CHECK_MSG(gguf_open(vocab, &src, err) == 0, "%s: %s", vocab, err);
  CHECK(w != NULL);
  if (!src || !w || fd < 0) goto done;
  CHECK_MSG(gguf_writer_copy_kvs_prefix(w, src, "", err) >= 0 &&
                gguf_writer_set_str(w, "tokenizer.ggml.pre", "gpt-4o", err) == 0 &&
                gguf_writer_write(w, path, NULL, NULL, err) == 0,
            "writing %s: %s", path, err);
  CHECK_MSG(gguf_open(path, &g, err) == 0 && tok_vocab_load(g, &v, err) == 0, "gpt-4o vocabulary: %s", err);
  if (!v) goto done;
  size_t tlen = 0;
  char *inp = read_all(texts_path, &tlen);
  CHECK_MSG(inp != NULL, "missing %s", texts_path);
  json_t *texts = json_array();
  const char *sep = "\n__ggml_vocab_test__\n";
  for (char *p = inp, *e; inp && (e = strstr(p, sep)) != NULL; p = e + strlen(sep))
    json_array_append_new(texts, json_stringn_nocheck(p, (size_t)(e - p)));
  for (size_t i = 0; i < sizeof k_gpt4o_extra / sizeof k_gpt4o_extra[0]; i++)
    json_array_append_new(texts, json_stringn_nocheck(k_gpt4o_extra[i], strlen(k_gpt4o_extra[i])));
  int pass = 0, total = 0;
  compare_peer(peer, path, v, texts, &pass, &total);
  fprintf(stderr, "gpt-4o pre-tokenizer against llama.cpp: %d/%d texts tokenize the same\n", pass, total);
  CHECK_MSG(pass == total && total >= 40, "%d of %d texts", pass, total);
  json_decref(texts);
  free(inp);
done:
  tok_vocab_destroy(v);
  gguf_close(g);
  gguf_close(src);
  gguf_writer_destroy(w);
  unlink(path);
}

/* Tekken (Mistral's tokenizer.ggml.pre): llama.cpp's bundle has no such
 * vocabulary, so the Llama 3 BPE vocabulary is written again with its
 * pre-tokenizer named tekken, and both engines tokenize the texts with
 * it: the split (cased words, single digits, punctuation runs with
 * trailing newlines and slashes) is what differs. */
static void test_tekken(const char *peer, json_t *texts) {
  char err[PW_ERRMAX], path[64];
  snprintf(path, sizeof path, "/tmp/power-tekken-%d.gguf", (int)getpid());
  gguf_file *src = NULL, *g = NULL;
  gguf_writer *w = gguf_writer_create();
  tok_vocab *v = NULL;
  CHECK_MSG(gguf_open(POWER_SHARED_DIR "/tokenizer/ggml-vocab-llama-bpe.gguf", &src, err) == 0, "%s", err);
  if (src && w) {
    CHECK(gguf_writer_copy_kvs_prefix(w, src, "", err) > 0);
    gguf_writer_remove_kv(w, "tokenizer.ggml.pre");
    CHECK(gguf_writer_set_str(w, "tokenizer.ggml.pre", "tekken", err) == 0);
    CHECK_MSG(gguf_writer_write(w, path, NULL, NULL, err) == 0, "%s", err);
  }
  CHECK_MSG(gguf_open(path, &g, err) == 0, "%s", err);
  if (g) CHECK_MSG(tok_vocab_load(g, &v, err) == 0, "tekken: %s", err);
  static const char *const k_cased[] = {
      "HELLOworld HelloWorld helloWORLD ABC abc A b",
      "McDonald's iPhone XMLHttpRequest getHTTPResponse",
      "\xC3\x89t\xC3\xA9 \xC3\x89" "COLE \xC3\xA9" "cole caf\xC3\xA9S",
      "path/to/file.txt // comment\n/* x */\r\n",
      "12345 3.14159 1,000,000 v2.0.1",
      "  \t indented\n\n\nthree newlines   \n  ",
      "!!!\n\n...///\nend",
      "x=\"y\"; f(a, b) -> c != d",
  };
  json_t *all = json_deep_copy(texts);
  for (size_t i = 0; i < sizeof k_cased / sizeof k_cased[0]; i++)
    json_array_append_new(all, json_stringn_nocheck(k_cased[i], strlen(k_cased[i])));
  int pass = 0, total = 0;
  if (v) compare_peer(peer, path, v, all, &pass, &total);
  fprintf(stderr, "tekken (BPE) against llama.cpp: %d/%d texts tokenize the same\n", pass, total);
  CHECK_MSG(pass == total && total >= 50, "tekken: %d of %d texts", pass, total);
  json_decref(all);
  tok_vocab_destroy(v);
  gguf_close(g);
  gguf_close(src);
  gguf_writer_destroy(w);
  unlink(path);
}

int main(void) {
  char self[1024], peer[1100];
  snprintf(self, sizeof self, "%s", __FILE__);
  snprintf(peer, sizeof peer, "%s/../peer", dirname(self));
  if (system("command -v node >/dev/null 2>&1") != 0) {
    fprintf(stderr, "FAIL: `node` is not installed; the llama.cpp peer check needs Node.js >= 20\n");
    return 1;
  }
  char err[PW_ERRMAX];
  gguf_file *g = NULL;
  tok_vocab *v = NULL;
  CHECK_MSG(gguf_open(VOCAB, &g, err) == 0, "%s: %s (the peer_assets fixture extracts it)", VOCAB, err);
  if (g) CHECK_MSG(tok_vocab_load(g, &v, err) == 0, "load: %s", err);
  size_t tlen = 0;
  char *inp = read_all(TEXTS, &tlen);
  CHECK_MSG(inp != NULL, "missing %s", TEXTS);
  if (!v || !inp) {
    free(inp);
    tok_vocab_destroy(v);
    gguf_close(g);
    TEST_DONE();
  }
  CHECK(strcmp(tok_kind(v), "ugm") == 0);
  /* the texts: llama.cpp's test strings, the extras, a long mixed text */
  json_t *texts = json_array();
  const char *sep = "\n__ggml_vocab_test__\n";
  for (char *p = inp, *e; (e = strstr(p, sep)) != NULL; p = e + strlen(sep))
    json_array_append_new(texts, json_stringn_nocheck(p, (size_t)(e - p)));
  for (size_t i = 0; i < sizeof k_extra / sizeof k_extra[0]; i++)
    json_array_append_new(texts, json_stringn_nocheck(k_extra[i], strlen(k_extra[i])));
  {
    size_t n = 0;
    char *big = malloc(20000);
    for (int r = 0; n + 300 < 20000; r++)
      for (size_t i = 0; i < sizeof k_extra / sizeof k_extra[0] && n + 200 < 20000; i++) {
        size_t l = strlen(k_extra[i]);
        memcpy(big + n, k_extra[i], l);
        n += l;
        big[n++] = (char)(r % 3 ? ' ' : '\n');
      }
    json_array_append_new(texts, json_stringn_nocheck(big, n));
    free(big);
  }
  int pass = 0, total = 0;
  compare_peer(peer, VOCAB, v, texts, &pass, &total);
  fprintf(stderr, "nomic-bert-moe (unigram) against llama.cpp: %d/%d texts tokenize the same\n", pass, total);
  CHECK_MSG(pass == total && total >= 50, "%d of %d texts", pass, total);
  /* invalid UTF-8: each bad byte is U+FFFD, which no piece covers: one
   * <unk> per run, never a crash */
  {
    static const char bad[] = "ok \xFF\xFE\xC3 fine \x80";
    int32_t out[64];
    size_t nb = 0;
    CHECK(tok_encode(v, bad, sizeof bad - 1, false, false, out, 64, &nb, err) == 0 && nb >= 3);
    int unk = 0;
    for (size_t k = 0; k < nb; k++) unk += out[k] == tok_unk(v);
    CHECK(unk >= 1);
  }
  /* add_special: <s> ... </s> as the vocabulary's flags say */
  int32_t ids[64];
  size_t n = 0;
  CHECK(tok_encode(v, "Hello world", 11, true, false, ids, 64, &n, err) == 0);
  CHECK(n == 4 && ids[0] == tok_bos(v) && ids[3] == tok_eos(v));
  CHECK(tok_encode(v, "<s>", 3, false, true, ids, 64, &n, err) == 0 && n == 1 && ids[0] == tok_bos(v));
  test_tekken(peer, texts);
  json_decref(texts);
  free(inp);
  tok_vocab_destroy(v);
  gguf_close(g);
  gpt4o(peer);
  TEST_DONE();
}
