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
 * Memory budget (plain files): at most mem_budget bytes of the file are
 * resident at once (stream.c). The file is cut into units: each decoder
 * layer (the blk.N.* tensors, contiguous in the file), and the embedding
 * and output matrices in row pieces about a layer's size. The header, the
 * other tensors and the pages two units share stay resident (the "base");
 * some units are pinned (the policy below); the rest stream through a pool
 * of the remaining budget: weights_acquire makes a unit resident (waiting
 * for the reader thread if needed) and starts the read of the unit that
 * follows it in the pass, weights_release lets it go. Every tensor keeps
 * one address for its life (the units are mapped in and out of one
 * reserved range), so a model binds its weights once, and outputs are
 * bit-identical at every budget.
 *   pread/direct: the pool is a ring of shared-memory chunks (memfd), read
 *     with the strategy's reads and mapped at the unit's place; evicted
 *     units are unmapped (PROT_NONE: a use without acquire faults).
 *   mmap: the file's own mapping; a unit is made resident with
 *     MADV_POPULATE_READ and dropped with MADV_DONTNEED, so the process's
 *     resident file pages (RssFile) stay within the budget.
 *
 * Split models (the first part of NAME-00001-of-0000N.gguf, gguf.h): each
 * part is opened with the same strategy and the parts' directories merged,
 * so the model sees one file. Under a budget each part streams within a
 * share of it (the part's minimum plus the rest by size; the split's
 * minimum is the sum of the parts'), unit ids run on across the parts, and
 * a layer whose tensors two parts share is one composite unit. An
 * encrypted part is refused.
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

/* Which units a budget keeps, after the pinned ones:
 *   lru   the least recently used unit is evicted first
 *   lfru  the unit with the fewest reuse hits (uses that found it still
 *         resident from an earlier pass) first, the most recently used
 *         among equals: a decode pass uses every unit once in the same
 *         order, where plain LRU evicts each unit just before its next use
 *         and the most recent one is the one needed last */
typedef enum weights_residency_policy { WEIGHTS_RES_LRU = 0, WEIGHTS_RES_LFRU = 1 } weights_residency_policy;
int weights_residency_parse(const char *s); /* "lru" | "lfru" -> policy, or -1 */
const char *weights_residency_name(int policy);
/* "1234", "512K", "64M", "1.5G" (powers of 1024) -> *bytes, *frac = 0; or
 * "25%" -> *frac = 0.25, *bytes = 0. PW_EINVAL with a message otherwise. */
int weights_budget_parse(const char *s, uint64_t *bytes, double *frac, char *err);

typedef struct weights_opts {
  int io;               /* weights_io; 0 = mmap */
  uint64_t mem_budget;  /* bytes of the file resident at once; 0 = no budget */
  double mem_budget_frac; /* (0, 1]: the budget as this share of the
                           * tensor bytes (used when mem_budget is 0) */
  int residency;        /* weights_residency_policy (with a budget) */
  bool mlock;           /* lock the resident weights; failure is an error
                         * naming RLIMIT_MEMLOCK */
  bool hugepages;       /* ask for 2 MiB pages on owned buffers; an error
                         * where the kernel has them off or with mmap */
  const char *key_file; /* borrowed: key file of an encrypted container
                         * (crypt.h); NULL = the file must be plain GGUF.
                         * A key with a plain file, or a container without
                         * a key, is an error. */
  pw_pool *pool;        /* borrowed, may be NULL: decrypt on these threads */
  /* May be NULL: asked between pieces of the load (8 MiB reads, 32 MiB of
   * a mapping faulted in, each part of a split); true abandons the load
   * (PW_ECANCELED, everything freed), e.g. when nobody waits for it. */
  bool (*cancel)(void *arg);
  void *cancel_arg;
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

/* ---- memory budget and streaming (stream.c) ---- */
/* True when the file was opened with a budget smaller than the file. */
bool weights_streaming(const weights *w);
/* The streamed pieces of tensor `name`: piece k holds rows [row0[k],
 * row0[k+1]) and is unit unit[k]. n = 0: the tensor is always resident
 * (no acquire needed). Views owned by w. */
typedef struct weights_rows {
  int n;
  const int64_t *row0; /* [n + 1] */
  const int *unit;     /* [n] */
} weights_rows;
void weights_tensor_rows(const weights *w, const char *name, weights_rows *out);
/* The unit of decoder layer il, or -1 when its weights are always resident. */
int weights_layer_unit(const weights *w, int il);
/* Makes unit u (-1: no-op) resident and keeps it so until the matching
 * release; starts reading the unit after it. Thread-safe. An error (the
 * file changed or cannot be read) names the file and the unit. */
int weights_acquire(weights *w, int u, char *err);
void weights_release(weights *w, int u);
/* Copies n weight bytes at src (a tensor address) into dst, reading them
 * from the file when their unit is not resident (a row of a streamed
 * matrix without the read of its whole piece). */
int weights_copy(weights *w, const void *src, size_t n, void *dst, char *err);

typedef struct weights_unit_info {
  char name[48];        /* "blk.3", "output.weight[0:21376)" */
  uint64_t bytes;       /* the unit's own pages */
  bool pinned;          /* resident for the model's life */
  bool resident;        /* now */
  uint64_t loads, hits; /* reads of it; uses that found it still resident */
} weights_unit_info;

typedef struct weights_budget_info {
  uint64_t budget;       /* asked for, in bytes */
  uint64_t tensor_bytes; /* the file's tensor bytes (the base of "25%") */
  uint64_t base_bytes;   /* header, small tensors, shared pages: resident */
  uint64_t pinned_bytes; /* pinned units */
  uint64_t pool_bytes;   /* what the streamed units share */
  uint64_t min_budget;   /* the smallest budget this file accepts */
  uint64_t chunk;        /* pool granularity (pread/direct), bytes */
  int policy;            /* weights_residency_policy */
  int n_units;
  uint64_t loads, hits;  /* over all units */
  uint64_t read_bytes;   /* streamed in since open */
  double read_s;         /* reader thread time spent reading them */
  double wait_s;         /* time acquire waited for a read */
} weights_budget_info;
/* NULL-safe: false when w does not stream. */
bool weights_get_budget(const weights *w, weights_budget_info *out);
/* Unit i (0 <= i < n_units) of a streaming w. */
void weights_get_unit(const weights *w, int i, weights_unit_info *out);
/* SHA-256 of the file's plaintext bytes (from memory when they are all
 * resident, else read again from the file). */
int weights_sha256(const weights *w, uint8_t dig[32], char *err);

/* ---- page cache control (cold-start benchmarks) ---- */
/* Asks the kernel to drop path's clean cached pages (POSIX_FADV_DONTNEED;
 * pages another process maps stay). Both take a split model's every part. */
int weights_drop_cache(const char *path, char *err);
/* Bytes of path now in the page cache (mincore over a mapping of it). */
int weights_cached_bytes(const char *path, uint64_t *cached, uint64_t *size, char *err);

#endif
