/* cmd_crypt.h - `power encrypt` and `power decrypt`: a GGUF file to an
 * encrypted weights container (.pwe, src/weights/crypt.h) and back. */
#ifndef PW_CLI_CMD_CRYPT_H
#define PW_CLI_CMD_CRYPT_H

/* argv[0] = "encrypt" / "decrypt". Exit status 0, 1 (failure, one line on
 * stderr) or 2 (usage). */
int cmd_encrypt(int argc, char **argv);
int cmd_decrypt(int argc, char **argv);

#endif
