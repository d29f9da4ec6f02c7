/* writer.c - GGUF v3 writer (format in gguf.h).
 *
 * Each kv keeps its value already serialized as the bytes that follow the
 * type tag in the file, so writing metadata is a memcpy and copying a kv
 * verbatim from a mapped file is one walk over its bytes. Tensor offsets are
 * assigned when tensors are added; the data pass streams through a stdio
 * buffer into "<path>.part", renamed over path only when everything was
 * written and flushed, so a failed write never leaves a truncated model
 * where a good one was. A path that exists and is not a regular file (a
 * device, a pipe) is written in place: renaming over it would replace it. */
#include "gguf/writer.h"

#include "base/error.h"
#include "tensor/dtype.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC 0x46554747u
#define GGUF_VERSION 3
#define WR_MAX_KEY 65535
#define WR_MAX_NESTING 8

typedef struct wr_kv {
  char *key;    /* owned, NUL-terminated */
  uint32_t type;
  uint8_t *val; /* owned serialized value (bytes after the type tag) */
  size_t len;
} wr_kv;

typedef struct wr_tensor {
  char *name; /* owned */
  uint32_t n_dims;
  uint64_t ne[GGUF_MAX_DIMS];
  uint32_t dtype;
  uint64_t offset; /* relative to the data section, aligned */
  uint64_t nbytes;
} wr_tensor;

struct gguf_writer {
  wr_kv *kv;
  uint64_t n_kv, cap_kv;
  wr_tensor *t;
  uint64_t n_t, cap_t;
  uint64_t data_size; /* aligned end of the last tensor */
};

static const uint32_t k_scalar_size[GGUF_T_COUNT] = {
    [GGUF_T_UINT8] = 1,  [GGUF_T_INT8] = 1,    [GGUF_T_UINT16] = 2, [GGUF_T_INT16] = 2,
    [GGUF_T_UINT32] = 4, [GGUF_T_INT32] = 4,   [GGUF_T_FLOAT32] = 4, [GGUF_T_BOOL] = 1,
    [GGUF_T_UINT64] = 8, [GGUF_T_INT64] = 8,   [GGUF_T_FLOAT64] = 8,
};

static uint64_t align_up(uint64_t x) {
  return (x + GGUF_WRITER_ALIGNMENT - 1) / GGUF_WRITER_ALIGNMENT * GGUF_WRITER_ALIGNMENT;
}

/* ---- metadata --------------------------------------------------------- */

static int find_kv(const gguf_writer *w, const char *key) {
  for (uint64_t i = 0; i < w->n_kv; i++)
    if (!strcmp(w->kv[i].key, key)) return (int)i;
  return -1;
}

/* Takes ownership of val (freed on failure). */
static int put_kv(gguf_writer *w, const char *key, uint32_t type, uint8_t *val, size_t len, char *err) {
  size_t klen = key ? strlen(key) : 0;
  if (!w || klen == 0 || klen > WR_MAX_KEY) {
    free(val);
    return pw_seterr(err, PW_EINVAL, "gguf writer: metadata key must be 1..%d bytes", WR_MAX_KEY);
  }
  /* The data layout depends on the alignment, which this writer fixes. */
  if (!strcmp(key, "general.alignment")) {
    uint32_t a = 0;
    if (type == GGUF_T_UINT32 && len == 4) memcpy(&a, val, 4);
    free(val);
    if (a != GGUF_WRITER_ALIGNMENT)
      return pw_seterr(err, PW_EUNSUPPORTED, "gguf writer: general.alignment must be u32 %d",
                       GGUF_WRITER_ALIGNMENT);
    return 0;
  }
  int at = find_kv(w, key);
  if (at >= 0) {
    free(w->kv[at].val);
    w->kv[at].type = type;
    w->kv[at].val = val;
    w->kv[at].len = len;
    return 0;
  }
  if (w->n_kv == w->cap_kv) {
    uint64_t cap = w->cap_kv ? w->cap_kv * 2 : 32;
    wr_kv *p = realloc(w->kv, cap * sizeof *p);
    if (!p) {
      free(val);
      return pw_seterr(err, PW_ENOMEM, "gguf writer: out of memory");
    }
    w->kv = p;
    w->cap_kv = cap;
  }
  char *k = strdup(key);
  if (!k) {
    free(val);
    return pw_seterr(err, PW_ENOMEM, "gguf writer: out of memory");
  }
  w->kv[w->n_kv++] = (wr_kv){k, type, val, len};
  return 0;
}

static int put_scalar(gguf_writer *w, const char *key, uint32_t type, const void *v, char *err) {
  size_t n = k_scalar_size[type];
  uint8_t *val = malloc(n);
  if (!val) return pw_seterr(err, PW_ENOMEM, "gguf writer: out of memory");
  memcpy(val, v, n);
  return put_kv(w, key, type, val, n, err);
}

gguf_writer *gguf_writer_create(void) {
  gguf_writer *w = calloc(1, sizeof *w);
  if (!w) return NULL;
  /* First key, so readers that honour it find it before anything else. */
  uint8_t *val = malloc(4);
  char *k = strdup("general.alignment");
  w->kv = malloc(32 * sizeof *w->kv);
  if (!val || !k || !w->kv) {
    free(val);
    free(k);
    free(w->kv);
    free(w);
    return NULL;
  }
  uint32_t a = GGUF_WRITER_ALIGNMENT;
  memcpy(val, &a, 4);
  w->cap_kv = 32;
  w->kv[w->n_kv++] = (wr_kv){k, GGUF_T_UINT32, val, 4};
  return w;
}

void gguf_writer_destroy(gguf_writer *w) {
  if (!w) return;
  for (uint64_t i = 0; i < w->n_kv; i++) {
    free(w->kv[i].key);
    free(w->kv[i].val);
  }
  for (uint64_t i = 0; i < w->n_t; i++) free(w->t[i].name);
  free(w->kv);
  free(w->t);
  free(w);
}

#define WR_SCALAR(fn, ctype, vt) \
  int fn(gguf_writer *w, const char *key, ctype v, char *err) { return put_scalar(w, key, vt, &v, err); }
WR_SCALAR(gguf_writer_set_u8, uint8_t, GGUF_T_UINT8)
WR_SCALAR(gguf_writer_set_i8, int8_t, GGUF_T_INT8)
WR_SCALAR(gguf_writer_set_u16, uint16_t, GGUF_T_UINT16)
WR_SCALAR(gguf_writer_set_i16, int16_t, GGUF_T_INT16)
WR_SCALAR(gguf_writer_set_u32, uint32_t, GGUF_T_UINT32)
WR_SCALAR(gguf_writer_set_i32, int32_t, GGUF_T_INT32)
WR_SCALAR(gguf_writer_set_u64, uint64_t, GGUF_T_UINT64)
WR_SCALAR(gguf_writer_set_i64, int64_t, GGUF_T_INT64)
WR_SCALAR(gguf_writer_set_f32, float, GGUF_T_FLOAT32)
WR_SCALAR(gguf_writer_set_f64, double, GGUF_T_FLOAT64)
#undef WR_SCALAR

int gguf_writer_set_bool(gguf_writer *w, const char *key, bool v, char *err) {
  uint8_t b = v ? 1 : 0;
  return put_scalar(w, key, GGUF_T_BOOL, &b, err);
}

int gguf_writer_set_strn(gguf_writer *w, const char *key, const char *v, uint64_t len, char *err) {
  if (!v && len) return pw_seterr(err, PW_EINVAL, "gguf writer: NULL string for %s", key ? key : "?");
  uint8_t *val = malloc(8 + len);
  if (!val) return pw_seterr(err, PW_ENOMEM, "gguf writer: out of memory for a %llu-byte string",
                             (unsigned long long)len);
  memcpy(val, &len, 8);
  if (len) memcpy(val + 8, v, len);
  return put_kv(w, key, GGUF_T_STRING, val, 8 + len, err);
}

int gguf_writer_set_str(gguf_writer *w, const char *key, const char *v, char *err) {
  if (!v) return pw_seterr(err, PW_EINVAL, "gguf writer: NULL string for %s", key ? key : "?");
  return gguf_writer_set_strn(w, key, v, strlen(v), err);
}

int gguf_writer_set_arr(gguf_writer *w, const char *key, uint32_t elem_type, const void *data, uint64_t n,
                        char *err) {
  if (elem_type >= GGUF_T_COUNT || !k_scalar_size[elem_type])
    return pw_seterr(err, PW_EINVAL, "gguf writer: %s: array element type %u is not a fixed-size scalar",
                     key ? key : "?", elem_type);
  uint64_t es = k_scalar_size[elem_type];
  if (n > (SIZE_MAX - 12) / es) return pw_seterr(err, PW_EINVAL, "gguf writer: array too large");
  if (!data && n) return pw_seterr(err, PW_EINVAL, "gguf writer: NULL array data for %s", key ? key : "?");
  if (elem_type == GGUF_T_BOOL)
    for (uint64_t i = 0; i < n; i++)
      if (((const uint8_t *)data)[i] > 1)
        return pw_seterr(err, PW_EINVAL, "gguf writer: %s: bool element %llu is not 0 or 1", key ? key : "?",
                         (unsigned long long)i);
  size_t len = 12 + (size_t)(n * es);
  uint8_t *val = malloc(len);
  if (!val) return pw_seterr(err, PW_ENOMEM, "gguf writer: out of memory");
  memcpy(val, &elem_type, 4);
  memcpy(val + 4, &n, 8);
  if (n) memcpy(val + 12, data, (size_t)(n * es));
  return put_kv(w, key, GGUF_T_ARRAY, val, len, err);
}

int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n, char *err) {
  if (!v && n) return pw_seterr(err, PW_EINVAL, "gguf writer: NULL string array for %s", key ? key : "?");
  size_t len = 12;
  for (uint64_t i = 0; i < n; i++) {
    if (!v[i]) return pw_seterr(err, PW_EINVAL, "gguf writer: %s: string %llu is NULL", key ? key : "?",
                                (unsigned long long)i);
    len += 8 + strlen(v[i]);
  }
  uint8_t *val = malloc(len);
  if (!val) return pw_seterr(err, PW_ENOMEM, "gguf writer: out of memory");
  uint32_t et = GGUF_T_STRING;
  memcpy(val, &et, 4);
  memcpy(val + 4, &n, 8);
  size_t off = 12;
  for (uint64_t i = 0; i < n; i++) {
    uint64_t sl = strlen(v[i]);
    memcpy(val + off, &sl, 8);
    memcpy(val + off + 8, v[i], sl);
    off += 8 + sl;
  }
  return put_kv(w, key, GGUF_T_ARRAY, val, len, err);
}

/* Byte length of a serialized value at p. The reader validated the whole
 * file, so the walk stays inside the mapping. */
static uint64_t value_len(uint32_t type, const uint8_t *p, int depth) {
  if (type == GGUF_T_STRING) {
    uint64_t n;
    memcpy(&n, p, 8);
    return 8 + n;
  }
  if (type != GGUF_T_ARRAY) return k_scalar_size[type];
  uint32_t et;
  uint64_t n;
  memcpy(&et, p, 4);
  memcpy(&n, p + 4, 8);
  if (k_scalar_size[et] && et != GGUF_T_STRING && et != GGUF_T_ARRAY) return 12 + n * k_scalar_size[et];
  PW_ASSERT(depth < 64);
  uint64_t off = 12;
  for (uint64_t i = 0; i < n; i++) off += value_len(et, p + off, depth + 1);
  return off;
}

int gguf_writer_copy_kv(gguf_writer *w, const gguf_kv *kv, char *err) {
  if (!kv || kv->type >= GGUF_T_COUNT) return pw_seterr(err, PW_EINVAL, "gguf writer: bad kv to copy");
  if (kv->key.len == 0 || kv->key.len > WR_MAX_KEY)
    return pw_seterr(err, PW_EINVAL, "gguf writer: metadata key must be 1..%d bytes", WR_MAX_KEY);
  char *key = malloc(kv->key.len + 1);
  if (!key) return pw_seterr(err, PW_ENOMEM, "gguf writer: out of memory");
  memcpy(key, kv->key.ptr, kv->key.len);
  key[kv->key.len] = 0;
  if (strlen(key) != kv->key.len) {
    free(key);
    return pw_seterr(err, PW_EINVAL, "gguf writer: metadata key with an embedded NUL cannot be copied");
  }
  uint64_t len = value_len(kv->type, kv->value, 0);
  uint8_t *val = len <= SIZE_MAX ? malloc(len ? (size_t)len : 1) : NULL;
  if (!val) {
    free(key);
    return pw_seterr(err, PW_ENOMEM, "gguf writer: out of memory");
  }
  memcpy(val, kv->value, (size_t)len);
  int rc = put_kv(w, key, kv->type, val, (size_t)len, err);
  free(key);
  return rc;
}

int gguf_writer_copy_kvs_prefix(gguf_writer *w, const gguf_file *src, const char *prefix, char *err) {
  size_t pl = prefix ? strlen(prefix) : 0;
  int n = 0;
  for (uint64_t i = 0; i < gguf_n_kv(src); i++) {
    const gguf_kv *kv = gguf_kv_at(src, i);
    if (kv->key.len < pl || memcmp(kv->key.ptr, prefix, pl)) continue;
    if (gguf_str_eq(kv->key, "general.alignment")) continue; /* ours is fixed */
    int rc = gguf_writer_copy_kv(w, kv, err);
    if (rc) return rc;
    n++;
  }
  return n;
}

bool gguf_writer_remove_kv(gguf_writer *w, const char *key) {
  int at = find_kv(w, key);
  if (at < 0 || !strcmp(key, "general.alignment")) return false;
  free(w->kv[at].key);
  free(w->kv[at].val);
  memmove(&w->kv[at], &w->kv[at + 1], (size_t)(w->n_kv - (uint64_t)at - 1) * sizeof *w->kv);
  w->n_kv--;
  return true;
}

uint64_t gguf_writer_n_kv(const gguf_writer *w) { return w->n_kv; }

/* ---- tensors ---------------------------------------------------------- */

int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t dtype,
                           char *err) {
  size_t nl = name ? strlen(name) : 0;
  if (!w || nl == 0 || nl > WR_MAX_KEY) return pw_seterr(err, PW_EINVAL, "gguf writer: bad tensor name");
  if (n_dims < 1 || n_dims > GGUF_MAX_DIMS || !ne)
    return pw_seterr(err, PW_EINVAL, "gguf writer: tensor %s: %u dimensions (must be 1..%d)", name, n_dims,
                     GGUF_MAX_DIMS);
  const pw_dtype_info *di = pw_dtype_get(dtype);
  if (!di) return pw_seterr(err, PW_EINVAL, "gguf writer: tensor %s: unknown dtype %u", name, dtype);
  uint64_t nel = 1;
  for (uint32_t d = 0; d < n_dims; d++) {
    if (ne[d] == 0 || ne[d] > (1ull << 40) || nel > (1ull << 42) / ne[d])
      return pw_seterr(err, PW_EINVAL, "gguf writer: tensor %s: dimension %u = %llu is out of range", name, d,
                       (unsigned long long)ne[d]);
    nel *= ne[d];
  }
  if (ne[0] % di->blck)
    return pw_seterr(err, PW_EINVAL, "gguf writer: tensor %s: row length %llu is not a multiple of the %s block %u",
                     name, (unsigned long long)ne[0], di->name, di->blck);
  for (uint64_t i = 0; i < w->n_t; i++)
    if (!strcmp(w->t[i].name, name)) return pw_seterr(err, PW_EINVAL, "gguf writer: duplicate tensor %s", name);
  if (w->n_t == w->cap_t) {
    uint64_t cap = w->cap_t ? w->cap_t * 2 : 64;
    wr_tensor *p = realloc(w->t, cap * sizeof *p);
    if (!p) return pw_seterr(err, PW_ENOMEM, "gguf writer: out of memory");
    w->t = p;
    w->cap_t = cap;
  }
  wr_tensor t = {0};
  t.name = strdup(name);
  if (!t.name) return pw_seterr(err, PW_ENOMEM, "gguf writer: out of memory");
  t.n_dims = n_dims;
  for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t.ne[d] = d < n_dims ? ne[d] : 1;
  t.dtype = dtype;
  t.nbytes = nel / di->blck * di->type_size;
  t.offset = w->data_size;
  w->data_size = align_up(t.offset + t.nbytes);
  w->t[w->n_t++] = t;
  return 0;
}

uint64_t gguf_writer_n_tensors(const gguf_writer *w) { return w->n_t; }

uint64_t gguf_writer_tensor_nbytes(const gguf_writer *w, uint64_t i) { return i < w->n_t ? w->t[i].nbytes : 0; }

static uint64_t header_size(const gguf_writer *w) {
  uint64_t n = 4 + 4 + 8 + 8;
  for (uint64_t i = 0; i < w->n_kv; i++) n += 8 + strlen(w->kv[i].key) + 4 + w->kv[i].len;
  for (uint64_t i = 0; i < w->n_t; i++) n += 8 + strlen(w->t[i].name) + 4 + 8ull * w->t[i].n_dims + 4 + 8;
  return n;
}

uint64_t gguf_writer_file_size(const gguf_writer *w) {
  if (w->n_t == 0) return header_size(w);
  return align_up(header_size(w)) + w->data_size;
}

/* ---- writing ---------------------------------------------------------- */

typedef struct wr_sink {
  FILE *fp;
  uint64_t left; /* bytes the current tensor may still emit */
  int io_errno;  /* errno of the first failed write */
  int overflow;  /* the producer emitted more than announced */
} wr_sink;

static int sink_emit(void *s, const void *buf, size_t len) {
  wr_sink *k = s;
  if (len > k->left) {
    k->overflow = 1;
    return PW_EINVAL;
  }
  if (len && fwrite(buf, 1, len, k->fp) != len) {
    if (!k->io_errno) k->io_errno = errno ? errno : EIO;
    return PW_EIO;
  }
  k->left -= len;
  return 0;
}

static int put_raw(wr_sink *k, const void *p, size_t n) {
  if (n && fwrite(p, 1, n, k->fp) != n) {
    if (!k->io_errno) k->io_errno = errno ? errno : EIO;
    return PW_EIO;
  }
  return 0;
}

static int put_zeros(wr_sink *k, uint64_t n) {
  static const uint8_t z[GGUF_WRITER_ALIGNMENT];
  return put_raw(k, z, (size_t)n);
}

static int put_gstr(wr_sink *k, const char *s) {
  uint64_t n = strlen(s);
  int rc = put_raw(k, &n, 8);
  return rc ? rc : put_raw(k, s, (size_t)n);
}

static int write_header(const gguf_writer *w, wr_sink *k) {
  uint32_t magic = GGUF_MAGIC, version = GGUF_VERSION;
  int rc = 0;
  rc = rc ? rc : put_raw(k, &magic, 4);
  rc = rc ? rc : put_raw(k, &version, 4);
  rc = rc ? rc : put_raw(k, &w->n_t, 8);
  rc = rc ? rc : put_raw(k, &w->n_kv, 8);
  for (uint64_t i = 0; i < w->n_kv && !rc; i++) {
    rc = put_gstr(k, w->kv[i].key);
    rc = rc ? rc : put_raw(k, &w->kv[i].type, 4);
    rc = rc ? rc : put_raw(k, w->kv[i].val, w->kv[i].len);
  }
  for (uint64_t i = 0; i < w->n_t && !rc; i++) {
    const wr_tensor *t = &w->t[i];
    rc = put_gstr(k, t->name);
    rc = rc ? rc : put_raw(k, &t->n_dims, 4);
    rc = rc ? rc : put_raw(k, t->ne, 8ull * t->n_dims);
    rc = rc ? rc : put_raw(k, &t->dtype, 4);
    rc = rc ? rc : put_raw(k, &t->offset, 8);
  }
  if (!rc && w->n_t) {
    uint64_t h = header_size(w);
    rc = put_zeros(k, align_up(h) - h);
  }
  return rc;
}

#define WR_BUF_BYTES (2u << 20)

int gguf_writer_write(const gguf_writer *w, const char *path, gguf_tensor_data_fn fn, void *ctx, char *err) {
  if (!w || !path || !*path) return pw_seterr(err, PW_EINVAL, "gguf writer: no output path");
  if (w->n_t && !fn) return pw_seterr(err, PW_EINVAL, "gguf writer: tensors but no data callback");
  size_t pl = strlen(path);
  char *tmp = malloc(pl + 6);
  if (!tmp) return pw_seterr(err, PW_ENOMEM, "gguf writer: out of memory");
  memcpy(tmp, path, pl);
  memcpy(tmp + pl, ".part", 6);
  struct stat st;
  int direct = stat(path, &st) == 0 && !S_ISREG(st.st_mode);
  if (direct) memcpy(tmp, path, pl + 1);
  int rc = 0;
  wr_sink k = {0};
  char *buf = NULL;
  k.fp = fopen(tmp, "wb");
  if (!k.fp) {
    rc = pw_seterr(err, PW_EIO, "cannot create %s: %s", path, strerror(errno));
    free(tmp);
    return rc;
  }
  /* Large stdio buffer: rows arrive in small pieces. 2 MiB writes at 2 MiB
   * offsets also let the page cache hold the new file in 2 MiB folios, so a
   * model loaded right after it is written can be mapped in 2 MiB pages
   * (see gguf_make_resident). */
  buf = malloc(WR_BUF_BYTES);
  if (buf) setvbuf(k.fp, buf, _IOFBF, WR_BUF_BYTES);
  if ((rc = write_header(w, &k))) goto io_fail;
  for (uint64_t i = 0; i < w->n_t; i++) {
    const wr_tensor *t = &w->t[i];
    k.left = t->nbytes;
    k.overflow = 0;
    char perr[PW_ERRMAX] = "";
    rc = fn(ctx, i, sink_emit, &k, perr);
    if (k.io_errno) goto io_fail;
    if (k.overflow) {
      rc = pw_seterr(err, PW_EINTERNAL, "gguf writer: tensor %s: producer wrote more than %llu bytes", t->name,
                     (unsigned long long)t->nbytes);
      goto fail;
    }
    if (rc) {
      if (perr[0]) pw_seterr(err, rc, "%s", perr);
      else pw_seterr(err, rc, "gguf writer: tensor %s: data producer failed", t->name);
      goto fail;
    }
    if (k.left) {
      rc = pw_seterr(err, PW_EINTERNAL, "gguf writer: tensor %s: producer wrote %llu of %llu bytes", t->name,
                     (unsigned long long)(t->nbytes - k.left), (unsigned long long)t->nbytes);
      goto fail;
    }
    if ((rc = put_zeros(&k, align_up(t->nbytes) - t->nbytes))) goto io_fail;
  }
  if (fflush(k.fp) != 0) {
    k.io_errno = errno;
    goto io_fail;
  }
  FILE *fp = k.fp;
  k.fp = NULL;
  if (fclose(fp) != 0) {
    k.io_errno = errno;
    goto io_fail;
  }
  if (!direct && rename(tmp, path) != 0) {
    rc = pw_seterr(err, PW_EIO, "cannot create %s: %s", path, strerror(errno));
    goto fail;
  }
  free(buf);
  free(tmp);
  return 0;
io_fail:
  rc = pw_seterr(err, PW_EIO, "cannot write %s: %s", path, strerror(k.io_errno ? k.io_errno : EIO));
fail:
  if (k.fp) fclose(k.fp);
  if (!direct) unlink(tmp);
  free(buf);
  free(tmp);
  return rc;
}
