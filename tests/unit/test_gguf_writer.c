/* test_gguf_writer.c - GGUF writer round trip: every metadata type (scalars,
 * strings, arrays of ints/floats/strings/arrays), kvs copied verbatim from a
 * real vocabulary file, several tensors of different dtypes; read back with
 * gguf_open and compare everything. Plus the errors: bad arguments, a
 * producer that writes too little or too much, an unwritable path. */
#include "base/error.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "tensor/dtype.h"
#include "test.h"

#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct tdata {
  int mode; /* 0 = correct, 1 = short, 2 = long, 3 = producer error */
  uint64_t n_t;
  uint8_t **bytes; /* [n_t] expected bytes */
  uint64_t *len;
} tdata;

static int produce(void *ctx, uint64_t i, gguf_emit_fn emit, void *sink, char *err) {
  tdata *d = ctx;
  if (d->mode == 3) return pw_seterr(err, PW_ERANGE, "producer says no at %llu", (unsigned long long)i);
  uint64_t n = d->len[i];
  if (d->mode == 1 && i == 1) n -= 1;
  /* emit in pieces of 7 bytes to exercise streaming */
  for (uint64_t off = 0; off < n; off += 7) {
    uint64_t k = n - off < 7 ? n - off : 7;
    int rc = emit(sink, d->bytes[i] + off, (size_t)k);
    if (rc) return rc;
  }
  if (d->mode == 2 && i == 2) {
    uint8_t extra = 1;
    int rc = emit(sink, &extra, 1);
    if (rc) return rc;
  }
  return 0;
}

static void test_round_trip(void) {
  char err[PW_ERRMAX];
  char path[256];
  snprintf(path, sizeof path, "/tmp/pw_test_writer_%d.gguf", (int)getpid());
  gguf_writer *w = gguf_writer_create();
  CHECK(w != NULL);
  CHECK(gguf_writer_set_u8(w, "t.u8", 200, err) == 0);
  CHECK(gguf_writer_set_i8(w, "t.i8", -100, err) == 0);
  CHECK(gguf_writer_set_u16(w, "t.u16", 60000, err) == 0);
  CHECK(gguf_writer_set_i16(w, "t.i16", -30000, err) == 0);
  CHECK(gguf_writer_set_u32(w, "t.u32", 4000000000u, err) == 0);
  CHECK(gguf_writer_set_i32(w, "t.i32", -2000000000, err) == 0);
  CHECK(gguf_writer_set_u64(w, "t.u64", 1ull << 60, err) == 0);
  CHECK(gguf_writer_set_i64(w, "t.i64", -(1ll << 60), err) == 0);
  CHECK(gguf_writer_set_f32(w, "t.f32", 1.5f, err) == 0);
  CHECK(gguf_writer_set_f64(w, "t.f64", -2.25, err) == 0);
  CHECK(gguf_writer_set_bool(w, "t.bool", true, err) == 0);
  CHECK(gguf_writer_set_str(w, "t.str", "héllo", err) == 0);
  CHECK(gguf_writer_set_strn(w, "t.strn", "a\0b", 3, err) == 0);
  CHECK(gguf_writer_set_str(w, "t.replaced", "old", err) == 0);
  CHECK(gguf_writer_set_u32(w, "t.replaced", 7, err) == 0); /* replaces in place */
  int32_t ints[5] = {1, -2, 3, -4, 5};
  CHECK(gguf_writer_set_arr(w, "t.arr_i32", GGUF_T_INT32, ints, 5, err) == 0);
  float fl[3] = {0.5f, -1.0f, 3.25f};
  CHECK(gguf_writer_set_arr(w, "t.arr_f32", GGUF_T_FLOAT32, fl, 3, err) == 0);
  uint8_t bools[3] = {1, 0, 1};
  CHECK(gguf_writer_set_arr(w, "t.arr_bool", GGUF_T_BOOL, bools, 3, err) == 0);
  CHECK(gguf_writer_set_arr(w, "t.arr_empty", GGUF_T_UINT64, NULL, 0, err) == 0);
  const char *strs[3] = {"alpha", "", "gamma"};
  CHECK(gguf_writer_set_arr_str(w, "t.arr_str", strs, 3, err) == 0);
  /* errors */
  CHECK(gguf_writer_set_u32(w, "", 1, err) == PW_EINVAL);
  CHECK(gguf_writer_set_u32(w, "general.alignment", 64, err) == PW_EUNSUPPORTED);
  CHECK(gguf_writer_set_arr(w, "t.bad", GGUF_T_STRING, ints, 1, err) == PW_EINVAL);
  uint8_t badb = 2;
  CHECK(gguf_writer_set_arr(w, "t.badb", GGUF_T_BOOL, &badb, 1, err) == PW_EINVAL);

  /* Copy all tokenizer.* keys (arrays of strings, ints, floats) from a vocab. */
  char vpath[1024];
  snprintf(vpath, sizeof vpath, "%s/tokenizer/ggml-vocab-llama-spm.gguf", POWER_SHARED_DIR);
  gguf_file *vf = NULL;
  int rc = gguf_open(vpath, &vf, err);
  CHECK_MSG(rc == 0, "missing test asset %s: %s", vpath, err);
  int n_copied = 0;
  if (vf) {
    n_copied = gguf_writer_copy_kvs_prefix(w, vf, "tokenizer.", err);
    CHECK_MSG(n_copied >= 3, "copied %d: %s", n_copied, err);
  }
  /* An array of arrays, via a hand-built file copied verbatim. */
  static const uint8_t nested_file[] = {
      'G', 'G', 'U', 'F', 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0,
      /* key "n" */ 1, 0, 0, 0, 0, 0, 0, 0, 'n',
      /* type ARRAY of ARRAY, 2 elements */ 9, 0, 0, 0, 9, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
      /* [u8: 1,2] */ 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 2,
      /* [str: "xy"] */ 8, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 'x', 'y'};
  gguf_file *nf = NULL;
  CHECK_MSG(gguf_open_mem(nested_file, sizeof nested_file, &nf, err) == 0, "%s", err);
  if (nf) CHECK(gguf_writer_copy_kv(w, gguf_kv_at(nf, 0), err) == 0);

  /* Tensors: F32 1-D, F16 2-D, Q8_0 2-D, Q4_K 3-D. */
  struct {
    const char *name;
    uint32_t nd;
    uint64_t ne[4];
    uint32_t dt;
  } ts[4] = {{"a.bias", 1, {5}, PW_DT_F32},
             {"b.weight", 2, {8, 3}, PW_DT_F16},
             {"c.weight", 2, {64, 2}, PW_DT_Q8_0},
             {"blk.0.d", 3, {256, 2, 2}, PW_DT_Q4_K}};
  tdata d = {0, 4, NULL, NULL};
  uint8_t *bufs[4];
  uint64_t lens[4];
  d.bytes = bufs;
  d.len = lens;
  for (int i = 0; i < 4; i++) {
    CHECK_MSG(gguf_writer_add_tensor(w, ts[i].name, ts[i].nd, ts[i].ne, ts[i].dt, err) == 0, "%s", err);
    lens[i] = gguf_writer_tensor_nbytes(w, (uint64_t)i);
    bufs[i] = malloc(lens[i]);
    for (uint64_t k = 0; k < lens[i]; k++) bufs[i][k] = (uint8_t)(k * 31 + (uint64_t)i * 7 + 1);
  }
  CHECK_EQ_INT(lens[0], 20);
  CHECK_EQ_INT(lens[1], 48);
  CHECK_EQ_INT(lens[2], 2 * 2 * 34);
  CHECK_EQ_INT(lens[3], 4 * 144);
  uint64_t ne_bad[2] = {33, 1};
  CHECK(gguf_writer_add_tensor(w, "bad", 2, ne_bad, PW_DT_Q8_0, err) == PW_EINVAL);
  CHECK(gguf_writer_add_tensor(w, "a.bias", 1, ne_bad, PW_DT_F32, err) == PW_EINVAL);
  CHECK(gguf_writer_add_tensor(w, "bad2", 1, ne_bad, 99, err) == PW_EINVAL);
  CHECK(gguf_writer_add_tensor(w, "bad3", 0, ne_bad, PW_DT_F32, err) == PW_EINVAL);

  rc = gguf_writer_write(w, path, produce, &d, err);
  CHECK_MSG(rc == 0, "%s", err);
  gguf_file *f = NULL;
  rc = gguf_open(path, &f, err);
  CHECK_MSG(rc == 0, "%s", err);
  if (f) {
    CHECK_EQ_INT(gguf_version(f), 3);
    CHECK_EQ_INT(gguf_alignment(f), 32);
    CHECK_EQ_INT(gguf_size(f), gguf_writer_file_size(w));
    CHECK_EQ_INT(gguf_n_kv(f), gguf_writer_n_kv(w));
    CHECK(gguf_str_eq(gguf_kv_at(f, 0)->key, "general.alignment"));
    uint64_t u;
    int64_t s;
    float fv;
    bool b;
    CHECK(gguf_get_u64(f, "t.u8", &u) && u == 200);
    CHECK(gguf_get_i64(f, "t.i8", &s) && s == -100);
    CHECK(gguf_get_u64(f, "t.u16", &u) && u == 60000);
    CHECK(gguf_get_i64(f, "t.i16", &s) && s == -30000);
    CHECK(gguf_get_u64(f, "t.u32", &u) && u == 4000000000u);
    CHECK(gguf_get_i64(f, "t.i32", &s) && s == -2000000000);
    CHECK(gguf_get_u64(f, "t.u64", &u) && u == 1ull << 60);
    CHECK(gguf_get_i64(f, "t.i64", &s) && s == -(1ll << 60));
    CHECK(gguf_get_f32(f, "t.f32", &fv) && fv == 1.5f);
    const gguf_kv *kv = gguf_find_kv(f, "t.f64");
    CHECK(kv && kv->type == GGUF_T_FLOAT64);
    if (kv) {
      double dv;
      memcpy(&dv, kv->value, 8);
      CHECK(dv == -2.25);
    }
    CHECK(gguf_get_bool(f, "t.bool", &b) && b);
    char sb[32];
    CHECK(gguf_get_cstr(f, "t.str", sb, sizeof sb) && !strcmp(sb, "héllo"));
    gguf_str gs;
    CHECK(gguf_get_str(f, "t.strn", &gs) && gs.len == 3 && !memcmp(gs.ptr, "a\0b", 3));
    kv = gguf_find_kv(f, "t.replaced");
    CHECK(kv && kv->type == GGUF_T_UINT32);
    CHECK(gguf_get_u64(f, "t.replaced", &u) && u == 7);
    gguf_arr a;
    CHECK(gguf_get_arr(f, "t.arr_i32", &a) && a.type == GGUF_T_INT32 && a.n == 5);
    for (uint64_t i = 0; i < 5 && a.n == 5; i++) CHECK(gguf_arr_int(&a, i) == ints[i]);
    CHECK(gguf_get_arr(f, "t.arr_f32", &a) && a.type == GGUF_T_FLOAT32 && a.n == 3);
    for (uint64_t i = 0; i < 3 && a.n == 3; i++) CHECK(gguf_arr_f32(&a, i) == fl[i]);
    CHECK(gguf_get_arr(f, "t.arr_bool", &a) && a.type == GGUF_T_BOOL && a.n == 3 && gguf_arr_int(&a, 1) == 0 &&
          gguf_arr_int(&a, 2) == 1);
    CHECK(gguf_get_arr(f, "t.arr_empty", &a) && a.type == GGUF_T_UINT64 && a.n == 0);
    CHECK(gguf_get_arr(f, "t.arr_str", &a) && a.type == GGUF_T_STRING && a.n == 3);
    if (a.n == 3) {
      CHECK(gguf_str_eq(gguf_arr_str(&a, 0), "alpha"));
      CHECK(gguf_str_eq(gguf_arr_str(&a, 1), ""));
      CHECK(gguf_str_eq(gguf_arr_str(&a, 2), "gamma"));
    }
    CHECK(gguf_get_arr(f, "n", &a) && a.type == GGUF_T_ARRAY && a.n == 2);
    if (a.n == 2) {
      gguf_arr s0 = gguf_arr_sub(&a, 0), s1 = gguf_arr_sub(&a, 1);
      CHECK(s0.type == GGUF_T_UINT8 && s0.n == 2 && gguf_arr_int(&s0, 1) == 2);
      /* The reader keeps no index for nested string arrays: check the bytes. */
      CHECK(s1.type == GGUF_T_STRING && s1.n == 1 && !memcmp(s1.data, "\x02\0\0\0\0\0\0\0xy", 10));
    }
    /* Copied tokenizer keys: same type and identical value bytes. */
    int seen = 0;
    for (uint64_t i = 0; vf && i < gguf_n_kv(vf); i++) {
      const gguf_kv *src = gguf_kv_at(vf, i);
      if (src->key.len < 10 || memcmp(src->key.ptr, "tokenizer.", 10)) continue;
      char key[256];
      snprintf(key, sizeof key, "%.*s", (int)src->key.len, src->key.ptr);
      const gguf_kv *dst = gguf_find_kv(f, key);
      CHECK_MSG(dst && dst->type == src->type, "copied key %s", key);
      if (!dst) continue;
      seen++;
      if (src->type == GGUF_T_ARRAY) {
        CHECK(dst->arr.n == src->arr.n && dst->arr.type == src->arr.type);
        if (src->arr.type == GGUF_T_STRING && src->arr.n) {
          gguf_str x = gguf_arr_str(&src->arr, src->arr.n - 1), y = gguf_arr_str(&dst->arr, dst->arr.n - 1);
          CHECK(x.len == y.len && !memcmp(x.ptr, y.ptr, x.len));
        }
      } else if (src->type == GGUF_T_STRING) {
        gguf_str x, y;
        memcpy(&x.len, src->value, 8);
        memcpy(&y.len, dst->value, 8);
        CHECK(x.len == y.len && !memcmp(src->value, dst->value, 8 + x.len));
      } else {
        CHECK(!memcmp(src->value, dst->value, 1));
      }
    }
    CHECK_EQ_INT(seen, n_copied);
    CHECK_EQ_INT(gguf_n_tensors(f), 4);
    for (uint64_t i = 0; i < 4 && gguf_n_tensors(f) == 4; i++) {
      const gguf_tensor *t = gguf_tensor_at(f, i);
      CHECK(gguf_str_eq(t->name, ts[i].name));
      CHECK_EQ_INT(t->n_dims, ts[i].nd);
      CHECK_EQ_INT(t->type, ts[i].dt);
      for (uint32_t k = 0; k < 4; k++) CHECK_EQ_INT(t->ne[k], k < ts[i].nd ? ts[i].ne[k] : 1);
      CHECK_EQ_INT(t->nbytes, lens[i]);
      CHECK((uintptr_t)((const uint8_t *)t->data - (const uint8_t *)gguf_base(f)) % 32 == 0);
      CHECK_MSG(!memcmp(t->data, bufs[i], lens[i]), "tensor %llu data differs", (unsigned long long)i);
    }
    gguf_close(f);
  }

  /* Producer errors: short, long, failing. Each removes the partial file
   * and leaves the previous good file in place. */
  for (int mode = 1; mode <= 3; mode++) {
    d.mode = mode;
    rc = gguf_writer_write(w, path, produce, &d, err);
    CHECK_MSG(rc < 0, "mode %d wrote", mode);
    if (mode == 3) CHECK_MSG(strstr(err, "producer says no") != NULL, "%s", err);
    else CHECK_MSG(strstr(err, "b.weight") || strstr(err, "c.weight"), "%s", err);
    char part[300];
    snprintf(part, sizeof part, "%s.part", path);
    CHECK(access(part, F_OK) != 0);
    f = NULL;
    CHECK(gguf_open(path, &f, err) == 0);
    gguf_close(f);
  }
  d.mode = 0;
  rc = gguf_writer_write(w, "/nonexistent-dir/x.gguf", produce, &d, err);
  CHECK(rc == PW_EIO && strstr(err, "/nonexistent-dir/x.gguf"));
  /* A device is written in place (never renamed over): a full disk is a
   * clean PW_EIO. */
  struct stat st;
  if (stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode)) {
    rc = gguf_writer_write(w, "/dev/full", produce, &d, err);
    CHECK_MSG(rc == PW_EIO && strstr(err, "/dev/full"), "%d %s", rc, err);
    CHECK(stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode));
  }

  /* remove_kv */
  uint64_t nkv = gguf_writer_n_kv(w);
  CHECK(gguf_writer_remove_kv(w, "t.u8"));
  CHECK(!gguf_writer_remove_kv(w, "t.u8"));
  CHECK(!gguf_writer_remove_kv(w, "general.alignment"));
  CHECK_EQ_INT(gguf_writer_n_kv(w), nkv - 1);

  for (int i = 0; i < 4; i++) free(bufs[i]);
  unlink(path);
  gguf_close(nf);
  gguf_close(vf);
  gguf_writer_destroy(w);
  gguf_writer_destroy(NULL);
}

static void test_empty(void) {
  char err[PW_ERRMAX], path[256];
  snprintf(path, sizeof path, "/tmp/pw_test_writer_e%d.gguf", (int)getpid());
  gguf_writer *w = gguf_writer_create();
  CHECK(gguf_writer_write(w, path, NULL, NULL, err) == 0);
  gguf_file *f = NULL;
  CHECK_MSG(gguf_open(path, &f, err) == 0, "%s", err);
  if (f) {
    CHECK_EQ_INT(gguf_n_tensors(f), 0);
    CHECK_EQ_INT(gguf_n_kv(f), 1);
  }
  gguf_close(f);
  unlink(path);
  gguf_writer_destroy(w);
}

int main(void) {
  test_round_trip();
  test_empty();
  TEST_DONE();
}
