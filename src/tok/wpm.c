/* wpm.c - WordPiece, the BERT family's tokenizer, as llama.cpp's WPM:
 *  1. normalize: per code point, accents stripped (the first code point of
 *     its canonical decomposition, combining marks dropped) and lowercased
 *     when the vocabulary says so; NUL, U+FFFD (what invalid UTF-8 decodes
 *     to) and control characters are dropped;
 *  2. split into words at whitespace; punctuation, ASCII symbols and CJK
 *     ideographs are words of their own;
 *  3. each word, with a leading U+2581 (how the GGUF converter writes a
 *     word-initial piece; "##" continuations are stored bare), becomes the
 *     longest vocabulary piece at each point, left to right; a word with a
 *     point where no piece matches is one [UNK].
 * Not here: the special-token partition and [CLS]/[SEP] (encode.c). */
#include "tok/tok_internal.h"

#include "base/error.h"
#include "tok/unicode.h"

#include <stdlib.h>
#include <string.h>

/* CJK ideograph blocks split like punctuation (llama.cpp's list, with its
 * 0x2B920 start of Extension E as the reference tokenizer has it). */
static bool wpm_cjk(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* Greedy longest-match of one word (w[0..n) starts with U+2581). */
static void wpm_word(const tok_vocab *v, const char *w, size_t n, void (*put)(void *, int32_t), void *ctx,
                     int32_t *ids) {
  size_t k = 0;
  for (size_t i = 0; i < n;) {
    size_t j = n < i + v->max_len ? n : i + v->max_len;
    int32_t id = -1;
    for (; j > i; j--)
      if ((id = tok_lookup(v, w + i, j - i)) >= 0) break;
    if (id < 0) { /* no piece here: the whole word is unknown */
      k = 0;
      break;
    }
    ids[k++] = id;
    i = j;
  }
  if (k == 0) {
    put(ctx, v->unk);
    return;
  }
  for (size_t i = 0; i < k; i++) put(ctx, ids[i]);
}

/* Room for a word of n bytes in *w and as many ids in *ids (a piece is
 * at least one byte), grown geometrically: scratch follows the longest
 * word, not the text. */
static int wpm_room(char **w, int32_t **ids, size_t *cap, size_t n) {
  if (n <= *cap) return 0;
  size_t c = *cap * 2 > n ? *cap * 2 : n;
  char *nw = realloc(*w, c);
  if (!nw) return PW_ENOMEM;
  *w = nw;
  int32_t *ni = realloc(*ids, c * sizeof *ni);
  if (!ni) return PW_ENOMEM;
  *ids = ni;
  *cap = c;
  return 0;
}

int tok_wpm_fragment(const tok_vocab *v, const char *text, size_t len, void (*put)(void *ctx, int32_t id),
                     void *ctx) {
  /* a word: U+2581, then the normalized code points (at most 4 bytes each) */
  char *w = NULL;
  int32_t *ids = NULL;
  size_t cap = 0;
  int rc = 0;
  if (wpm_room(&w, &ids, &cap, 256)) {
    rc = PW_ENOMEM;
    goto done;
  }
  static const char k_mark[3] = {'\xE2', '\x96', '\x81'};
  memcpy(w, k_mark, 3);
  size_t wl = 3;
  for (size_t i = 0; i <= len;) {
    uint32_t c = ' '; /* past the end: a space finishes the last word */
    if (i < len) {
      size_t adv;
      c = tok_utf8_decode((const uint8_t *)text + i, len - i, &adv);
      i += adv;
    } else {
      i++;
    }
    if (v->wpm_strip_accents) c = tok_nfd_first(c);
    uint8_t fl = tok_uflags(c);
    if (fl & TOK_UF_WS) {
      if (wl > 3) wpm_word(v, w, wl, put, ctx, ids);
      wl = 3;
      continue;
    }
    if (c == 0 || c == 0xFFFD || (fl & TOK_UF_C)) continue;
    if (v->wpm_strip_accents && (fl & TOK_UF_M)) continue;
    uint8_t u[4];
    size_t ul = tok_utf8_encode(v->wpm_lower ? tok_lower(c) : c, u);
    if (wpm_room(&w, &ids, &cap, wl + ul)) {
      rc = PW_ENOMEM;
      goto done;
    }
    if ((fl & TOK_UF_P) || (c < 0x7F && (fl & TOK_UF_S)) || wpm_cjk(c)) {
      if (wl > 3) wpm_word(v, w, wl, put, ctx, ids);
      memcpy(w + 3, u, ul);
      wpm_word(v, w, 3 + ul, put, ctx, ids);
      wl = 3;
    } else {
      memcpy(w + wl, u, ul);
      wl += ul;
    }
  }
done:
  free(w);
  free(ids);
  return rc;
}
