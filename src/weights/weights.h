/* weights.h - where a model's weight bytes come from.
 *
 * A model file is opened with one read strategy:
 *   mmap    the file is mapped and faulted in (gguf_make_resident): the
 *           weights are the page cache itself.
 *   pread   the file is read with pread(2) into an owned buffer, 2 MiB
 *           aligned and asked for 2 MiB pages.
 *   direct  as pread, but through O_DIRECT (bypassing the page cache):
 *           4 KiB-aligned offsets, lengths and buffer; the tail that does
 *           not fill a 4 KiB block is read without O_DIRECT. A file system
 *           that refuses O_DIRECT is an error naming it, never a silent
 *           fallback to buffered reads.
 * and either plain (a GGUF file) or encrypted (a .pwe container, crypt.h):
 * its records are read with the same strategy and decrypted into memory
 * that is locked (mlock, where RLIMIT_MEMLOCK permits; a warning naming the
 * limit otherwise), kept out of core dumps, and wiped on close.
 *
 * Every strategy gives the same bytes at the same alignment modulo the
 * GGUF alignment, so model outputs are bit-identical whichever is used.
 *
 * Not here: GGUF parsing (gguf/), what the tensors mean (model/). */
#ifndef PW_WEIGHTS_WEIGHTS_H
#define PW_WEIGHTS_WEIGHTS_H

#include "base/pool.h"
#include "gguf/gguf.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum weights_io { WEIGHTS_IO_MMAP = 0, WEIGHTS_IO_PREAD = 1, WEIGHTS_IO_DIRECT = 2 } weights_io;
#define WEIGHTS_IO_COUNT 3

/* "mmap" | "pread" | "direct" -> weights_io, or -1. */
int weights_io_parse(const char *s);
const char *weights_io_name(int io);

typedef struct weights_opts {
  int io;               /* weights_io; 0 = mmap */
  const char *key_file; /* borrowed: key file of an encrypted container
                         * (crypt.h); NULL = the file must be plain GGUF.
                         * A key with a plain file, or a container without
                         * a key, is an error. */
  pw_pool *pool;        /* borrowed, may be NULL: decrypt on these threads */
} weights_opts;

/* What a load did, for logs and benchmarks. */
typedef struct weights_info {
  int io;                /* weights_io used */
  bool encrypted;
  bool locked;           /* decrypted bytes are mlocked */
  uint64_t file_bytes;   /* bytes on disk */
  uint64_t bytes;        /* plaintext (GGUF) bytes */
  double read_s;         /* wall time of the whole open (read, decrypt) */
  double decrypt_s;      /* of it, wall time of the decryption passes (with
                          * pread: the threads' reads too); 0 when plain */
  double decrypt_core_s; /* thread-seconds inside AES-GCM alone: bytes /
                          * decrypt_core_s is the rate per core */
  int decrypt_threads;
} weights_info;

typedef struct weights weights;

/* Opens path with o (NULL = mmap, plain) and validates it as GGUF. Errors
 * name the file, the strategy where it matters, and for containers the
 * chunk; they never contain key bytes. */
int weights_open(const char *path, const weights_opts *o, weights **out, char *err);
/* Unmaps or wipes and frees everything; NULL is a no-op. Views into the
 * gguf_file are invalid afterwards. */
void weights_close(weights *w);
/* The parsed file (owned by w; its data pointers are views into w's bytes). */
gguf_file *weights_gguf(const weights *w);
/* Bytes resident and in 2 MiB pages (as gguf_make_resident reports). */
const gguf_residency *weights_residency(const weights *w);
const weights_info *weights_get_info(const weights *w);

/* ---- page cache control (cold-start benchmarks) ---- */
/* Asks the kernel to drop path's clean cached pages (POSIX_FADV_DONTNEED;
 * pages another process maps stay). */
int weights_drop_cache(const char *path, char *err);
/* Bytes of path now in the page cache (mincore over a mapping of it). */
int weights_cached_bytes(const char *path, uint64_t *cached, uint64_t *size, char *err);

#endif
