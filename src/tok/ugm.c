/* ugm.c - the SentencePiece unigram tokenizer (tokenizer.ggml.model "t5":
 * T5, XLM-RoBERTa and the BERT-architecture models that use its vocabulary,
 * e.g. nomic-bert-moe, bge-m3), as llama.cpp's UGM:
 *  1. normalize: at each point the longest prefix the precompiled charsmap
 *     (a XOR-compressed compact double array, XCDA, over input bytes) maps
 *     is replaced by its string; otherwise a valid UTF-8 character passes
 *     and a malformed byte becomes U+FFFD. Spaces become U+2581; with
 *     remove_extra_whitespaces runs of spaces collapse and each word gets
 *     one leading U+2581, else add_space_prefix gives the first one;
 *  2. Viterbi over the normalized bytes: the best sum of piece scores
 *     (normal, unused and user-defined pieces; user-defined score 0), a
 *     character no piece covers is [UNK] at the lowest normal score - 10,
 *     and consecutive [UNK]s merge into one.
 * The charsmap is validated when the vocabulary loads (ugm_load); every
 * read of it is bounds-checked here too, so a hostile file cannot make a
 * read go out of it. Not here: the special-token partition (encode.c). */
#include "tok/tok_internal.h"

#include "base/error.h"
#include "tok/unicode.h"

#include <float.h>
#include <stdlib.h>
#include <string.h>

/* XCDA node i (0 when out of range: lcheck 0 never matches a non-NUL byte). */
static uint32_t xcda_node(const tok_vocab *v, size_t i) {
  if (i >= v->ugm_xcda_n) return 0;
  uint32_t x;
  memcpy(&x, v->ugm_xcda + 4 * i, 4); /* the mapping need not align it */
  return x;
}
static uint32_t xcda_base(uint32_t node) { return (node >> 10) << ((node & (1u << 9)) >> 6); }
static uint32_t xcda_lcheck(uint32_t node) { return node & ((1u << 31) | 0xff); }
static bool xcda_leaf(uint32_t node) { return (node >> 8) & 1; }
static uint32_t xcda_value(uint32_t node) { return node & ((1u << 31) - 1); }

/* The normalization of the input at s[0..len) (len >= 1): *out points to
 * the replacement (len *out_len) and the input bytes it consumes are
 * returned. */
static size_t norm_prefix(const tok_vocab *v, const char *s, size_t len, const char **out, size_t *out_len) {
  size_t best = 0, best_off = 0;
  if (v->ugm_xcda_n > 0) {
    size_t node = xcda_base(xcda_node(v, 0));
    for (size_t p = 0; p < len; p++) {
      const uint8_t c = (uint8_t)s[p];
      if (c == 0) break;
      node ^= c;
      const uint32_t nd = xcda_node(v, node);
      if (xcda_lcheck(nd) != c) break;
      const bool leaf = xcda_leaf(nd);
      node ^= xcda_base(nd);
      if (leaf) {
        best = p + 1;
        best_off = xcda_value(xcda_node(v, node));
      }
    }
  }
  if (best > 0 && best_off < v->ugm_repl_n) {
    const char *r = v->ugm_repl + best_off;
    const char *z = memchr(r, 0, v->ugm_repl_n - best_off);
    if (z) { /* (an unterminated replacement is treated as no match) */
      *out = r;
      *out_len = (size_t)(z - r);
      return best;
    }
  }
  size_t adv;
  uint32_t cp = tok_utf8_decode((const uint8_t *)s, len, &adv);
  if (cp == 0xFFFD && adv == 1) { /* malformed: one byte becomes U+FFFD */
    *out = "\xEF\xBF\xBD";
    *out_len = 3;
    return 1;
  }
  *out = s;
  *out_len = adv;
  return adv;
}

typedef struct ugm_buf {
  char *p;
  size_t n, cap;
} ugm_buf;

static int buf_put(ugm_buf *b, const char *s, size_t n) {
  if (b->n + n > b->cap) {
    size_t c = b->cap ? b->cap : 256;
    while (c < b->n + n) c *= 2;
    char *q = realloc(b->p, c);
    if (!q) return PW_ENOMEM;
    b->p = q;
    b->cap = c;
  }
  memcpy(b->p + b->n, s, n);
  b->n += n;
  return 0;
}

static int normalize(const tok_vocab *v, const char *text, size_t len, ugm_buf *out) {
  static const char k_space[3] = {'\xE2', '\x96', '\x81'};
  const bool merge = v->ugm_merge_ws, prepend = v->add_space_prefix;
  bool prepended = false, in_word = false;
  for (size_t off = 0; off < len;) {
    const char *r;
    size_t rl;
    off += norm_prefix(v, text + off, len - off, &r, &rl);
    for (size_t i = 0; i < rl; i++) {
      if (r[i] != ' ') {
        if (!in_word) {
          in_word = true;
          if ((prepend && !prepended) || merge) {
            if (buf_put(out, k_space, 3)) return PW_ENOMEM;
            prepended = true;
          }
        }
        if (buf_put(out, r + i, 1)) return PW_ENOMEM;
      } else {
        in_word = false;
        if (!merge && buf_put(out, k_space, 3)) return PW_ENOMEM;
      }
    }
  }
  return 0;
}

typedef struct ugm_best {
  int32_t id;
  size_t from; /* input offset where the piece starts */
  double score;
} ugm_best;

int tok_ugm_fragment(const tok_vocab *v, const char *text, size_t len, void (*put)(void *ctx, int32_t id),
                     void *ctx) {
  ugm_buf nb = {0};
  ugm_best *best = NULL;
  int32_t *rev = NULL;
  int rc = normalize(v, text, len, &nb);
  const size_t n = nb.n;
  if (rc || n == 0) goto done;
  best = malloc((n + 1) * sizeof *best);
  rev = malloc((n + 1) * sizeof *rev);
  if (!best || !rev) {
    rc = PW_ENOMEM;
    goto done;
  }
  for (size_t i = 0; i <= n; i++) best[i] = (ugm_best){v->unk, 0, -DBL_MAX};
  best[0].score = 0;
  const uint16_t pieces = TOK_ATTR_NORMAL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNUSED;
  for (size_t off = 0; off < n;) {
    size_t cl = tok_utf8_len((uint8_t)nb.p[off]);
    if (cl > n - off) cl = n - off;
    bool single = false;
    const double cur = best[off].score;
    const size_t lmax = n - off < v->max_len ? n - off : v->max_len;
    for (size_t l = 1; l <= lmax; l++) {
      int32_t id = tok_lookup(v, nb.p + off, l);
      if (id < 0 || !(v->attr[id] & pieces)) continue;
      if (l == cl) single = true;
      const double sc = cur + ((v->attr[id] & TOK_ATTR_USER_DEFINED) ? 0.0 : (double)v->score[id]);
      if (sc > best[off + l].score) best[off + l] = (ugm_best){id, off, sc};
    }
    if (!single) {
      const double sc = cur + v->ugm_unk_score;
      if (sc > best[off + cl].score) best[off + cl] = (ugm_best){v->unk, off, sc};
    }
    off += cl;
  }
  /* back from the end; runs of [UNK] become one */
  size_t k = 0;
  bool prev_unk = false;
  for (size_t at = n;;) {
    const ugm_best *b = &best[at];
    const bool unk = b->id == v->unk;
    if (!(prev_unk && unk)) rev[k++] = b->id;
    if (b->from == 0) break;
    prev_unk = unk;
    at = b->from;
  }
  while (k > 0) put(ctx, rev[--k]);
done:
  free(nb.p);
  free(best);
  free(rev);
  return rc;
}

int tok_ugm_load(const gguf_file *f, tok_vocab *v, char *err) {
  gguf_arr cm;
  v->ugm_xcda = NULL;
  v->ugm_xcda_n = 0;
  v->ugm_repl = NULL;
  v->ugm_repl_n = 0;
  if (gguf_get_arr(f, "tokenizer.ggml.precompiled_charsmap", &cm)) {
    if (cm.type != GGUF_T_UINT8 && cm.type != GGUF_T_INT8)
      return pw_seterr(err, PW_EFORMAT, "tokenizer: precompiled_charsmap is not an array of bytes");
    if (cm.n < 4) return pw_seterr(err, PW_EFORMAT, "tokenizer: precompiled_charsmap is too small");
    uint32_t blob;
    memcpy(&blob, cm.data, 4);
    if ((uint64_t)blob + 4 >= cm.n || blob % 4)
      return pw_seterr(err, PW_EFORMAT, "tokenizer: precompiled_charsmap's double array (%u bytes) does not fit in %llu",
                       blob, (unsigned long long)cm.n);
    v->ugm_xcda = cm.data + 4;
    v->ugm_xcda_n = blob / 4;
    v->ugm_repl = (const char *)cm.data + 4 + blob;
    v->ugm_repl_n = (size_t)(cm.n - 4 - blob);
  }
  float lo = FLT_MAX;
  for (int32_t i = 0; i < v->n; i++)
    if ((v->attr[i] & TOK_ATTR_NORMAL) && v->score[i] < lo) lo = v->score[i];
  v->ugm_unk_score = lo - 10.0f;
  if (v->unk < 0) return pw_seterr(err, PW_EFORMAT, "tokenizer: a unigram vocabulary needs a valid unknown token id");
  return 0;
}
