/* cli.h - subcommand entry points and shared option helpers. Each
 * subcommand gets argv with argv[0] = its name and returns the exit status. */
#ifndef PW_CLI_CLI_H
#define PW_CLI_CLI_H

#include <stddef.h>

/* A macro's value as a string literal, for help texts that quote the
 * engine's defaults (engine.h) instead of repeating them. */
#define CLI_STR_(x) #x
#define CLI_STR(x) CLI_STR_(x)

int cmd_run(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_chat(int argc, char **argv);

/* Resolves the model path: explicit (may be NULL), else $POWER_MODEL, else
 * the default model in ../shared/models (relative to the working directory
 * or the executable). explicit and $POWER_MODEL may be a file or a name in
 * the model store ($POWER_HOME). Writes a one-line error naming how to give
 * a model and returns NULL when none is found. Returned string is static
 * (one of four rotating buffers) or the argument itself. */
const char *cli_resolve_model(const char *explicit_path, char *err, size_t errlen);

/* Parses a non-negative integer / a float option value; returns 0 or -1
 * after printing "power <cmd>: invalid value for <opt>: <v>". */
int cli_parse_long(const char *cmd, const char *opt, const char *v, long lo, long hi, long *out);
int cli_parse_double(const char *cmd, const char *opt, const char *v, double lo, double hi, double *out);
/* Single-valued options given twice are an error: the last one silently
 * winning hides mistakes (`--model A --model B`). cli_once records opt (a
 * canonical name, static) in seen; 0, or -1 after printing
 * "power <cmd>: <opt> given more than once". */
#define CLI_SEEN_MAX 48
typedef struct cli_seen {
  const char *name[CLI_SEEN_MAX];
  int n;
} cli_seen;
int cli_once(const char *cmd, cli_seen *seen, const char *opt);
/* A whole file (at most max bytes) in a malloc'ed NUL-terminated buffer,
 * its length in *len; NULL with err set (PW_EIO, PW_ENOMEM). */
char *cli_slurp(const char *path, long max, size_t *len, char *err);

#endif
