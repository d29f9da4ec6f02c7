/* cmd_crypt.c - `power encrypt` / `power decrypt` (see cmd_crypt.h): option
 * wiring around weights_encrypt_file / weights_decrypt_file. The key is
 * only ever named by a file, so it never appears in argv; the commands
 * print no key bytes. */
#include "cli/cmd_crypt.h"

#include "base/error.h"
#include "weights/crypt.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void crypt_usage(FILE *out, const char *cmd) {
  if (!strcmp(cmd, "encrypt"))
    fprintf(out,
            "usage: power encrypt --key-file K [--chunk-size SIZE] IN.gguf OUT.pwe\n"
            "  writes an AES-256-GCM container of IN, in chunks that load independently\n"
            "  --key-file K       32 raw bytes or 64 hex digits (e.g. head -c 32 /dev/urandom > K;\n"
            "                     chmod 600 K); else $POWER_WEIGHTS_KEY_FILE\n"
            "  --chunk-size SIZE  a power of two from 4K to 64M (K/M suffixes; default 1M)\n"
            "  load it with --weights-key-file K on run, chat, serve, bench, ab, verify\n");
  else
    fprintf(out,
            "usage: power decrypt --key-file K IN.pwe OUT.gguf\n"
            "  checks every chunk and the plaintext SHA-256, then writes OUT\n"
            "  --key-file K       the container's key; else $POWER_WEIGHTS_KEY_FILE\n");
}

/* "1M", "4096", "64K" -> the shift of a power of two in range, or 0. */
static uint32_t parse_chunk(const char *v) {
  char *end;
  unsigned long long n = strtoull(v, &end, 10);
  if (end == v || *v == '-') return 0;
  if (*end == 'K' || *end == 'k') n <<= 10, end++;
  else if (*end == 'M' || *end == 'm') n <<= 20, end++;
  if (*end || n == 0 || (n & (n - 1))) return 0;
  uint32_t s = 0;
  while ((1ull << s) < n) s++;
  return s >= WEIGHTS_PWE_MIN_SHIFT && s <= WEIGHTS_PWE_MAX_SHIFT ? s : 0;
}

static int run(int argc, char **argv, int enc) {
  const char *cmd = argv[0], *key_file = NULL, *files[2] = {NULL, NULL};
  uint32_t shift = 0;
  int nf = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      crypt_usage(stdout, cmd);
      return 0;
    }
    if (!strcmp(a, "--key-file") || (enc && !strcmp(a, "--chunk-size"))) {
      if (i + 1 >= argc || !*argv[i + 1]) {
        fprintf(stderr, "power %s: option %s needs a value\n", cmd, a);
        return 2;
      }
      const char *v = argv[++i];
      if (!strcmp(a, "--key-file")) key_file = v;
      else if (!(shift = parse_chunk(v))) {
        fprintf(stderr, "power %s: invalid --chunk-size '%s' (a power of two from 4K to 64M)\n", cmd, v);
        return 2;
      }
      continue;
    }
    if (a[0] == '-' && a[1]) {
      fprintf(stderr, "power %s: unknown option %s (try --help)\n", cmd, a);
      return 2;
    }
    if (nf == 2) {
      fprintf(stderr, "power %s: too many arguments (%s)\n", cmd, a);
      return 2;
    }
    files[nf++] = a;
  }
  if (!key_file) {
    const char *env = getenv("POWER_WEIGHTS_KEY_FILE");
    if (env && *env) key_file = env;
  }
  if (!key_file || nf != 2) {
    crypt_usage(stderr, cmd);
    return 2;
  }
  if (!strcmp(files[0], files[1])) {
    fprintf(stderr, "power %s: input and output are the same file\n", cmd);
    return 2;
  }
  char err[PW_ERRMAX];
  weights_key *k = NULL;
  int rc = weights_key_load(key_file, &k, err);
  if (!rc && enc) {
    /* a container of a container would load as neither */
    FILE *f = fopen(files[0], "rb");
    char magic[8];
    if (f && fread(magic, 1, 8, f) == 8 && weights_pwe_is(magic, 8))
      rc = pw_seterr(err, PW_EINVAL, "%s is already an encrypted container", files[0]);
    if (f) fclose(f);
  }
  if (!rc) rc = enc ? weights_encrypt_file(files[0], files[1], k, shift, err) : weights_decrypt_file(files[0], files[1], k, err);
  weights_key_destroy(k);
  if (rc) {
    fprintf(stderr, "power %s: %s\n", cmd, err);
    return 1;
  }
  return 0;
}

int cmd_encrypt(int argc, char **argv) { return run(argc, argv, 1); }
int cmd_decrypt(int argc, char **argv) { return run(argc, argv, 0); }
