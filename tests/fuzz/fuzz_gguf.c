/* fuzz_gguf.c - fuzz harness for the GGUF reader and the vocabulary loader
 * on top of it: any bytes are opened as a GGUF file; when they open, every
 * key, array element and tensor is walked, and the tokenizer metadata (if
 * any) is loaded and used once. */
#include "fuzz.h"

#include "gguf/gguf.h"
#include "tok/tok.h"
#include "power.h"

#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  return 0;
}

static volatile uint64_t sink;

static void walk_arr(const gguf_arr *a, int depth) {
  uint64_t n = a->n < 64 ? a->n : 64;
  /* a nested array of strings or arrays has no element index (gguf.h):
   * its elements are not reachable, by contract */
  if ((a->type == GGUF_T_STRING || a->type == GGUF_T_ARRAY) && !a->index) return;
  for (uint64_t i = 0; i < n; i++) {
    if (a->type == GGUF_T_STRING) {
      gguf_str s = gguf_arr_str(a, i);
      if (s.len) sink += (uint8_t)s.ptr[0] + (uint8_t)s.ptr[s.len - 1];
    } else if (a->type == GGUF_T_FLOAT32) {
      sink += (uint64_t)(gguf_arr_f32(a, i) != 0);
    } else if (a->type == GGUF_T_ARRAY) {
      if (depth < 4) {
        gguf_arr sub = gguf_arr_sub(a, i);
        walk_arr(&sub, depth + 1);
      }
    } else if (a->type != GGUF_T_FLOAT64) {
      sink += (uint64_t)gguf_arr_int(a, i);
    }
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char err[PW_ERRMAX];
  gguf_file *f = NULL;
  if (gguf_open_mem(data, size, &f, err) != 0) return 0;
  char buf[256];
  for (uint64_t i = 0; i < gguf_n_kv(f); i++) {
    const gguf_kv *kv = gguf_kv_at(f, i);
    gguf_kv_format(kv, buf, sizeof buf);
    sink += strlen(buf);
    if (kv->type == GGUF_T_ARRAY) walk_arr(&kv->arr, 0);
  }
  for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
    const gguf_tensor *t = gguf_tensor_at(f, i);
    if (t->nbytes) sink += ((const uint8_t *)t->data)[0] + ((const uint8_t *)t->data)[t->nbytes - 1];
  }
  uint64_t u;
  gguf_str s;
  sink += gguf_get_u64(f, "general.alignment", &u) + gguf_get_str(f, "general.architecture", &s);
  gguf_get_cstr(f, "general.name", buf, sizeof buf);
  tok_vocab *v = NULL;
  if (tok_vocab_load(f, &v, err) == 0) {
    static const char text[] = " Hello <s> world\n\n1234 caf\xc3\xa9 \xff\xfe <|im_start|>";
    int32_t ids[128];
    size_t n = 0;
    if (tok_encode(v, text, sizeof text - 1, true, true, ids, 128, &n, err) == 0) {
      char out[4096];
      size_t m = 0;
      tok_decode(v, ids, n, TOK_DETOK_SPECIAL, out, sizeof out, &m, err);
    }
    tok_vocab_destroy(v);
  }
  gguf_close(f);
  return 0;
}
