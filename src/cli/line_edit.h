/* line_edit.h - a small line editor for `power chat` on a terminal: cursor
 * movement (arrows, Home/End, Ctrl-A/E/B/F, Alt-B/F), deletion (Backspace,
 * Delete, Ctrl-D/H/K/U/W), history (Up/Down, Ctrl-P/N) and incremental
 * reverse search (Ctrl-R). Cursor movement and deletion step over whole
 * UTF-8 characters; each character is taken to be one column wide.
 *
 * Two parts: an editing state machine fed one byte at a time (le_feed: no
 * terminal, no I/O, so tests drive it directly), and le_read_line, which puts
 * a terminal in raw mode, feeds it the keys and redraws the line. Not a
 * readline: no completion, no multi-line editing, no key bindings file. */
#ifndef PW_CLI_LINE_EDIT_H
#define PW_CLI_LINE_EDIT_H

#include <stdbool.h>
#include <stddef.h>

#define LE_MAX_LINE (1u << 20) /* bytes of one line; more is not inserted */
#define LE_MAX_HISTORY 500     /* entries kept; the oldest go first */

typedef enum le_result {
  LE_MORE = 0,   /* keep feeding */
  LE_ACCEPT = 1, /* Enter: the line is in le->buf */
  LE_EOF = 2,    /* Ctrl-D on an empty line */
  LE_INTR = 3,   /* Ctrl-C: the line was abandoned */
} le_result;

typedef struct line_edit {
  char *buf;        /* owned: the line, NUL-terminated */
  size_t len, cap;  /* bytes */
  size_t pos;       /* cursor, byte offset of a character boundary */
  char **hist;      /* owned: entries, oldest first */
  int n_hist;
  int hist_at;      /* entry shown by Up/Down; n_hist = the line being typed */
  char *saved;      /* owned: the line being typed while browsing history */
  /* escape sequences in progress */
  unsigned char esc[8];
  int n_esc;
  /* Ctrl-R search */
  bool searching;
  char query[256];
  size_t n_query;
  int found;        /* history index of the match; -1 = none */
} line_edit;

void le_init(line_edit *le);
void le_free(line_edit *le);
/* Starts a new line (empty, history browsing reset). */
void le_begin(line_edit *le);
/* Feeds one input byte. Returns LE_MORE, or what ended the line. */
le_result le_feed(line_edit *le, unsigned char c);
/* Adds a line to the history (empty lines and repeats of the last entry
 * are skipped). 0, or -1 when out of memory. */
int le_history_add(line_edit *le, const char *line);

/* Reads one line from fd_in (a terminal) showing prompt on fd_out and
 * returns le_result (LE_ACCEPT: the line is in le->buf). The terminal is
 * restored before returning, also on error (-1: not a terminal or a read
 * error; errno set). */
int le_read_line(line_edit *le, int fd_in, int fd_out, const char *prompt);

#endif
