/* cmd_ps.h - `power ps`: what a running server has loaded (see cmd_ps.c). */
#ifndef PW_CLI_CMD_PS_H
#define PW_CLI_CMD_PS_H

int cmd_ps(int argc, char **argv);

#endif
