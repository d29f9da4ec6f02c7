/* cmd_tokenize.c - `power tokenize --model M [--raw] [--ids] (TEXT | --file F)`:
 * prints one `id<TAB>piece` line per token (pieces escaped so control bytes,
 * newlines and invalid UTF-8 are visible), or with --ids the ids on one
 * line. By default BOS/EOS are added as the vocabulary says and special-token
 * text is parsed; --raw does neither. Works on vocabulary-only GGUF files.
 * Not here: the tokenizer itself (tok/). */
#include "cli/cmd_tokenize.h"

#include "base/error.h"
#include "cli/cli.h"
#include "gguf/gguf.h"
#include "tok/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *o) {
  fprintf(o,
          "usage: power tokenize [--model M] [--raw] [--ids] (TEXT | --file F | --file -)\n"
          "  --model M   GGUF file (a full model or a vocabulary-only file)\n"
          "  --raw       add no BOS/EOS and treat special-token text as plain text\n"
          "  --ids       print only the ids, space-separated, on one line\n"
          "  --file F    read the text from F ('-' = standard input)\n");
}

/* Reads all of f; returns a malloc'd buffer or NULL. */
static char *slurp(FILE *f, size_t *len) {
  size_t cap = 1 << 16, n = 0;
  char *b = malloc(cap);
  if (!b) return NULL;
  for (;;) {
    if (n == cap) {
      char *nb = realloc(b, cap *= 2);
      if (!nb) {
        free(b);
        return NULL;
      }
      b = nb;
    }
    size_t r = fread(b + n, 1, cap - n, f);
    n += r;
    if (r == 0) break;
  }
  if (ferror(f)) {
    free(b);
    return NULL;
  }
  *len = n;
  return b;
}

/* Length of a valid UTF-8 character at s[0..n), 0 if none. */
static size_t utf8_char(const unsigned char *s, size_t n) {
  size_t l;
  if (s[0] >= 0xC2 && s[0] <= 0xDF)
    l = 2;
  else if (s[0] >= 0xE0 && s[0] <= 0xEF)
    l = 3;
  else if (s[0] >= 0xF0 && s[0] <= 0xF4)
    l = 4;
  else
    return 0;
  if (l > n) return 0;
  for (size_t i = 1; i < l; i++)
    if ((s[i] & 0xC0) != 0x80) return 0;
  if ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] > 0x9F) || (s[0] == 0xF0 && s[1] < 0x90) ||
      (s[0] == 0xF4 && s[1] > 0x8F))
    return 0;
  return l;
}

static void print_escaped(const char *p, size_t n) {
  const unsigned char *s = (const unsigned char *)p;
  for (size_t i = 0; i < n;) {
    unsigned char c = s[i];
    if (c == '\\') {
      fputs("\\\\", stdout);
    } else if (c == '\n') {
      fputs("\\n", stdout);
    } else if (c == '\t') {
      fputs("\\t", stdout);
    } else if (c == '\r') {
      fputs("\\r", stdout);
    } else if (c < 0x20 || c == 0x7F) {
      printf("\\x%02X", c);
    } else if (c >= 0x80) {
      size_t l = utf8_char(s + i, n - i);
      if (l == 0) {
        printf("\\x%02X", c);
      } else {
        fwrite(s + i, 1, l, stdout);
        i += l;
        continue;
      }
    } else {
      putchar(c);
    }
    i++;
  }
}

int cmd_tokenize(int argc, char **argv) {
  const char *model = NULL, *file = NULL, *text = NULL;
  bool raw = false, ids_only = false;
  char err[PW_ERRMAX];
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--model") || !strcmp(a, "-m") || !strcmp(a, "--file") || !strcmp(a, "-f")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "power tokenize: %s needs a value\n", a);
        return 1;
      }
      bool is_model = !strcmp(a, "--model") || !strcmp(a, "-m");
      if (is_model)
        model = argv[++i];
      else
        file = argv[++i];
    } else if (!strcmp(a, "--raw")) {
      raw = true;
    } else if (!strcmp(a, "--ids")) {
      ids_only = true;
    } else if (a[0] == '-' && a[1] == '-' && a[2] != 0) {
      fprintf(stderr, "power tokenize: unknown option '%s' (try --help)\n", a);
      return 1;
    } else if (!text) {
      text = a;
    } else {
      fprintf(stderr, "power tokenize: give the text as one argument (quote it)\n");
      return 1;
    }
  }
  if ((text != NULL) == (file != NULL)) {
    fprintf(stderr, "power tokenize: give either TEXT or --file F (try --help)\n");
    return 1;
  }
  {
    model = cli_resolve_model(model, err, sizeof err);
    if (!model) {
      fprintf(stderr, "power tokenize: %s\n", err);
      return 1;
    }
  }

  int status = 1;
  char *buf = NULL;
  size_t len = 0;
  gguf_file *g = NULL;
  tok_vocab *v = NULL;
  int32_t *ids = NULL;
  if (file) {
    FILE *f = strcmp(file, "-") ? fopen(file, "rb") : stdin;
    if (!f) {
      fprintf(stderr, "power tokenize: cannot open %s\n", file);
      return 1;
    }
    buf = slurp(f, &len);
    if (f != stdin) fclose(f);
    if (!buf) {
      fprintf(stderr, "power tokenize: cannot read %s\n", file);
      return 1;
    }
    text = buf;
  } else {
    len = strlen(text);
  }
  if (gguf_open(model, &g, err) < 0) {
    fprintf(stderr, "power tokenize: %s\n", err);
    goto done;
  }
  if (tok_vocab_load(g, &v, err) < 0) {
    fprintf(stderr, "power tokenize: %s: %s\n", model, err);
    goto done;
  }
  size_t n = 0, cap = len + 4;
  ids = malloc(cap * sizeof *ids);
  if (!ids) {
    fprintf(stderr, "power tokenize: out of memory\n");
    goto done;
  }
  int rc = tok_encode(v, text, len, !raw, !raw, ids, cap, &n, err);
  if (rc == PW_ERANGE) { /* cannot happen for cap > len + BOS/EOS, kept for safety */
    int32_t *nids = realloc(ids, n * sizeof *ids);
    if (nids) {
      ids = nids;
      rc = tok_encode(v, text, len, !raw, !raw, ids, n, &n, err);
    }
  }
  if (rc < 0) {
    fprintf(stderr, "power tokenize: %s\n", err);
    goto done;
  }
  if (ids_only) {
    for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    putchar('\n');
  } else {
    for (size_t i = 0; i < n; i++) {
      const char *p;
      size_t pl = tok_piece_ref(v, ids[i], true, &p);
      printf("%d\t", ids[i]);
      print_escaped(p, pl);
      putchar('\n');
    }
  }
  status = fflush(stdout) == 0 ? 0 : 1;
done:
  free(ids);
  tok_vocab_destroy(v);
  gguf_close(g);
  free(buf);
  return status;
}
