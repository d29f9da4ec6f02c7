/* stop.c - streaming stop-string matcher. See stop.h.
 *
 * Each feed looks at T = held + piece (assembled in the caller's output
 * buffer, so nothing is allocated): the stop string in T that completes
 * first ends the stream; otherwise the longest suffix of T that is a proper
 * prefix of a stop string is held back and the rest is released. held never
 * contains a complete stop string, so a match found in T is new. Cost per
 * feed: O(|T| * stops) for the search plus O(sum of stop lengths^2) at most
 * for the held suffix, in practice a few hundred byte compares.
 */
#include "chat/stop.h"

#include "base/error.h"

#include <string.h>

int stop_init(stop_matcher *m, const char *const *stops, const size_t *lens, int n, char *err) {
  memset(m, 0, sizeof *m);
  m->which = -1;
  if (n < 0 || n > STOP_MAX_STRINGS)
    return pw_seterr(err, PW_EINVAL, "at most %d stop strings are supported, got %d", STOP_MAX_STRINGS, n);
  for (int i = 0; i < n; i++) {
    size_t l = lens ? lens[i] : (stops[i] ? strlen(stops[i]) : 0);
    if (!stops[i] || l == 0) return pw_seterr(err, PW_EINVAL, "stop string %d is empty", i);
    if (l > STOP_MAX_LEN)
      return pw_seterr(err, PW_EINVAL, "stop string %d is %zu bytes; at most %d are supported", i, l, STOP_MAX_LEN);
    memcpy(m->str[i], stops[i], l);
    m->len[i] = (uint16_t)l;
  }
  m->n = n;
  return 0;
}

void stop_reset(stop_matcher *m) {
  m->nheld = 0;
  m->stopped = false;
  m->which = -1;
}

size_t stop_feed(stop_matcher *m, const char *piece, size_t n, char *out, bool *stopped) {
  *stopped = m->stopped;
  if (m->stopped) return 0;
  if (m->n == 0) {
    if (n) memcpy(out, piece, n);
    return n;
  }
  size_t total = m->nheld + n;
  memcpy(out, m->held, m->nheld);
  if (n) memcpy(out + m->nheld, piece, n);
  /* the match that completes first (smallest end; at equal ends the
   * longer one, which starts earlier), so the result does not depend on
   * how the text was split into pieces */
  size_t best_end = total + 1, best = total;
  int which = -1;
  for (int i = 0; i < m->n; i++) {
    size_t l = m->len[i];
    size_t hl = best_end <= total ? best_end : total; /* only matches ending by best_end */
    if (l > hl) continue;
    const char *p = memmem(out, hl, m->str[i], l);
    if (!p) continue;
    size_t st = (size_t)(p - out), end = st + l;
    if (end < best_end || (end == best_end && st < best)) {
      best_end = end;
      best = st;
      which = i;
    }
  }
  if (best_end <= total) {
    m->stopped = true;
    m->which = (int8_t)which;
    m->nheld = 0;
    *stopped = true;
    return best;
  }
  /* longest suffix that is a proper prefix of some stop string */
  size_t hold = 0;
  for (int i = 0; i < m->n; i++) {
    size_t k = (size_t)m->len[i] - 1;
    if (k > total) k = total;
    for (; k > hold; k--) {
      if (memcmp(out + total - k, m->str[i], k) == 0) {
        hold = k;
        break;
      }
    }
  }
  memcpy(m->held, out + total - hold, hold);
  m->nheld = (uint16_t)hold;
  return total - hold;
}

size_t stop_flush(stop_matcher *m, char *out) {
  if (m->stopped) return 0;
  size_t k = m->nheld;
  memcpy(out, m->held, k);
  m->nheld = 0;
  return k;
}
