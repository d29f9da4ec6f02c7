/* cmd_bench.h - `power bench`: prompt-processing, generation and batched
 * generation throughput of a model, plus a memory read-bandwidth probe.
 * Not a load generator for the server (that drives HTTP, not the model). */
#ifndef PW_CLI_CMD_BENCH_H
#define PW_CLI_CMD_BENCH_H

/* argv[0] = "bench"; returns the process exit status (0 ok, 1 runtime
 * failure, 2 usage error). Results go to stdout, diagnostics to stderr. */
int cmd_bench(int argc, char **argv);

#endif
