/* weights_int.h - what weights.c and stream.c share: the file reader of
 * the read strategies, and the streaming state's lifecycle. Not part of the
 * API (weights.h is). */
#ifndef PW_WEIGHTS_WEIGHTS_INT_H
#define PW_WEIGHTS_WEIGHTS_INT_H

#include "weights/weights.h"

#include <stdint.h>

typedef struct reader {
  const char *path;   /* borrowed */
  int io;
  int fd;             /* buffered descriptor (pread, and direct's tail) */
  int dfd;            /* O_DIRECT descriptor, or -1 */
  const uint8_t *map; /* mmap of the whole file (mmap io), or NULL */
  uint64_t size;      /* at open */
} reader;

int weights_reader_open(reader *r, const char *path, int io, char *err);
void weights_reader_close(reader *r);
/* [off, off + len) into buf; direct: off and buf 4 KiB-aligned */
int weights_reader_read(const reader *r, uint64_t off, uint64_t len, uint8_t *buf, char *err);

/* The streaming state of a plain file opened with a memory budget
 * (stream.c). weights_stream_open parses the file, plans the resident set
 * and loads it; *f_out is the parsed file (owned by the stream, its tensor
 * pointers into the stream's address range). */
typedef struct wstream wstream;
/* 1 (and *out NULL) when the budget holds the whole file: no streaming. */
int weights_stream_open(const char *path, const weights_opts *o, wstream **out, gguf_file **f_out, char *err);
void weights_stream_close(wstream *s);
int weights_stream_acquire(wstream *s, int ui, char *err);
void weights_stream_release(wstream *s, int ui);
void weights_stream_tensor_rows(const wstream *s, const char *name, weights_rows *out);
int weights_stream_layer_unit(const wstream *s, int il);
void weights_stream_budget(wstream *s, weights_budget_info *out);
void weights_stream_unit(wstream *s, int i, weights_unit_info *out);
int weights_stream_copy(wstream *s, const void *src, size_t n, void *dst, char *err);

/* The error for a failed mlock of n bytes: names RLIMIT_MEMLOCK's value. */
int weights_mlock_error(const char *path, size_t n, int e, char *err);

#endif
