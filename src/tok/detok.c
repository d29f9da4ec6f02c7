/* detok.c - token ids -> text: pieces (precomputed at load), whole-sequence
 * decoding, and the streaming detokenizer that only ever emits valid UTF-8.
 * Not here: what a piece is (vocab.c renders them at load). */
#include "tok/tok_internal.h"

#include "base/error.h"

#include <string.h>

size_t tok_piece_ref(const tok_vocab *v, int32_t id, bool render_special, const char **ptr) {
  if (id < 0 || id >= v->n || (!render_special && (v->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN)))) {
    *ptr = "";
    return 0;
  }
  *ptr = v->piece_blob + v->piece_off[id];
  return v->piece_off[id + 1] - v->piece_off[id];
}

size_t tok_max_piece(const tok_vocab *v) { return v->max_piece; }

int tok_piece(const tok_vocab *v, int32_t id, bool render_special, char *buf, size_t cap) {
  const char *p;
  if (id < 0 || id >= v->n) return PW_EINVAL;
  size_t n = tok_piece_ref(v, id, render_special, &p);
  if (n > cap) return PW_ERANGE;
  memcpy(buf, p, n);
  return (int)n;
}

/* Piece of id as seen by a decoder with flags; first = first token. */
static size_t piece_for(const tok_vocab *v, int32_t id, unsigned flags, bool first, const char **p) {
  size_t n = tok_piece_ref(v, id, (flags & TOK_DETOK_SPECIAL) != 0, p);
  if (first && (flags & TOK_DETOK_STRIP_SPACE) && v->add_space_prefix && n > 0 && (*p)[0] == ' ') {
    (*p)++;
    n--;
  }
  return n;
}

int tok_decode(const tok_vocab *v, const int32_t *ids, size_t n, unsigned flags, char *buf, size_t cap,
               size_t *n_out, char *err) {
  size_t total = 0;
  *n_out = 0;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] < 0 || ids[i] >= v->n)
      return pw_seterr(err, PW_EINVAL, "detokenize: token id %d out of range [0, %d)", ids[i], v->n);
    const char *p;
    size_t l = piece_for(v, ids[i], flags, i == 0, &p);
    if (total + l <= cap) memcpy(buf + total, p, l);
    total += l;
  }
  *n_out = total;
  if (total > cap) return pw_seterr(err, PW_ERANGE, "detokenize: %zu bytes do not fit in %zu", total, cap);
  return 0;
}

/* ---- streaming ------------------------------------------------------------------- */

void tok_detok_init(tok_detok *d, const tok_vocab *v, unsigned flags) {
  memset(d, 0, sizeof *d);
  d->v = v;
  d->flags = flags;
  d->first = true;
}

size_t tok_detok_max_out(const tok_vocab *v) { return 3 * ((size_t)v->max_piece + 4); }

/* Bytes a UTF-8 lead byte announces (0 = cannot start a character). */
static int lead_len(uint8_t b) {
  if (b < 0x80) return 1;
  if (b >= 0xC2 && b <= 0xDF) return 2;
  if (b >= 0xE0 && b <= 0xEF) return 3;
  if (b >= 0xF0 && b <= 0xF4) return 4;
  return 0;
}

/* Whether b may follow the bytes held so far (lead = pend[0], k = count):
 * the second byte's range excludes overlongs, surrogates and > U+10FFFF. */
static bool may_follow(const uint8_t *pend, int k, uint8_t b) {
  if (k == 1) {
    switch (pend[0]) {
      case 0xE0: return b >= 0xA0 && b <= 0xBF;
      case 0xED: return b >= 0x80 && b <= 0x9F;
      case 0xF0: return b >= 0x90 && b <= 0xBF;
      case 0xF4: return b >= 0x80 && b <= 0x8F;
      default: break;
    }
  }
  return b >= 0x80 && b <= 0xBF;
}

static const char k_fffd[3] = {(char)0xEF, (char)0xBF, (char)0xBD};

int tok_detok_feed(tok_detok *d, int32_t id, char *buf, size_t cap) {
  const tok_vocab *v = d->v;
  if (id < 0 || id >= v->n) return PW_EINVAL;
  const char *p;
  size_t n = piece_for(v, id, d->flags, d->first, &p);
  /* every output byte run replaces at least one input byte with at most 3 */
  if (cap < 3 * (n + d->n_pend)) return PW_ERANGE;
  d->first = false;
  size_t o = 0;
  for (size_t i = 0; i < n; i++) {
    uint8_t b = (uint8_t)p[i];
    if (d->n_pend > 0) {
      if (may_follow(d->pend, d->n_pend, b)) {
        d->pend[d->n_pend++] = b;
        if (d->n_pend == lead_len(d->pend[0])) {
          memcpy(buf + o, d->pend, d->n_pend);
          o += d->n_pend;
          d->n_pend = 0;
        }
        continue;
      }
      /* the held bytes can never complete: one U+FFFD for them, then b
       * starts afresh */
      memcpy(buf + o, k_fffd, 3);
      o += 3;
      d->n_pend = 0;
    }
    int l = lead_len(b);
    if (l == 1) {
      buf[o++] = (char)b;
    } else if (l == 0) {
      memcpy(buf + o, k_fffd, 3);
      o += 3;
    } else {
      d->pend[0] = b;
      d->n_pend = 1;
    }
  }
  return (int)o;
}

int tok_detok_flush(tok_detok *d, char *buf, size_t cap) {
  if (d->n_pend == 0) return 0;
  if (cap < 3) return PW_ERANGE;
  memcpy(buf, k_fffd, 3);
  d->n_pend = 0;
  return 3;
}
