/* cmd_ab.h - `power ab`: a paired A/B benchmark of two engine
 * configurations on one model and one workload (speed ratios with their
 * noise, output parity, speculation and prefix-cache figures), and the
 * verification-cost curve of the forward pass (--verify-curve).
 * Not a server load test: it drives the in-process engine, no HTTP. */
#ifndef PW_CLI_CMD_AB_H
#define PW_CLI_CMD_AB_H

/* argv[0] = "ab"; returns the process exit status (0 ok, 1 runtime failure
 * or parity broken, 2 usage error). Results go to stdout, progress and
 * diagnostics to stderr. */
int cmd_ab(int argc, char **argv);

#endif
