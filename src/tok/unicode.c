/* unicode.c - UTF-8 coding and the byte-level BPE byte mapping. The category
 * tables live in the generated unicode_tables.c. */
#include "tok/unicode.h"

uint32_t tok_utf8_decode(const uint8_t *s, size_t len, size_t *adv) {
  uint8_t b0 = s[0];
  size_t need;
  uint32_t cp;
  if (b0 < 0x80) {
    *adv = 1;
    return b0;
  }
  if ((b0 & 0xE0) == 0xC0) {
    need = 1;
    cp = b0 & 0x1F;
  } else if ((b0 & 0xF0) == 0xE0) {
    need = 2;
    cp = b0 & 0x0F;
  } else if ((b0 & 0xF8) == 0xF0) {
    need = 3;
    cp = b0 & 0x07;
  } else {
    goto bad; /* stray continuation byte or 0xF8..0xFF */
  }
  if (need >= len) goto bad;
  for (size_t i = 1; i <= need; i++) {
    if ((s[i] & 0xC0) != 0x80) goto bad;
    cp = (cp << 6) | (s[i] & 0x3F);
  }
  /* llama.cpp decodes F4..F7 sequences above U+10FFFF and then fails to
   * re-encode them; we treat them as malformed instead. */
  if (cp > 0x10FFFF) goto bad;
  *adv = need + 1;
  return cp;
bad:
  *adv = 1;
  return 0xFFFD;
}

size_t tok_utf8_encode(uint32_t cp, uint8_t out[4]) {
  if (cp < 0x80) {
    out[0] = (uint8_t)cp;
    return 1;
  }
  if (cp < 0x800) {
    out[0] = (uint8_t)(0xC0 | (cp >> 6));
    out[1] = (uint8_t)(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = (uint8_t)(0xE0 | (cp >> 12));
    out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    out[2] = (uint8_t)(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = (uint8_t)(0xF0 | ((cp >> 18) & 0x07));
  out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
  out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
  out[3] = (uint8_t)(0x80 | (cp & 0x3F));
  return 4;
}

uint32_t tok_lower_ascii(uint32_t cp) {
  if (cp >= 'A' && cp <= 'Z') return cp + 32;
  if (cp < 0x80) return cp;
  for (size_t i = 0; i < tok_ucd_n_lower_ascii; i++)
    if (tok_ucd_lower_ascii[i][0] == cp) return tok_ucd_lower_ascii[i][1];
  return cp;
}

/* Bytes 0x21..0x7E, 0xA1..0xAC and 0xAE..0xFF stand for themselves; the
 * other 68 bytes map, in byte order, to U+0100.. (GPT-2's bytes_to_unicode). */
uint32_t tok_byte_to_cp(uint8_t b) {
  if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) return b;
  if (b <= 0x20) return 256u + b;
  if (b <= 0xA0) return 256u + 33u + (uint32_t)(b - 0x7F);
  return 256u + 33u + 34u; /* 0xAD */
}

int tok_cp_to_byte(uint32_t cp) {
  if ((cp >= 0x21 && cp <= 0x7E) || (cp >= 0xA1 && cp <= 0xAC) || (cp >= 0xAE && cp <= 0xFF)) return (int)cp;
  if (cp >= 256 && cp <= 256 + 32) return (int)(cp - 256);
  if (cp >= 256 + 33 && cp <= 256 + 66) return (int)(cp - 256 - 33 + 0x7F);
  if (cp == 256 + 67) return 0xAD;
  return -1;
}

uint32_t tok_lower(uint32_t cp) {
  size_t lo = 0, hi = tok_ucd_n_lower;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (tok_ucd_lower[mid][0] < cp)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < tok_ucd_n_lower && tok_ucd_lower[lo][0] == cp ? tok_ucd_lower[lo][1] : cp;
}

uint32_t tok_nfd_first(uint32_t cp) {
  size_t lo = 0, hi = tok_ucd_n_nfd; /* first range ending at or after cp */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (tok_ucd_nfd[mid][1] < cp)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < tok_ucd_n_nfd && tok_ucd_nfd[lo][0] <= cp ? tok_ucd_nfd[lo][2] : cp;
}
