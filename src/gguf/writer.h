/* writer.h - GGUF v3 writer: metadata, a tensor directory, then the tensor
 * data streamed to the file in directory order.
 *
 * Usage: gguf_writer_create(); gguf_writer_set_* / gguf_writer_copy_kv* to
 * build the metadata; gguf_writer_add_tensor() for each tensor (name, shape,
 * dtype; offsets are assigned here); gguf_writer_write() opens the file,
 * writes header, metadata and directory, then asks a callback for each
 * tensor's bytes in directory order and pads to `general.alignment` (32,
 * always written as the first key). Only the current tensor's bytes pass
 * through memory, so multi-GB files never sit in RAM.
 *
 * Keys are unique: setting an existing key replaces its value in place (its
 * position in the file stays), as gguf-py and ggml do.
 *
 * Not here: reading (gguf.h), quantization or model knowledge; the writer
 * checks that a tensor's byte count matches its dtype and shape and nothing
 * about what the bytes mean.
 *
 * Ownership: the writer copies every key, string, array and name it is given;
 * callers' buffers are borrowed only for the duration of a call. */
#ifndef PW_GGUF_WRITER_H
#define PW_GGUF_WRITER_H

#include "gguf/gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GGUF_WRITER_ALIGNMENT 32

typedef struct gguf_writer gguf_writer;

/* NULL on out-of-memory. */
gguf_writer *gguf_writer_create(void);
void gguf_writer_destroy(gguf_writer *w);

/* Scalars. key is a NUL-terminated string of 1..65535 bytes. Each returns 0,
 * PW_EINVAL (bad key) or PW_ENOMEM, with a message in err. */
int gguf_writer_set_u8(gguf_writer *w, const char *key, uint8_t v, char *err);
int gguf_writer_set_i8(gguf_writer *w, const char *key, int8_t v, char *err);
int gguf_writer_set_u16(gguf_writer *w, const char *key, uint16_t v, char *err);
int gguf_writer_set_i16(gguf_writer *w, const char *key, int16_t v, char *err);
int gguf_writer_set_u32(gguf_writer *w, const char *key, uint32_t v, char *err);
int gguf_writer_set_i32(gguf_writer *w, const char *key, int32_t v, char *err);
int gguf_writer_set_u64(gguf_writer *w, const char *key, uint64_t v, char *err);
int gguf_writer_set_i64(gguf_writer *w, const char *key, int64_t v, char *err);
int gguf_writer_set_f32(gguf_writer *w, const char *key, float v, char *err);
int gguf_writer_set_f64(gguf_writer *w, const char *key, double v, char *err);
int gguf_writer_set_bool(gguf_writer *w, const char *key, bool v, char *err);
/* NUL-terminated string value. */
int gguf_writer_set_str(gguf_writer *w, const char *key, const char *v, char *err);
/* String value of len bytes (may contain NULs). */
int gguf_writer_set_strn(gguf_writer *w, const char *key, const char *v, uint64_t len, char *err);

/* Array of n fixed-size elements of elem_type (any scalar gguf_vtype except
 * STRING/ARRAY), data laid out little-endian as in the file (i.e. a plain C
 * array of uint32_t for GGUF_T_UINT32, of uint8_t 0/1 for BOOL). */
int gguf_writer_set_arr(gguf_writer *w, const char *key, uint32_t elem_type, const void *data, uint64_t n,
                        char *err);
/* Array of n NUL-terminated strings. */
int gguf_writer_set_arr_str(gguf_writer *w, const char *key, const char *const *v, uint64_t n, char *err);

/* Copies a kv verbatim (any type, nested arrays included) from a file. */
int gguf_writer_copy_kv(gguf_writer *w, const gguf_kv *kv, char *err);
/* Copies every kv of src whose key starts with prefix ("" = all); returns
 * the number copied (>= 0) or a negative status. */
int gguf_writer_copy_kvs_prefix(gguf_writer *w, const gguf_file *src, const char *prefix, char *err);
/* Removes a key if present; true when it was there. */
bool gguf_writer_remove_kv(gguf_writer *w, const char *key);
uint64_t gguf_writer_n_kv(const gguf_writer *w);

/* Adds a tensor to the directory (in write order). n_dims 1..4, ne[0] the
 * row length and a multiple of the dtype's block size; dtype must be known
 * to tensor/dtype.h. Names are unique (PW_EINVAL on a duplicate). */
int gguf_writer_add_tensor(gguf_writer *w, const char *name, uint32_t n_dims, const uint64_t *ne, uint32_t dtype,
                           char *err);
uint64_t gguf_writer_n_tensors(const gguf_writer *w);
/* Byte size of tensor i as added. */
uint64_t gguf_writer_tensor_nbytes(const gguf_writer *w, uint64_t i);
/* Total file size gguf_writer_write() will produce with the current state. */
uint64_t gguf_writer_file_size(const gguf_writer *w);

/* Produces tensor i's bytes: must call emit(sink, buf, len) with exactly
 * gguf_writer_tensor_nbytes(i) bytes in total, in as many pieces as it likes
 * (e.g. one row at a time). Returns 0, or a negative status with a message
 * in err to abort the write. emit returns 0 or a negative status (write
 * error, or more bytes than announced) that the producer must pass on. */
typedef int (*gguf_emit_fn)(void *sink, const void *buf, size_t len);
typedef int (*gguf_tensor_data_fn)(void *ctx, uint64_t i, gguf_emit_fn emit, void *sink, char *err);

/* Writes the file. On any failure the partial file is removed and a status
 * returned (PW_EIO naming the path and errno text, or the producer's). The
 * writer's state is unchanged, so write() may be called again. */
int gguf_writer_write(const gguf_writer *w, const char *path, gguf_tensor_data_fn fn, void *ctx, char *err);

#endif
