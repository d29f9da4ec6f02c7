/* cmd_inspect.c - `power inspect MODEL [--sha256] [--kv] [--tensors]
 * [-o text|json]`, and `power inspect MODEL --residency --mem-budget B
 * [--residency-policy lru|lfru] [--weights-io S]`: what a memory budget
 * keeps resident. Summarizes a GGUF file (sizes in human units, the
 * quantization the file states in general.file_type), as text or as one
 * JSON object; for an invalid file prints one line naming the defect and
 * exits non-zero. Wiring only: the facts come from the gguf layer. */
#include "base/error.h"
#include "base/sha256.h"
#include "cli/cli.h"
#include "gguf/gguf.h"
#include "tensor/dtype.h"
#include "weights/weights.h"

#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Bytes in binary units with three significant digits ("14.2 MiB"). */
static void human_bytes(uint64_t n, char *buf, size_t cap) {
  static const char *const unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  if (n < 1024) {
    snprintf(buf, cap, "%llu bytes", (unsigned long long)n);
    return;
  }
  double v = (double)n;
  int u = 0;
  while (v >= 1024 && u < 5) {
    v /= 1024;
    u++;
  }
  snprintf(buf, cap, v < 10 ? "%.2f %s" : v < 100 ? "%.1f %s" : "%.0f %s", v, unit[u]);
}

/* Parameter counts as "1.24 B", "494 M", "3.10 K". */
static void human_count(uint64_t n, char *buf, size_t cap) {
  static const char *const unit[] = {"", " K", " M", " B", " T"};
  double v = (double)n;
  int u = 0;
  while (v >= 1000 && u < 4) {
    v /= 1000;
    u++;
  }
  if (u == 0) snprintf(buf, cap, "%llu", (unsigned long long)n);
  else snprintf(buf, cap, v < 10 ? "%.2f%s" : v < 100 ? "%.1f%s" : "%.0f%s", v, unit[u]);
}

static const char *const k_hparams[][2] = {
    {"context_length", "context_length"},
    {"embedding_length", "embedding_length"},
    {"block_count", "block_count"},
    {"feed_forward_length", "feed_forward_length"},
    {"attention.head_count", "head_count"},
    {"attention.head_count_kv", "head_count_kv"},
    {"attention.key_length", "key_length"},
};
static const char *const k_hparams_f[][2] = {
    {"rope.freq_base", "rope.freq_base"},
    {"attention.layer_norm_rms_epsilon", "rms_epsilon"},
};

/* A metadata value as JSON: scalars as themselves, arrays summarized. */
static json_t *kv_json(const gguf_kv *kv) {
  char buf[160];
  if (kv->type == GGUF_T_ARRAY)
    return json_pack("{s:s?,s:I}", "array_of", gguf_vtype_name(kv->arr.type), "length", (json_int_t)kv->arr.n);
  if (kv->type == GGUF_T_STRING) {
    uint64_t len;
    memcpy(&len, kv->value, 8);
    json_t *j = json_stringn((const char *)kv->value + 8, (size_t)len);
    return j ? j : json_string("(not valid UTF-8)");
  }
  if (kv->type == GGUF_T_BOOL) return json_boolean(kv->value[0]);
  gguf_kv_format(kv, buf, sizeof buf);
  json_t *j = json_loads(buf, JSON_DECODE_ANY, NULL); /* numbers print as JSON numbers */
  return j ? j : json_string(buf);
}

/* The plan a budget makes: its parts, the policy, the resident set. */
static int inspect_residency(const char *path, const weights_opts *wo) {
  char err[PW_ERRMAX], a[32], b[32], c[32], d[32];
  weights *w = NULL;
  if (!wo->mem_budget && !wo->mem_budget_frac) {
    fprintf(stderr, "power inspect: --residency needs --mem-budget B (bytes with K/M/G, or P%%)\n");
    return 2;
  }
  if (weights_open(path, wo, &w, err)) {
    fprintf(stderr, "power inspect: %s\n", err);
    return 1;
  }
  weights_budget_info bi;
  if (!weights_get_budget(w, &bi)) {
    human_bytes(gguf_size(weights_gguf(w)), a, sizeof a);
    printf("budget holds the whole file (%s): everything resident, nothing streams\n", a);
    weights_close(w);
    return 0;
  }
  human_bytes(bi.budget, a, sizeof a);
  human_bytes(bi.min_budget, b, sizeof b);
  printf("memory budget   %s (the smallest this file accepts: %s)\n", a, b);
  printf("read strategy   %s\n", weights_io_name(weights_get_info(w)->io));
  printf("policy          pinned: embedding and output rows, first and last layer, as the budget\n"
         "                allows; the rest streams, evicted by %s\n", weights_residency_name(bi.policy));
  human_bytes(bi.base_bytes, a, sizeof a);
  human_bytes(bi.pinned_bytes, b, sizeof b);
  human_bytes(bi.pool_bytes, c, sizeof c);
  human_bytes(bi.chunk, d, sizeof d);
  printf("resident        %s always (header, small tensors, shared pages), %s pinned,\n"
         "                %s pool for streamed units (granule %s)\n", a, b, c, d);
  printf("%-36s %12s  %s\n", "unit", "bytes", "residency");
  uint64_t streamed = 0;
  for (int i = 0; i < bi.n_units; i++) {
    weights_unit_info u;
    weights_get_unit(w, i, &u);
    human_bytes(u.bytes, a, sizeof a);
    printf("%-36s %12s  %s\n", u.name, a, u.pinned ? "pinned" : "streamed");
    if (!u.pinned) streamed += u.bytes;
  }
  human_bytes(streamed, a, sizeof a);
  printf("streamed per pass: up to %s\n", a);
  weights_close(w);
  return 0;
}

/* SHA-256 of a split model's parts' bytes in order. */
static int parts_sha256(const char *first, int n, uint8_t d[32], char *err) {
  pw_sha256_ctx *c = pw_sha256_begin();
  char *buf = malloc(1 << 20), p[4096];
  int rc = !c || !buf ? pw_seterr(err, PW_ENOMEM, "out of memory") : 0;
  for (int i = 0; i < n && !rc; i++) {
    if ((rc = gguf_split_path(first, 0, n, i, p, sizeof p, err))) break;
    FILE *fp = fopen(p, "rb");
    if (!fp) {
      rc = pw_seterr(err, PW_EIO, "%s: %s", p, strerror(errno));
      break;
    }
    size_t k;
    while ((k = fread(buf, 1, 1 << 20, fp)) > 0) pw_sha256_update(c, buf, k);
    if (ferror(fp)) rc = pw_seterr(err, PW_EIO, "%s: read error", p);
    fclose(fp);
  }
  free(buf);
  if (rc) pw_sha256_free(c);
  else pw_sha256_end(c, d);
  return rc;
}

/* The parts of a split model: text lines, or a JSON array. */
static void print_parts(const char *first, const gguf_file *f, json_t *arr) {
  const int n = gguf_n_parts(f);
  char p[4096], e[PW_ERRMAX], hb[32];
  for (int i = 0; i < n; i++) {
    const gguf_file *q = gguf_part(f, i);
    if (gguf_split_path(first, 0, n, i, p, sizeof p, e)) snprintf(p, sizeof p, "part %d", i + 1);
    if (arr) {
      json_array_append_new(arr, json_pack("{s:s,s:I,s:I}", "file", p, "size_bytes", (json_int_t)gguf_size(q),
                                           "tensors", (json_int_t)gguf_n_tensors(q)));
      continue;
    }
    human_bytes(gguf_size(q), hb, sizeof hb);
    printf("  %d/%d  %s  %s, %llu tensors\n", i + 1, n, p, hb, (unsigned long long)gguf_n_tensors(q));
  }
}

int cmd_inspect(int argc, char **argv) {
  const char *path = NULL;
  bool want_res = false;
  weights_opts wo = {0};
  int want_sha = 0, want_kv = 0, want_tensors = 0, json_out = 0;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--sha256")) want_sha = 1;
    else if (!strcmp(argv[i], "--kv")) want_kv = 1;
    else if (!strcmp(argv[i], "--tensors")) want_tensors = 1;
    else if (!strcmp(argv[i], "--residency")) want_res = true;
    else if (!strcmp(argv[i], "--mem-budget") && i + 1 < argc) {
      char e[PW_ERRMAX];
      if (weights_budget_parse(argv[++i], &wo.mem_budget, &wo.mem_budget_frac, e)) {
        fprintf(stderr, "power inspect: --mem-budget: %s\n", e);
        return 2;
      }
    } else if (!strcmp(argv[i], "--residency-policy") && i + 1 < argc) {
      if ((wo.residency = weights_residency_parse(argv[++i])) < 0) {
        fprintf(stderr, "power inspect: unknown --residency-policy '%s' (lru or lfru)\n", argv[i]);
        return 2;
      }
    } else if (!strcmp(argv[i], "--weights-io") && i + 1 < argc) {
      if ((wo.io = weights_io_parse(argv[++i])) < 0) {
        fprintf(stderr, "power inspect: unknown --weights-io '%s' (mmap, pread or direct)\n", argv[i]);
        return 2;
      }
    } else if (!strcmp(argv[i], "--model") && i + 1 < argc) path = argv[++i];
    else if ((!strcmp(argv[i], "-o") || !strcmp(argv[i], "--output")) && i + 1 < argc) {
      const char *v = argv[++i];
      if (!strcmp(v, "json")) json_out = 1;
      else if (!strcmp(v, "text")) json_out = 0;
      else {
        fprintf(stderr, "power inspect: invalid value for -o: '%s' (expected text or json)\n", v);
        return 2;
      }
    } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
      printf("usage: power inspect MODEL.gguf [--sha256] [--kv] [--tensors] [-o text|json]\n"
             "       power inspect MODEL.gguf --residency --mem-budget B [--residency-policy lru|lfru]\n"
             "                     [--weights-io S]   what a memory budget keeps resident\n");
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
  if (want_res) return inspect_residency(path, &wo);
  if (wo.mem_budget || wo.mem_budget_frac) {
    fprintf(stderr, "power inspect: --mem-budget goes with --residency\n");
    return 2;
  }
  gguf_file *f;
  int rc = gguf_open(path, &f, err);
  if (rc) {
    fprintf(stderr, "power inspect: %s: %s\n", path, err);
    return 1;
  }
  /* the parts of a split model, by the names gguf_open found them */
  const int n_parts = gguf_n_parts(f);
  char hex[65] = "";
  if (want_sha) {
    /* the digest of the model's bytes: its parts' in order, as the
     * engine's model digest */
    uint8_t d[32];
    rc = 0;
    if (n_parts == 1) rc = pw_sha256_file(path, d, err);
    else rc = parts_sha256(path, n_parts, d, err);
    if (rc) {
      fprintf(stderr, "power inspect: %s\n", err);
      gguf_close(f);
      return 1;
    }
    pw_hex(d, 32, hex);
  }
  char arch[64] = "?", name[128] = "", tk[64] = "none", pre[64] = "", hb[32], hc[32];
  gguf_get_cstr(f, "general.architecture", arch, sizeof arch);
  gguf_get_cstr(f, "general.name", name, sizeof name);
  uint32_t ft = 0;
  bool has_ft = gguf_get_u32(f, "general.file_type", &ft);
  const char *ft_name = has_ft ? gguf_file_type_name(ft) : NULL;
  gguf_get_cstr(f, "tokenizer.ggml.model", tk, sizeof tk);
  gguf_get_cstr(f, "tokenizer.ggml.pre", pre, sizeof pre);
  gguf_arr toks;
  unsigned long long n_tok = gguf_get_arr(f, "tokenizer.ggml.tokens", &toks) ? toks.n : 0;
  gguf_str tmpl;
  bool has_tmpl = gguf_get_str(f, "tokenizer.chat_template", &tmpl);
  uint64_t count[PW_DT_COUNT] = {0}, bytes[PW_DT_COUNT] = {0}, params = 0;
  for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
    const gguf_tensor *t = gguf_tensor_at(f, i);
    count[t->type]++;
    bytes[t->type] += t->nbytes;
    params += t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
  }

  if (json_out) {
    json_t *o = json_object(), *hp = json_object(), *types = json_array();
    json_object_set_new(o, "file", json_string(path));
    json_object_set_new(o, "size_bytes", json_integer((json_int_t)gguf_size(f)));
    if (n_parts > 1) {
      json_t *parts = json_array();
      print_parts(path, f, parts);
      json_object_set_new(o, "parts", parts);
    }
    json_object_set_new(o, "gguf", json_pack("{s:i,s:I,s:I,s:i}", "version", (int)gguf_version(f), "metadata_entries",
                                             (json_int_t)gguf_n_kv(f), "tensors", (json_int_t)gguf_n_tensors(f),
                                             "alignment", (int)gguf_alignment(f)));
    json_object_set_new(o, "architecture", json_string(arch));
    json_object_set_new(o, "name", *name ? json_string(name) : json_null());
    json_object_set_new(o, "file_type", has_ft ? json_pack("{s:i,s:s?}", "id", (int)ft, "name", ft_name) : json_null());
    char key[160];
    for (size_t k = 0; k < sizeof k_hparams / sizeof k_hparams[0]; k++) {
      uint32_t v;
      snprintf(key, sizeof key, "%s.%s", arch, k_hparams[k][0]);
      if (gguf_get_u32(f, key, &v)) json_object_set_new(hp, k_hparams[k][1], json_integer(v));
    }
    for (size_t k = 0; k < sizeof k_hparams_f / sizeof k_hparams_f[0]; k++) {
      float v;
      snprintf(key, sizeof key, "%s.%s", arch, k_hparams_f[k][0]);
      if (gguf_get_f32(f, key, &v)) json_object_set_new(hp, k_hparams_f[k][1], json_real(v));
    }
    json_object_set_new(o, "hyperparameters", hp);
    json_object_set_new(o, "tokenizer", json_pack("{s:s,s:s?,s:I}", "model", tk, "pre", *pre ? pre : NULL, "tokens",
                                                  (json_int_t)n_tok));
    json_object_set_new(o, "chat_template", json_boolean(has_tmpl));
    json_object_set_new(o, "parameters", json_integer((json_int_t)params));
    for (int t = 0; t < PW_DT_COUNT; t++)
      if (count[t])
        json_array_append_new(types, json_pack("{s:s?,s:I,s:I}", "type", pw_dtype_name((uint32_t)t), "tensors",
                                               (json_int_t)count[t], "bytes", (json_int_t)bytes[t]));
    json_object_set_new(o, "tensor_types", types);
    if (want_kv) {
      json_t *md = json_object();
      for (uint64_t i = 0; i < gguf_n_kv(f); i++) {
        const gguf_kv *kv = gguf_kv_at(f, i);
        snprintf(key, sizeof key, "%.*s", (int)(kv->key.len < 159 ? kv->key.len : 159), kv->key.ptr);
        json_object_set_new(md, key, kv_json(kv));
      }
      json_object_set_new(o, "metadata", md);
    }
    if (want_tensors) {
      json_t *ts = json_array();
      for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
        const gguf_tensor *t = gguf_tensor_at(f, i);
        json_t *shape = json_array();
        for (uint32_t d = 0; d < t->n_dims; d++) json_array_append_new(shape, json_integer((json_int_t)t->ne[d]));
        json_array_append_new(ts, json_pack("{s:s%,s:s?,s:o,s:I,s:I}", "name", t->name.ptr, (size_t)t->name.len,
                                            "type", pw_dtype_name(t->type), "shape", shape, "offset",
                                            (json_int_t)t->offset, "bytes", (json_int_t)t->nbytes));
      }
      json_object_set_new(o, "tensors", ts);
    }
    if (want_sha) json_object_set_new(o, "sha256", json_string(hex));
    char *s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(o);
    gguf_close(f);
    if (!s) {
      fprintf(stderr, "power inspect: out of memory\n");
      return 1;
    }
    printf("%s\n", s);
    free(s);
    return 0;
  }

  human_bytes(gguf_size(f), hb, sizeof hb);
  printf("file:         %s\n", path);
  printf("size:         %s (%llu bytes)\n", hb, (unsigned long long)gguf_size(f));
  printf("gguf:         v%u, %llu metadata entries, %llu tensors, alignment %u\n", gguf_version(f),
         (unsigned long long)gguf_n_kv(f), (unsigned long long)gguf_n_tensors(f), gguf_alignment(f));
  if (n_parts > 1) {
    printf("split:        %d parts (split.count)\n", n_parts);
    print_parts(path, f, NULL);
  }
  printf("architecture: %s\n", arch);
  if (*name) printf("name:         %s\n", name);
  if (ft_name) printf("quantization: %s (general.file_type %u)\n", ft_name, ft);
  else if (has_ft) printf("quantization: unknown (general.file_type %u)\n", ft);
  else printf("quantization: not stated (no general.file_type)\n");
  printf("hyperparameters:\n");
  char key[160];
  for (size_t k = 0; k < sizeof k_hparams / sizeof k_hparams[0]; k++) {
    uint32_t v;
    snprintf(key, sizeof key, "%s.%s", arch, k_hparams[k][0]);
    if (gguf_get_u32(f, key, &v)) printf("  %-22s %u\n", k_hparams[k][1], v);
  }
  for (size_t k = 0; k < sizeof k_hparams_f / sizeof k_hparams_f[0]; k++) {
    float v;
    snprintf(key, sizeof key, "%s.%s", arch, k_hparams_f[k][0]);
    if (gguf_get_f32(f, key, &v)) printf("  %-22s %g\n", k_hparams_f[k][1], (double)v);
  }
  printf("tokenizer:    %s%s%s, %llu tokens\n", tk, *pre ? " / pre " : "", pre, n_tok);
  printf("chat template: %s\n", has_tmpl ? "yes" : "no (ChatML is used)");
  human_count(params, hc, sizeof hc);
  printf("tensors:      %s parameters (%llu)\n", hc, (unsigned long long)params);
  for (int t = 0; t < PW_DT_COUNT; t++)
    if (count[t]) {
      human_bytes(bytes[t], hb, sizeof hb);
      printf("  %-6s %5llu tensors %12s\n", pw_dtype_name((uint32_t)t), (unsigned long long)count[t], hb);
    }
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
  if (want_sha) printf("sha256:       %s\n", hex);
  return 0;
}
