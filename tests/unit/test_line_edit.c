/* test_line_edit.c - the chat's line editor as a state machine: key
 * sequences (as a terminal sends them) in, the accepted line out. The
 * terminal side is covered by test_chat_pty. */
#include "cli/line_edit.h"
#include "test.h"

/* Feeds keys (a NUL-terminated byte string) to a fresh line; returns the
 * result of the last byte. */
static le_result feed(line_edit *le, const char *keys) {
  le_begin(le);
  le_result r = LE_MORE;
  for (const unsigned char *p = (const unsigned char *)keys; *p; p++) {
    r = le_feed(le, *p);
    if (r != LE_MORE && p[1]) {
      fprintf(stderr, "line ended early at byte %zu of %s\n", (size_t)(p - (const unsigned char *)keys), keys);
      return r;
    }
  }
  return r;
}

#define LINE(keys, want)                                                                            \
  do {                                                                                              \
    le_result r_ = feed(&le, keys);                                                                 \
    CHECK_MSG(r_ == LE_ACCEPT && !strcmp(le.buf, want), "keys %s: result %d, line '%s', want '%s'", \
              #keys, r_, le.buf, want);                                                             \
    le_history_add(&le, le.buf);                                                                    \
  } while (0)

int main(void) {
  line_edit le;
  le_init(&le);
  /* insertion, arrows, Home/End in their several encodings */
  LINE("abc\x1b[D\x1b[DX\x05Y\x01Z\r", "ZaXbcY");
  LINE("abc\x1bOH1\x1bOF2\x1b[1~3\x1b[4~4\r", "31abc24");
  LINE("abc\x1b[H-\x1b[F+\n", "-abc+");
  /* deletion: Backspace (DEL and Ctrl-H), Delete, Ctrl-D, Ctrl-K, Ctrl-U, Ctrl-W */
  LINE("abcd\x7f\x08" "e\r", "abe");
  LINE("abcd\x01\x1b[3~\x04\r", "cd");
  LINE("abcdef\x02\x02\x0b\r", "abcd");
  LINE("abcdef\x02\x02\x15\r", "ef");
  LINE("one two three\x17\x17x\r", "one x");
  /* word movement: Alt-B/F and Ctrl-Left/Right */
  LINE("one two three\x1b" "b\x1b" "bX\r", "one Xtwo three");
  LINE("one two three\x01\x1b[1;5C!\x1b" "f?\r", "one! two? three");
  /* UTF-8: one key moves and deletes one character */
  LINE("h\xc3\xa9llo\x1b[D\x7f\x1b[D\x1b[D\x1b[3~\r", "hlo");
  LINE("\xe2\x82\xac\xf0\x9f\x98\x80x\x1b[D\x7fy\r", "\xe2\x82\xacyx");
  /* history: Up/Down and Ctrl-P/N; the typed line comes back at the bottom */
  LINE("\x1b[A\r", "\xe2\x82\xacyx");
  LINE("\x1b[A\x1b[A\x1b[A\r", "one! two? three");
  LINE("draft\x1b[A\x1b[B\r", "draft");
  LINE("\x10\x10\x0e\r", "draft");
  /* Ctrl-R: incremental search of the history, Enter takes the match,
   * Ctrl-R again goes to an older match, other keys edit the match */
  LINE("\x12two\r", "one! two? three");
  LINE("\x12" "ab\x12\r", "abe");
  LINE("\x12" "ab\x12\x05!\r", "abcd!");
  /* a search without a match leaves an empty line; Ctrl-G cancels */
  LINE("\x12zzz\r", "");
  LINE("keep\x12one\x07\r", "keep");
  /* Ctrl-C abandons the line, Ctrl-D on an empty line is end of input,
   * Ctrl-D elsewhere deletes */
  CHECK(feed(&le, "partial\x03") == LE_INTR);
  CHECK(feed(&le, "\x04") == LE_EOF);
  LINE("ab\x01\x04\r", "b");
  /* unknown escape sequences and control keys are ignored */
  LINE("a\x1b[99Z\x1b[5~\x1bxb\x0c\r", "ab");
  /* history bounds: the oldest entries go, repeats are kept once */
  line_edit h;
  le_init(&h);
  char buf[32];
  for (int i = 0; i < LE_MAX_HISTORY + 10; i++) {
    snprintf(buf, sizeof buf, "line %d", i);
    CHECK(le_history_add(&h, buf) == 0);
    CHECK(le_history_add(&h, buf) == 0);
  }
  CHECK_EQ_INT(h.n_hist, LE_MAX_HISTORY);
  CHECK_STR(h.hist[0], "line 10");
  le_free(&h);
  le_free(&le);
  le_free(NULL);
  TEST_DONE();
}
