/* vocab.c - loads a tokenizer vocabulary from GGUF metadata (tokenizer.ggml.*)
 * and applies llama.cpp's load-time rules: default special ids per model
 * type, pre-tokenizer flags, special tokens recognised by their text
 * (end-of-turn, fill-in-the-middle, end-of-generation), per-model token
 * attributes. Builds the lookup tables encoding needs (text hash, merge
 * ranks) and the rendered piece of every token.
 * Not here: encoding (encode.c, pretok.c) and detokenization (detok.c). */
#include "tok/tok_internal.h"

#include "base/error.h"
#include "tok/unicode.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint32_t tok_hash(const char *s, size_t len) {
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < len; i++) {
    h ^= (uint8_t)s[i];
    h *= 16777619u;
  }
  return h;
}

int32_t tok_lookup(const tok_vocab *v, const char *s, size_t len) {
  if (len > v->max_len) return -1;
  for (uint32_t i = tok_hash(s, len) & v->hmask;; i = (i + 1) & v->hmask) {
    int32_t id = v->hslot[i];
    if (id < 0) return -1;
    if (v->text[id].len == len && memcmp(v->text[id].ptr, s, len) == 0) return id;
  }
}

static uint64_t merge_hash(uint64_t key) { return (key * 0x9E3779B97F4A7C15ull) >> 24; }

int32_t tok_merge_lookup(const tok_vocab *v, int32_t a, int32_t b, int32_t *res) {
  if (!v->mkey) return -1;
  uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
  for (uint64_t i = merge_hash(key) & v->mmask;; i = (i + 1) & v->mmask) {
    if (v->mkey[i] == UINT64_MAX) return -1;
    if (v->mkey[i] == key) {
      *res = v->mres[i];
      return v->mrank[i];
    }
  }
}

void tok_vocab_destroy(tok_vocab *v) {
  if (!v) return;
  free(v->text);
  free(v->score);
  free(v->attr);
  free(v->eog);
  free(v->hslot);
  free(v->mkey);
  free(v->mrank);
  free(v->mres);
  free(v->piece_blob);
  free(v->piece_off);
  free(v->specials);
  free(v->extra);
  free(v);
}

/* ---- loading helpers ------------------------------------------------------ */

static int32_t find_c(const tok_vocab *v, const char *c) { return tok_lookup(v, c, strlen(c)); }

/* Reads an optional id key. Absent: *id unchanged. Out of range: an error
 * when strict (the id is used by encoding or generation), else the id is
 * dropped, as some published files set e.g. padding_token_id = n_vocab. */
static int read_id(const gguf_file *f, const tok_vocab *v, const char *key, int32_t *id, bool strict, char *err) {
  int64_t x;
  if (!gguf_get_i64(f, key, &x)) {
    if (gguf_find_kv(f, key)) return pw_seterr(err, PW_EFORMAT, "tokenizer: %s is not an integer", key);
    return 0;
  }
  if (x >= 0 && x < v->n) {
    *id = (int32_t)x;
    return 0;
  }
  if (strict && x >= 0)
    return pw_seterr(err, PW_EFORMAT, "tokenizer: %s = %" PRId64 " is out of range (vocabulary has %d tokens)",
                     key, x, v->n);
  *id = -1;
  return 0;
}

static void read_bool(const gguf_file *f, const char *key, bool *b) {
  bool x;
  if (gguf_get_bool(f, key, &x)) *b = x;
}

/* Marks a token control (llama.cpp overrides the type of tokens it
 * recognises by text). */
static void make_control(tok_vocab *v, int32_t id) { v->attr[id] |= TOK_ATTR_CONTROL; }

/* First token whose text is in the NULL-terminated list, in list order. */
static int32_t find_first(const tok_vocab *v, const char *const *list) {
  for (int i = 0; list[i]; i++) {
    int32_t id = find_c(v, list[i]);
    if (id >= 0) return id;
  }
  return -1;
}

static const char *const k_eot_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>",
                                          "<|end_of_text|>", "<EOT>", "_<EOT>", "[EOT]",
                                          "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                                          "<end_of_utterance>", NULL};
static const char *const k_eom_texts[] = {"<|eom_id|>", NULL};
static const char *const k_fim_pre_texts[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                              "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "begin\xEF\xBD\x9C>", "<PRE>",
                                              "\xE2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
static const char *const k_fim_suf_texts[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                              "<\xEF\xBD\x9C" "fim\xE2\x96\x81hole\xEF\xBD\x9C>", "<SUF>",
                                              "\xE2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
static const char *const k_fim_mid_texts[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                              "<\xEF\xBD\x9C" "fim\xE2\x96\x81" "end\xEF\xBD\x9C>", "<MID>",
                                              "\xE2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL};
static const char *const k_fim_pad_texts[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL};
static const char *const k_fim_rep_texts[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>",
                                              NULL};
static const char *const k_fim_sep_texts[] = {"<|file_sep|>", NULL};
/* Tokens that end generation wherever they are (llama.cpp's list). */
static const char *const k_eog_texts[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>",
                                          "<|flush|>", "<|calls|>", "<end_of_turn>", "<|endoftext|>", "</s>",
                                          "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]", "<|end_of_text|>",
                                          "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
                                          "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",
                                          "[e~[", NULL};

/* Renders token id's piece (as if render_special) into dst (NULL: measure
 * only); returns its length or a negative status. */
static int64_t render_piece(const tok_vocab *v, int32_t id, char *dst, char *err) {
  tok_span t = v->text[id];
  uint16_t a = v->attr[id];
  if (a & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED)) {
    if (dst) memcpy(dst, t.ptr, t.len);
    return t.len;
  }
  if (a & TOK_ATTR_NORMAL) {
    int64_t n = 0;
    if (v->kind != TOK_KIND_BPE) {
      for (uint32_t i = 0; i < t.len; i++) {
        if (i + 2 < t.len && (uint8_t)t.ptr[i] == 0xE2 && (uint8_t)t.ptr[i + 1] == 0x96 &&
            (uint8_t)t.ptr[i + 2] == 0x81) {
          if (dst) dst[n] = ' ';
          n++;
          i += 2;
        } else {
          if (dst) dst[n] = t.ptr[i];
          n++;
        }
      }
      return n;
    }
    for (uint32_t i = 0; i < t.len;) {
      size_t adv;
      uint32_t cp = tok_utf8_decode((const uint8_t *)t.ptr + i, t.len - i, &adv);
      i += (uint32_t)adv;
      int b = tok_cp_to_byte(cp);
      if (b >= 0) {
        if (dst) dst[n] = (char)b;
        n++;
        continue;
      }
      /* A code point outside the byte-level alphabet: llama.cpp writes a
       * visible marker with the bytes and the token text. */
      uint8_t u[4];
      size_t ul = tok_utf8_encode(cp, u);
      char tmp[32];
      int k = snprintf(tmp, sizeof tmp, "[UNK_BYTE_0x");
      for (size_t j = 0; j < ul; j++) k += snprintf(tmp + k, sizeof tmp - (size_t)k, "%02x", u[j]);
      if (dst) {
        memcpy(dst + n, tmp, (size_t)k);
        memcpy(dst + n + k, t.ptr, t.len);
        dst[n + k + t.len] = ']';
      }
      n += k + t.len + 1;
    }
    return n;
  }
  if (a & TOK_ATTR_BYTE) {
    unsigned x;
    char hex[3];
    if (t.len != 6 || memcmp(t.ptr, "<0x", 3) != 0 || t.ptr[5] != '>' || !isxdigit((uint8_t)t.ptr[3]) ||
        !isxdigit((uint8_t)t.ptr[4]))
      return pw_seterr(err, PW_EFORMAT, "tokenizer: token %d is of type byte but its text is not <0xNN>", id);
    hex[0] = t.ptr[3];
    hex[1] = t.ptr[4];
    hex[2] = 0;
    x = (unsigned)strtoul(hex, NULL, 16);
    if (dst) dst[0] = (char)x;
    return 1;
  }
  return 0; /* undefined / unused tokens render as nothing */
}

static int build_specials(tok_vocab *v) {
  uint32_t n = 0;
  for (int32_t i = 0; i < v->n; i++)
    if (v->attr[i] & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN)) n++;
  v->specials = malloc((n ? n : 1) * sizeof *v->specials);
  if (!v->specials) return PW_ENOMEM;
  n = 0;
  for (int32_t i = 0; i < v->n; i++)
    if (v->attr[i] & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN)) v->specials[n++] = i;
  v->n_specials = n;
  return 0;
}

/* Stable sort of the specials: longest text first, then by id (a merge sort:
 * qsort would need a global for the vocab, and loads may run concurrently). */
static void sort_specials(tok_vocab *v, int32_t *a, int32_t *tmp, uint32_t n) {
  if (n < 2) return;
  uint32_t h = n / 2;
  sort_specials(v, a, tmp, h);
  sort_specials(v, a + h, tmp, n - h);
  uint32_t i = 0, j = h, k = 0;
  while (i < h && j < n) {
    uint32_t li = v->text[a[i]].len, lj = v->text[a[j]].len;
    tmp[k++] = (lj > li) ? a[j++] : a[i++];
  }
  while (i < h) tmp[k++] = a[i++];
  while (j < n) tmp[k++] = a[j++];
  memcpy(a, tmp, n * sizeof *a);
}

size_t tok_pow2_at_least(uint64_t x, size_t max) {
  size_t c = 16;
  while (c < x) {
    if (c > max / 2) return 0;
    c <<= 1;
  }
  return c <= max ? c : 0;
}

/* ---- load ------------------------------------------------------------------ */

/* The loader's phases, in order; each returns 0 or a PW_E* status with err
 * set, and leaves what it allocated in v (tok_vocab_destroy frees it). */

/* The tokenizer family and, for BPE, its pre-tokenizer. */
static int load_kind(const gguf_file *f, tok_vocab *v, gguf_str model, char *err) {
  gguf_str pre_s;
  if (gguf_str_eq(model, "llama")) {
    v->kind = TOK_KIND_SPM;
  } else if (gguf_str_eq(model, "gpt2")) {
    v->kind = TOK_KIND_BPE;
  } else if (gguf_str_eq(model, "bert")) {
    v->kind = TOK_KIND_WPM; /* tokenizer.ggml.pre does not apply (llama.cpp ignores it for WPM) */
  } else if (gguf_str_eq(model, "t5")) {
    v->kind = TOK_KIND_UGM; /* nor for the unigram model */
  } else {
    return pw_seterr(err, PW_EUNSUPPORTED, "tokenizer: model type '%.*s' is not supported (llama, gpt2, bert, t5)",
                   (int)(model.len > 64 ? 64 : model.len), model.ptr);
  }

  if (v->kind == TOK_KIND_BPE) {
    if (!gguf_get_str(f, "tokenizer.ggml.pre", &pre_s) || pre_s.len == 0) {
      pre_s.ptr = "default";
      pre_s.len = 7;
    }
    v->pre = tok_pre_lookup(pre_s.ptr, pre_s.len);
    if (!v->pre) {
      return pw_seterr(err, PW_EUNSUPPORTED, "tokenizer: pre-tokenizer '%.*s' is not supported (supported: %s)",
                     (int)(pre_s.len > 64 ? 64 : pre_s.len), pre_s.ptr, tok_pre_supported());
    }
    snprintf(v->pre_name, sizeof v->pre_name, "%.*s", (int)(pre_s.len > 47 ? 47 : pre_s.len), pre_s.ptr);
  } else {
    snprintf(v->pre_name, sizeof v->pre_name, "default");
  }
  return 0;
}

/* Token texts, scores and types. */
static int load_tokens(const gguf_file *f, tok_vocab *v, char *err) {
  gguf_arr toks, scores, types;
  bool has_scores, has_types;
  if (!gguf_get_arr(f, "tokenizer.ggml.tokens", &toks) || toks.type != GGUF_T_STRING) {
    return pw_seterr(err, PW_EFORMAT, "tokenizer: tokenizer.ggml.tokens is missing or not an array of strings");
  }
  if (toks.n == 0 || toks.n > (1u << 30)) {
    return pw_seterr(err, PW_EFORMAT, "tokenizer: tokenizer.ggml.tokens has %" PRIu64 " entries", toks.n);
  }
  v->n = (int32_t)toks.n;
  has_scores = gguf_get_arr(f, "tokenizer.ggml.scores", &scores);
  if (has_scores && ((scores.type != GGUF_T_FLOAT32 && scores.type != GGUF_T_INT32) || scores.n != toks.n)) {
    return pw_seterr(err, PW_EFORMAT,
                   "tokenizer: tokenizer.ggml.scores has %" PRIu64 " entries of type %s for %d tokens", scores.n,
                   gguf_vtype_name(scores.type), v->n);
  }
  has_types = gguf_get_arr(f, "tokenizer.ggml.token_type", &types);
  if (has_types && (types.type == GGUF_T_STRING || types.type == GGUF_T_ARRAY || types.type == GGUF_T_FLOAT32 ||
                    types.type == GGUF_T_FLOAT64 || types.n != toks.n)) {
    return pw_seterr(err, PW_EFORMAT,
                   "tokenizer: tokenizer.ggml.token_type has %" PRIu64 " entries of type %s for %d tokens", types.n,
                   gguf_vtype_name(types.type), v->n);
  }

  v->text = calloc((size_t)v->n, sizeof *v->text);
  v->score = calloc((size_t)v->n, sizeof *v->score);
  v->attr = calloc((size_t)v->n, sizeof *v->attr);
  v->eog = calloc((size_t)v->n, 1);
  if (!v->text || !v->score || !v->attr || !v->eog) return pw_seterr(err, PW_ENOMEM, "tokenizer: out of memory");

  {
    size_t n_empty = 0;
    for (int32_t i = 0; i < v->n; i++) {
      gguf_str s = gguf_arr_str(&toks, (uint64_t)i);
      if (s.len == 0) n_empty++;
      if (s.len > (1u << 20)) {
        return pw_seterr(err, PW_EFORMAT, "tokenizer: token %d is %" PRIu64 " bytes long", i, s.len);
      }
      v->text[i].ptr = s.ptr;
      v->text[i].len = (uint32_t)s.len;
    }
    if (n_empty) {
      /* llama.cpp renames empty tokens "[EMPTY_<id>]" so that every token
       * has a distinct, non-empty text. */
      char *p = v->extra = malloc(n_empty * 24);
      if (!p) return pw_seterr(err, PW_ENOMEM, "tokenizer: out of memory");
      for (int32_t i = 0; i < v->n; i++) {
        if (v->text[i].len) continue;
        int k = snprintf(p, 24, "[EMPTY_%d]", i);
        v->text[i].ptr = p;
        v->text[i].len = (uint32_t)k;
        p += 24;
      }
    }
  }
  for (int32_t i = 0; i < v->n; i++) {
    if (v->text[i].len > v->max_len) v->max_len = v->text[i].len;
    if (has_scores)
      v->score[i] = scores.type == GGUF_T_FLOAT32 ? gguf_arr_f32(&scores, (uint64_t)i)
                                                  : (float)gguf_arr_int(&scores, (uint64_t)i);
    int64_t t = has_types ? gguf_arr_int(&types, (uint64_t)i) : 1;
    switch (t) {
      case 1: v->attr[i] = TOK_ATTR_NORMAL; break;
      case 2: v->attr[i] = TOK_ATTR_UNKNOWN; break;
      case 3: v->attr[i] = TOK_ATTR_CONTROL; break;
      case 4: v->attr[i] = TOK_ATTR_USER_DEFINED; break;
      case 5: v->attr[i] = TOK_ATTR_UNUSED; break;
      case 6: v->attr[i] = TOK_ATTR_BYTE; break;
      default: v->attr[i] = 0; break; /* undefined */
    }
  }
  return 0;
}

/* The text -> id hash table. */
static int build_lookup(tok_vocab *v, char *err) {
  /* hmask is 32 bits: at most 2^31 slots (2^30 tokens fit) */
  size_t cap = tok_pow2_at_least((uint64_t)v->n * 2, (size_t)1 << 31);
  if (!cap) return pw_seterr(err, PW_EFORMAT, "tokenizer: %d tokens are too many for the lookup table", v->n);
  v->hmask = (uint32_t)(cap - 1);
  v->hslot = malloc((size_t)cap * sizeof *v->hslot);
  if (!v->hslot) return pw_seterr(err, PW_ENOMEM, "tokenizer: out of memory");
  memset(v->hslot, 0xFF, (size_t)cap * sizeof *v->hslot);
  for (int32_t i = 0; i < v->n; i++) {
    tok_span s = v->text[i];
    uint32_t h = tok_hash(s.ptr, s.len) & v->hmask;
    for (;; h = (h + 1) & v->hmask) {
      int32_t o = v->hslot[h];
      if (o < 0) {
        v->hslot[h] = i;
        break;
      }
      if (v->text[o].len == s.len && memcmp(v->text[o].ptr, s.ptr, s.len) == 0) {
        return pw_seterr(err, PW_EFORMAT, "tokenizer: duplicate token text '%.*s' at ids %d and %d",
                       (int)(s.len > 40 ? 40 : s.len), s.ptr, o, i);
      }
    }
  }
  return 0;
}

/* BPE merges: (left, right) -> rank and result, the lowest rank winning. */
static int load_merges(const gguf_file *f, tok_vocab *v, char *err) {
  gguf_arr merges;
  if (v->kind != TOK_KIND_BPE) return 0;
  if (!gguf_get_arr(f, "tokenizer.ggml.merges", &merges) || merges.type != GGUF_T_STRING) {
    return pw_seterr(err, PW_EFORMAT, "tokenizer: BPE vocabulary without tokenizer.ggml.merges (array of strings)");
  }
  if (merges.n > (1u << 30)) {
    return pw_seterr(err, PW_EFORMAT, "tokenizer: %" PRIu64 " merges", merges.n);
  }
  v->n_merges = merges.n;
  size_t cap = tok_pow2_at_least(merges.n * 2 + 1, SIZE_MAX / sizeof *v->mkey);
  if (!cap)
    return pw_seterr(err, PW_EFORMAT, "tokenizer: %" PRIu64 " merges are too many for the merge table", merges.n);
  v->mmask = cap - 1;
  v->mkey = malloc(cap * sizeof *v->mkey);
  v->mrank = malloc(cap * sizeof *v->mrank);
  v->mres = malloc(cap * sizeof *v->mres);
  char *cat = malloc((size_t)v->max_len * 2 + 2);
  if (!v->mkey || !v->mrank || !v->mres || !cat) {
    free(cat);
    return pw_seterr(err, PW_ENOMEM, "tokenizer: out of memory");
  }
  memset(v->mkey, 0xFF, cap * sizeof *v->mkey);
  for (uint64_t m = 0; m < merges.n; m++) {
    gguf_str s = gguf_arr_str(&merges, m);
    const char *sp = s.len > 1 ? memchr(s.ptr + 1, ' ', s.len - 1) : NULL;
    if (!sp) {
      free(cat);
      return pw_seterr(err, PW_EFORMAT, "tokenizer: merge %" PRIu64 " ('%.*s') has no space separator", m,
                     (int)(s.len > 40 ? 40 : s.len), s.ptr);
    }
    size_t la = (size_t)(sp - s.ptr), lb = s.len - la - 1;
    int32_t a = tok_lookup(v, s.ptr, la), b = tok_lookup(v, sp + 1, lb);
    if (a < 0 || b < 0) {
      free(cat);
      return pw_seterr(err, PW_EFORMAT, "tokenizer: merge %" PRIu64 " ('%.*s') names unknown piece '%.*s'", m,
                     (int)(s.len > 40 ? 40 : s.len), s.ptr, (int)(a < 0 ? (la > 40 ? 40 : la) : (lb > 40 ? 40 : lb)),
                     a < 0 ? s.ptr : sp + 1);
    }
    memcpy(cat, s.ptr, la);
    memcpy(cat + la, sp + 1, lb);
    int32_t r = tok_lookup(v, cat, la + lb);
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (uint64_t i = merge_hash(key) & v->mmask;; i = (i + 1) & v->mmask) {
      if (v->mkey[i] == key) break; /* the first (lowest) rank wins */
      if (v->mkey[i] == UINT64_MAX) {
        v->mkey[i] = key;
        v->mrank[i] = (int32_t)m;
        v->mres[i] = r;
        break;
      }
    }
  }
  free(cat);
  return 0;
}

/* Token ids that are not in the metadata as ids (FIM and the like). */
typedef struct fim_ids {
  int32_t pre, suf, mid, pad, rep, sep;
} fim_ids;

/* Flags and special ids: llama.cpp's defaults, then the metadata. */
static int load_special_ids(const gguf_file *f, tok_vocab *v, fim_ids *fi, char *err) {
  int rc;
  if (v->kind == TOK_KIND_SPM) {
    v->bos = 1;
    v->eos = 2;
    v->unk = 0;
    v->add_bos = true;
    v->add_space_prefix = true;
  } else if (v->kind == TOK_KIND_WPM) {
    /* BERT: [CLS] = 101 starts, [SEP] = 102 ends every text; [UNK] = 100 */
    v->bos = 101;
    v->eos = -1;
    v->unk = 100;
    v->add_bos = true;
  } else if (v->kind == TOK_KIND_UGM) {
    /* T5: no BOS, </s> = 1 ends every text, <unk> = 2 */
    v->bos = -1;
    v->eos = 1;
    v->unk = 2;
    v->add_eos = true;
  } else {
    v->bos = 11;
    v->eos = 11;
    v->unk = -1;
    v->add_bos = tok_pre_add_bos(v->pre);
    v->ignore_merges = tok_pre_ignore_merges(v->pre);
    if (tok_pre_no_bos(v->pre)) v->bos = -1;
  }
  v->eot = v->eom = v->pad = v->sep = v->mask = -1;
  if (v->kind == TOK_KIND_WPM) {
    v->sep = 102;
    v->pad = 0;
    v->mask = 103;
  }
  if (v->kind == TOK_KIND_UGM) v->pad = 0;
  if (v->sep >= v->n) v->sep = -1;
  if (v->pad >= v->n) v->pad = -1;
  if (v->mask >= v->n) v->mask = -1;
  if (v->bos >= v->n) v->bos = -1;
  if (v->eos >= v->n) v->eos = -1;
  if (v->unk >= v->n) v->unk = -1;
  read_bool(f, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix);
  fi->pre = fi->suf = fi->mid = fi->pad = fi->rep = fi->sep = -1;
  {
    struct {
      const char *key;
      int32_t *id;
      bool strict;
    } ids[] = {
        {"tokenizer.ggml.bos_token_id", &v->bos, true},      {"tokenizer.ggml.eos_token_id", &v->eos, true},
        {"tokenizer.ggml.eot_token_id", &v->eot, true},      {"tokenizer.ggml.eom_token_id", &v->eom, true},
        {"tokenizer.ggml.unknown_token_id", &v->unk, true},  {"tokenizer.ggml.seperator_token_id", &v->sep, false},
        {"tokenizer.ggml.padding_token_id", &v->pad, false}, {"tokenizer.ggml.mask_token_id", &v->mask, false},
        {"tokenizer.ggml.fim_pre_token_id", &fi->pre, false}, {"tokenizer.ggml.fim_suf_token_id", &fi->suf, false},
        {"tokenizer.ggml.fim_mid_token_id", &fi->mid, false}, {"tokenizer.ggml.fim_pad_token_id", &fi->pad, false},
        {"tokenizer.ggml.fim_rep_token_id", &fi->rep, false}, {"tokenizer.ggml.fim_sep_token_id", &fi->sep, false},
        {"tokenizer.ggml.prefix_token_id", &fi->pre, false},  {"tokenizer.ggml.suffix_token_id", &fi->suf, false},
        {"tokenizer.ggml.middle_token_id", &fi->mid, false},
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
      if ((rc = read_id(f, v, ids[i].key, ids[i].id, ids[i].strict, err)) < 0) return rc;
  }
  read_bool(f, "tokenizer.ggml.add_bos_token", &v->add_bos);
  read_bool(f, "tokenizer.ggml.add_eos_token", &v->add_eos);
  if (v->kind == TOK_KIND_WPM) {
    /* llama.cpp adds [CLS] and [SEP] around every WPM text with
     * add_special, whatever the add_* flags say; and its BERT normalizer
     * lowercases and strips accents unless the metadata says otherwise */
    v->add_bos = true;
    v->add_eos = false;
    v->wpm_lower = true;
    read_bool(f, "tokenizer.ggml.normalizer.lowercase", &v->wpm_lower);
    v->wpm_strip_accents = v->wpm_lower;
    read_bool(f, "tokenizer.ggml.normalizer.strip_accents", &v->wpm_strip_accents);
    if (v->bos < 0 || v->sep < 0 || v->unk < 0)
      return pw_seterr(err, PW_EFORMAT, "tokenizer: a WordPiece vocabulary needs valid [CLS], [SEP] and [UNK] ids");
  }
  if (v->kind == TOK_KIND_UGM) {
    read_bool(f, "tokenizer.ggml.remove_extra_whitespaces", &v->ugm_merge_ws);
    int rc2 = tok_ugm_load(f, v, err);
    if (rc2 < 0) return rc2;
  }
  if (v->add_bos && v->bos < 0) {
    return pw_seterr(err, PW_EFORMAT, "tokenizer: add_bos_token is true but there is no valid bos_token_id");
  }
  if (v->add_eos && v->eos < 0) {
    return pw_seterr(err, PW_EFORMAT, "tokenizer: add_eos_token is true but there is no valid eos_token_id");
  }
  return 0;
}

/* Tokens recognised by their text (llama.cpp forces them to control) and
 * the end-of-generation set. */
static void mark_eog(tok_vocab *v, fim_ids *fi) {
  {
    struct {
      int32_t *id;
      const char *const *texts;
    } auto_ids[] = {{&v->eot, k_eot_texts},       {&v->eom, k_eom_texts},       {&fi->pre, k_fim_pre_texts},
                    {&fi->suf, k_fim_suf_texts}, {&fi->mid, k_fim_mid_texts}, {&fi->pad, k_fim_pad_texts},
                    {&fi->rep, k_fim_rep_texts}, {&fi->sep, k_fim_sep_texts}};
    for (size_t i = 0; i < sizeof auto_ids / sizeof auto_ids[0]; i++) {
      if (*auto_ids[i].id >= 0) continue;
      int32_t id = find_first(v, auto_ids[i].texts);
      if (id >= 0) {
        *auto_ids[i].id = id;
        make_control(v, id);
      }
    }
  }
  /* end of generation */
  if (fi->pad >= 0) v->eog[fi->pad] = 1;
  if (fi->rep >= 0) v->eog[fi->rep] = 1;
  if (fi->sep >= 0) v->eog[fi->sep] = 1;
  for (int i = 0; k_eog_texts[i]; i++) {
    int32_t id = find_c(v, k_eog_texts[i]);
    if (id < 0) continue;
    v->eog[id] = 1;
    make_control(v, id);
  }
  {
    /* gpt-oss: these control tokens are always rendered */
    static const char *const k_render[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", NULL};
    for (int i = 0; k_render[i]; i++) {
      int32_t id = find_c(v, k_render[i]);
      if (id >= 0) v->attr[id] = TOK_ATTR_USER_DEFINED;
    }
  }
  if (v->eos >= 0) v->eog[v->eos] = 1;
  if (v->eot >= 0) v->eog[v->eot] = 1;
  if (v->eom >= 0) v->eog[v->eom] = 1;
  {
    /* o200k_harmony / solar-open: <|end|> separates turns but does not end
     * generation there */
    int32_t ret = find_c(v, "<|return|>"), call = find_c(v, "<|call|>"), calls = find_c(v, "<|calls|>");
    int32_t flush = find_c(v, "<|flush|>"), end = find_c(v, "<|end|>");
    bool has_ret = ret >= 0 && v->eog[ret], has_call = (call >= 0 && v->eog[call]) || (calls >= 0 && v->eog[calls]);
    bool has_flush = flush >= 0 && v->eog[flush];
    if (end >= 0 && v->eog[end] && ((has_ret && has_call) || (has_call && has_flush))) {
      v->eog[end] = 0;
      v->attr[end] = TOK_ATTR_USER_DEFINED;
    }
    /* gemma4 / paddleocr: </s> is text there */
    int32_t tr = find_c(v, "<|tool_response>"), s = find_c(v, "</s>");
    if (tr >= 0 && v->eog[tr] && s >= 0 && v->eog[s]) {
      v->eog[s] = 0;
      v->attr[s] = TOK_ATTR_NORMAL;
    }
  }

}

/* Special tokens in matching order, and every token's rendered piece. */
static int build_pieces(tok_vocab *v, char *err) {
  int rc;
  if ((rc = build_specials(v)) < 0) return pw_seterr(err, PW_ENOMEM, "tokenizer: out of memory");
  {
    int32_t *tmp = malloc((v->n_specials ? v->n_specials : 1) * sizeof *tmp);
    if (!tmp) return pw_seterr(err, PW_ENOMEM, "tokenizer: out of memory");
    sort_specials(v, v->specials, tmp, v->n_specials);
    free(tmp);
  }

  {
    uint64_t total = 0;
    v->piece_off = malloc(((size_t)v->n + 1) * sizeof *v->piece_off);
    if (!v->piece_off) return pw_seterr(err, PW_ENOMEM, "tokenizer: out of memory");
    for (int32_t i = 0; i < v->n; i++) {
      int64_t l = render_piece(v, i, NULL, err);
      if (l < 0) return (int)l;
      v->piece_off[i] = (uint32_t)total;
      total += (uint64_t)l;
      if ((uint64_t)l > v->max_piece) v->max_piece = (uint32_t)l;
      if (total > UINT32_MAX) {
        return pw_seterr(err, PW_EFORMAT, "tokenizer: token texts too large");
      }
    }
    v->piece_off[v->n] = (uint32_t)total;
    v->piece_blob = malloc(total ? total : 1);
    if (!v->piece_blob) return pw_seterr(err, PW_ENOMEM, "tokenizer: out of memory");
    for (int32_t i = 0; i < v->n; i++) render_piece(v, i, v->piece_blob + v->piece_off[i], err);
  }
  return 0;
}

/* Per-model token attributes (llama.cpp keys them on general.name). */
static void name_attrs(const gguf_file *f, tok_vocab *v) {
  {
    char name[128];
    if (gguf_get_cstr(f, "general.name", name, sizeof name)) {
      for (char *p = name; *p; p++) *p = (char)tolower((uint8_t)*p);
      if (strstr(name, "phi-3") || strstr(name, "phi3")) {
        for (uint32_t i = 0; i < v->n_specials; i++) v->attr[v->specials[i]] |= TOK_ATTR_RSTRIP;
        int32_t id = find_c(v, "</s>");
        if (id >= 0) v->attr[id] |= TOK_ATTR_RSTRIP;
        static const char *const k_no[] = {"<unk>", "<s>", "<|endoftext|>", NULL};
        for (int i = 0; k_no[i]; i++)
          if ((id = find_c(v, k_no[i])) >= 0) v->attr[id] &= (uint16_t)~TOK_ATTR_RSTRIP;
      }
    }
  }

}

/* The token of each byte (SPM <0xNN> pieces, BPE byte-level code points). */
static void byte_tokens(tok_vocab *v) {
  for (int b = 0; b < 256; b++) {
    if (v->kind == TOK_KIND_SPM) {
      char buf[8];
      snprintf(buf, sizeof buf, "<0x%02X>", b);
      int32_t id = find_c(v, buf);
      if (id < 0) {
        char c = (char)b;
        id = tok_lookup(v, &c, 1);
      }
      v->byte_tok[b] = id;
    } else {
      uint8_t u[4];
      size_t l = tok_utf8_encode(tok_byte_to_cp((uint8_t)b), u);
      v->byte_tok[b] = tok_lookup(v, (const char *)u, l);
    }
  }

}

int tok_vocab_load(const gguf_file *f, tok_vocab **out, char *err) {
  gguf_str model;
  fim_ids fi;
  int rc;
  *out = NULL;
  if (!gguf_get_str(f, "tokenizer.ggml.model", &model))
    return pw_seterr(err, PW_EFORMAT, "tokenizer: no tokenizer.ggml.model string in the file");
  tok_vocab *v = calloc(1, sizeof *v);
  if (!v) return pw_seterr(err, PW_ENOMEM, "tokenizer: out of memory");
  if ((rc = load_kind(f, v, model, err)) || (rc = load_tokens(f, v, err)) || (rc = build_lookup(v, err)) ||
      (rc = load_merges(f, v, err)) || (rc = load_special_ids(f, v, &fi, err))) {
    tok_vocab_destroy(v);
    return rc;
  }
  mark_eog(v, &fi);
  if ((rc = build_pieces(v, err))) {
    tok_vocab_destroy(v);
    return rc;
  }
  name_attrs(f, v);
  byte_tokens(v);
  *out = v;
  return 0;
}

/* ---- accessors --------------------------------------------------------------- */

int32_t tok_n_vocab(const tok_vocab *v) { return v->n; }
const char *tok_kind(const tok_vocab *v) {
  return v->kind == TOK_KIND_SPM ? "spm" : v->kind == TOK_KIND_WPM ? "wpm" : v->kind == TOK_KIND_UGM ? "ugm" : "bpe";
}
int32_t tok_sep(const tok_vocab *v) { return v->sep; }
const char *tok_pre(const tok_vocab *v) { return v->pre_name; }
bool tok_add_bos(const tok_vocab *v) { return v->add_bos; }
bool tok_add_eos(const tok_vocab *v) { return v->add_eos; }
bool tok_add_space_prefix(const tok_vocab *v) { return v->add_space_prefix; }
int32_t tok_bos(const tok_vocab *v) { return v->bos; }
int32_t tok_eos(const tok_vocab *v) { return v->eos; }
int32_t tok_eot(const tok_vocab *v) { return v->eot; }
int32_t tok_eom(const tok_vocab *v) { return v->eom; }
int32_t tok_pad(const tok_vocab *v) { return v->pad; }
int32_t tok_unk(const tok_vocab *v) { return v->unk; }
bool tok_is_eog(const tok_vocab *v, int32_t id) { return id >= 0 && id < v->n && v->eog[id]; }
bool tok_is_control(const tok_vocab *v, int32_t id) {
  return id >= 0 && id < v->n && (v->attr[id] & TOK_ATTR_CONTROL);
}
uint32_t tok_attr(const tok_vocab *v, int32_t id) { return id >= 0 && id < v->n ? v->attr[id] : 0; }
int32_t tok_find(const tok_vocab *v, const char *text, size_t len) { return tok_lookup(v, text, len); }
const char *tok_text(const tok_vocab *v, int32_t id, size_t *len) {
  if (id < 0 || id >= v->n) return NULL;
  *len = v->text[id].len;
  return v->text[id].ptr;
}
