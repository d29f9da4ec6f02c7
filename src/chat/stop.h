/* stop.h - streaming stop-string matching over generated text.
 *
 * What it is: a matcher with caller-owned, fixed-size state (no allocation
 * at any point) that is fed the text of generated tokens piece by piece and
 * says which bytes may be sent to the client now. Bytes that could be the
 * start of a stop string are held back until the next piece decides; when a
 * stop string completes, the text before it is released and the stop string
 * and everything after it are dropped (OpenAI `stop` semantics: the stop
 * string is not part of the output). When several stop strings match, the
 * one that completes first in the text wins (at the same end, the longer),
 * so the result does not depend on how the text is split into pieces.
 *
 * What it is not: token-level stopping (EOS, max tokens) or UTF-8 repair;
 * it works on bytes, so it never splits a stop string, but a held-back tail
 * may end inside a UTF-8 sequence exactly as the input did.
 *
 * Usage (per request, e.g. in the sequence's state; nothing to free):
 *
 *   stop_matcher sm;
 *   if (stop_init(&sm, stops, lens, n_stops, err)) ...  // n_stops may be 0
 *   // out must hold at least STOP_OUT_CAP(piece_len) bytes (a buffer sized
 *   // once at admission: the largest piece + STOP_MAX_LEN)
 *   for each generated token:
 *     bool stopped;
 *     size_t k = stop_feed(&sm, piece, piece_len, out, &stopped);
 *     send(out, k);                  // k may be 0 while a prefix is held
 *     if (stopped) { finish with reason "stop"; break; }
 *   at the end of generation for another reason (EOS, length, cancel):
 *     size_t k = stop_flush(&sm, out);  // held-back bytes, <= STOP_MAX_LEN
 *     send(out, k);
 *
 * After a match, stop_feed returns 0 with *stopped = true and stop_flush
 * returns 0. Threads: a matcher belongs to one thread at a time.
 */
#ifndef PW_CHAT_STOP_H
#define PW_CHAT_STOP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define STOP_MAX_STRINGS 8
#define STOP_MAX_LEN 256 /* bytes of one stop string */

/* Capacity of the output buffer for a piece of n bytes. */
#define STOP_OUT_CAP(n) ((size_t)(n) + STOP_MAX_LEN)

typedef struct stop_matcher {
  int n;                                      /* stop strings */
  uint16_t len[STOP_MAX_STRINGS];             /* bytes of each, 1..STOP_MAX_LEN */
  char str[STOP_MAX_STRINGS][STOP_MAX_LEN];   /* the stop strings (not NUL-terminated) */
  char held[STOP_MAX_LEN];                    /* held-back tail: a proper prefix of some stop string */
  uint16_t nheld;                             /* bytes in held, < STOP_MAX_LEN */
  bool stopped;                               /* a stop string matched */
  int8_t which;                               /* when stopped: the index of the string that matched */
} stop_matcher;

/* Copies n stop strings (stops[i] of lens[i] bytes; lens may be NULL for
 * NUL-terminated strings) into m. Returns PW_EINVAL with a message when
 * n > STOP_MAX_STRINGS or a string is empty or longer than STOP_MAX_LEN. */
int stop_init(stop_matcher *m, const char *const *stops, const size_t *lens, int n, char *err);

/* Forgets held bytes and any match, keeping the stop strings. */
void stop_reset(stop_matcher *m);

/* Feeds a piece of generated text. Writes the bytes that may be emitted
 * now to out (capacity >= STOP_OUT_CAP(n)) and returns their count; sets
 * *stopped when a stop string matched (then the returned bytes are the
 * text before it and the matcher ignores further input). */
size_t stop_feed(stop_matcher *m, const char *piece, size_t n, char *out, bool *stopped);

/* End of generation without a match: writes the held-back bytes to out
 * (capacity >= STOP_MAX_LEN) and returns their count. */
size_t stop_flush(stop_matcher *m, char *out);

#endif
