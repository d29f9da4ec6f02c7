#include "cli/cli.h"
#include <stdio.h>
int cmd_run(int argc, char **argv) {
  (void)argc;
  (void)argv;
  fprintf(stderr, "power run: not built yet\n");
  return 1;
}
