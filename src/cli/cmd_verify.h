/* cmd_verify.h - `power verify` (receipts, replays, ab reports) and
 * `power keygen`. */
#ifndef PW_CLI_CMD_VERIFY_H
#define PW_CLI_CMD_VERIFY_H
int cmd_verify(int argc, char **argv);
int cmd_keygen(int argc, char **argv);
#endif
