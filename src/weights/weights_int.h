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
/* 1 (and *out NULL) when the budget holds the whole file: no streaming.
 * budget_override: the budget in bytes, or UINT64_MAX for o's. n_layer:
 * the model's layer count, or -1 to read it from the file's metadata. When
 * the budget is below the file's minimum, *min_out (may be NULL) is that
 * minimum (a split model's parts share one budget: weights.c asks each
 * part's minimum this way before dividing it). */
int weights_stream_open(const char *path, const weights_opts *o, uint64_t budget_override, int n_layer,
                        wstream **out, gguf_file **f_out, uint64_t *min_out, char *err);
/* True when p lies in s's file layout. */
bool weights_stream_holds(const wstream *s, const void *p);
/* Adds base to the unit ids weights_stream_tensor_rows reports (a split
 * model numbers its parts' units in one sequence). Ids given to acquire,
 * release and unit stay the part's own. */
void weights_stream_offset_units(wstream *s, int base);
void weights_stream_close(wstream *s);
int weights_stream_acquire(wstream *s, int ui, char *err);
/* Starts reading unit ui when it is absent and the pool has room now (a
 * split model's next part, which this stream's own pass order does not
 * know); never waits. */
void weights_stream_prefetch(wstream *s, int ui);
void weights_stream_release(wstream *s, int ui);
void weights_stream_tensor_rows(const wstream *s, const char *name, weights_rows *out);
int weights_stream_layer_unit(const wstream *s, int il);
void weights_stream_budget(wstream *s, weights_budget_info *out);
void weights_stream_unit(wstream *s, int i, weights_unit_info *out);
int weights_stream_copy(wstream *s, const void *src, size_t n, void *dst, char *err);

/* The error for a failed mlock of n bytes: names RLIMIT_MEMLOCK's value. */
int weights_mlock_error(const char *path, size_t n, int e, char *err);

#endif
