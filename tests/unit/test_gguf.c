/* test_gguf.c - the GGUF reader on hand-built files, on every shared model,
 * and on hostile input: truncations at many cut points, corrupted header
 * fields, absurd counts and offsets, random byte flips. Each bad file must
 * give a clean error with a message; buffers are exact-size heap copies so
 * ASan catches any over-read. */
#include "base/error.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "test.h"

#include <dirent.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- a tiny GGUF writer for hand-built files -------------------------- */
typedef struct buf {
  uint8_t *p;
  size_t n, cap;
} buf;

static void put(buf *b, const void *d, size_t n) {
  if (b->n + n > b->cap) {
    b->cap = (b->n + n) * 2 + 64;
    b->p = realloc(b->p, b->cap);
  }
  memcpy(b->p + b->n, d, n);
  b->n += n;
}
static void put_u32(buf *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(buf *b, uint64_t v) { put(b, &v, 8); }
static void put_str(buf *b, const char *s) {
  put_u64(b, strlen(s));
  put(b, s, strlen(s));
}

typedef struct spec {
  uint32_t magic, version;
  uint64_t n_tensors_override, n_kv_override; /* 0 = real count */
  uint64_t str_len_override;                  /* for the first key, 0 = real */
  uint32_t alignment;                         /* 0 = none written */
  uint32_t tensor_type, n_dims;
  uint64_t ne0, offset_add;
  int nested_depth;                           /* nesting of an array kv */
} spec;

static spec good_spec(void) {
  spec s = {0x46554747u, 3, 0, 0, 0, 0, 0 /* F32 */, 2, 8, 0, 2};
  return s;
}

/* Writes: 4 kvs (a string, a u32, a f32 array, a nested array), one tensor
 * "w" of F32 [ne0, 2] (or per spec). */
static buf build(spec s) {
  buf b = {0};
  put_u32(&b, s.magic);
  put_u32(&b, s.version);
  put_u64(&b, s.n_tensors_override ? s.n_tensors_override : 1);
  int n_kv = 4 + (s.alignment ? 1 : 0);
  put_u64(&b, s.n_kv_override ? s.n_kv_override : (uint64_t)n_kv);
  if (s.str_len_override) {
    put_u64(&b, s.str_len_override);
    put(&b, "general.architecture", 20);
  } else put_str(&b, "general.architecture");
  put_u32(&b, GGUF_T_STRING);
  put_str(&b, "llama");
  put_str(&b, "test.count");
  put_u32(&b, GGUF_T_UINT32);
  put_u32(&b, 42);
  put_str(&b, "test.floats");
  put_u32(&b, GGUF_T_ARRAY);
  put_u32(&b, GGUF_T_FLOAT32);
  put_u64(&b, 3);
  float fl[3] = {1.5f, -2.0f, 3.25f};
  put(&b, fl, sizeof fl);
  put_str(&b, "test.nested");
  put_u32(&b, GGUF_T_ARRAY);
  for (int d = 0; d < s.nested_depth; d++) {
    put_u32(&b, d + 1 == s.nested_depth ? GGUF_T_STRING : GGUF_T_ARRAY);
    put_u64(&b, d + 1 == s.nested_depth ? 2 : 1);
  }
  put_str(&b, "x");
  put_str(&b, "yz");
  if (s.alignment) {
    put_str(&b, "general.alignment");
    put_u32(&b, GGUF_T_UINT32);
    put_u32(&b, s.alignment);
  }
  put_str(&b, "w");
  put_u32(&b, s.n_dims);
  for (uint32_t d = 0; d < s.n_dims && d < 8; d++) put_u64(&b, d == 0 ? s.ne0 : 2);
  put_u32(&b, s.tensor_type);
  put_u64(&b, s.offset_add);
  uint32_t al = s.alignment && !(s.alignment & (s.alignment - 1)) ? s.alignment : 32;
  while (b.n % al) put(&b, "", 1);
  for (uint64_t i = 0; i < 16; i++) {
    float v = (float)i;
    put(&b, &v, 4);
  }
  return b;
}

/* Opens an exact-size heap copy of the first len bytes. */
static int open_copy(const uint8_t *p, size_t len, char *err) {
  uint8_t *c = malloc(len ? len : 1);
  memcpy(c, p, len);
  gguf_file *f;
  int rc = gguf_open_mem(c, len, &f, err);
  if (rc == 0) {
    /* Touch everything a caller could reach. */
    for (uint64_t i = 0; i < gguf_n_kv(f); i++) {
      char tmp[128];
      gguf_kv_format(gguf_kv_at(f, i), tmp, sizeof tmp);
      const gguf_kv *kv = gguf_kv_at(f, i);
      if (kv->type == GGUF_T_ARRAY && kv->arr.type == GGUF_T_STRING)
        for (uint64_t j = 0; j < kv->arr.n && j < 1000; j++) (void)gguf_arr_str(&kv->arr, j);
    }
    volatile uint8_t sink = 0;
    for (uint64_t i = 0; i < gguf_n_tensors(f); i++) {
      const gguf_tensor *t = gguf_tensor_at(f, i);
      if (t->nbytes) sink ^= ((const uint8_t *)t->data)[t->nbytes - 1];
    }
    (void)sink;
    gguf_close(f);
  }
  free(c);
  return rc;
}

static void test_good(void) {
  spec s = good_spec();
  buf b = build(s);
  gguf_file *f;
  char err[PW_ERRMAX] = "";
  CHECK_MSG(gguf_open_mem(b.p, b.n, &f, err) == 0, "%s", err);
  if (!f) return;
  char arch[16];
  CHECK(gguf_get_cstr(f, "general.architecture", arch, sizeof arch));
  CHECK_STR(arch, "llama");
  uint32_t u;
  CHECK(gguf_get_u32(f, "test.count", &u) && u == 42);
  float fv;
  CHECK(gguf_get_f32(f, "test.count", &fv) && fv == 42.0f);
  CHECK(!gguf_get_u32(f, "general.architecture", &u));
  gguf_arr a;
  CHECK(gguf_get_arr(f, "test.floats", &a) && a.n == 3 && gguf_arr_f32(&a, 2) == 3.25f);
  CHECK(gguf_get_arr(f, "test.nested", &a) && a.type == GGUF_T_ARRAY && a.n == 1);
  gguf_arr sub = gguf_arr_sub(&a, 0);
  CHECK(sub.type == GGUF_T_STRING && sub.n == 2);
  const gguf_tensor *t = gguf_find_tensor(f, "w");
  CHECK(t && t->ne[0] == 8 && t->ne[1] == 2 && t->nbytes == 64);
  if (t) CHECK(((const float *)t->data)[3] == 3.0f);
  CHECK(gguf_find_tensor(f, "nope") == NULL);
  gguf_close(f);
  free(b.p);
}

typedef struct bad_case {
  const char *what;
  spec s;
  const char *needle; /* expected substring of the message */
} bad_case;

static void test_bad_headers(void) {
  bad_case cases[16];
  int n = 0;
  spec s;
#define BAD(desc, field, val, needle_)                     \
  s = good_spec();                                         \
  s.field = val;                                           \
  cases[n++] = (bad_case){desc, s, needle_};
  BAD("bad magic", magic, 0x12345678, "magic");
  BAD("version 1", version, 1, "version");
  BAD("version 99", version, 99, "version");
  BAD("absurd tensor count", n_tensors_override, 1ull << 60, "tensor count");
  BAD("absurd kv count", n_kv_override, 1ull << 62, "metadata count");
  BAD("absurd string length", str_len_override, 1ull << 62, "length");
  BAD("unknown tensor type", tensor_type, 99, "unknown tensor type 99");
  BAD("5 dims", n_dims, 5, "dimensions");
  BAD("zero dim", ne0, 0, "dimension");
  BAD("huge dim", ne0, 1ull << 50, "dimension");
  BAD("misaligned offset", offset_add, 3, "aligned");
  BAD("offset beyond end", offset_add, 1ull << 40, "exceeds");
  BAD("alignment not power of 2", alignment, 24, "alignment");
  BAD("too deep nesting", nested_depth, 40, "nested");
  BAD("row not multiple of block", tensor_type, 2 /* Q4_0 */, "block size");
#undef BAD
  for (int i = 0; i < n; i++) {
    buf b = build(cases[i].s);
    char err[PW_ERRMAX] = "";
    int rc = open_copy(b.p, b.n, err);
    CHECK_MSG(rc < 0, "%s: accepted", cases[i].what);
    CHECK_MSG(strstr(err, cases[i].needle) != NULL, "%s: message '%s' lacks '%s'", cases[i].what, err,
              cases[i].needle);
    free(b.p);
  }
}

static uint8_t *read_file(const char *path, size_t *len) {
  FILE *fp = fopen(path, "rb");
  if (!fp) return NULL;
  fseek(fp, 0, SEEK_END);
  long n = ftell(fp);
  fseek(fp, 0, SEEK_SET);
  uint8_t *p = malloc((size_t)n);
  if (fread(p, 1, (size_t)n, fp) != (size_t)n) {
    free(p);
    p = NULL;
  }
  fclose(fp);
  *len = (size_t)n;
  return p;
}

/* Every shared model opens; truncations at many cut points and random
 * header corruptions are rejected or (if harmless) accepted, never crash. */
static void test_shared_models(void) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/models", POWER_SHARED_DIR);
  DIR *d = opendir(dir);
  CHECK_MSG(d != NULL, "missing test assets: %s", dir);
  if (!d) return;
  struct dirent *de;
  int n_models = 0;
  uint64_t rng = 12345;
  while ((de = readdir(d))) {
    size_t L = strlen(de->d_name);
    if (L < 6 || strcmp(de->d_name + L - 5, ".gguf")) continue;
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    size_t len;
    uint8_t *p = read_file(path, &len);
    CHECK_MSG(p != NULL, "cannot read %s", path);
    if (!p) continue;
    n_models++;
    char err[PW_ERRMAX] = "";
    CHECK_MSG(open_copy(p, len, err) == 0, "%s: %s", de->d_name, err);
    /* Truncations: dense in the header, sparse in the data. */
    size_t cuts[64];
    int nc = 0;
    for (size_t c = 0; c < 64 && nc < 40; c += 3) cuts[nc++] = c;
    for (int k = 1; k <= 16; k++) cuts[nc++] = len * (size_t)k / 17;
    cuts[nc++] = len - 1;
    for (int i = 0; i < nc; i++) {
      err[0] = 0;
      int rc = open_copy(p, cuts[i], err);
      CHECK_MSG(rc < 0 && err[0], "%s truncated to %zu bytes: accepted", de->d_name, cuts[i]);
    }
    /* Random flips of bytes in the metadata region. */
    size_t hdr = len < 65536 ? len : 65536;
    uint8_t *c = malloc(len);
    memcpy(c, p, len);
    for (int it = 0; it < 300; it++) {
      size_t at[4];
      for (int k = 0; k < 4; k++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        at[k] = (size_t)(rng >> 33) % hdr;
        c[at[k]] ^= (uint8_t)(1u << ((rng >> 20) & 7));
      }
      gguf_file *f;
      err[0] = 0;
      int rc = gguf_open_mem(c, len, &f, err);
      if (rc == 0) gguf_close(f);
      else CHECK_MSG(err[0] != 0, "%s: error without a message", de->d_name);
      for (int k = 0; k < 4; k++) c[at[k]] = p[at[k]];
    }
    free(c);
    /* A truncated file on disk through the model loader. */
    char tmp[] = "/tmp/power-test-XXXXXX";
    int fd = mkstemp(tmp);
    if (fd >= 0) {
      CHECK(write(fd, p, len / 2) == (ssize_t)(len / 2));
      close(fd);
      model *m = NULL;
      err[0] = 0;
      int rc = model_load(tmp, NULL, &m, err);
      CHECK_MSG(rc < 0 && m == NULL && strstr(err, "truncated"), "%s half: rc %d '%s'", de->d_name, rc, err);
      unlink(tmp);
    }
    free(p);
  }
  closedir(d);
  CHECK_MSG(n_models >= 5, "expected the shared models, found %d", n_models);
}

/* gguf_make_resident: every byte faulted in, the same bytes as the file
 * (a page-cache re-read must not lose or change any), the 2 MiB-page count
 * found in /proc for this very mapping; a no-op over a caller buffer. */
static void test_residency(void) {
  char path[1024], err[PW_ERRMAX] = "";
  snprintf(path, sizeof path, "%s/models/syn-llama3-Q8_0.gguf", POWER_SHARED_DIR);
  size_t len;
  uint8_t *p = read_file(path, &len);
  CHECK_MSG(p != NULL, "cannot read %s", path);
  if (!p) return;
  gguf_file *f;
  CHECK(gguf_open_mem(p, len, &f, err) == 0);
  gguf_residency r;
  if (f) {
    gguf_make_resident(f, &r);
    CHECK(r.bytes == len && r.huge_bytes == -1 && !r.refreshed);
    gguf_close(f);
  }
  /* a copy written 4 KiB at a time: its page cache starts in small folios,
   * which is what makes gguf_make_resident re-read a file */
  char tmp[] = "/tmp/power-test-XXXXXX";
  int fd = mkstemp(tmp);
  CHECK(fd >= 0);
  for (size_t o = 0; fd >= 0 && o < len; o += 4096) {
    size_t n = len - o < 4096 ? len - o : 4096;
    CHECK(write(fd, p + o, n) == (ssize_t)n);
  }
  if (fd >= 0) {
    CHECK(fsync(fd) == 0);
    close(fd);
  }
  int refreshed = 0;
  for (int round = 0; round < 3; round++) {
    CHECK_MSG(gguf_open(round ? tmp : path, &f, err) == 0, "%s", err);
    if (!f) break;
    gguf_make_resident(f, &r);
    CHECK(r.bytes == len && gguf_size(f) == len);
    FILE *smaps = fopen("/proc/self/smaps", "r");
    if (smaps) {
      fclose(smaps);
      CHECK_MSG(r.huge_bytes >= 0 && (uint64_t)r.huge_bytes <= len, "huge bytes %lld of %zu", (long long)r.huge_bytes,
                len);
    }
    const long pg = sysconf(_SC_PAGESIZE);
    size_t np = (len + (size_t)pg - 1) / (size_t)pg;
    unsigned char *vec = malloc(np);
    CHECK(vec && mincore((void *)gguf_base(f), len, vec) == 0);
    size_t res = 0;
    for (size_t i = 0; vec && i < np; i++) res += vec[i] & 1;
    CHECK_MSG(res == np, "round %d: %zu of %zu pages resident", round, res, np);
    free(vec);
    CHECK_MSG(memcmp(gguf_base(f), p, len) == 0, "round %d: mapped bytes differ from the file", round);
    refreshed += r.refreshed;
    gguf_close(f);
  }
  printf("residency: %d of 3 loads re-read the page cache\n", refreshed);
  unlink(tmp);
  free(p);
}

static void test_missing_file(void) {
  gguf_file *f;
  char err[PW_ERRMAX];
  CHECK(gguf_open("/nonexistent/x.gguf", &f, err) == PW_EIO && f == NULL);
  CHECK(strstr(err, "No such file") != NULL);
}

int main(void) {
  test_good();
  test_bad_headers();
  test_missing_file();
  test_residency();
  test_shared_models();
  TEST_DONE();
}
