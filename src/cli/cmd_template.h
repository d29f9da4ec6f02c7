/* cmd_template.h - `power template`: renders a chat template to stdout. */
#ifndef PW_CLI_CMD_TEMPLATE_H
#define PW_CLI_CMD_TEMPLATE_H

/* argv[0] is "template". Returns the process exit status: 0 on success,
 * 1 on a render or input error (one line on stderr), 2 on bad usage. */
int cmd_template(int argc, char **argv);

#endif
