/* cmd_serve.h - `power serve`: the OpenAI-compatible HTTP server. */
#ifndef PW_CLI_CMD_SERVE_H
#define PW_CLI_CMD_SERVE_H

/* argv[0] = "serve". Returns the exit status (0 after a graceful shutdown). */
int cmd_serve(int argc, char **argv);

#endif
