/* cmd_template.c - `power template (--model M.gguf | --template FILE.jinja)
 * --vars VARS.json [--date YYYY-MM-DDTHH:MM:SS]`: renders a chat template
 * with the variables of a JSON object (messages, add_generation_prompt,
 * bos_token, eos_token, tools, ...) and writes exactly the rendered bytes to
 * stdout (no newline added), so prompts can be checked against other
 * implementations byte for byte. --date fixes what strftime_now sees (UTC).
 * A model without tokenizer.chat_template gets the ChatML default. Errors
 * are one line on stderr and exit status 1. Not a chat client: see run. */
#include "cli/cmd_template.h"

#include "base/error.h"
#include "chat/chat.h"
#include "cli/cli.h"
#include "gguf/gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TEMPLATE_MAX_FILE ((long)16 << 20)

static void usage(FILE *out) {
  fprintf(out, "usage: power template (--model M.gguf | --template FILE.jinja) --vars VARS.json "
               "[--date YYYY-MM-DDTHH:MM:SS]\n");
}

static char *model_template(const char *path, size_t *len, char *err) {
  gguf_file *f = NULL;
  char gerr[PW_ERRMAX];
  if (gguf_open(path, &f, gerr)) {
    pw_seterr(err, PW_EFORMAT, "%s: %s", path, gerr);
    return NULL;
  }
  gguf_str s;
  const char *src = chat_default_template();
  size_t n = strlen(src);
  if (gguf_get_str(f, "tokenizer.chat_template", &s)) { /* a view into the mapping, not NUL-terminated */
    src = s.ptr;
    n = (size_t)s.len;
  }
  char *buf = malloc(n + 1);
  if (buf) {
    memcpy(buf, src, n);
    buf[n] = 0;
    *len = n;
  } else {
    pw_seterr(err, PW_ENOMEM, "out of memory");
  }
  gguf_close(f);
  return buf;
}

int cmd_template(int argc, char **argv) {
  const char *model = NULL, *tmpl_path = NULL, *vars_path = NULL, *date = NULL;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      usage(stdout);
      return 0;
    }
    const char **slot = !strcmp(a, "--model") ? &model
                        : !strcmp(a, "--template") ? &tmpl_path
                        : !strcmp(a, "--vars") ? &vars_path
                        : !strcmp(a, "--date") ? &date
                        : NULL;
    if (!slot) {
      fprintf(stderr, "power template: unknown option '%s' (try --help)\n", a);
      return 2;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "power template: %s needs a value\n", a);
      return 2;
    }
    *slot = argv[++i];
  }
  if ((!model) == (!tmpl_path) || !vars_path) {
    fprintf(stderr, "power template: give one of --model or --template, and --vars (try --help)\n");
    return 2;
  }
  chat_render_opts opts = {0};
  if (date) {
    struct tm tm;
    memset(&tm, 0, sizeof tm);
    const char *end = strptime(date, "%Y-%m-%dT%H:%M:%S", &tm);
    if (!end || *end) {
      fprintf(stderr, "power template: invalid value for --date: %s (want YYYY-MM-DDTHH:MM:SS)\n", date);
      return 2;
    }
    opts.now = timegm(&tm);
  }
  char err[PW_ERRMAX] = "";
  if (model && !(model = cli_resolve_model(model, err, sizeof err))) {
    fprintf(stderr, "power template: %s\n", err);
    return 1;
  }
  size_t tl = 0;
  char *tmpl = model ? model_template(model, &tl, err) : cli_slurp(tmpl_path, TEMPLATE_MAX_FILE, &tl, err);
  if (!tmpl) {
    fprintf(stderr, "power template: %s\n", err);
    return 1;
  }
  json_error_t je;
  json_t *vars = json_load_file(vars_path, JSON_ALLOW_NUL, &je);
  if (!vars || !json_is_object(vars)) {
    if (vars)
      fprintf(stderr, "power template: %s: the variables must be a JSON object\n", vars_path);
    else
      fprintf(stderr, "power template: %s:%d: %s\n", vars_path, je.line, je.text);
    json_decref(vars);
    free(tmpl);
    return 1;
  }
  int rc = 0;
  json_t *msgs = json_object_get(vars, "messages");
  if (msgs) rc = chat_flatten_content(msgs, err);
  char *out = NULL;
  size_t n = 0;
  if (rc == 0) rc = chat_render(tmpl, tl, vars, &opts, &out, &n, err);
  json_decref(vars);
  free(tmpl);
  if (rc) {
    fprintf(stderr, "power template: %s\n", err);
    return 1;
  }
  size_t w = fwrite(out, 1, n, stdout);
  free(out);
  if (w != n || fflush(stdout) != 0) {
    fprintf(stderr, "power template: write error\n");
    return 1;
  }
  return 0;
}
