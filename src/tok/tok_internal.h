/* tok_internal.h - the tok_vocab structure shared by the tokenizer's source
 * files (vocab.c loads it, encode.c and detok.c read it). Not a public
 * interface: use tok.h. */
#ifndef PW_TOK_TOK_INTERNAL_H
#define PW_TOK_TOK_INTERNAL_H

#include "tok/pretok.h"
#include "tok/tok.h"

#include <stdint.h>

typedef enum tok_kind_id { TOK_KIND_SPM = 0, TOK_KIND_BPE = 1, TOK_KIND_WPM = 2, TOK_KIND_UGM = 3 } tok_kind_id;

typedef struct tok_span {
  const char *ptr; /* view into the gguf mapping (or vocab->extra) */
  uint32_t len;    /* bytes */
} tok_span;

struct tok_vocab {
  tok_kind_id kind;
  int32_t n;        /* vocabulary size */
  tok_span *text;   /* [n] stored token texts */
  float *score;     /* [n] SPM merge priority (0 when absent) */
  uint16_t *attr;   /* [n] TOK_ATTR_* */
  uint8_t *eog;     /* [n] 1 = end of generation */
  uint32_t max_len; /* longest token text, bytes */

  /* text -> id: open addressing, slots hold id or -1; capacity hmask+1. */
  int32_t *hslot;
  uint32_t hmask;

  /* BPE merges: (left id, right id) -> rank and merged id (-1 if the merged
   * text is not a token). Open addressing on mkey (UINT64_MAX = empty). */
  uint64_t *mkey;
  int32_t *mrank;
  int32_t *mres;
  uint64_t mmask;
  uint64_t n_merges;

  /* Rendered pieces (control/unknown tokens rendered as their text):
   * piece i = piece_blob[piece_off[i] .. piece_off[i+1]). */
  char *piece_blob;
  uint32_t *piece_off; /* [n + 1] */
  uint32_t max_piece;

  /* SPM: id of <0xNN> per byte; BPE: id of the byte-level code point of the
   * byte. -1 when absent. */
  int32_t byte_tok[256];

  int32_t bos, eos, eot, eom, unk, pad, sep, mask;
  bool add_bos, add_eos, add_space_prefix;
  bool ignore_merges; /* BPE: a word that is a token is not merged */
  /* WPM (BERT's normalizer): lowercase, and strip accents (NFD first code
   * point, marks dropped) */
  bool wpm_lower, wpm_strip_accents;
  /* UGM (ugm.c): the precompiled charsmap's double array (ugm_xcda_n
   * 32-bit entries, unaligned) and replacement strings, views into the
   * mapping; the unknown piece's score; remove_extra_whitespaces */
  const uint8_t *ugm_xcda;
  size_t ugm_xcda_n;
  const char *ugm_repl;
  size_t ugm_repl_n;
  float ugm_unk_score;
  bool ugm_merge_ws;

  /* Ids of control/user-defined/unknown tokens, longest text first (the
   * order llama.cpp matches them in the input). */
  int32_t *specials;
  uint32_t n_specials;

  const tok_pre_def *pre; /* BPE pre-tokenizer; NULL for SPM */
  char pre_name[48];

  char *extra; /* owned storage for substituted texts ("[EMPTY_i]") */
};

/* WordPiece (wpm.c): tokenizes one text fragment, appending ids through
 * put(ctx, id). Allocates scratch per call. */
int tok_wpm_fragment(const tok_vocab *v, const char *text, size_t len, void (*put)(void *ctx, int32_t id),
                     void *ctx);

/* Unigram (ugm.c): loads the normalizer's charsmap and the unknown score
 * (after the tokens and special ids), and tokenizes one text fragment. */
int tok_ugm_load(const gguf_file *f, tok_vocab *v, char *err);
int tok_ugm_fragment(const tok_vocab *v, const char *text, size_t len, void (*put)(void *ctx, int32_t id),
                     void *ctx);

/* Hash of a byte string (FNV-1a). */
uint32_t tok_hash(const char *s, size_t len);
/* The smallest power of two that is >= x and >= 16, or 0 when it would
 * exceed max (a hash table of that size cannot be made). */
size_t tok_pow2_at_least(uint64_t x, size_t max);
/* text -> id lookup; -1 if none. */
int32_t tok_lookup(const tok_vocab *v, const char *s, size_t len);
/* Merge lookup for the pair (a, b): returns the rank (or -1) and the merged
 * id in *res. */
int32_t tok_merge_lookup(const tok_vocab *v, int32_t a, int32_t b, int32_t *res);

#endif
