/* cmd_split.h - `power split`: cuts a GGUF into the parts of a split model
 * (llama.cpp's gguf-split layout) or joins a split model into one file. */
#ifndef PW_CLI_CMD_SPLIT_H
#define PW_CLI_CMD_SPLIT_H

/* argv[0] is "split". Returns the exit status: 0, 1 on an input or write
 * error (one line on stderr), 2 on bad usage. */
int cmd_split(int argc, char **argv);

#endif
