/* gguf.c - GGUF parsing and validation.
 *
 * Parsing walks the file once with a bounds-checked cursor. Every count read
 * from the file is checked against the bytes that remain before anything is
 * allocated for it, so a hostile header cannot make us allocate or read
 * beyond the file. String and nested arrays get an offset index so later
 * element access is O(1) and needs no re-validation. */
#include "gguf/gguf.h"

#include "base/error.h"
#include "tensor/dtype.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_MAGIC 0x46554747u /* "GGUF" little-endian */
#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_NESTING 8
#define GGUF_MAX_KEY_LEN 65535
#define GGUF_MAX_NAME_LEN 65535

struct gguf_file {
  const uint8_t *base;  /* mapping or caller buffer */
  uint64_t size;        /* bytes */
  int mapped;           /* 1 when base is our mmap */
  int fd;               /* the mapped file (residency), or -1 */
  uint32_t version;
  uint32_t alignment;
  uint64_t data_offset; /* absolute offset of the tensor data section */
  uint64_t n_kv;
  gguf_kv *kvs;         /* [n_kv], owned */
  uint64_t n_tensors;
  gguf_tensor *tensors; /* [n_tensors], owned */
  uint64_t **indexes;   /* owned offset indexes of string/array arrays */
  uint64_t n_indexes, cap_indexes;
  /* A split model (gguf_merge): kvs is a copy of part 0's table (views
   * into part 0), tensors gathers every part's (views into each part);
   * base/size/data_offset are part 0's, size the parts' sum. */
  gguf_file **parts;    /* [n_parts]; owned when own_parts */
  int n_parts;          /* 0: an ordinary file */
  int own_parts;
};

typedef struct cursor {
  const uint8_t *p;
  uint64_t off, size;
  char *err;
} cursor;

static const uint32_t k_vtype_size[GGUF_T_COUNT] = {
    [GGUF_T_UINT8] = 1,  [GGUF_T_INT8] = 1,    [GGUF_T_UINT16] = 2, [GGUF_T_INT16] = 2,
    [GGUF_T_UINT32] = 4, [GGUF_T_INT32] = 4,   [GGUF_T_FLOAT32] = 4, [GGUF_T_BOOL] = 1,
    [GGUF_T_STRING] = 0, [GGUF_T_ARRAY] = 0,   [GGUF_T_UINT64] = 8, [GGUF_T_INT64] = 8,
    [GGUF_T_FLOAT64] = 8,
};

/* general.file_type values as llama.cpp's llama_ftype numbers them (the
 * "MOSTLY_" types; 4-6 and 33-35 are retired or unused). */
const char *gguf_file_type_name(uint32_t ft) {
  static const char *const k[] = {
      [0] = "F32",      [1] = "F16",      [2] = "Q4_0",     [3] = "Q4_1",     [4] = "Q4_1_SOME_F16",
      [7] = "Q8_0",     [8] = "Q5_0",     [9] = "Q5_1",     [10] = "Q2_K",    [11] = "Q3_K_S",
      [12] = "Q3_K_M",  [13] = "Q3_K_L",  [14] = "Q4_K_S",  [15] = "Q4_K_M",  [16] = "Q5_K_S",
      [17] = "Q5_K_M",  [18] = "Q6_K",    [19] = "IQ2_XXS", [20] = "IQ2_XS",  [21] = "Q2_K_S",
      [22] = "IQ3_XS",  [23] = "IQ3_XXS", [24] = "IQ1_S",   [25] = "IQ4_NL",  [26] = "IQ3_S",
      [27] = "IQ3_M",   [28] = "IQ2_S",   [29] = "IQ2_M",   [30] = "IQ4_XS",  [31] = "IQ1_M",
      [32] = "BF16",    [36] = "TQ1_0",   [37] = "TQ2_0",   [38] = "MXFP4_MOE",
  };
  return ft < sizeof k / sizeof k[0] ? k[ft] : NULL;
}

const char *gguf_vtype_name(uint32_t t) {
  static const char *names[GGUF_T_COUNT] = {"u8",   "i8",     "u16",   "i16", "u32",
                                            "i32",  "f32",    "bool",  "str", "array",
                                            "u64",  "i64",    "f64"};
  return t < GGUF_T_COUNT ? names[t] : "?";
}

static int need(cursor *c, uint64_t n, const char *what) {
  if (n > c->size - c->off)
    return pw_seterr(c->err, PW_EFORMAT, "truncated file: %s at offset %llu needs %llu bytes, %llu left",
                     what, (unsigned long long)c->off, (unsigned long long)n,
                     (unsigned long long)(c->size - c->off));
  return 0;
}

static int rd_u32(cursor *c, uint32_t *v, const char *what) {
  int rc = need(c, 4, what);
  if (rc) return rc;
  memcpy(v, c->p + c->off, 4);
  c->off += 4;
  return 0;
}

static int rd_u64(cursor *c, uint64_t *v, const char *what) {
  int rc = need(c, 8, what);
  if (rc) return rc;
  memcpy(v, c->p + c->off, 8);
  c->off += 8;
  return 0;
}

static int rd_str(cursor *c, gguf_str *s, uint64_t max_len, const char *what) {
  uint64_t len;
  int rc = rd_u64(c, &len, what);
  if (rc) return rc;
  if (len > max_len)
    return pw_seterr(c->err, PW_EFORMAT, "%s: string length %llu exceeds limit %llu", what,
                     (unsigned long long)len, (unsigned long long)max_len);
  if ((rc = need(c, len, what))) return rc;
  s->ptr = (const char *)c->p + c->off;
  s->len = len;
  c->off += len;
  return 0;
}

static int add_index(gguf_file *f, uint64_t *idx) {
  if (f->n_indexes == f->cap_indexes) {
    uint64_t cap = f->cap_indexes ? f->cap_indexes * 2 : 16;
    uint64_t **p = realloc(f->indexes, cap * sizeof *p);
    if (!p) return PW_ENOMEM;
    f->indexes = p;
    f->cap_indexes = cap;
  }
  f->indexes[f->n_indexes++] = idx;
  return 0;
}

static int parse_value(gguf_file *f, cursor *c, uint32_t type, int depth, gguf_arr *arr_out,
                       const char *what);

/* Parses an array body (after the u32 type tag). */
static int parse_array(gguf_file *f, cursor *c, int depth, gguf_arr *a, const char *what) {
  int rc;
  if (depth > GGUF_MAX_NESTING)
    return pw_seterr(c->err, PW_EFORMAT, "%s: arrays nested deeper than %d", what, GGUF_MAX_NESTING);
  uint32_t et;
  uint64_t n;
  if ((rc = rd_u32(c, &et, what)) || (rc = rd_u64(c, &n, what))) return rc;
  if (et >= GGUF_T_COUNT)
    return pw_seterr(c->err, PW_EFORMAT, "%s: unknown array element type %u", what, et);
  memset(a, 0, sizeof *a);
  a->type = et;
  a->n = n;
  a->data = c->p + c->off;
  if (k_vtype_size[et]) {
    if (n > (c->size - c->off) / k_vtype_size[et])
      return pw_seterr(c->err, PW_EFORMAT, "truncated file or corrupt count: %s: array of %llu %s elements exceeds the file", what,
                       (unsigned long long)n, gguf_vtype_name(et));
    c->off += n * k_vtype_size[et];
    return 0;
  }
  /* Strings need >= 8 bytes each, arrays >= 12: bound n before allocating. */
  uint64_t min_elem = et == GGUF_T_STRING ? 8 : 12;
  if (n > (c->size - c->off) / min_elem)
    return pw_seterr(c->err, PW_EFORMAT, "truncated file or corrupt count: %s: array count %llu exceeds the file", what,
                     (unsigned long long)n);
  uint64_t *idx = malloc((n ? n : 1) * sizeof *idx);
  if (!idx || add_index(f, idx)) {
    free(idx);
    return pw_seterr(c->err, PW_ENOMEM, "%s: out of memory for array index", what);
  }
  a->index = idx;
  uint64_t start = c->off;
  for (uint64_t i = 0; i < n; i++) {
    idx[i] = c->off - start;
    gguf_arr sub;
    if ((rc = parse_value(f, c, et, depth + 1, &sub, what))) return rc;
  }
  return 0;
}

static int parse_value(gguf_file *f, cursor *c, uint32_t type, int depth, gguf_arr *arr_out,
                       const char *what) {
  if (type >= GGUF_T_COUNT)
    return pw_seterr(c->err, PW_EFORMAT, "%s: unknown value type %u", what, type);
  if (type == GGUF_T_STRING) {
    gguf_str s;
    return rd_str(c, &s, UINT64_MAX, what);
  }
  if (type == GGUF_T_ARRAY) return parse_array(f, c, depth, arr_out, what);
  int rc = need(c, k_vtype_size[type], what);
  if (rc) return rc;
  if (type == GGUF_T_BOOL && c->p[c->off] > 1)
    return pw_seterr(c->err, PW_EFORMAT, "%s: bool value %u is not 0 or 1", what, c->p[c->off]);
  c->off += k_vtype_size[type];
  return 0;
}

static int parse(gguf_file *f, char *err) {
  cursor c = {f->base, 0, f->size, err};
  int rc;
  uint32_t magic;
  if ((rc = rd_u32(&c, &magic, "header magic"))) return rc;
  if (magic != GGUF_MAGIC) return pw_seterr(err, PW_EFORMAT, "not a GGUF file (bad magic 0x%08x)", magic);
  if ((rc = rd_u32(&c, &f->version, "header version"))) return rc;
  if (f->version != 2 && f->version != 3)
    return pw_seterr(err, PW_EUNSUPPORTED, "unsupported GGUF version %u (need 2 or 3)", f->version);
  if ((rc = rd_u64(&c, &f->n_tensors, "tensor count")) || (rc = rd_u64(&c, &f->n_kv, "metadata count")))
    return rc;
  /* Each kv needs >= 8+4 bytes, each tensor info >= 8+4+4+8 bytes. */
  if (f->n_kv > (f->size - c.off) / 12)
    return pw_seterr(err, PW_EFORMAT, "metadata count %llu exceeds the file size",
                     (unsigned long long)f->n_kv);
  if (f->n_tensors > (f->size - c.off) / 24)
    return pw_seterr(err, PW_EFORMAT, "tensor count %llu exceeds the file size",
                     (unsigned long long)f->n_tensors);
  f->kvs = calloc(f->n_kv ? f->n_kv : 1, sizeof *f->kvs);
  f->tensors = calloc(f->n_tensors ? f->n_tensors : 1, sizeof *f->tensors);
  if (!f->kvs || !f->tensors) return pw_seterr(err, PW_ENOMEM, "out of memory");
  f->alignment = GGUF_DEFAULT_ALIGNMENT;
  for (uint64_t i = 0; i < f->n_kv; i++) {
    gguf_kv *kv = &f->kvs[i];
    char what[96];
    snprintf(what, sizeof what, "metadata entry %llu", (unsigned long long)i);
    if ((rc = rd_str(&c, &kv->key, GGUF_MAX_KEY_LEN, what))) return rc;
    snprintf(what, sizeof what, "metadata '%.*s'", (int)(kv->key.len > 64 ? 64 : kv->key.len), kv->key.ptr);
    if ((rc = rd_u32(&c, &kv->type, what))) return rc;
    kv->value = c.p + c.off;
    if ((rc = parse_value(f, &c, kv->type, 0, &kv->arr, what))) return rc;
    if (gguf_str_eq(kv->key, "general.alignment")) {
      uint32_t a;
      if (kv->type != GGUF_T_UINT32) return pw_seterr(err, PW_EFORMAT, "general.alignment is not u32");
      memcpy(&a, kv->value, 4);
      if (a == 0 || (a & (a - 1)) || a > (1u << 20))
        return pw_seterr(err, PW_EFORMAT, "general.alignment %u is not a power of two <= 1 MiB", a);
      f->alignment = a;
    }
  }
  for (uint64_t i = 0; i < f->n_tensors; i++) {
    gguf_tensor *t = &f->tensors[i];
    char what[96];
    snprintf(what, sizeof what, "tensor info %llu", (unsigned long long)i);
    if ((rc = rd_str(&c, &t->name, GGUF_MAX_NAME_LEN, what))) return rc;
    snprintf(what, sizeof what, "tensor '%.*s'", (int)(t->name.len > 64 ? 64 : t->name.len), t->name.ptr);
    if ((rc = rd_u32(&c, &t->n_dims, what))) return rc;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
      return pw_seterr(err, PW_EFORMAT, "%s: %u dimensions (must be 1..%d)", what, t->n_dims, GGUF_MAX_DIMS);
    uint64_t nel = 1;
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
      if ((rc = rd_u64(&c, &t->ne[d], what))) return rc;
      if (t->ne[d] == 0 || t->ne[d] > (1ull << 40) || nel > (1ull << 42) / t->ne[d])
        return pw_seterr(err, PW_EFORMAT, "%s: dimension %u = %llu is out of range", what, d,
                         (unsigned long long)t->ne[d]);
      nel *= t->ne[d];
    }
    if ((rc = rd_u32(&c, &t->type, what)) || (rc = rd_u64(&c, &t->offset, what))) return rc;
    const pw_dtype_info *di = pw_dtype_get(t->type);
    if (!di) return pw_seterr(err, PW_EUNSUPPORTED, "%s: unknown tensor type %u", what, t->type);
    if (t->ne[0] % di->blck)
      return pw_seterr(err, PW_EFORMAT, "%s: row length %llu is not a multiple of the %s block size %u",
                       what, (unsigned long long)t->ne[0], di->name, di->blck);
    t->nbytes = nel / di->blck * di->type_size;
    if (t->offset % f->alignment)
      return pw_seterr(err, PW_EFORMAT, "%s: data offset %llu is not aligned to %u", what,
                       (unsigned long long)t->offset, f->alignment);
  }
  uint64_t data = (c.off + f->alignment - 1) / f->alignment * f->alignment;
  if (data > f->size && f->n_tensors > 0)
    return pw_seterr(err, PW_EFORMAT, "truncated file: tensor data section starts at %llu beyond end %llu",
                     (unsigned long long)data, (unsigned long long)f->size);
  f->data_offset = data;
  uint64_t avail = f->size >= data ? f->size - data : 0;
  for (uint64_t i = 0; i < f->n_tensors; i++) {
    gguf_tensor *t = &f->tensors[i];
    if (t->offset > avail || t->nbytes > avail - t->offset)
      return pw_seterr(err, PW_EFORMAT,
                       "truncated file: tensor '%.*s' data [%llu, +%llu) exceeds the %llu data bytes present",
                       (int)(t->name.len > 64 ? 64 : t->name.len), t->name.ptr,
                       (unsigned long long)t->offset, (unsigned long long)t->nbytes,
                       (unsigned long long)avail);
    t->data = f->base + data + t->offset;
  }
  /* Duplicate tensor names would make lookups ambiguous. O(n^2) on small n. */
  if (f->n_tensors <= 4096) {
    for (uint64_t i = 0; i < f->n_tensors; i++)
      for (uint64_t j = i + 1; j < f->n_tensors; j++)
        if (f->tensors[i].name.len == f->tensors[j].name.len &&
            !memcmp(f->tensors[i].name.ptr, f->tensors[j].name.ptr, f->tensors[i].name.len))
          return pw_seterr(err, PW_EFORMAT, "duplicate tensor name '%.*s'",
                           (int)(f->tensors[i].name.len > 64 ? 64 : f->tensors[i].name.len),
                           f->tensors[i].name.ptr);
  }
  return 0;
}

static int open_common(gguf_file *f, gguf_file **out, char *err) {
  int rc = parse(f, err);
  if (rc) {
    gguf_close(f);
    *out = NULL;
    return rc;
  }
  *out = f;
  return 0;
}

int gguf_open_mem(const void *buf, size_t len, gguf_file **out, char *err) {
  *out = NULL;
  gguf_file *f = calloc(1, sizeof *f);
  if (!f) return pw_seterr(err, PW_ENOMEM, "out of memory");
  f->base = buf;
  f->size = len;
  f->fd = -1;
  return open_common(f, out, err);
}

int gguf_open_file(const char *path, gguf_file **out, char *err) {
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return pw_seterr(err, PW_EIO, "%s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return pw_seterr(err, PW_EIO, "%s: not a regular file", path);
  }
  if (st.st_size < 24) {
    close(fd);
    return pw_seterr(err, PW_EFORMAT, "%s: truncated file: %lld bytes is smaller than a GGUF header", path,
                     (long long)st.st_size);
  }
  void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (m == MAP_FAILED) {
    int e = errno;
    close(fd);
    return pw_seterr(err, PW_EIO, "%s: mmap: %s", path, strerror(e));
  }
  gguf_file *f = calloc(1, sizeof *f);
  if (!f) {
    munmap(m, (size_t)st.st_size);
    close(fd);
    return pw_seterr(err, PW_ENOMEM, "out of memory");
  }
  f->base = m;
  f->size = (uint64_t)st.st_size;
  f->mapped = 1;
  f->fd = fd;
  return open_common(f, out, err);
}

void gguf_close(gguf_file *f) {
  if (!f) return;
  if (f->n_parts) {
    if (f->own_parts)
      for (int i = 0; i < f->n_parts; i++) gguf_close(f->parts[i]);
    free(f->parts);
    free(f->kvs);
    free(f->tensors);
    free(f);
    return;
  }
  if (f->mapped) {
    munmap((void *)f->base, f->size);
    close(f->fd);
  }
  for (uint64_t i = 0; i < f->n_indexes; i++) free(f->indexes[i]);
  free(f->indexes);
  free(f->kvs);
  free(f->tensors);
  free(f);
}

/* ---- residency: the tensor data faulted in, in 2 MiB pages ---------------
 * Decode streams every weight once per token, so the mapping is asked for
 * 2 MiB pages (one TLB entry per 2 MiB instead of 512) and faulted in at
 * load rather than token by token. The kernel maps a file's page cache in
 * 2 MiB pages where the cache holds it in 2 MiB folios and the mapping is
 * aligned (it aligns large file mappings itself); which folios the cache
 * holds depends on how the file came there: read-ahead after MADV_HUGEPAGE
 * builds 2 MiB ones, small writes leave small ones. So: MADV_HUGEPAGE,
 * fault everything in, and if the kernel shows it can map file pages huge
 * but most of ours are not, drop this file's clean cached pages (nobody
 * else's, and none another process still maps) and fault them in again,
 * once. Measured on the machines this was built on: in one period, freshly
 * written files decoded 5-18x slower on one thread (a 1.2B Q4_K_M file at
 * 1.5-5 tok/s, 42% of it in 2 MiB pages) until their cache was re-read this
 * way (20-27 tok/s, all of it in 2 MiB pages), four files in a row; at other
 * times files in small folios decoded as fast as in 2 MiB ones, so the cause
 * of the slow state is not settled. Linux-only; elsewhere, or
 * without /proc, the data is simply faulted in. */

#if defined(__linux__) && !defined(MADV_POPULATE_READ)
#define MADV_POPULATE_READ 22 /* Linux 5.14; older headers lack it */
#endif

/* "Key:   N kB" of the smaps entry of the mapping starting at `start`, or
 * of /proc/meminfo (start == NULL); -1 when not found */
static int64_t proc_kb(const void *start, const char *key) {
  FILE *fp = fopen(start ? "/proc/self/smaps" : "/proc/meminfo", "re");
  if (!fp) return -1;
  char line[4096];
  const size_t kl = strlen(key);
  int in = start == NULL;
  int64_t kb = -1;
  while (fgets(line, sizeof line, fp)) {
    unsigned long lo, hi;
    char perm[8];
    if (start && sscanf(line, "%lx-%lx %7s", &lo, &hi, perm) == 3) {
      if (in) break; /* the next mapping */
      in = lo == (unsigned long)(uintptr_t)start;
      continue;
    }
    long long v;
    if (in && !strncmp(line, key, kl) && line[kl] == ':' && sscanf(line + kl + 1, "%lld", &v) == 1) {
      kb = v;
      break;
    }
  }
  fclose(fp);
  return kb;
}

static void populate(const gguf_file *f) {
#ifdef MADV_POPULATE_READ
  if (madvise((void *)f->base, f->size, MADV_POPULATE_READ) == 0) return;
#endif
  /* kernels before 5.14, other systems: touch a byte per page */
  const long pg = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
  volatile uint8_t sink = 0;
  for (uint64_t o = 0; o < f->size; o += (uint64_t)pg) sink ^= f->base[o];
  (void)sink;
}

void gguf_make_resident(gguf_file *f, gguf_residency *r) {
  memset(r, 0, sizeof *r);
  if (f->n_parts) {
    r->huge_bytes = 0;
    for (int i = 0; i < f->n_parts; i++) {
      gguf_residency pr;
      gguf_make_resident(f->parts[i], &pr);
      r->bytes += pr.bytes;
      r->huge_bytes = pr.huge_bytes < 0 || r->huge_bytes < 0 ? -1 : r->huge_bytes + pr.huge_bytes;
      r->refreshed |= pr.refreshed;
    }
    return;
  }
  r->bytes = f->size;
  r->huge_bytes = -1;
  if (!f->mapped) return;
#ifdef MADV_HUGEPAGE
  madvise((void *)f->base, f->size, MADV_HUGEPAGE);
#endif
  populate(f);
  const uint64_t huge = 2u << 20;
  /* 2 MiB pages that fit inside the mapping (it may start unaligned) */
  const uintptr_t b = (uintptr_t)f->base, lo = (b + huge - 1) & ~(uintptr_t)(huge - 1);
  const uintptr_t hi = (b + f->size) & ~(uintptr_t)(huge - 1);
  const uint64_t fit = hi > lo ? hi - lo : 0;
  int64_t kb = proc_kb(f->base, "FilePmdMapped");
  r->huge_bytes = kb < 0 ? -1 : kb * 1024;
  if (kb < 0 || fit < 4 * huge || (uint64_t)kb * 1024 * 4 >= fit * 3) return;
  /* Can this kernel map file pages huge at all? Else a re-read gains
   * nothing. */
  if (kb == 0 && proc_kb(NULL, "FileHugePages") <= 0) return;
#if defined(MADV_DONTNEED) && defined(POSIX_FADV_DONTNEED)
  madvise((void *)f->base, f->size, MADV_DONTNEED); /* our page table entries only */
  posix_fadvise(f->fd, 0, 0, POSIX_FADV_DONTNEED);
  populate(f);
  r->refreshed = 1;
  kb = proc_kb(f->base, "FilePmdMapped");
  r->huge_bytes = kb < 0 ? -1 : kb * 1024;
#endif
}

uint32_t gguf_version(const gguf_file *f) { return f->version; }
uint64_t gguf_size(const gguf_file *f) { return f->size; }
const void *gguf_base(const gguf_file *f) { return f->base; }
uint64_t gguf_data_offset(const gguf_file *f) { return f->data_offset; }
uint32_t gguf_alignment(const gguf_file *f) { return f->alignment; }
uint64_t gguf_n_kv(const gguf_file *f) { return f->n_kv; }
const gguf_kv *gguf_kv_at(const gguf_file *f, uint64_t i) { return i < f->n_kv ? &f->kvs[i] : NULL; }
uint64_t gguf_n_tensors(const gguf_file *f) { return f->n_tensors; }
const gguf_tensor *gguf_tensor_at(const gguf_file *f, uint64_t i) {
  return i < f->n_tensors ? &f->tensors[i] : NULL;
}

bool gguf_str_eq(gguf_str s, const char *c) {
  size_t n = strlen(c);
  return s.len == n && memcmp(s.ptr, c, n) == 0;
}

const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key) {
  for (uint64_t i = 0; i < f->n_kv; i++)
    if (gguf_str_eq(f->kvs[i].key, key)) return &f->kvs[i];
  return NULL;
}

const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name) {
  for (uint64_t i = 0; i < f->n_tensors; i++)
    if (gguf_str_eq(f->tensors[i].name, name)) return &f->tensors[i];
  return NULL;
}

/* Reads an integer-typed scalar at p as int64 (u64 beyond INT64_MAX fails). */
static bool scalar_int(uint32_t type, const uint8_t *p, int64_t *out) {
  switch (type) {
  case GGUF_T_UINT8: *out = *p; return true;
  case GGUF_T_INT8: *out = (int8_t)*p; return true;
  case GGUF_T_BOOL: *out = *p; return true;
  case GGUF_T_UINT16: { uint16_t v; memcpy(&v, p, 2); *out = v; return true; }
  case GGUF_T_INT16: { int16_t v; memcpy(&v, p, 2); *out = v; return true; }
  case GGUF_T_UINT32: { uint32_t v; memcpy(&v, p, 4); *out = v; return true; }
  case GGUF_T_INT32: { int32_t v; memcpy(&v, p, 4); *out = v; return true; }
  case GGUF_T_UINT64: { uint64_t v; memcpy(&v, p, 8); if (v > INT64_MAX) return false; *out = (int64_t)v; return true; }
  case GGUF_T_INT64: { int64_t v; memcpy(&v, p, 8); *out = v; return true; }
  default: return false;
  }
}

bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out) {
  const gguf_kv *kv = gguf_find_kv(f, key);
  return kv && kv->type != GGUF_T_BOOL && scalar_int(kv->type, kv->value, out);
}

bool gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out) {
  int64_t v;
  if (!gguf_get_i64(f, key, &v) || v < 0) return false;
  *out = (uint64_t)v;
  return true;
}

bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out) {
  int64_t v;
  if (!gguf_get_i64(f, key, &v) || v < 0 || v > (int64_t)UINT32_MAX) return false;
  *out = (uint32_t)v;
  return true;
}

bool gguf_get_f32(const gguf_file *f, const char *key, float *out) {
  const gguf_kv *kv = gguf_find_kv(f, key);
  if (!kv) return false;
  if (kv->type == GGUF_T_FLOAT32) {
    memcpy(out, kv->value, 4);
    return true;
  }
  if (kv->type == GGUF_T_FLOAT64) {
    double d;
    memcpy(&d, kv->value, 8);
    *out = (float)d;
    return true;
  }
  int64_t v;
  if (kv->type != GGUF_T_BOOL && scalar_int(kv->type, kv->value, &v)) {
    *out = (float)v;
    return true;
  }
  return false;
}

bool gguf_get_bool(const gguf_file *f, const char *key, bool *out) {
  const gguf_kv *kv = gguf_find_kv(f, key);
  if (!kv || kv->type != GGUF_T_BOOL) return false;
  *out = kv->value[0] != 0;
  return true;
}

bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out) {
  const gguf_kv *kv = gguf_find_kv(f, key);
  if (!kv || kv->type != GGUF_T_STRING) return false;
  uint64_t len;
  memcpy(&len, kv->value, 8);
  out->ptr = (const char *)kv->value + 8;
  out->len = len;
  return true;
}

bool gguf_get_cstr(const gguf_file *f, const char *key, char *buf, size_t cap) {
  gguf_str s;
  if (!cap || !gguf_get_str(f, key, &s)) return false;
  size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
  memcpy(buf, s.ptr, n);
  buf[n] = 0;
  return true;
}

bool gguf_get_arr(const gguf_file *f, const char *key, gguf_arr *out) {
  const gguf_kv *kv = gguf_find_kv(f, key);
  if (!kv || kv->type != GGUF_T_ARRAY) return false;
  *out = kv->arr;
  return true;
}

gguf_str gguf_arr_str(const gguf_arr *a, uint64_t i) {
  PW_ASSERT(a->type == GGUF_T_STRING && i < a->n && a->index);
  const uint8_t *p = a->data + a->index[i];
  gguf_str s;
  memcpy(&s.len, p, 8);
  s.ptr = (const char *)p + 8;
  return s;
}

float gguf_arr_f32(const gguf_arr *a, uint64_t i) {
  PW_ASSERT(i < a->n);
  if (a->type == GGUF_T_FLOAT32) {
    float v;
    memcpy(&v, a->data + 4 * i, 4);
    return v;
  }
  if (a->type == GGUF_T_FLOAT64) {
    double v;
    memcpy(&v, a->data + 8 * i, 8);
    return (float)v;
  }
  return (float)gguf_arr_int(a, i);
}

int64_t gguf_arr_int(const gguf_arr *a, uint64_t i) {
  PW_ASSERT(i < a->n && a->type < GGUF_T_COUNT && k_vtype_size[a->type]);
  int64_t v = 0;
  if (!scalar_int(a->type, a->data + (uint64_t)k_vtype_size[a->type] * i, &v)) {
    if (a->type == GGUF_T_FLOAT32) return (int64_t)gguf_arr_f32(a, i);
    v = 0;
  }
  return v;
}

gguf_arr gguf_arr_sub(const gguf_arr *a, uint64_t i) {
  PW_ASSERT(a->type == GGUF_T_ARRAY && i < a->n && a->index);
  const uint8_t *p = a->data + a->index[i];
  /* The nested array was validated at open. Its own offset index is not
   * kept, so nested arrays of strings or arrays expose no index (index is
   * NULL and gguf_arr_str asserts); fixed-size elements work. */
  gguf_arr s;
  memset(&s, 0, sizeof s);
  memcpy(&s.type, p, 4);
  memcpy(&s.n, p + 4, 8);
  s.data = p + 12;
  return s;
}

void gguf_kv_format(const gguf_kv *kv, char *buf, size_t cap) {
  int64_t iv;
  switch (kv->type) {
  case GGUF_T_FLOAT32: {
    float v;
    memcpy(&v, kv->value, 4);
    snprintf(buf, cap, "%g", (double)v);
    return;
  }
  case GGUF_T_FLOAT64: {
    double v;
    memcpy(&v, kv->value, 8);
    snprintf(buf, cap, "%g", v);
    return;
  }
  case GGUF_T_BOOL: snprintf(buf, cap, "%s", kv->value[0] ? "true" : "false"); return;
  case GGUF_T_STRING: {
    uint64_t len;
    memcpy(&len, kv->value, 8);
    snprintf(buf, cap, "\"%.*s%s\"", (int)(len > 60 ? 60 : len), (const char *)kv->value + 8,
             len > 60 ? "..." : "");
    for (char *q = buf; *q; q++)
      if (*q == '\n' || *q == '\r' || *q == '\t') *q = ' ';
    return;
  }
  case GGUF_T_ARRAY:
    snprintf(buf, cap, "[%s x %llu]", gguf_vtype_name(kv->arr.type), (unsigned long long)kv->arr.n);
    return;
  default:
    if (scalar_int(kv->type, kv->value, &iv)) snprintf(buf, cap, "%lld", (long long)iv);
    else {
      uint64_t uv; /* values sit at any byte offset: copy, never dereference */
      memcpy(&uv, kv->value, 8);
      snprintf(buf, cap, "%llu", (unsigned long long)uv);
    }
  }
}

/* ---- split models ----------------------------------------------------------
 * llama.cpp's gguf-split writes a model as N files named
 * PREFIX-00001-of-0000N.gguf .. PREFIX-0000N-of-0000N.gguf (5 digits each).
 * Every part carries split.no (u16, 0-based), split.count (u16) and
 * split.tensors.count (i32, the tensors of all parts); the first part also
 * carries all the model's metadata, the others only these keys. Tensor
 * offsets are relative to each part's own data section, so a merged file
 * is a directory whose entries point into several mappings. */

#define GGUF_MAX_PARTS 1000

bool gguf_split_get(const gguf_file *f, gguf_split *out) {
  memset(out, 0, sizeof *out);
  uint32_t cnt = 0, no = 0;
  int64_t nt = -1;
  if (!gguf_get_u32(f, "split.count", &cnt)) return false;
  gguf_get_u32(f, "split.no", &no);
  gguf_get_i64(f, "split.tensors.count", &nt);
  out->count = cnt > INT32_MAX ? INT32_MAX : (int)cnt;
  out->no = no > INT32_MAX ? INT32_MAX : (int)no;
  out->tensors = nt;
  return true;
}

int gguf_split_path(const char *path, int no, int count, int want, char *out, size_t cap, char *err) {
  char suf[48];
  snprintf(suf, sizeof suf, "-%05d-of-%05d.gguf", no + 1, count);
  const size_t n = strlen(path), k = strlen(suf);
  if (n <= k || strcmp(path + n - k, suf))
    return pw_seterr(err, PW_EFORMAT,
                     "%s is part %d of a %d-part split model but its name does not end in %s, so the other "
                     "parts cannot be found",
                     path, no + 1, count, suf);
  if (n - k + k + 1 > cap) return pw_seterr(err, PW_ERANGE, "%s: path too long", path);
  snprintf(out, cap, "%.*s-%05d-of-%05d.gguf", (int)(n - k), path, want + 1, count);
  return 0;
}

static int cmp_tensor_name(const void *pa, const void *pb) {
  const gguf_tensor *a = *(const gguf_tensor *const *)pa, *b = *(const gguf_tensor *const *)pb;
  const uint64_t n = a->name.len < b->name.len ? a->name.len : b->name.len;
  const int c = memcmp(a->name.ptr, b->name.ptr, (size_t)n);
  return c ? c : (a->name.len > b->name.len) - (a->name.len < b->name.len);
}

int gguf_merge(gguf_file **parts, int n, int own, const char *const *names, gguf_file **out, char *err) {
  *out = NULL;
  int rc = 0;
  gguf_file *m = NULL;
  const gguf_tensor **sorted = NULL;
  char nb[32];
#define PART_NAME(i) (names && names[i] ? names[i] : (snprintf(nb, sizeof nb, "part %d", (i) + 1), nb))
  gguf_split s0;
  if (n < 1 || n > GGUF_MAX_PARTS) {
    rc = pw_seterr(err, PW_EINVAL, "a split model has 1..%d parts, not %d", GGUF_MAX_PARTS, n);
    goto fail;
  }
  if (!gguf_split_get(parts[0], &s0)) {
    rc = pw_seterr(err, PW_EFORMAT, "%s has no split.count: not part of a split model", PART_NAME(0));
    goto fail;
  }
  uint64_t total = 0, size = 0;
  for (int i = 0; i < n; i++) {
    gguf_split si;
    if (!gguf_split_get(parts[i], &si)) {
      rc = pw_seterr(err, PW_EFORMAT, "%s has no split.count: not part of this split model", PART_NAME(i));
      goto fail;
    }
    if (si.count != n || si.no != i || si.tensors != s0.tensors) {
      rc = pw_seterr(err, PW_EFORMAT,
                     "%s is part %d of %d of a split of %lld tensors; expected part %d of %d of %lld tensors "
                     "(a part of another split?)",
                     PART_NAME(i), si.no + 1, si.count, (long long)si.tensors, i + 1, n, (long long)s0.tensors);
      goto fail;
    }
    total += parts[i]->n_tensors;
    size += parts[i]->size;
  }
  if (s0.tensors < 0 || total != (uint64_t)s0.tensors) {
    rc = pw_seterr(err, PW_EFORMAT, "the %d parts hold %llu tensors but split.tensors.count says %lld", n,
                   (unsigned long long)total, (long long)s0.tensors);
    goto fail;
  }
  m = calloc(1, sizeof *m);
  if (!m || !(m->parts = calloc((size_t)n, sizeof *m->parts)) ||
      !(m->kvs = calloc(parts[0]->n_kv ? parts[0]->n_kv : 1, sizeof *m->kvs)) ||
      !(m->tensors = calloc(total ? total : 1, sizeof *m->tensors)) ||
      !(sorted = malloc((total ? total : 1) * sizeof *sorted))) {
    rc = pw_seterr(err, PW_ENOMEM, "out of memory");
    goto fail;
  }
  memcpy(m->kvs, parts[0]->kvs, parts[0]->n_kv * sizeof *m->kvs);
  m->n_kv = parts[0]->n_kv;
  uint64_t k = 0;
  for (int i = 0; i < n; i++)
    for (uint64_t j = 0; j < parts[i]->n_tensors; j++) {
      m->tensors[k] = parts[i]->tensors[j];
      sorted[k] = &m->tensors[k];
      k++;
    }
  m->n_tensors = total;
  qsort(sorted, total, sizeof *sorted, cmp_tensor_name);
  for (uint64_t i = 1; i < total; i++)
    if (!cmp_tensor_name(&sorted[i - 1], &sorted[i])) {
      const gguf_tensor *t = sorted[i];
      rc = pw_seterr(err, PW_EFORMAT, "split model: tensor '%.*s' appears in more than one part",
                     (int)(t->name.len > 64 ? 64 : t->name.len), t->name.ptr);
      goto fail;
    }
  free(sorted);
#undef PART_NAME
  memcpy(m->parts, parts, (size_t)n * sizeof *parts);
  m->n_parts = n;
  m->own_parts = own;
  m->base = parts[0]->base;
  m->size = size;
  m->fd = -1;
  m->version = parts[0]->version;
  m->alignment = parts[0]->alignment;
  m->data_offset = parts[0]->data_offset;
  *out = m;
  return 0;
fail:
  free(sorted);
  if (m) {
    free(m->parts);
    free(m->kvs);
    free(m->tensors);
    free(m);
  }
  if (own)
    for (int i = 0; i < n; i++) gguf_close(parts[i]);
  return rc;
}

int gguf_split_open_parts(const char *path, gguf_file *first, gguf_file ***parts_out, char ***names_out,
                          int *n_out, char *err) {
  *parts_out = NULL;
  *names_out = NULL;
  *n_out = 0;
  gguf_split sp;
  if (!gguf_split_get(first, &sp) || sp.count <= 1) return 0;
  if (sp.count > GGUF_MAX_PARTS)
    return pw_seterr(err, PW_EFORMAT, "%s: split.count %d exceeds the limit of %d parts", path, sp.count,
                     GGUF_MAX_PARTS);
  if (sp.no != 0)
    return pw_seterr(err, PW_EINVAL, "%s is part %d of %d of a split model: give the first part (-00001-of-%05d.gguf)",
                     path, sp.no + 1, sp.count, sp.count);
  int rc = 0;
  gguf_file **parts = calloc((size_t)sp.count, sizeof *parts);
  char **names = calloc((size_t)sp.count, sizeof *names);
  if (!parts || !names || !(names[0] = strdup(path))) {
    rc = pw_seterr(err, PW_ENOMEM, "out of memory");
    goto fail;
  }
  const size_t cap = strlen(path) + 32;
  for (int i = 1; i < sp.count; i++) {
    if (!(names[i] = malloc(cap))) {
      rc = pw_seterr(err, PW_ENOMEM, "out of memory");
      goto fail;
    }
    if ((rc = gguf_split_path(path, 0, sp.count, i, names[i], cap, err))) goto fail;
    if (access(names[i], F_OK)) {
      rc = pw_seterr(err, PW_ENOTFOUND, "split model part %d of %d is missing: %s", i + 1, sp.count, names[i]);
      goto fail;
    }
  }
  *parts_out = parts;
  *names_out = names;
  *n_out = sp.count;
  return 0;
fail:
  gguf_split_free_names(names, sp.count);
  free(parts);
  return rc;
}

void gguf_split_free_names(char **names, int n) {
  if (!names) return;
  for (int i = 0; i < n; i++) free(names[i]);
  free(names);
}

int gguf_open(const char *path, gguf_file **out, char *err) {
  *out = NULL;
  gguf_file *f = NULL, **parts = NULL;
  char **names = NULL;
  int n = 0;
  int rc = gguf_open_file(path, &f, err);
  if (rc) return rc;
  if ((rc = gguf_split_open_parts(path, f, &parts, &names, &n, err)) || n == 0) {
    if (rc) gguf_close(f);
    else *out = f;
    return rc;
  }
  parts[0] = f;
  char e2[PW_ERRMAX];
  for (int i = 1; i < n && !rc; i++)
    if ((rc = gguf_open_file(names[i], &parts[i], e2))) pw_seterr(err, rc, "split part %d of %d: %s", i + 1, n, e2);
  if (rc)
    for (int i = 0; i < n; i++) gguf_close(parts[i]);
  else
    rc = gguf_merge(parts, n, 1, (const char *const *)names, out, err);
  gguf_split_free_names(names, n);
  free(parts);
  return rc;
}

int gguf_n_parts(const gguf_file *f) { return f->n_parts ? f->n_parts : 1; }
const gguf_file *gguf_part(const gguf_file *f, int i) {
  if (!f->n_parts) return i == 0 ? f : NULL;
  return i >= 0 && i < f->n_parts ? f->parts[i] : NULL;
}
