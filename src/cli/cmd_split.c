/* cmd_split.c - `power split (--parts N | --max-tensors N) IN.gguf PREFIX`
 * writes PREFIX-00001-of-0000N.gguf .. as llama.cpp's gguf-split does: the
 * first part carries all the metadata, every part split.no (u16, 0-based),
 * split.count (u16) and split.tensors.count (i32), and the tensors follow
 * in the input's order, cut by count. `power split --merge FIRST OUT.gguf`
 * joins a split model (given by its first part) into one file without the
 * split keys. Wiring over gguf/writer.h; the bytes are copied unchanged. */
#include "cli/cmd_split.h"

#include "base/error.h"
#include "cli/cli.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SPLIT_MAX_PARTS 999

static void usage(FILE *out) {
  fprintf(out, "usage: power split (--parts N | --max-tensors N) IN.gguf OUT-PREFIX\n"
               "       power split --merge FIRST-00001-of-0000N.gguf OUT.gguf\n");
}

typedef struct copy_ctx {
  const gguf_file *f;
  uint64_t first; /* index in f of the writer's tensor 0 */
} copy_ctx;

static int copy_tensor(void *ctx, uint64_t i, gguf_emit_fn emit, void *sink, char *err) {
  const copy_ctx *c = ctx;
  const gguf_tensor *t = gguf_tensor_at(c->f, c->first + i);
  int rc = emit(sink, t->data, (size_t)t->nbytes);
  if (rc) pw_seterr(err, rc, "writing tensor %.*s", (int)t->name.len, t->name.ptr);
  return rc;
}

static int add_tensors(gguf_writer *w, const gguf_file *f, uint64_t a, uint64_t b, char *err) {
  for (uint64_t i = a; i < b; i++) {
    const gguf_tensor *t = gguf_tensor_at(f, i);
    char name[512];
    snprintf(name, sizeof name, "%.*s", (int)(t->name.len < 511 ? t->name.len : 511), t->name.ptr);
    int rc = gguf_writer_add_tensor(w, name, t->n_dims, t->ne, t->type, err);
    if (rc) return rc;
  }
  return 0;
}

static void drop_split_keys(gguf_writer *w) {
  gguf_writer_remove_kv(w, "split.no");
  gguf_writer_remove_kv(w, "split.count");
  gguf_writer_remove_kv(w, "split.tensors.count");
}

static int do_split(const gguf_file *f, long parts, long per, const char *prefix, char *err) {
  const uint64_t nt = gguf_n_tensors(f);
  if (nt == 0) return pw_seterr(err, PW_EINVAL, "the model has no tensors to split");
  if (per <= 0) per = (long)((nt + (uint64_t)parts - 1) / (uint64_t)parts);
  const uint64_t n = (nt + (uint64_t)per - 1) / (uint64_t)per;
  if (n > SPLIT_MAX_PARTS) return pw_seterr(err, PW_ELIMIT, "%llu parts: at most %d", (unsigned long long)n, SPLIT_MAX_PARTS);
  if (parts > 0 && n != (uint64_t)parts)
    return pw_seterr(err, PW_EINVAL, "%llu tensors cannot fill %ld parts", (unsigned long long)nt, parts);
  int rc = 0;
  for (uint64_t p = 0; p < n && !rc; p++) {
    gguf_writer *w = gguf_writer_create();
    if (!w) return pw_seterr(err, PW_ENOMEM, "out of memory");
    if (p == 0 && (rc = gguf_writer_copy_kvs_prefix(w, f, "", err)) < 0) goto next;
    rc = 0;
    drop_split_keys(w);
    if ((rc = gguf_writer_set_u16(w, "split.no", (uint16_t)p, err)) ||
        (rc = gguf_writer_set_u16(w, "split.count", (uint16_t)n, err)) ||
        (rc = gguf_writer_set_i32(w, "split.tensors.count", (int32_t)nt, err)))
      goto next;
    const uint64_t a = p * (uint64_t)per, b = a + (uint64_t)per < nt ? a + (uint64_t)per : nt;
    if ((rc = add_tensors(w, f, a, b, err))) goto next;
    char path[4096];
    if ((size_t)snprintf(path, sizeof path, "%s-%05llu-of-%05llu.gguf", prefix, (unsigned long long)p + 1,
                         (unsigned long long)n) >= sizeof path) {
      rc = pw_seterr(err, PW_ERANGE, "output prefix too long");
      goto next;
    }
    copy_ctx c = {f, a};
    if (!(rc = gguf_writer_write(w, path, copy_tensor, &c, err))) printf("%s: %llu tensors\n", path, (unsigned long long)(b - a));
  next:
    gguf_writer_destroy(w);
  }
  return rc;
}

static int do_merge(const gguf_file *f, const char *out, char *err) {
  gguf_writer *w = gguf_writer_create();
  if (!w) return pw_seterr(err, PW_ENOMEM, "out of memory");
  int rc = gguf_writer_copy_kvs_prefix(w, f, "", err);
  if (rc >= 0) {
    drop_split_keys(w);
    rc = add_tensors(w, f, 0, gguf_n_tensors(f), err);
  }
  copy_ctx c = {f, 0};
  if (rc >= 0 && !(rc = gguf_writer_write(w, out, copy_tensor, &c, err)))
    printf("%s: %llu tensors from %d parts\n", out, (unsigned long long)gguf_n_tensors(f), gguf_n_parts(f));
  gguf_writer_destroy(w);
  return rc < 0 ? rc : 0;
}

int cmd_split(int argc, char **argv) {
  long parts = 0, per = 0;
  int merge = 0;
  const char *pos[2] = {NULL, NULL};
  int npos = 0;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!strcmp(a, "--parts") && i + 1 < argc) {
      if (cli_parse_long("split", a, argv[++i], 1, SPLIT_MAX_PARTS, &parts)) return 2;
    } else if (!strcmp(a, "--max-tensors") && i + 1 < argc) {
      if (cli_parse_long("split", a, argv[++i], 1, 1L << 30, &per)) return 2;
    } else if (!strcmp(a, "--merge")) {
      merge = 1;
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "power split: unknown option %s\n", a);
      usage(stderr);
      return 2;
    } else if (npos < 2) {
      pos[npos++] = a;
    } else {
      usage(stderr);
      return 2;
    }
  }
  if (npos != 2 || (!merge && !parts == !per) || (merge && (parts || per))) {
    usage(stderr);
    return 2;
  }
  char err[PW_ERRMAX];
  gguf_file *f = NULL;
  if (gguf_open(pos[0], &f, err)) {
    fprintf(stderr, "power split: %s\n", err);
    return 1;
  }
  gguf_split sp;
  int rc;
  if (!merge && gguf_split_get(f, &sp) && sp.count > 1)
    rc = pw_seterr(err, PW_EINVAL, "%s is already split: join it first (--merge)", pos[0]);
  else
    rc = merge ? do_merge(f, pos[1], err) : do_split(f, parts, per, pos[1], err);
  gguf_close(f);
  if (rc) {
    fprintf(stderr, "power split: %s\n", err);
    return 1;
  }
  return 0;
}
