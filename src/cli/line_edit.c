/* line_edit.c - the line editor of `power chat` (see line_edit.h): an
 * editing state machine fed bytes, and a raw-mode terminal loop around it
 * that redraws the line after every key. */
#include "cli/line_edit.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <unistd.h>

#define KEY_CTRL(c) ((c) & 0x1f)

void le_init(line_edit *le) {
  memset(le, 0, sizeof *le);
  le->found = -1;
}

void le_free(line_edit *le) {
  if (!le) return;
  free(le->buf);
  for (int i = 0; i < le->n_hist; i++) free(le->hist[i]);
  free(le->hist);
  free(le->saved);
  memset(le, 0, sizeof *le);
}

static int set_text(line_edit *le, const char *s, size_t n) {
  if (n + 1 > le->cap) {
    size_t cap = n + 1 > 256 ? n + 1 : 256;
    char *p = realloc(le->buf, cap);
    if (!p) return -1;
    le->buf = p;
    le->cap = cap;
  }
  memcpy(le->buf, s, n);
  le->buf[n] = 0;
  le->len = le->pos = n;
  return 0;
}

void le_begin(line_edit *le) {
  set_text(le, "", 0);
  le->hist_at = le->n_hist;
  free(le->saved);
  le->saved = NULL;
  le->n_esc = 0;
  le->searching = false;
  le->n_query = 0;
  le->found = -1;
}

int le_history_add(line_edit *le, const char *line) {
  if (!*line || (le->n_hist && !strcmp(le->hist[le->n_hist - 1], line))) return 0;
  char *copy = strdup(line);
  if (!copy) return -1;
  if (le->n_hist == LE_MAX_HISTORY) {
    free(le->hist[0]);
    memmove(le->hist, le->hist + 1, (size_t)(le->n_hist - 1) * sizeof *le->hist);
    le->n_hist--;
  } else {
    char **h = realloc(le->hist, (size_t)(le->n_hist + 1) * sizeof *h);
    if (!h) {
      free(copy);
      return -1;
    }
    le->hist = h;
  }
  le->hist[le->n_hist++] = copy;
  return 0;
}

/* UTF-8 continuation bytes are skipped so the cursor stays on characters. */
static bool is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

static size_t prev_char(const line_edit *le, size_t i) {
  if (i == 0) return 0;
  i--;
  while (i > 0 && is_cont((unsigned char)le->buf[i])) i--;
  return i;
}

static size_t next_char(const line_edit *le, size_t i) {
  if (i >= le->len) return le->len;
  i++;
  while (i < le->len && is_cont((unsigned char)le->buf[i])) i++;
  return i;
}

static void delete_range(line_edit *le, size_t from, size_t to) {
  memmove(le->buf + from, le->buf + to, le->len - to + 1);
  le->len -= to - from;
  le->pos = from;
}

static void insert_byte(line_edit *le, unsigned char c) {
  if (le->len + 1 >= LE_MAX_LINE) return;
  if (le->len + 2 > le->cap) {
    size_t cap = le->cap ? le->cap * 2 : 256;
    char *p = realloc(le->buf, cap);
    if (!p) return; /* the key is dropped; the line stays as it was */
    le->buf = p;
    le->cap = cap;
  }
  memmove(le->buf + le->pos + 1, le->buf + le->pos, le->len - le->pos + 1);
  le->buf[le->pos++] = (char)c;
  le->len++;
}

static bool is_space(char c) { return c == ' ' || c == '\t'; }

static size_t word_left(const line_edit *le, size_t i) {
  while (i > 0 && is_space(le->buf[i - 1])) i--;
  while (i > 0 && !is_space(le->buf[i - 1])) i--;
  return i;
}

static size_t word_right(const line_edit *le, size_t i) {
  while (i < le->len && is_space(le->buf[i])) i++;
  while (i < le->len && !is_space(le->buf[i])) i++;
  return i;
}

/* Shows history entry `at` (n_hist = the line that was being typed). */
static void history_go(line_edit *le, int at) {
  if (at < 0 || at > le->n_hist || at == le->hist_at) return;
  if (le->hist_at == le->n_hist) {
    free(le->saved);
    le->saved = strdup(le->buf ? le->buf : "");
  }
  le->hist_at = at;
  const char *s = at == le->n_hist ? (le->saved ? le->saved : "") : le->hist[at];
  set_text(le, s, strlen(s));
}

/* The newest entry before `before` containing the query; -1 if none. */
static int search_from(line_edit *le, int before) {
  le->query[le->n_query] = 0;
  for (int i = before - 1; i >= 0; i--)
    if (strstr(le->hist[i], le->query)) return i;
  return -1;
}

static void search_end(line_edit *le, bool take) {
  if (take && le->found >= 0) {
    set_text(le, le->hist[le->found], strlen(le->hist[le->found]));
    le->hist_at = le->n_hist;
  }
  le->searching = false;
}

static le_result key(line_edit *le, int k);

/* Key codes beyond bytes, from escape sequences. */
enum { K_UP = 256, K_DOWN, K_RIGHT, K_LEFT, K_HOME, K_END, K_DEL, K_WLEFT, K_WRIGHT };

static le_result search_key(line_edit *le, int k) {
  if (k == KEY_CTRL('R')) {
    int f = search_from(le, le->found >= 0 ? le->found : le->n_hist);
    if (f >= 0) le->found = f;
    return LE_MORE;
  }
  if (k == KEY_CTRL('G')) {
    search_end(le, false);
    return LE_MORE;
  }
  if (k == 127 || k == KEY_CTRL('H')) {
    if (le->n_query) {
      le->n_query--;
      while (le->n_query && is_cont((unsigned char)le->query[le->n_query])) le->n_query--;
      le->found = search_from(le, le->n_hist);
    }
    return LE_MORE;
  }
  if (k >= 32 && k < 256 && k != 127) {
    if (le->n_query + 1 < sizeof le->query) {
      le->query[le->n_query++] = (char)k;
      int f = search_from(le, le->found >= 0 ? le->found + 1 : le->n_hist);
      le->found = f;
    }
    return LE_MORE;
  }
  /* anything else ends the search with the match as the line, then acts */
  search_end(le, true);
  return key(le, k);
}

static le_result key(line_edit *le, int k) {
  if (le->searching) return search_key(le, k);
  switch (k) {
  case '\r':
  case '\n': return LE_ACCEPT;
  case KEY_CTRL('C'): return LE_INTR;
  case KEY_CTRL('D'):
    if (le->len == 0) return LE_EOF;
    /* fall through */
  case K_DEL:
    if (le->pos < le->len) delete_range(le, le->pos, next_char(le, le->pos));
    return LE_MORE;
  case 127:
  case KEY_CTRL('H'):
    if (le->pos > 0) delete_range(le, prev_char(le, le->pos), le->pos);
    return LE_MORE;
  case KEY_CTRL('A'):
  case K_HOME: le->pos = 0; return LE_MORE;
  case KEY_CTRL('E'):
  case K_END: le->pos = le->len; return LE_MORE;
  case KEY_CTRL('B'):
  case K_LEFT: le->pos = prev_char(le, le->pos); return LE_MORE;
  case KEY_CTRL('F'):
  case K_RIGHT: le->pos = next_char(le, le->pos); return LE_MORE;
  case K_WLEFT: le->pos = word_left(le, le->pos); return LE_MORE;
  case K_WRIGHT: le->pos = word_right(le, le->pos); return LE_MORE;
  case KEY_CTRL('K'):
    le->len = le->pos;
    le->buf[le->len] = 0;
    return LE_MORE;
  case KEY_CTRL('U'): delete_range(le, 0, le->pos); return LE_MORE;
  case KEY_CTRL('W'): delete_range(le, word_left(le, le->pos), le->pos); return LE_MORE;
  case KEY_CTRL('P'):
  case K_UP: history_go(le, le->hist_at - 1); return LE_MORE;
  case KEY_CTRL('N'):
  case K_DOWN: history_go(le, le->hist_at + 1); return LE_MORE;
  case KEY_CTRL('R'):
    le->searching = true;
    le->n_query = 0;
    le->found = -1;
    return LE_MORE;
  default:
    if (k == '\t' || (k >= 32 && k < 256 && k != 127)) insert_byte(le, (unsigned char)k);
    return LE_MORE; /* other control keys are ignored */
  }
}

le_result le_feed(line_edit *le, unsigned char c) {
  if (!le->buf) set_text(le, "", 0);
  if (!le->buf) return LE_INTR;
  if (le->n_esc == 0) {
    if (c == 0x1b) {
      le->esc[le->n_esc++] = c;
      return LE_MORE;
    }
    return key(le, c);
  }
  le->esc[le->n_esc++] = c;
  if (le->n_esc == 2) {
    if (c == '[' || c == 'O') return LE_MORE;
    le->n_esc = 0; /* Alt-<key> */
    if (c == 'b' || c == 'B') return key(le, K_WLEFT);
    if (c == 'f' || c == 'F') return key(le, K_WRIGHT);
    if (le->searching) search_end(le, true);
    return LE_MORE;
  }
  /* CSI / SS3: parameters until a final byte 0x40-0x7e */
  if (c < 0x40 || c > 0x7e) {
    if (le->n_esc == (int)sizeof le->esc) le->n_esc = 0; /* too long: dropped */
    return LE_MORE;
  }
  int n = le->n_esc;
  le->n_esc = 0;
  int p = le->esc[2] >= '0' && le->esc[2] <= '9' ? le->esc[2] - '0' : 0;
  bool ctrl_mod = n >= 6 && le->esc[3] == ';' && le->esc[4] == '5'; /* ESC [ 1 ; 5 C */
  switch (c) {
  case 'A': return key(le, K_UP);
  case 'B': return key(le, K_DOWN);
  case 'C': return key(le, ctrl_mod ? K_WRIGHT : K_RIGHT);
  case 'D': return key(le, ctrl_mod ? K_WLEFT : K_LEFT);
  case 'H': return key(le, K_HOME);
  case 'F': return key(le, K_END);
  case '~':
    if (p == 1 || p == 7) return key(le, K_HOME);
    if (p == 4 || p == 8) return key(le, K_END);
    if (p == 3) return key(le, K_DEL);
    return LE_MORE;
  default: return LE_MORE;
  }
}

/* ---- terminal ---------------------------------------------------------- */

static void put(int fd, const char *s, size_t n) {
  while (n) {
    ssize_t w = write(fd, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= (size_t)w;
  }
}

static size_t n_chars(const char *s, size_t n) {
  size_t k = 0;
  for (size_t i = 0; i < n; i++) k += !is_cont((unsigned char)s[i]);
  return k;
}

/* Redraws the line in place: carriage return, prompt and text, clear to
 * the end, cursor moved back to its place. A line wider than the terminal
 * wraps and is redrawn from its last row only (a known limit). */
static void redraw(const line_edit *le, int fd, const char *prompt) {
  char head[384];
  if (le->searching) {
    const char *m = le->found >= 0 ? le->hist[le->found] : "";
    int hn = snprintf(head, sizeof head, "\r(reverse-i-search)'%.*s': ", (int)le->n_query, le->query);
    put(fd, head, (size_t)hn);
    put(fd, m, strlen(m));
    put(fd, "\x1b[K", 3);
    return;
  }
  put(fd, "\r", 1);
  put(fd, prompt, strlen(prompt));
  put(fd, le->buf, le->len);
  put(fd, "\x1b[K", 3);
  size_t back = n_chars(le->buf + le->pos, le->len - le->pos);
  if (back) {
    int hn = snprintf(head, sizeof head, "\x1b[%zuD", back);
    put(fd, head, (size_t)hn);
  }
}

int le_read_line(line_edit *le, int fd_in, int fd_out, const char *prompt) {
  struct termios old, raw;
  if (tcgetattr(fd_in, &old) != 0) return -1;
  raw = old;
  /* bytes as typed, no echo, no signals (Ctrl-C is a key here); output
   * processing stays on so "\n" still returns the carriage */
  raw.c_iflag &= ~(tcflag_t)(BRKINT | ICRNL | INPCK | ISTRIP | IXON);
  raw.c_lflag &= ~(tcflag_t)(ECHO | ICANON | IEXTEN | ISIG);
  raw.c_cflag |= CS8;
  raw.c_cc[VMIN] = 1;
  raw.c_cc[VTIME] = 0;
  if (tcsetattr(fd_in, TCSADRAIN, &raw) != 0) return -1;
  le_begin(le);
  redraw(le, fd_out, prompt);
  int res = -1;
  for (;;) {
    unsigned char c;
    ssize_t r = read(fd_in, &c, 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      res = r == 0 ? LE_EOF : -1;
      break;
    }
    le_result lr = le_feed(le, c);
    if (lr == LE_MORE) {
      redraw(le, fd_out, prompt);
      continue;
    }
    if (le->searching) search_end(le, true);
    redraw(le, fd_out, prompt);
    put(fd_out, lr == LE_INTR ? "^C\r\n" : "\r\n", lr == LE_INTR ? 4 : 2);
    res = lr;
    break;
  }
  int e = errno;
  tcsetattr(fd_in, TCSADRAIN, &old);
  errno = e;
  return res;
}
