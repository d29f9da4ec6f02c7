/* cmd_tokenize.h - `power tokenize`: show how a model's tokenizer splits
 * text. */
#ifndef PW_CLI_CMD_TOKENIZE_H
#define PW_CLI_CMD_TOKENIZE_H

/* argv[0] = "tokenize". Returns the exit status (0, or 1 after a one-line
 * error on stderr). */
int cmd_tokenize(int argc, char **argv);

#endif
