/* gguf.h - GGUF v2/v3 reader over mmap.
 *
 * Validates the whole header, metadata and tensor directory at open time, so
 * every accessor below is a bounds-safe lookup. Knows dtypes by id (sizes
 * from tensor/dtype.h) and nothing of models.
 *
 * File layout (little-endian):
 *   u32 magic "GGUF" | u32 version (2 or 3) | u64 n_tensors | u64 n_kv
 *   n_kv x { string key | u32 type | value }
 *     string = u64 len + bytes (not NUL-terminated)
 *     array  = u32 elem_type + u64 n + n values (arrays may nest)
 *   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 type | u64 offset }
 *   padding to general.alignment (default 32), then tensor data; each
 *   tensor's offset is relative to the data start and aligned.
 *
 * Ownership: gguf_file owns the mapping; every gguf_str, array data pointer
 * and tensor data pointer is a view into the mapping, valid until
 * gguf_close(). */
#ifndef PW_GGUF_GGUF_H
#define PW_GGUF_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum gguf_vtype {
  GGUF_T_UINT8 = 0,
  GGUF_T_INT8 = 1,
  GGUF_T_UINT16 = 2,
  GGUF_T_INT16 = 3,
  GGUF_T_UINT32 = 4,
  GGUF_T_INT32 = 5,
  GGUF_T_FLOAT32 = 6,
  GGUF_T_BOOL = 7,
  GGUF_T_STRING = 8,
  GGUF_T_ARRAY = 9,
  GGUF_T_UINT64 = 10,
  GGUF_T_INT64 = 11,
  GGUF_T_FLOAT64 = 12,
  GGUF_T_COUNT
} gguf_vtype;

#define GGUF_MAX_DIMS 4

typedef struct gguf_str {
  const char *ptr; /* view into the mapping, NOT NUL-terminated */
  uint64_t len;    /* bytes */
} gguf_str;

/* An array value. For arrays of strings, gguf_arr_str() gives element i in
 * O(1) through an offset index built at open time. Nested arrays are
 * validated; their elements are reachable through gguf_arr_sub(). */
typedef struct gguf_arr {
  uint32_t type;         /* gguf_vtype of the elements */
  uint64_t n;            /* element count */
  const uint8_t *data;   /* first element (view) */
  const uint64_t *index; /* for STRING/ARRAY elements: byte offset of element i from data; owned by gguf_file */
} gguf_arr;

typedef struct gguf_kv {
  gguf_str key;
  uint32_t type;        /* gguf_vtype */
  const uint8_t *value; /* raw value bytes (view) */
  gguf_arr arr;         /* valid when type == GGUF_T_ARRAY */
} gguf_kv;

typedef struct gguf_tensor {
  gguf_str name;
  uint32_t n_dims;
  uint64_t ne[GGUF_MAX_DIMS]; /* ne[0] is the row length (fastest); unused dims are 1 */
  uint32_t type;              /* pw_dtype id, known to tensor/dtype.h */
  uint64_t offset;            /* relative to the data section */
  uint64_t nbytes;
  const void *data;           /* view into the mapping */
} gguf_tensor;

typedef struct gguf_file gguf_file;

/* Maps and validates a file. On failure returns PW_EIO/PW_EFORMAT/... with a
 * message naming the defect, and *out is NULL. The first part of a split
 * model (below) opens every part and gives them as one file; another part
 * is an error naming the first. */
int gguf_open(const char *path, gguf_file **out, char *err);
/* One file only, a split part as it is (its own tensors and keys). */
int gguf_open_file(const char *path, gguf_file **out, char *err);
/* Same over a caller buffer (must outlive the gguf_file; not copied). */
int gguf_open_mem(const void *buf, size_t len, gguf_file **out, char *err);
void gguf_close(gguf_file *f);

/* Faults a mapped file's bytes in ahead of use, in 2 MiB pages where the
 * kernel can give them (see gguf.c); a no-op for gguf_open_mem. Reports the
 * bytes, how many are mapped in 2 MiB pages (-1 when unknown) and
 * whether the file's page cache was re-read to get them. */
typedef struct gguf_residency {
  uint64_t bytes;
  int64_t huge_bytes;
  int refreshed;
} gguf_residency;
void gguf_make_resident(gguf_file *f, gguf_residency *r);

uint32_t gguf_version(const gguf_file *f);
uint64_t gguf_size(const gguf_file *f);        /* file bytes */
const void *gguf_base(const gguf_file *f);     /* first byte of the file */
uint64_t gguf_data_offset(const gguf_file *f); /* start of tensor data */
uint32_t gguf_alignment(const gguf_file *f);

uint64_t gguf_n_kv(const gguf_file *f);
const gguf_kv *gguf_kv_at(const gguf_file *f, uint64_t i);
/* NULL when absent. */
const gguf_kv *gguf_find_kv(const gguf_file *f, const char *key);

/* Typed getters. Return false when the key is absent or of an incompatible
 * type (integers convert between widths when the value fits). */
bool gguf_get_u64(const gguf_file *f, const char *key, uint64_t *out);
bool gguf_get_u32(const gguf_file *f, const char *key, uint32_t *out);
bool gguf_get_i64(const gguf_file *f, const char *key, int64_t *out);
bool gguf_get_f32(const gguf_file *f, const char *key, float *out);
bool gguf_get_bool(const gguf_file *f, const char *key, bool *out);
bool gguf_get_str(const gguf_file *f, const char *key, gguf_str *out);
bool gguf_get_arr(const gguf_file *f, const char *key, gguf_arr *out);
/* Copies a string value into buf (NUL-terminated, truncated to cap-1). */
bool gguf_get_cstr(const gguf_file *f, const char *key, char *buf, size_t cap);

/* Element access; i must be < a->n and the element type must match. */
gguf_str gguf_arr_str(const gguf_arr *a, uint64_t i);
float gguf_arr_f32(const gguf_arr *a, uint64_t i);
int64_t gguf_arr_int(const gguf_arr *a, uint64_t i); /* any integer/bool element type */
/* Element of an array of arrays. A sub-array has no index of its own
 * (index NULL): its strings or arrays are not reachable. */
gguf_arr gguf_arr_sub(const gguf_arr *a, uint64_t i);

/* Scalar value of a kv as text (for inspect): writes into buf. */
void gguf_kv_format(const gguf_kv *kv, char *buf, size_t cap);
const char *gguf_vtype_name(uint32_t t);
/* Name of a general.file_type value (the quantization the file states:
 * "Q4_K_M", "F16", ...); NULL for a value not known. */
const char *gguf_file_type_name(uint32_t ft);

uint64_t gguf_n_tensors(const gguf_file *f);
const gguf_tensor *gguf_tensor_at(const gguf_file *f, uint64_t i);
/* NULL when absent. */
const gguf_tensor *gguf_find_tensor(const gguf_file *f, const char *name);

/* ---- split models (llama.cpp gguf-split) ----
 * PREFIX-00001-of-0000N.gguf .. PREFIX-0000N-of-0000N.gguf, each with
 * split.no (0-based), split.count and split.tensors.count; the first part
 * holds the model's metadata. A merged file answers every accessor above
 * as one model: part 0's metadata, every part's tensors (data pointers into
 * each part), gguf_size the parts' sum, gguf_base/gguf_data_offset part 0's
 * (meaningful per part only: use gguf_part). */
typedef struct gguf_split {
  int no;          /* split.no, 0-based */
  int count;       /* split.count */
  int64_t tensors; /* split.tensors.count, -1 when absent */
} gguf_split;
/* False when f has no split.count. */
bool gguf_split_get(const gguf_file *f, gguf_split *out);
/* The path of part `want` (0-based) of a `count`-part split, from the path
 * of its part `no`: PW_EFORMAT when path does not end in that part's
 * -NNNNN-of-NNNNN.gguf. */
int gguf_split_path(const char *path, int no, int count, int want, char *out, size_t cap, char *err);
/* For the already opened part `first` at path: when it is the first part
 * of a split, *n_out = count, *names_out the parts' paths (owned; free with
 * gguf_split_free_names) and *parts_out a zeroed array of count slots
 * (owned, free()); every other part's file is checked to exist
 * (PW_ENOTFOUND naming it). *n_out = 0 for an ordinary file; PW_EINVAL for
 * a part other than the first. */
int gguf_split_open_parts(const char *path, gguf_file *first, gguf_file ***parts_out, char ***names_out,
                          int *n_out, char *err);
void gguf_split_free_names(char **names, int n);
/* Merges the n parts of one split (in order) into *out. own: *out owns and
 * closes the parts (also on failure); else they must outlive it. names
 * (may be NULL) name the parts in errors. PW_EFORMAT for a part of another
 * split or out of order, a count that disagrees, a tensor in two parts. */
int gguf_merge(gguf_file **parts, int n, int own, const char *const *names, gguf_file **out, char *err);
/* 1 for an ordinary file; part i (0-based; f itself for an ordinary file). */
int gguf_n_parts(const gguf_file *f);
const gguf_file *gguf_part(const gguf_file *f, int i);

/* True if s equals the NUL-terminated c. */
bool gguf_str_eq(gguf_str s, const char *c);

#endif
