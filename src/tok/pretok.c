/* pretok.c - pre-tokenizers for byte-level BPE (see pretok.h).
 *
 * Each step splits one piece [ini, end) of code points into sub-pieces. Two
 * kinds exist, mirroring how llama.cpp runs the regexes:
 *  - "custom" steps reproduce llama.cpp's hand-written GPT-2 and Llama-3
 *    splitters, including their quirks (an unassigned code point never joins
 *    a [^\s\p{L}\p{N}]+ run; lookahead stops at the piece end);
 *  - "regex" steps reproduce std::regex (ECMAScript, leftmost, first
 *    alternative wins, backtracking) over llama.cpp's input: non-ASCII
 *    White_Space becomes \v before matching, and a category class like \p{L}
 *    means ASCII letters plus non-ASCII letters. Unmatched gaps between
 *    matches become pieces of their own. */
#include "tok/pretok.h"

#include "tok/unicode.h"

#include <string.h>

#define UF_L TOK_UF_L
#define UF_N TOK_UF_N
#define UF_P TOK_UF_P
#define UF_WS TOK_UF_WS
#define UF_M TOK_UF_M

typedef size_t (*step_fn)(const uint32_t *cp, const uint8_t *fl, size_t ini, size_t end, uint32_t *out);

#define MAX_STEPS 6

struct tok_pre_def {
  const char *names; /* '|'-separated tokenizer.ggml.pre values */
  step_fn steps[MAX_STEPS];
  bool ignore_merges;
  bool add_bos;
  bool no_bos;
};

/* Piece emitter shared by the custom splitters. */
typedef struct emitter {
  uint32_t *out;
  size_t n;
  size_t prev; /* end of the last emitted piece */
} emitter;

static void emit_to(emitter *e, size_t end) {
  if (end > e->prev) e->out[e->n++] = (uint32_t)(end - e->prev);
  e->prev = end;
}

/* ---- custom splitters (llama.cpp unicode.cpp) ---------------------------- */

/* 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t step_gpt2(const uint32_t *cp, const uint8_t *fl, size_t ini, size_t end, uint32_t *out) {
#define F(i) ((i) < end ? fl[i] : 0)
  emitter e = {out, 0, ini};
  size_t pos = ini;
  while (pos < end) {
    uint32_t c = cp[pos];
    uint8_t f = fl[pos];
    if (c == '\'' && pos + 1 < end) {
      uint32_t c1 = cp[pos + 1];
      if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
        pos += 2;
        emit_to(&e, pos);
        continue;
      }
      if (pos + 2 < end) {
        uint32_t c2 = cp[pos + 2];
        if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
          pos += 3;
          emit_to(&e, pos);
          continue;
        }
      }
    }
    uint8_t f2 = c == ' ' ? F(pos + 1) : f;
    if (f2 & UF_L) {
      pos += c == ' ';
      while (F(pos) & UF_L) pos++;
      emit_to(&e, pos);
      continue;
    }
    if (f2 & UF_N) {
      pos += c == ' ';
      while (F(pos) & UF_N) pos++;
      emit_to(&e, pos);
      continue;
    }
    if (!(f2 & (UF_WS | UF_L | UF_N)) && f2) {
      pos += c == ' ';
      while (!(F(pos) & (UF_WS | UF_L | UF_N)) && F(pos)) pos++;
      emit_to(&e, pos);
      continue;
    }
    size_t nws = 0;
    while (F(pos + nws) & UF_WS) nws++;
    if (nws > 1 && pos + nws < end) {
      pos += nws - 1;
      emit_to(&e, pos);
      continue;
    }
    if (nws > 0) {
      pos += nws;
      emit_to(&e, pos);
      continue;
    }
    emit_to(&e, ++pos);
  }
  return e.n;
}

/* The length of the case-insensitive contraction ('s 't 'm 'd 're 've 'll)
 * at pos, or 0: the first alternative of the Llama 3 and Qwen3.5 splits. */
static size_t contraction_len(const uint32_t *cp, size_t pos, size_t end) {
  if (cp[pos] != '\'' || pos + 1 >= end) return 0;
  uint32_t c1 = tok_lower_ascii(cp[pos + 1]);
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (pos + 2 >= end) return 0;
  uint32_t c2 = tok_lower_ascii(cp[pos + 2]);
  return (c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l') ? 3 : 0;
}

/* The end of the piece at pos under the whitespace alternatives that
 * close the Llama 3 and Qwen3.5 expressions, \s*[\r\n]+|\s+(?!\S)|\s+,
 * and of one other code point when none matches. */
static size_t ws_piece_end(const uint32_t *cp, const uint8_t *fl, size_t pos, size_t end) {
  size_t nws = 0, last_nl = 0;
  while (pos + nws < end && (fl[pos + nws] & UF_WS)) {
    if (cp[pos + nws] == '\r' || cp[pos + nws] == '\n') last_nl = pos + nws + 1;
    nws++;
  }
  if (last_nl > 0) return last_nl;
  if (nws > 1 && pos + nws < end) return pos + nws - 1;
  return nws > 0 ? pos + nws : pos + 1;
}

/* (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t step_llama3(const uint32_t *cp, const uint8_t *fl, size_t ini, size_t end, uint32_t *out) {
  emitter e = {out, 0, ini};
  size_t pos = ini;
  while (pos < end) {
    uint32_t c = cp[pos];
    uint8_t f = fl[pos];
    size_t cl = contraction_len(cp, pos, end);
    if (cl) {
      pos += cl;
      emit_to(&e, pos);
      continue;
    }
    if (!(c == '\r' || c == '\n' || (f & UF_N))) {
      if ((f & UF_L) || (F(pos + 1) & UF_L)) {
        pos++;
        while (F(pos) & UF_L) pos++;
        emit_to(&e, pos);
        continue;
      }
    }
    if (f & UF_N) {
      size_t start = pos;
      while (F(pos) & UF_N) {
        if (++pos - start >= 3) {
          emit_to(&e, pos);
          start = pos;
        }
      }
      emit_to(&e, pos);
      continue;
    }
    uint8_t f2 = c == ' ' ? F(pos + 1) : f;
    /* llama.cpp tests the current code point's flags (not f2) for "defined"
     * here; kept for identical splits. */
    if (!(f2 & (UF_WS | UF_L | UF_N)) && f) {
      pos += c == ' ';
      while (!(F(pos) & (UF_WS | UF_L | UF_N)) && F(pos)) pos++;
      while (pos < end && (cp[pos] == '\r' || cp[pos] == '\n')) pos++;
      emit_to(&e, pos);
      continue;
    }
    pos = ws_piece_end(cp, fl, pos, end);
    emit_to(&e, pos);
  }
  return e.n;
}

/* Qwen3.5: Qwen2's expression with combining marks in letter runs:
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}|
 *  ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * split as llama.cpp's hand-written qwen35 splitter does (not its
 * std::regex): a letter run may start with one character that is neither
 * a newline nor a number when a letter or mark follows it. */
static size_t step_qwen35(const uint32_t *cp, const uint8_t *fl, size_t ini, size_t end, uint32_t *out) {
  emitter e = {out, 0, ini};
  size_t pos = ini;
  while (pos < end) {
    uint32_t c = cp[pos];
    uint8_t f = fl[pos];
    size_t cl = contraction_len(cp, pos, end);
    if (cl) {
      pos += cl;
      emit_to(&e, pos);
      continue;
    }
    if (!(c == '\r' || c == '\n' || (f & UF_N)) && ((f & (UF_L | UF_M)) || (F(pos + 1) & (UF_L | UF_M)))) {
      pos++;
      while (F(pos) & (UF_L | UF_M)) pos++;
      emit_to(&e, pos);
      continue;
    }
    if (f & UF_N) {
      emit_to(&e, ++pos);
      continue;
    }
    uint8_t f2 = c == ' ' ? F(pos + 1) : f;
    if (!(f2 & (UF_WS | UF_L | UF_M | UF_N)) && f) {
      pos += c == ' ';
      while (!(F(pos) & (UF_WS | UF_L | UF_M | UF_N)) && F(pos)) pos++;
      while (pos < end && (cp[pos] == '\r' || cp[pos] == '\n')) pos++;
      emit_to(&e, pos);
      continue;
    }
    pos = ws_piece_end(cp, fl, pos, end);
    emit_to(&e, pos);
  }
  return e.n;
#undef F
}

/* ---- std::regex-equivalent splitters -------------------------------------- */

/* Length of the match starting exactly at pos (0 = no match there). */
typedef size_t (*match_fn)(const uint32_t *cp, const uint8_t *fl, size_t pos, size_t end);

/* regex_iterator over [ini, end): matches and the gaps between them. */
static size_t scan(match_fn m, const uint32_t *cp, const uint8_t *fl, size_t ini, size_t end, uint32_t *out) {
  size_t n = 0, gap = ini, pos = ini;
  while (pos < end) {
    size_t len = m(cp, fl, pos, end);
    if (len == 0) {
      pos++;
      continue;
    }
    if (pos > gap) out[n++] = (uint32_t)(pos - gap);
    out[n++] = (uint32_t)len;
    pos += len;
    gap = pos;
  }
  if (end > gap) out[n++] = (uint32_t)(end - gap);
  return n;
}

/* Class tests as the collapsed std::regex sees them. */
static inline bool r_l(const uint8_t *fl, size_t i, size_t end) { return i < end && (fl[i] & UF_L); }
static inline bool r_n(const uint8_t *fl, size_t i, size_t end) { return i < end && (fl[i] & UF_N); }
static inline bool r_ws(const uint8_t *fl, size_t i, size_t end) { return i < end && (fl[i] & UF_WS); }
static inline bool r_other(const uint8_t *fl, size_t i, size_t end) {
  return i < end && !(fl[i] & (UF_L | UF_N | UF_WS));
}
static inline bool is_nl(uint32_t c) { return c == '\r' || c == '\n'; }

/* (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+   (Qwen2) */
/* (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]) at pos: its
 * length or 0. ASCII letters only: std::regex sees every non-ASCII code
 * point collapsed to one category byte, which no [sS] matches. */
static size_t contraction_ascii_len(const uint32_t *cp, size_t pos, size_t end) {
  if (cp[pos] != '\'' || pos + 1 >= end || cp[pos + 1] >= 0x80) return 0;
  uint32_t c1 = cp[pos + 1] | 0x20; /* |0x20 maps no other ASCII code point onto these letters */
  if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') return 2;
  if (pos + 2 >= end || cp[pos + 2] >= 0x80) return 0;
  uint32_t c2 = cp[pos + 2] | 0x20;
  return (c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l') ? 3 : 0;
}

/* \s*[\r\n]+|\s+(?!\S)|\s+ at pos, as std::regex matches it within the
 * piece (the lookahead sees the piece's end as the end of the text): the
 * length, or 0 when pos is not whitespace. */
static size_t ws_match(const uint32_t *cp, const uint8_t *fl, size_t pos, size_t end) {
  size_t nws = 0, last_nl = 0;
  while (r_ws(fl, pos + nws, end)) {
    if (is_nl(cp[pos + nws])) last_nl = nws + 1;
    nws++;
  }
  if (last_nl) return last_nl;
  if (nws == 0) return 0;
  if (pos + nws == end) return nws;
  if (nws >= 2) return nws - 1;
  return nws;
}

static size_t m_qwen2(const uint32_t *cp, const uint8_t *fl, size_t pos, size_t end) {
  uint32_t c = cp[pos];
  size_t cl = contraction_ascii_len(cp, pos, end);
  if (cl) return cl;
  size_t q = pos;
  if (r_l(fl, q, end) || (!is_nl(c) && !r_n(fl, q, end) && r_l(fl, q + 1, end))) {
    q++;
    while (r_l(fl, q, end)) q++;
    return q - pos;
  }
  if (r_n(fl, pos, end)) return 1;
  if (r_other(fl, pos, end) || (c == ' ' && r_other(fl, pos + 1, end))) {
    q = pos + (c == ' ' && !r_other(fl, pos, end));
    while (r_other(fl, q, end)) q++;
    while (q < end && is_nl(cp[q])) q++;
    return q - pos;
  }
  return ws_match(cp, fl, pos, end);
}
static size_t step_qwen2(const uint32_t *cp, const uint8_t *fl, size_t ini, size_t end, uint32_t *out) {
  return scan(m_qwen2, cp, fl, ini, end, out);
}

/* GPT-4o / o200k (llama.cpp's rewrite of the tokenizer.json expression
 * for std::regex):
 *   [^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|...)?
 *  |[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*(?:'[sS]|...)?
 *  |\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * A word is an optional prefix, a run of "upper" letters (not a-z) and a
 * run of "lower" ones (not A-Z); a non-ASCII letter is both, since
 * std::regex sees it as one collapsed byte. The first alternative is tried
 * as the backtracking engine does: the upper run as long as possible, then
 * shorter, until a lower letter follows it.
 * Tekken (Mistral) is the same expression without the contractions and
 * with single digits (\p{N} instead of \p{N}{1,3}). */
static inline bool g_up(const uint32_t *cp, const uint8_t *fl, size_t i, size_t end) {
  return r_l(fl, i, end) && !(cp[i] >= 'a' && cp[i] <= 'z');
}
static inline bool g_lo(const uint32_t *cp, const uint8_t *fl, size_t i, size_t end) {
  return r_l(fl, i, end) && !(cp[i] >= 'A' && cp[i] <= 'Z');
}

/* The words of both alternatives from q (after any prefix): the end of the
 * match, or 0 when there is none. lower_required: the first alternative
 * (upper*, lower+); else the second (upper+, lower*). contractions: an
 * ASCII contraction may follow (GPT-4o; not tekken). */
static size_t g_word(const uint32_t *cp, const uint8_t *fl, size_t q, size_t end, bool lower_required,
                     bool contractions) {
  size_t a = 0;
  while (g_up(cp, fl, q + a, end)) a++;
  size_t j = a;
  if (lower_required) {
    /* the longest upper run after which a lower letter starts */
    for (;; j--) {
      if (g_lo(cp, fl, q + j, end)) break;
      if (j == 0) return 0;
    }
  } else if (a == 0) {
    return 0;
  }
  size_t e = q + j;
  while (g_lo(cp, fl, e, end)) e++;
  return e + (contractions ? contraction_ascii_len(cp, e, end) : 0);
}

static size_t m_gpt4o_like(const uint32_t *cp, const uint8_t *fl, size_t pos, size_t end, bool contractions,
                           size_t max_digits) {
  const uint32_t c = cp[pos];
  /* [^\r\n\p{L}\p{N}]: the optional prefix of both word alternatives */
  const bool pre = !is_nl(c) && !r_l(fl, pos, end) && !r_n(fl, pos, end);
  for (int alt = 0; alt < 2; alt++) {
    size_t e = pre ? g_word(cp, fl, pos + 1, end, alt == 0, contractions) : 0;
    if (!e) e = g_word(cp, fl, pos, end, alt == 0, contractions);
    if (e) return e - pos;
  }
  if (r_n(fl, pos, end)) {
    size_t q = pos;
    while (q < pos + max_digits && r_n(fl, q, end)) q++;
    return q - pos;
  }
  if (r_other(fl, pos, end) || (c == ' ' && r_other(fl, pos + 1, end))) {
    size_t q = pos + (c == ' ');
    while (r_other(fl, q, end)) q++;
    while (q < end && (is_nl(cp[q]) || cp[q] == '/')) q++;
    return q - pos;
  }
  return ws_match(cp, fl, pos, end);
}
static size_t m_gpt4o(const uint32_t *cp, const uint8_t *fl, size_t pos, size_t end) {
  return m_gpt4o_like(cp, fl, pos, end, true, 3);
}
static size_t m_tekken(const uint32_t *cp, const uint8_t *fl, size_t pos, size_t end) {
  return m_gpt4o_like(cp, fl, pos, end, false, 1);
}
static size_t step_gpt4o(const uint32_t *cp, const uint8_t *fl, size_t ini, size_t end, uint32_t *out) {
  return scan(m_gpt4o, cp, fl, ini, end, out);
}
static size_t step_tekken(const uint32_t *cp, const uint8_t *fl, size_t ini, size_t end, uint32_t *out) {
  return scan(m_tekken, cp, fl, ini, end, out);
}

/* \p{N} */
static size_t m_num1(const uint32_t *cp, const uint8_t *fl, size_t pos, size_t end) {
  (void)cp;
  return r_n(fl, pos, end) ? 1 : 0;
}
static size_t step_num1(const uint32_t *cp, const uint8_t *fl, size_t ini, size_t end, uint32_t *out) {
  return scan(m_num1, cp, fl, ini, end, out);
}

/* \p{N}+ */
static size_t m_nums(const uint32_t *cp, const uint8_t *fl, size_t pos, size_t end) {
  (void)cp;
  size_t q = pos;
  while (r_n(fl, q, end)) q++;
  return q - pos;
}
static size_t step_nums(const uint32_t *cp, const uint8_t *fl, size_t ini, size_t end, uint32_t *out) {
  return scan(m_nums, cp, fl, ini, end, out);
}

/* [0-9][0-9][0-9] */
static size_t m_digit3(const uint32_t *cp, const uint8_t *fl, size_t pos, size_t end) {
  (void)fl;
  if (pos + 3 > end) return 0;
  for (size_t i = pos; i < pos + 3; i++)
    if (cp[i] < '0' || cp[i] > '9') return 0;
  return 3;
}
static size_t step_digit3(const uint32_t *cp, const uint8_t *fl, size_t ini, size_t end, uint32_t *out) {
  return scan(m_digit3, cp, fl, ini, end, out);
}

/* [\p{P}\$\+<=>\^~\|]+ (default) and the same with ` (falcon). */
static bool punct_default(const uint32_t *cp, const uint8_t *fl, size_t i, size_t end, bool backtick) {
  if (i >= end || (fl[i] & UF_WS)) return false;
  if (fl[i] & UF_P) return true;
  uint32_t c = cp[i];
  return c == '$' || c == '+' || c == '<' || c == '=' || c == '>' || c == '^' || c == '~' || c == '|' ||
         (backtick && c == '`');
}
static size_t m_punct_default(const uint32_t *cp, const uint8_t *fl, size_t pos, size_t end) {
  size_t q = pos;
  while (punct_default(cp, fl, q, end, false)) q++;
  return q - pos;
}
static size_t step_punct_default(const uint32_t *cp, const uint8_t *fl, size_t ini, size_t end, uint32_t *out) {
  return scan(m_punct_default, cp, fl, ini, end, out);
}
static size_t m_punct_falcon(const uint32_t *cp, const uint8_t *fl, size_t pos, size_t end) {
  size_t q = pos;
  while (punct_default(cp, fl, q, end, true)) q++;
  return q - pos;
}
static size_t step_punct_falcon(const uint32_t *cp, const uint8_t *fl, size_t ini, size_t end, uint32_t *out) {
  return scan(m_punct_falcon, cp, fl, ini, end, out);
}

/* [\r\n] */
static size_t m_crlf(const uint32_t *cp, const uint8_t *fl, size_t pos, size_t end) {
  (void)fl;
  (void)end;
  return is_nl(cp[pos]) ? 1 : 0;
}
static size_t step_crlf(const uint32_t *cp, const uint8_t *fl, size_t ini, size_t end, uint32_t *out) {
  return scan(m_crlf, cp, fl, ini, end, out);
}

/* Literal code point classes of the DeepSeek pre-tokenizers (inclusive
 * ranges, sorted). A White_Space code point never matches them: llama.cpp
 * replaces non-ASCII whitespace with \v before matching. */
typedef struct cp_range {
  uint32_t lo, hi;
} cp_range;

/* Cased letters: [A-Za-zµÀ-ÖØ-öø-ƺ ... 𞤀-𞥃] */
static const cp_range k_ds_letters[] = {
    {0x0041, 0x005A},   {0x0061, 0x007A},   {0x00B5, 0x00B5},   {0x00C0, 0x00D6},   {0x00D8, 0x00F6},
    {0x00F8, 0x01BA},   {0x01BC, 0x01BF},   {0x01C4, 0x0293},   {0x0295, 0x02AF},   {0x0370, 0x0373},
    {0x0376, 0x0377},   {0x037B, 0x037D},   {0x037F, 0x037F},   {0x0386, 0x0386},   {0x0388, 0x038A},
    {0x038C, 0x038C},   {0x038E, 0x03A1},   {0x03A3, 0x03F5},   {0x03F7, 0x0481},   {0x048A, 0x052F},
    {0x0531, 0x0556},   {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},   {0x1C90, 0x1CBA},
    {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},   {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},
    {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},   {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},
    {0x1F5B, 0x1F5B},   {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},   {0x1FD6, 0x1FDB},
    {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},   {0x2102, 0x2102},   {0x2107, 0x2107},
    {0x210A, 0x2113},   {0x2115, 0x2115},   {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},
    {0x2128, 0x2128},   {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2C7B},   {0x2C7E, 0x2CE4},
    {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},   {0xA680, 0xA69B},   {0xA722, 0xA76F},
    {0xA771, 0xA787},   {0xA78B, 0xA78E},   {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},
    {0xFF21, 0xFF3A},   {0xFF41, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};
/* [!-/:-~！-／：-～‘-‟　-。] */
static const cp_range k_ds_punct[] = {
    {0x0021, 0x002F}, {0x003A, 0x007E}, {0x2018, 0x201F}, {0x3000, 0x3002}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E},
};
/* [一-龥ࠀ-一가-퟿] */
static const cp_range k_ds_cjk[] = {{0x0800, 0x4E00}, {0x4E00, 0x9FA5}, {0xAC00, 0xD7FF}};

static bool in_ranges(const cp_range *r, size_t n, const uint32_t *cp, const uint8_t *fl, size_t i, size_t end) {
  if (i >= end || (fl[i] & UF_WS)) return false;
  uint32_t c = cp[i];
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (c < r[mid].lo)
      hi = mid;
    else if (c > r[mid].hi)
      lo = mid + 1;
    else
      return true;
  }
  return false;
}
#define NR(a) (sizeof(a) / sizeof((a)[0]))

/* \s?[class]+ */
static size_t m_ws_opt_run(const cp_range *r, size_t nr, const uint32_t *cp, const uint8_t *fl, size_t pos,
                           size_t end) {
  size_t q = pos;
  if (r_ws(fl, q, end) && in_ranges(r, nr, cp, fl, q + 1, end)) q++;
  if (!in_ranges(r, nr, cp, fl, q, end)) return 0;
  while (in_ranges(r, nr, cp, fl, q, end)) q++;
  return q - pos;
}
static size_t m_ds_letters(const uint32_t *cp, const uint8_t *fl, size_t pos, size_t end) {
  return m_ws_opt_run(k_ds_letters, NR(k_ds_letters), cp, fl, pos, end);
}
static size_t step_ds_letters(const uint32_t *cp, const uint8_t *fl, size_t ini, size_t end, uint32_t *out) {
  return scan(m_ds_letters, cp, fl, ini, end, out);
}
static size_t m_ds_punct(const uint32_t *cp, const uint8_t *fl, size_t pos, size_t end) {
  return m_ws_opt_run(k_ds_punct, NR(k_ds_punct), cp, fl, pos, end);
}
static size_t step_ds_punct(const uint32_t *cp, const uint8_t *fl, size_t ini, size_t end, uint32_t *out) {
  return scan(m_ds_punct, cp, fl, ini, end, out);
}
/* [一-龥ࠀ-一가-퟿]+ */
static size_t m_cjk(const uint32_t *cp, const uint8_t *fl, size_t pos, size_t end) {
  size_t q = pos;
  while (in_ranges(k_ds_cjk, NR(k_ds_cjk), cp, fl, q, end)) q++;
  return q - pos;
}
static size_t step_cjk(const uint32_t *cp, const uint8_t *fl, size_t ini, size_t end, uint32_t *out) {
  return scan(m_cjk, cp, fl, ini, end, out);
}
/* \s+$ : only the whitespace run that reaches the piece end matches. */
static size_t step_trailing_ws(const uint32_t *cp, const uint8_t *fl, size_t ini, size_t end, uint32_t *out) {
  (void)cp;
  size_t t = end, n = 0;
  while (t > ini && (fl[t - 1] & UF_WS)) t--;
  if (t > ini) out[n++] = (uint32_t)(t - ini);
  if (end > t) out[n++] = (uint32_t)(end - t);
  return n;
}
/* \s?\p{L}+ and \s?\p{P}+ (DeepSeek Coder) */
static size_t m_ws_opt_cat(uint8_t cat, const uint8_t *fl, size_t pos, size_t end) {
  size_t q = pos;
#define IN(i) ((i) < end && (fl[i] & cat) && !(fl[i] & UF_WS))
  if (r_ws(fl, q, end) && IN(q + 1)) q++;
  if (!IN(q)) return 0;
  while (IN(q)) q++;
#undef IN
  return q - pos;
}
static size_t m_ws_letters(const uint32_t *cp, const uint8_t *fl, size_t pos, size_t end) {
  (void)cp;
  return m_ws_opt_cat(UF_L, fl, pos, end);
}
static size_t step_ws_letters(const uint32_t *cp, const uint8_t *fl, size_t ini, size_t end, uint32_t *out) {
  return scan(m_ws_letters, cp, fl, ini, end, out);
}
static size_t m_ws_punct(const uint32_t *cp, const uint8_t *fl, size_t pos, size_t end) {
  (void)cp;
  return m_ws_opt_cat(UF_P, fl, pos, end);
}
static size_t step_ws_punct(const uint32_t *cp, const uint8_t *fl, size_t ini, size_t end, uint32_t *out) {
  return scan(m_ws_punct, cp, fl, ini, end, out);
}

/* ---- the table ------------------------------------------------------------ */

static const tok_pre_def k_pre[] = {
    {"default", {step_punct_default, step_gpt2, step_nums, step_digit3}, false, false, false},
    {"llama3|llama-v3|llama-bpe|falcon3|falcon-h1|pixtral|midm-2.0|lfm2", {step_llama3}, true, true, false},
    {"dbrx|smaug-bpe", {step_llama3}, false, false, false},
    {"glm4|chatglm-bpe", {step_llama3}, false, false, true},
    {"qwen2|deepseek-r1-qwen|kormo|f2llmv2|stablelm2|hunyuan|solar-open|megrez|grok-2", {step_qwen2}, false, false,
     false},
    {"qwen35", {step_qwen35}, false, false, false},
    {"gpt-4o|llama4|kanana2|talkie", {step_gpt4o}, false, false, false},
    {"tekken", {step_tekken}, true, true, false},
    {"gpt-2|phi-2|gigachat|a.x-4.0|mellum|mpt|olmo|jais|trillion|granite-docling|exaone4", {step_gpt2}, false,
     false, false},
    {"starcoder|refact|command-r|smollm|codeshell|exaone|minerva-7b|mellum2", {step_num1, step_gpt2}, false, false,
     false},
    {"falcon", {step_punct_falcon, step_gpt2, step_digit3}, false, false, false},
    {"deepseek-llm", {step_crlf, step_ds_letters, step_ds_punct, step_trailing_ws, step_cjk, step_nums}, false, false,
     false},
    {"deepseek-coder", {step_crlf, step_ws_letters, step_ws_punct, step_cjk, step_num1}, false, false, false},
};

const tok_pre_def *tok_pre_lookup(const char *name, size_t len) {
  for (size_t i = 0; i < NR(k_pre); i++) {
    const char *p = k_pre[i].names;
    for (;;) {
      const char *bar = strchr(p, '|');
      size_t n = bar ? (size_t)(bar - p) : strlen(p);
      if (n == len && memcmp(p, name, len) == 0) return &k_pre[i];
      if (!bar) break;
      p = bar + 1;
    }
  }
  return NULL;
}

bool tok_pre_ignore_merges(const tok_pre_def *d) { return d->ignore_merges; }
bool tok_pre_add_bos(const tok_pre_def *d) { return d->add_bos; }
bool tok_pre_no_bos(const tok_pre_def *d) { return d->no_bos; }

const char *tok_pre_supported(void) {
  return "default, llama3/llama-bpe, qwen2, qwen35, gpt-4o, tekken, gpt-2, starcoder, smollm, deepseek-llm, "
         "deepseek-coder, falcon, dbrx, command-r, stablelm2, ...";
}

size_t tok_pretok_split(const tok_pre_def *d, const uint32_t *cp, const uint8_t *fl, size_t n, uint32_t *seg,
                        uint32_t *tmp) {
  uint32_t *cur = seg, *nxt = tmp;
  size_t n_cur = 1;
  cur[0] = (uint32_t)n;
  for (int s = 0; s < MAX_STEPS && d->steps[s]; s++) {
    size_t n_nxt = 0, start = 0;
    for (size_t i = 0; i < n_cur; i++) {
      size_t len = cur[i];
      n_nxt += d->steps[s](cp, fl, start, start + len, nxt + n_nxt);
      start += len;
    }
    uint32_t *t = cur;
    cur = nxt;
    nxt = t;
    n_cur = n_nxt;
  }
  if (cur != seg) memcpy(seg, cur, n_cur * sizeof *seg);
  return n_cur;
}
