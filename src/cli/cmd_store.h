/* cmd_store.h - the model store's subcommands (see cmd_store.c). */
#ifndef PW_CLI_CMD_STORE_H
#define PW_CLI_CMD_STORE_H

int cmd_pull(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_show(int argc, char **argv);
int cmd_rm(int argc, char **argv);
int cmd_cp(int argc, char **argv);
int cmd_import(int argc, char **argv);

#endif
