/* cmd_inspect.c - `power inspect MODEL [--sha256] [--kv] [--tensors]`:
 * summarizes a GGUF file; for an invalid file prints one line naming the
 * defect and exits non-zero. */
#include "base/error.h"
#include "base/sha256.h"
#include "cli/cli.h"
#include "gguf/gguf.h"
#include "tensor/dtype.h"

#include <stdio.h>
#include <string.h>

static void print_u32(const gguf_file *f, const char *arch, const char *suffix, const char *label) {
  char key[128];
  snprintf(key, sizeof key, "%s.%s", arch, suffix);
  uint32_t v;
  if (gguf_get_u32(f, key, &v)) printf("  %-22s %u\n", label, v);
}

static void print_f32(const gguf_file *f, const char *arch, const char *suffix, const char *label) {
  char key[128];
  snprintf(key, sizeof key, "%s.%s", arch, suffix);
  float v;
  if (gguf_get_f32(f, key, &v)) printf("  %-22s %g\n", label, (double)v);
}

int cmd_inspect(int argc, char **argv) {
  const char *path = NULL;
  int want_sha = 0, want_kv = 0, want_tensors = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--sha256")) want_sha = 1;
    else if (!strcmp(argv[i], "--kv")) want_kv = 1;
    else if (!strcmp(argv[i], "--tensors")) want_tensors = 1;
    else if (!strcmp(argv[i], "--model") && i + 1 < argc) path = argv[++i];
    else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: power inspect MODEL.gguf [--sha256] [--kv] [--tensors]\n");
      return 0;
    } else if (argv[i][0] == '-') {
      fprintf(stderr, "power inspect: unknown option '%s'\n", argv[i]);
      return 2;
    } else path = argv[i];
  }
  char err[PW_ERRMAX];
  path = cli_resolve_model(path, err, sizeof err);
  if (!path) {
    fprintf(stderr, "power inspect: %s\n", err);
    return 1;
  }
  gguf_file *f;
  int rc = gguf_open(path, &f, err);
  if (rc) {
    fprintf(stderr, "power inspect: %s: %s\n", path, err);
    return 1;
  }
  char arch[64] = "?";
  gguf_get_cstr(f, "general.architecture", arch, sizeof arch);
  char name[128] = "";
  gguf_get_cstr(f, "general.name", name, sizeof name);
  printf("file:         %s\n", path);
  printf("size:         %llu bytes\n", (unsigned long long)gguf_size(f));
  printf("gguf:         v%u, %llu metadata entries, %llu tensors, alignment %u\n", gguf_version(f),
         (unsigned long long)gguf_n_kv(f), (unsigned long long)gguf_n_tensors(f), gguf_alignment(f));
  printf("architecture: %s\n", arch);
  if (*name) printf("name:         %s\n", name);
  printf("hyperparameters:\n");
  print_u32(f, arch, "context_length", "context_length");
  print_u32(f, arch, "embedding_length", "embedding_length");
  print_u32(f, arch, "block_count", "block_count");
  print_u32(f, arch, "feed_forward_length", "feed_forward_length");
  print_u32(f, arch, "attention.head_count", "head_count");
  print_u32(f, arch, "attention.head_count_kv", "head_count_kv");
  print_u32(f, arch, "attention.key_length", "key_length");
  print_f32(f, arch, "rope.freq_base", "rope.freq_base");
  print_f32(f, arch, "attention.layer_norm_rms_epsilon", "rms_epsilon");
  char tk[64] = "none", pre[64] = "";
  gguf_get_cstr(f, "tokenizer.ggml.model", tk, sizeof tk);
  gguf_get_cstr(f, "tokenizer.ggml.pre", pre, sizeof pre);
  gguf_arr toks;
  unsigned long long n_tok = gguf_get_arr(f, "tokenizer.ggml.tokens", &toks) ? toks.n : 0;
  printf("tokenizer:    %s%s%s, %llu tokens\n", tk, *pre ? " / pre " : "", pre, n_tok);
  gguf_str tmpl;
  printf("chat template: %s\n", gguf_get_str(f, "tokenizer.chat_template", &tmpl) ? "yes" : "no (ChatML is used)");
  uint64_t count[PW_DT_COUNT] = {0}, bytes[PW_DT_COUNT] = {0}, params = 0;
  for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
    const gguf_tensor *t = gguf_tensor_at(f, i);
    count[t->type]++;
    bytes[t->type] += t->nbytes;
    params += t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
  }
  printf("tensors:      %llu parameters\n", (unsigned long long)params);
  for (int t = 0; t < PW_DT_COUNT; t++)
    if (count[t])
      printf("  %-6s %5llu tensors %12llu bytes\n", pw_dtype_name((uint32_t)t), (unsigned long long)count[t],
             (unsigned long long)bytes[t]);
  if (want_kv) {
    printf("metadata:\n");
    for (uint64_t i = 0; i < gguf_n_kv(f); i++) {
      const gguf_kv *kv = gguf_kv_at(f, i);
      char buf[160];
      gguf_kv_format(kv, buf, sizeof buf);
      printf("  %.*s = %s\n", (int)kv->key.len, kv->key.ptr, buf);
    }
  }
  if (want_tensors) {
    printf("tensor directory:\n");
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
      const gguf_tensor *t = gguf_tensor_at(f, i);
      printf("  %-32.*s %-5s [%llu, %llu, %llu, %llu] @%llu\n", (int)t->name.len, t->name.ptr,
             pw_dtype_name(t->type), (unsigned long long)t->ne[0], (unsigned long long)t->ne[1],
             (unsigned long long)t->ne[2], (unsigned long long)t->ne[3], (unsigned long long)t->offset);
    }
  }
  gguf_close(f);
  if (want_sha) {
    uint8_t d[32];
    char hex[65];
    if ((rc = pw_sha256_file(path, d, err))) {
      fprintf(stderr, "power inspect: %s\n", err);
      return 1;
    }
    pw_hex(d, 32, hex);
    printf("sha256:       %s\n", hex);
  }
  return 0;
}
