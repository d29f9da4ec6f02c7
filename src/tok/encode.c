/* encode.c - text -> token ids, as llama.cpp's llama_tokenize:
 *  1. special-token partition: texts of control/user-defined/unknown tokens
 *     (longest first) split the input into text and token fragments;
 *  2. SentencePiece: per text fragment, spaces become U+2581 (plus a leading
 *     one after a special token or at the start), then the highest-scoring
 *     adjacent pair that forms a token is merged until none does (a bigram
 *     heap); leftovers fall back to <0xNN> byte tokens;
 *  3. byte-level BPE: per text fragment, the pre-tokenizer splits words;
 *     each word's bytes merge lowest-rank pair first (a bigram heap over a
 *     linked list of symbols);
 *  4. WordPiece (wpm.c): per text fragment, BERT's normalizer and greedy
 *     longest-match pieces;
 *  5. unigram (ugm.c): per text fragment, the charsmap normalizer and the
 *     best-scoring segmentation.
 * All scratch is allocated per call, so concurrent calls share nothing
 * mutable. Not here: vocabulary loading (vocab.c), pre-tokenizer rules
 * (pretok.c). */
#include "tok/tok_internal.h"

#include "base/error.h"
#include "tok/unicode.h"

#include <stdlib.h>
#include <string.h>

typedef struct sink {
  int32_t *out;
  size_t cap;
  size_t n; /* ids produced (may exceed cap) */
} sink;

static void put(sink *s, int32_t id) {
  if (s->n < s->cap) s->out[s->n] = id;
  s->n++;
}

static void put_cb(void *ctx, int32_t id) { put(ctx, id); }

/* Grows *p to hold at least n elements of size sz. */
static int grow(void **p, size_t *cap, size_t n, size_t sz) {
  if (n <= *cap) return 0;
  size_t c = *cap ? *cap : 64;
  while (c < n) c *= 2;
  void *q = realloc(*p, c * sz);
  if (!q) return PW_ENOMEM;
  *p = q;
  *cap = c;
  return 0;
}

/* ---- special-token partition ----------------------------------------------- */

typedef struct frag {
  int32_t tok; /* token id, or -1 for text */
  size_t off, len;
} frag;

typedef struct frag_list {
  frag *a;
  size_t n, cap;
} frag_list;

static int frag_push(frag_list *l, int32_t tok, size_t off, size_t len) {
  if (grow((void **)&l->a, &l->cap, l->n + 1, sizeof *l->a)) return PW_ENOMEM;
  l->a[l->n++] = (frag){tok, off, len};
  return 0;
}

static bool c_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* Whether [pos, pos + n) overlaps one of the sorted, disjoint spans. */
static bool in_plain(const tok_range *sp, size_t n_sp, size_t pos, size_t n) {
  size_t lo = 0, hi = n_sp;
  while (lo < hi) { /* first span ending after pos */
    size_t mid = lo + (hi - lo) / 2;
    if (sp[mid].off + sp[mid].len <= pos)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < n_sp && sp[lo].off < pos + n;
}

/* Splits text into special-token matches and text fragments. Control and
 * unknown tokens match only with parse_special, and never where the match
 * overlaps one of the plain spans. */
static int partition(const tok_vocab *v, const char *text, size_t len, bool parse_special, const tok_range *plain,
                     size_t n_plain, frag_list *fl) {
  frag_list other = {0};
  int rc = 0;
  fl->n = 0;
  if (len == 0) return 0;
  if ((rc = frag_push(fl, -1, 0, len))) return rc;
  /* Which byte pairs occur at all: most special tokens are ruled out
   * without scanning the text. */
  uint64_t *pairs = calloc(65536 / 64, sizeof *pairs);
  uint64_t bytes[4] = {0};
  if (!pairs) return PW_ENOMEM;
  for (size_t i = 0; i < len; i++) {
    uint8_t b = (uint8_t)text[i];
    bytes[b >> 6] |= 1ull << (b & 63);
    if (i + 1 < len) {
      unsigned pr = (unsigned)b << 8 | (uint8_t)text[i + 1];
      pairs[pr >> 6] |= 1ull << (pr & 63);
    }
  }
  for (uint32_t k = 0; k < v->n_specials; k++) {
    int32_t id = v->specials[k];
    uint16_t attr = v->attr[id];
    bool gated = attr & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN);
    if (!parse_special && gated) continue;
    const char *t = v->text[id].ptr;
    size_t tl = v->text[id].len;
    if (tl > len) continue;
    bool possible = true;
    if (tl == 1) {
      uint8_t b = (uint8_t)t[0];
      possible = (bytes[b >> 6] >> (b & 63)) & 1;
    }
    for (size_t i = 0; possible && i + 1 < tl; i++) {
      unsigned pr = (unsigned)(uint8_t)t[i] << 8 | (uint8_t)t[i + 1];
      possible = (pairs[pr >> 6] >> (pr & 63)) & 1;
    }
    if (!possible) continue;
    other.n = 0;
    for (size_t f = 0; f < fl->n; f++) {
      frag fr = fl->a[f];
      if (fr.tok >= 0) {
        if ((rc = frag_push(&other, fr.tok, fr.off, fr.len))) goto out;
        continue;
      }
      size_t off = fr.off, flen = fr.len, from = off;
      while (flen > 0) {
        const char *m = memmem(text + from, off + flen - from, t, tl);
        if (m && gated && n_plain && in_plain(plain, n_plain, (size_t)(m - text), tl)) {
          from = (size_t)(m - text) + 1; /* plain text here: look further */
          continue;
        }
        if (!m) {
          if ((rc = frag_push(&other, -1, off, flen))) goto out;
          break;
        }
        size_t mpos = (size_t)(m - text);
        size_t left = mpos - off;
        if (attr & TOK_ATTR_LSTRIP)
          while (left > 0 && c_space(text[off + left - 1])) left--;
        if (left > 0 && (rc = frag_push(&other, -1, off, left))) goto out;
        if ((rc = frag_push(&other, id, mpos, tl))) goto out;
        size_t roff = mpos + tl, rlen = off + flen - roff;
        if (attr & TOK_ATTR_RSTRIP)
          while (rlen > 0 && c_space(text[roff])) {
            roff++;
            rlen--;
          }
        off = from = roff;
        flen = rlen;
      }
    }
    frag_list t2 = *fl;
    *fl = other;
    other = t2;
  }
out:
  free(other.a);
  free(pairs);
  return rc;
}

/* ---- SentencePiece ----------------------------------------------------------- */

typedef struct spm_sym {
  int32_t prev, next;
  uint32_t start, n; /* bytes of buf; n = 0 once merged away */
} spm_sym;

typedef struct spm_bigram {
  float score;
  int32_t left, right;
  uint32_t size;
} spm_bigram;

typedef struct spm_scratch {
  char *buf;
  size_t buf_cap;
  spm_sym *sym;
  size_t sym_cap;
  spm_bigram *heap;
  size_t heap_cap;
} spm_scratch;

/* a pops before b: higher score, then leftmost */
static bool spm_before(const spm_bigram *a, const spm_bigram *b) {
  return a->score > b->score || (a->score == b->score && a->left < b->left);
}

static void spm_heap_push(spm_bigram *h, size_t *n, spm_bigram x) {
  size_t i = (*n)++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!spm_before(&x, &h[p])) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = x;
}

static spm_bigram spm_heap_pop(spm_bigram *h, size_t *n) {
  spm_bigram top = h[0], x = h[--*n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && spm_before(&h[c + 1], &h[c])) c++;
    if (!spm_before(&h[c], &x)) break;
    h[i] = h[c];
    i = c;
  }
  if (*n) h[i] = x;
  return top;
}

static void spm_try_bigram(const tok_vocab *v, spm_scratch *s, size_t *nh, int32_t l, int32_t r) {
  if (l < 0 || r < 0) return;
  uint32_t size = s->sym[l].n + s->sym[r].n;
  int32_t id = tok_lookup(v, s->buf + s->sym[l].start, size);
  if (id < 0) return;
  spm_heap_push(s->heap, nh, (spm_bigram){v->score[id], l, r, size});
}

static int spm_fragment(const tok_vocab *v, const char *text, size_t len, bool prefix, spm_scratch *s, sink *out,
                        char *err) {
  /* escape: ' ' -> U+2581, with an optional leading one */
  if (grow((void **)&s->buf, &s->buf_cap, 3 * len + 3, 1)) return PW_ENOMEM;
  size_t bl = 0;
  if (prefix) {
    memcpy(s->buf, "\xE2\x96\x81", 3);
    bl = 3;
  }
  for (size_t i = 0; i < len; i++) {
    if (text[i] == ' ') {
      memcpy(s->buf + bl, "\xE2\x96\x81", 3);
      bl += 3;
    } else {
      s->buf[bl++] = text[i];
    }
  }
  if (bl == 0) return 0;
  /* one symbol per UTF-8 character (by lead byte, as llama.cpp) */
  if (grow((void **)&s->sym, &s->sym_cap, bl, sizeof *s->sym)) return PW_ENOMEM;
  int32_t ns = 0;
  for (size_t off = 0; off < bl;) {
    size_t l = tok_utf8_len((uint8_t)s->buf[off]);
    if (l > bl - off) l = bl - off;
    s->sym[ns] = (spm_sym){ns - 1, off + l == bl ? -1 : ns + 1, (uint32_t)off, (uint32_t)l};
    off += l;
    ns++;
  }
  if (grow((void **)&s->heap, &s->heap_cap, 3 * (size_t)ns + 1, sizeof *s->heap)) return PW_ENOMEM;
  size_t nh = 0;
  for (int32_t i = 1; i < ns; i++) spm_try_bigram(v, s, &nh, i - 1, i);
  while (nh > 0) {
    spm_bigram b = spm_heap_pop(s->heap, &nh);
    spm_sym *L = &s->sym[b.left], *R = &s->sym[b.right];
    if (L->n == 0 || R->n == 0 || L->n + R->n != b.size) continue; /* stale */
    L->n += R->n;
    R->n = 0;
    L->next = R->next;
    if (R->next >= 0) s->sym[R->next].prev = b.left;
    spm_try_bigram(v, s, &nh, L->prev, b.left);
    spm_try_bigram(v, s, &nh, b.left, L->next);
  }
  for (int32_t i = 0; i != -1; i = s->sym[i].next) {
    const spm_sym *y = &s->sym[i];
    int32_t id = tok_lookup(v, s->buf + y->start, y->n);
    if (id >= 0) {
      put(out, id);
      continue;
    }
    for (uint32_t j = 0; j < y->n; j++) {
      uint8_t byte = (uint8_t)s->buf[y->start + j];
      int32_t bt = v->byte_tok[byte] >= 0 ? v->byte_tok[byte] : v->unk;
      if (bt < 0) return pw_seterr(err, PW_EFORMAT, "tokenizer: no token for byte 0x%02X and no unknown token", byte);
      put(out, bt);
    }
  }
  return 0;
}

/* ---- byte-level BPE ------------------------------------------------------------ */

typedef struct bpe_sym {
  int32_t prev, next;
  int32_t id;        /* token of the symbol's text, -1 if none */
  uint32_t start, n; /* bytes of the word; n = 0 once merged away */
} bpe_sym;

typedef struct bpe_bigram {
  int32_t rank, left, right;
  int32_t idl, idr, res;
} bpe_bigram;

typedef struct bpe_scratch {
  uint32_t *cp;
  uint8_t *fl;
  uint32_t *seg, *tmp;
  size_t cp_cap;
  uint8_t *word; /* UTF-8 of one pre-token */
  size_t word_cap;
  char *enc; /* byte-level encoding of one pre-token */
  size_t enc_cap;
  bpe_sym *sym;
  size_t sym_cap;
  bpe_bigram *heap;
  size_t heap_cap;
} bpe_scratch;

/* a pops before b: lower rank, then leftmost */
static bool bpe_before(const bpe_bigram *a, const bpe_bigram *b) {
  return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

static void bpe_heap_push(bpe_bigram *h, size_t *n, bpe_bigram x) {
  size_t i = (*n)++;
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (!bpe_before(&x, &h[p])) break;
    h[i] = h[p];
    i = p;
  }
  h[i] = x;
}

static bpe_bigram bpe_heap_pop(bpe_bigram *h, size_t *n) {
  bpe_bigram top = h[0], x = h[--*n];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= *n) break;
    if (c + 1 < *n && bpe_before(&h[c + 1], &h[c])) c++;
    if (!bpe_before(&h[c], &x)) break;
    h[i] = h[c];
    i = c;
  }
  if (*n) h[i] = x;
  return top;
}

static void bpe_try_bigram(const tok_vocab *v, bpe_scratch *s, size_t *nh, int32_t l, int32_t r) {
  if (l < 0 || r < 0) return;
  int32_t a = s->sym[l].id, b = s->sym[r].id, res;
  if (a < 0 || b < 0) return;
  int32_t rank = tok_merge_lookup(v, a, b, &res);
  if (rank < 0) return;
  bpe_heap_push(s->heap, nh, (bpe_bigram){rank, l, r, a, b, res});
}

/* Byte-level encoding of bytes w[0..n) into s->enc; returns its length. */
static size_t bpe_encode_bytes(bpe_scratch *s, const uint8_t *w, size_t n) {
  size_t e = 0;
  for (size_t i = 0; i < n; i++) e += tok_utf8_encode(tok_byte_to_cp(w[i]), (uint8_t *)s->enc + e);
  return e;
}

static int bpe_word(const tok_vocab *v, bpe_scratch *s, const uint8_t *w, size_t n, sink *out) {
  if (grow((void **)&s->enc, &s->enc_cap, 2 * n, 1)) return PW_ENOMEM;
  if (v->ignore_merges) {
    size_t e = bpe_encode_bytes(s, w, n);
    int32_t id = tok_lookup(v, s->enc, e);
    if (id >= 0) {
      put(out, id);
      return 0;
    }
  }
  if (grow((void **)&s->sym, &s->sym_cap, n, sizeof *s->sym)) return PW_ENOMEM;
  if (grow((void **)&s->heap, &s->heap_cap, 3 * n + 1, sizeof *s->heap)) return PW_ENOMEM;
  int32_t ns = (int32_t)n;
  for (int32_t i = 0; i < ns; i++)
    s->sym[i] = (bpe_sym){i - 1, i + 1 == ns ? -1 : i + 1, v->byte_tok[w[i]], (uint32_t)i, 1};
  size_t nh = 0;
  for (int32_t i = 1; i < ns; i++) bpe_try_bigram(v, s, &nh, i - 1, i);
  while (nh > 0) {
    bpe_bigram b = bpe_heap_pop(s->heap, &nh);
    bpe_sym *L = &s->sym[b.left], *R = &s->sym[b.right];
    /* stale: a side was merged away or has become a different text */
    if (L->n == 0 || R->n == 0 || L->id != b.idl || R->id != b.idr) continue;
    L->n += R->n;
    L->id = b.res;
    R->n = 0;
    L->next = R->next;
    if (R->next >= 0) s->sym[R->next].prev = b.left;
    bpe_try_bigram(v, s, &nh, L->prev, b.left);
    bpe_try_bigram(v, s, &nh, b.left, L->next);
  }
  for (int32_t i = 0; i != -1; i = s->sym[i].next) {
    const bpe_sym *y = &s->sym[i];
    if (y->id >= 0) {
      put(out, y->id);
      continue;
    }
    /* Not a token: llama.cpp looks up each byte of the encoded text on its
     * own and keeps those that are tokens. */
    size_t e = bpe_encode_bytes(s, w + y->start, y->n);
    for (size_t j = 0; j < e; j++) {
      int32_t id = tok_lookup(v, s->enc + j, 1);
      if (id >= 0) put(out, id);
    }
  }
  return 0;
}

static int bpe_fragment(const tok_vocab *v, const char *text, size_t len, bpe_scratch *s, sink *out) {
  if (grow((void **)&s->cp, &s->cp_cap, len, sizeof *s->cp)) return PW_ENOMEM;
  /* the other per-code-point arrays share cp_cap */
  uint8_t *fl = realloc(s->fl, s->cp_cap);
  if (!fl) return PW_ENOMEM;
  s->fl = fl;
  uint32_t *seg = realloc(s->seg, s->cp_cap * sizeof *seg);
  if (!seg) return PW_ENOMEM;
  s->seg = seg;
  uint32_t *tmp = realloc(s->tmp, s->cp_cap * sizeof *tmp);
  if (!tmp) return PW_ENOMEM;
  s->tmp = tmp;
  size_t n = 0;
  for (size_t i = 0; i < len;) {
    size_t adv;
    uint32_t c = tok_utf8_decode((const uint8_t *)text + i, len - i, &adv);
    i += adv;
    s->fl[n] = tok_uflags(c);
    s->cp[n++] = c;
  }
  size_t nseg = tok_pretok_split(v->pre, s->cp, s->fl, n, s->seg, s->tmp);
  size_t start = 0;
  for (size_t k = 0; k < nseg; k++) {
    size_t cl = s->seg[k];
    if (grow((void **)&s->word, &s->word_cap, 4 * cl, 1)) return PW_ENOMEM;
    size_t wl = 0;
    for (size_t j = start; j < start + cl; j++) wl += tok_utf8_encode(s->cp[j], s->word + wl);
    start += cl;
    int rc = bpe_word(v, s, s->word, wl, out);
    if (rc) return rc;
  }
  return 0;
}

int tok_control_spans(const tok_vocab *v, const char *text, size_t len, tok_range *out, size_t cap, size_t *n_out,
                      char *err) {
  frag_list fl = {0};
  *n_out = 0;
  if (len > (1u << 30)) return pw_seterr(err, PW_ELIMIT, "tokenize: input of %zu bytes exceeds 1 GiB", len);
  int rc = partition(v, text, len, true, NULL, 0, &fl);
  if (rc) {
    free(fl.a);
    return pw_seterr(err, rc, "tokenize: out of memory");
  }
  size_t n = 0;
  for (size_t i = 0; i < fl.n; i++) {
    if (fl.a[i].tok < 0 || !(v->attr[fl.a[i].tok] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN))) continue;
    if (n < cap) out[n] = (tok_range){fl.a[i].off, fl.a[i].len};
    n++;
  }
  free(fl.a);
  *n_out = n;
  return n > cap ? pw_seterr(err, PW_ERANGE, "tokenize: %zu control-token matches do not fit in %zu", n, cap) : 0;
}

/* ---- entry point ------------------------------------------------------------------ */

int tok_encode(const tok_vocab *v, const char *text, size_t len, bool add_special, bool parse_special,
               int32_t *out, size_t cap, size_t *n_out, char *err) {
  return tok_encode_spans(v, text, len, add_special, parse_special, NULL, 0, out, cap, n_out, err);
}

int tok_encode_spans(const tok_vocab *v, const char *text, size_t len, bool add_special, bool parse_special,
                     const tok_range *plain, size_t n_plain, int32_t *out, size_t cap, size_t *n_out, char *err) {
  sink sk = {out, out ? cap : 0, 0};
  frag_list fl = {0};
  spm_scratch ss = {0};
  bpe_scratch bs = {0};
  int rc;
  *n_out = 0;
  if (!text && len) return pw_seterr(err, PW_EINVAL, "tokenize: NULL text");
  if (len > (1u << 30)) return pw_seterr(err, PW_ELIMIT, "tokenize: input of %zu bytes exceeds 1 GiB", len);
  for (size_t i = 1; i < n_plain; i++)
    if (plain[i].off < plain[i - 1].off + plain[i - 1].len)
      return pw_seterr(err, PW_EINVAL, "tokenize: plain spans overlap or are out of order");
  if ((rc = partition(v, text, len, parse_special, plain, n_plain, &fl))) goto fail;
  if (add_special && v->add_bos) put(&sk, v->bos);
  bool prev_special = true; /* SPM: the first text fragment gets a space prefix */
  for (size_t i = 0; i < fl.n; i++) {
    frag f = fl.a[i];
    if (f.tok >= 0) {
      put(&sk, f.tok);
      prev_special = true;
      continue;
    }
    if (v->kind == TOK_KIND_WPM) {
      rc = tok_wpm_fragment(v, text + f.off, f.len, put_cb, &sk);
    } else if (v->kind == TOK_KIND_UGM) {
      rc = tok_ugm_fragment(v, text + f.off, f.len, put_cb, &sk);
    } else if (v->kind == TOK_KIND_SPM) {
      rc = spm_fragment(v, text + f.off, f.len, v->add_space_prefix && prev_special, &ss, &sk, err);
      prev_special = false;
    } else {
      rc = bpe_fragment(v, text + f.off, f.len, &bs, &sk);
    }
    if (rc) goto fail;
  }
  if (add_special && v->add_eos) put(&sk, v->eos);
  if (add_special && v->kind == TOK_KIND_WPM) put(&sk, v->sep); /* BERT's [SEP] ends every text */
  *n_out = sk.n;
  if (sk.n > sk.cap) rc = pw_seterr(err, PW_ERANGE, "tokenize: %zu tokens do not fit in %zu", sk.n, cap);
  goto done;
fail:
  if (rc == PW_ENOMEM) pw_seterr(err, rc, "tokenize: out of memory");
done:
  free(fl.a);
  free(ss.buf);
  free(ss.sym);
  free(ss.heap);
  free(bs.cp);
  free(bs.fl);
  free(bs.seg);
  free(bs.tmp);
  free(bs.word);
  free(bs.enc);
  free(bs.sym);
  free(bs.heap);
  return rc;
}
