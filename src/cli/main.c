/* main.c - the `power` command: dispatches to subcommands. The CLI is the
 * only layer that wires the others together. */
#include "cli/cli.h"
#include "base/log.h"
#include "cli/cmd_ab.h"
#include "cli/cmd_bench.h"
#include "cli/cmd_crypt.h"
#include "cli/cmd_ps.h"
#include "cli/cmd_serve.h"
#include "cli/cmd_split.h"
#include "cli/cmd_store.h"
#include "cli/cmd_synth.h"
#include "cli/cmd_template.h"
#include "cli/cmd_tokenize.h"
#include "cli/cmd_verify.h"
#include "tensor/traits.h"

#include "power.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct subcommand {
  const char *name;
  int (*fn)(int argc, char **argv);
  const char *help;
} subcommand;

static const subcommand k_cmds[] = {
    {"run", cmd_run, "generate from a prompt (--prompt-ids, --prompt or --chat)"},
    {"bench", cmd_bench, "prompt and generation throughput (-p, -n, -r, --batch, -o json)"},
    {"ab", cmd_ab, "paired two-order A/B of engine configurations, with output parity"},
    {"chat", cmd_chat, "interactive chat with the model's template (/reset, /exit)"},
    {"inspect", cmd_inspect, "describe a GGUF file (quantization, sizes, tensors; --sha256, -o json)"},
    {"serve", cmd_serve, "OpenAI-compatible HTTP server (one model, or the store's models on demand)"},
    {"ps", cmd_ps, "models a running server has loaded (--host, --port)"},
    {"synth", cmd_synth, "write a model with a real model's shapes and dummy weights"},
    {"split", cmd_split, "cut a GGUF into split parts (--parts N) or join them (--merge)"},
    {"quantize", cmd_quantize, "convert F32/F16/BF16 weights to a quantized type"},
    {"template", cmd_template, "render a chat template (--model M | --template F.jinja) --vars V.json"},
    {"tokenize", cmd_tokenize, "text to token ids and pieces (--ids, --raw, --file)"},
    {"pull", cmd_pull, "download a GGUF into the model store (URL or hf.co/ORG/REPO[:QUANT])"},
    {"list", cmd_list, "models in the store ($POWER_HOME, default ~/.power)"},
    {"show", cmd_show, "a stored model's digest, source, metadata and template"},
    {"rm", cmd_rm, "remove a name from the store (and its blob when unused)"},
    {"cp", cmd_cp, "give a stored model a second name"},
    {"import", cmd_import, "put a local GGUF into the store (--name NAME)"},
    {"verify", cmd_verify, "check a receipt (digests, signature, --replay) or an ab report (--ab)"},
    {"encrypt", cmd_encrypt, "write an AES-256-GCM encrypted copy of a GGUF (--key-file K IN OUT.pwe)"},
    {"decrypt", cmd_decrypt, "check and decrypt an encrypted model (--key-file K IN.pwe OUT.gguf)"},
    {"keygen", cmd_keygen, "make an Ed25519 key pair for signing receipts"},
};

static void usage(FILE *out) {
  fprintf(out, "power %s - LLM inference runtime\n\nusage: power <command> [options]\n\ncommands:\n",
          pw_version());
  for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
    fprintf(out, "  %-10s %s\n", k_cmds[i].name, k_cmds[i].help);
  fprintf(out, "\nrun 'power help <command>' or 'power <command> --help' for a command's options;\n"
               "'power --version' names the version and the kernels this CPU gets\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || (!strcmp(argv[1], "help") && argc == 2)) {
    usage(stdout);
    return 0;
  }
  if (!strcmp(argv[1], "help")) { /* power help CMD = power CMD --help */
    for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
      if (!strcmp(argv[2], k_cmds[i].name)) {
        char *hargv[] = {argv[2], "--help", NULL};
        return k_cmds[i].fn(2, hargv);
      }
    fprintf(stderr, "power: unknown command '%s' (try 'power --help')\n", argv[2]);
    return 2;
  }
  if (!strcmp(argv[1], "--version")) {
    printf("power %s\nkernels: %s\n", pw_version(), pw_tensor_kernels());
    return 0;
  }
  if (pw_log_check_env()) {
    fprintf(stderr, "power: POWER_LOG='%s' is not a level (error, warn, info or debug)\n", getenv("POWER_LOG"));
    return 2;
  }
  for (size_t i = 0; i < sizeof k_cmds / sizeof k_cmds[0]; i++)
    if (!strcmp(argv[1], k_cmds[i].name)) return k_cmds[i].fn(argc - 1, argv + 1);
  fprintf(stderr, "power: unknown command '%s' (try 'power --help')\n", argv[1]);
  return 2;
}
