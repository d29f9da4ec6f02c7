/* weights.c - read strategies (mmap, pread, O_DIRECT) and encrypted
 * containers decrypted into locked memory; see weights.h. Not here: the
 * container's byte format and its cryptography (crypt.c), GGUF parsing. */
#include "weights/weights.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "base/sha256.h"
#include "weights/crypt.h"
#include "weights/weights_int.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#if defined(__linux__) && !defined(MADV_POPULATE_READ)
#define MADV_POPULATE_READ 22 /* Linux 5.14; older headers lack it */
#endif

#define HUGE_PAGE ((uint64_t)2 << 20)
/* O_DIRECT offsets, lengths and buffers are kept at multiples of this: the
 * largest logical block size in common use (512-byte devices accept it). */
#define DIO_ALIGN ((uint64_t)4096)
/* bytes per read call: large enough to amortise the call, small enough
 * that a slow device still reports progress through errors promptly */
#define READ_PIECE ((uint64_t)8 << 20)
/* ciphertext read per window before it is decrypted (pread/direct) */
#define CRYPT_WINDOW ((uint64_t)16 << 20)

struct weights {
  gguf_file *f;
  gguf_residency res;
  weights_info info;
  uint8_t *buf;   /* owned plaintext bytes (pread/direct/encrypted), or NULL */
  size_t buf_cap; /* bytes mapped at buf */
  wstream *st;    /* with a memory budget: the streaming state (owns f), or NULL */
  char *path;     /* owned: for re-reads (weights_sha256) */
  /* A split model: each part is a weights of its own (opened with the same
   * strategy, each with a share of the budget), and f is their merge
   * (borrowing the parts' files). Streamed units are numbered in one
   * sequence: part i's unit u is ubase[i] + u; a layer with units in two
   * parts gets an id n_gunits + c, composite c acquiring them all. */
  weights **sub;      /* [n_sub], owned */
  char **sub_path;    /* [n_sub], owned */
  int n_sub;
  int *ubase;         /* [n_sub] */
  int n_gunits;
  int *comp;          /* [n_comp * n_sub]: member ids (global), -1 padded */
  int n_comp;
  int *layer_g;       /* [n_layer]: the layer's id, or -1 */
  int *g_layer;       /* [n_gunits + n_comp]: the layer of an id, or -1 */
  uint64_t min_sum;   /* with a budget: the parts' minimums' sum */
  int n_layer;
  struct {
    const char *name;
    weights_rows rows; /* a part's, its unit ids offset (views) */
  } tr[2];            /* the streamed matrices (token_embd, output) */
};

static weights *sub_of(const weights *w, int g, int *local);
static int split_acquire(weights *w, int g, char *err);
static void split_release(weights *w, int g);
static void split_read_ahead(weights *w, int il);

int weights_io_parse(const char *s) {
  for (int i = 0; i < WEIGHTS_IO_COUNT; i++)
    if (!strcmp(s, weights_io_name(i))) return i;
  return -1;
}

const char *weights_io_name(int io) {
  static const char *names[WEIGHTS_IO_COUNT] = {"mmap", "pread", "direct"};
  return io >= 0 && io < WEIGHTS_IO_COUNT ? names[io] : "unknown";
}

/* ---- owned buffers --------------------------------------------------------- */

/* bytes rounded up to 2 MiB, 2 MiB aligned (an anonymous mapping trimmed to
 * alignment), asked for 2 MiB pages: decode reads every weight each token,
 * as the mmap path's gguf_make_resident explains. */
static uint8_t *buf_alloc(uint64_t bytes, size_t *cap_out) {
  if (bytes > SIZE_MAX - 2 * HUGE_PAGE) return NULL;
  const size_t cap = (size_t)((bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE);
  const size_t span = cap + HUGE_PAGE;
  uint8_t *p = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return NULL;
  uint8_t *a = (uint8_t *)(((uintptr_t)p + HUGE_PAGE - 1) & ~(uintptr_t)(HUGE_PAGE - 1));
  if (a > p) munmap(p, (size_t)(a - p));
  if (p + span > a + cap) munmap(a + cap, (size_t)(p + span - (a + cap)));
#ifdef MADV_HUGEPAGE
  madvise(a, cap, MADV_HUGEPAGE);
#endif
  *cap_out = cap;
  return a;
}

/* "Key: N kB" of the /proc/self/smaps entry holding addr, or -1. */
static int64_t smaps_kb(const void *addr, const char *key) {
  FILE *fp = fopen("/proc/self/smaps", "re");
  if (!fp) return -1;
  char line[512];
  const size_t kl = strlen(key);
  int in = 0;
  int64_t kb = -1;
  while (fgets(line, sizeof line, fp)) {
    unsigned long lo, hi;
    char perm[8];
    if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perm) == 3) {
      if (in) break;
      in = (uintptr_t)addr >= lo && (uintptr_t)addr < hi;
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

/* ---- readers ----------------------------------------------------------------- */

void weights_reader_close(reader *r) {
  if (r->map) munmap((void *)r->map, (size_t)r->size);
  if (r->dfd >= 0) close(r->dfd);
  if (r->fd >= 0) close(r->fd);
  r->map = NULL;
  r->fd = r->dfd = -1;
}

int weights_reader_open(reader *r, const char *path, int io, char *err) {
  memset(r, 0, sizeof *r);
  r->path = path;
  r->io = io;
  r->fd = r->dfd = -1;
  r->fd = open(path, O_RDONLY | O_CLOEXEC);
  if (r->fd < 0) return pw_seterr(err, PW_EIO, "%s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(r->fd, &st) || !S_ISREG(st.st_mode)) {
    weights_reader_close(r);
    return pw_seterr(err, PW_EIO, "%s: not a regular file", path);
  }
  r->size = (uint64_t)st.st_size;
  if (io == WEIGHTS_IO_DIRECT) {
    r->dfd = open(path, O_RDONLY | O_CLOEXEC | O_DIRECT);
    if (r->dfd < 0) {
      int e = errno;
      weights_reader_close(r);
      if (e == EINVAL)
        return pw_seterr(err, PW_EUNSUPPORTED,
                         "%s: the file system does not support O_DIRECT (open: %s); weights read strategy 'direct' "
                         "is unavailable here: use 'pread' or 'mmap'",
                         path, strerror(e));
      return pw_seterr(err, PW_EIO, "%s: open with O_DIRECT: %s", path, strerror(e));
    }
  } else if (io == WEIGHTS_IO_PREAD) {
#ifdef POSIX_FADV_SEQUENTIAL
    posix_fadvise(r->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
#endif
  }
  return 0;
}

static int short_read(const reader *r, uint64_t at, char *err) {
  return pw_seterr(err, PW_EFORMAT, "%s: truncated file: it ends at byte %llu, but had %llu bytes when opened",
                   r->path, (unsigned long long)at, (unsigned long long)r->size);
}

static int pread_all(const reader *r, int fd, uint8_t *buf, uint64_t len, uint64_t off, char *err) {
  while (len > 0) {
    size_t n = len > READ_PIECE ? (size_t)READ_PIECE : (size_t)len;
    ssize_t got = pread(fd, buf, n, (off_t)off);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      if (fd == r->dfd && errno == EINVAL)
        return pw_seterr(err, PW_EUNSUPPORTED,
                         "%s: the file system refused an O_DIRECT read (%s); weights read strategy 'direct' is "
                         "unavailable here: use 'pread' or 'mmap'",
                         r->path, strerror(errno));
      return pw_seterr(err, PW_EIO, "%s: read at byte %llu: %s", r->path, (unsigned long long)off, strerror(errno));
    }
    if (got == 0) return short_read(r, off, err);
    /* a short O_DIRECT read ends the file mid-block: no aligned retry */
    if (fd == r->dfd && (size_t)got < n && ((size_t)got % DIO_ALIGN)) return short_read(r, off + (uint64_t)got, err);
    buf += got;
    off += (uint64_t)got;
    len -= (uint64_t)got;
  }
  return 0;
}

/* Reads [off, off + len) into buf. direct: off and buf DIO_ALIGN-aligned;
 * the whole blocks go through O_DIRECT, the remainder (< 4 KiB, only at the
 * end of the file) through the buffered descriptor. */
int weights_reader_read(const reader *r, uint64_t off, uint64_t len, uint8_t *buf, char *err) {
  if (off > r->size || len > r->size - off) return short_read(r, r->size, err);
  if (r->io != WEIGHTS_IO_DIRECT) return pread_all(r, r->fd, buf, len, off, err);
  PW_ASSERT(off % DIO_ALIGN == 0 && (uintptr_t)buf % DIO_ALIGN == 0);
  const uint64_t whole = len / DIO_ALIGN * DIO_ALIGN;
  int rc = pread_all(r, r->dfd, buf, whole, off, err);
  if (!rc && len > whole) rc = pread_all(r, r->fd, buf + whole, len - whole, off + whole, err);
  return rc;
}

/* ---- plain files --------------------------------------------------------------- */

/* PW_ECANCELED when the caller abandoned the load (weights_opts.cancel). */
static int abandoned(const weights_opts *o, const char *path, char *err) {
  if (!o->cancel || !o->cancel(o->cancel_arg)) return 0;
  return pw_seterr(err, PW_ECANCELED, "%s: the load was abandoned", path);
}

/* Faults a mapping in by pieces, asking o->cancel between them (the
 * residency pass that follows then finds the pages in place). */
static int populate_cancellable(const weights_opts *o, const gguf_file *f, const char *path, char *err) {
  if (!o->cancel) return 0;
  const uint8_t *b = gguf_base(f);
  const uint64_t n = gguf_size(f), piece = 32u << 20;
  for (uint64_t off = 0; off < n; off += piece) {
    int rc = abandoned(o, path, err);
    if (rc) return rc;
#ifdef MADV_POPULATE_READ
    madvise((void *)(b + off), (size_t)(n - off < piece ? n - off : piece), MADV_POPULATE_READ);
#endif
  }
  return abandoned(o, path, err);
}

static int open_owned_plain(weights *w, reader *r, const weights_opts *o, char *err) {
  if (!(w->buf = buf_alloc(r->size, &w->buf_cap)))
    return pw_seterr(err, PW_ENOMEM, "%s: out of memory for %.1f MiB of weights", r->path, r->size / 1048576.0);
  for (uint64_t off = 0; off < r->size; off += READ_PIECE) {
    const uint64_t n = r->size - off < READ_PIECE ? r->size - off : READ_PIECE;
    int rc = abandoned(o, r->path, err);
    if (!rc) rc = weights_reader_read(r, off, n, w->buf + off, err);
    if (rc) return rc;
  }
  /* a file that grew since open is not the file we were asked to load
   * either: say so instead of loading its first part */
  struct stat st;
  if (fstat(r->fd, &st) == 0 && (uint64_t)st.st_size != r->size)
    return pw_seterr(err, PW_EIO, "%s: the file changed size while it was read (%llu, now %lld bytes)", r->path,
                     (unsigned long long)r->size, (long long)st.st_size);
  return 0;
}

/* ---- encrypted containers ---------------------------------------------------------- */

typedef struct dec_job {
  const weights_pwe_hdr *h;
  const reader *r;            /* preadv mode: records are read by the threads */
  weights_dec **decs;         /* [nth] */
  const uint8_t *recs;        /* record first..first+n-1, contiguous */
  uint64_t first, n;
  uint8_t *out;               /* plaintext of the container */
  uint64_t bad[256];          /* per thread: first failing record, or UINT64_MAX */
  double dec_s[256];          /* per thread: seconds inside AES-GCM */
  char errs[256][PW_ERRMAX];
} dec_job;

/* Record i straight from the file: nonce and tag to the side, the
 * ciphertext into its plaintext's place (decrypted there in place while it
 * is still in the cache: one pass over memory, as a plain pread). */
static int read_record(const dec_job *j, uint64_t i, uint8_t nonce[WEIGHTS_PWE_NONCE], uint8_t tag[WEIGHTS_PWE_TAG],
                       char *err) {
  const uint64_t len = weights_pwe_rec_len(j->h, i);
  uint64_t off = weights_pwe_rec_off(j->h, i);
  struct iovec iov[3] = {{nonce, WEIGHTS_PWE_NONCE}, {j->out + i * j->h->chunk, (size_t)len}, {tag, WEIGHTS_PWE_TAG}};
  struct iovec *v = iov;
  int nv = 3;
  while (nv > 0) {
    ssize_t got = preadv(j->r->fd, v, nv, (off_t)off);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      return pw_seterr(err, PW_EIO, "%s: read of chunk %llu: %s", j->r->path, (unsigned long long)i, strerror(errno));
    if (got == 0)
      return pw_seterr(err, PW_EFORMAT, "%s: truncated file: chunk %llu of %llu ends past the end of the file",
                       j->r->path, (unsigned long long)i, (unsigned long long)j->h->n_chunks);
    off += (uint64_t)got;
    while (nv > 0 && (size_t)got >= v->iov_len) {
      got -= (ssize_t)v->iov_len;
      v++;
      nv--;
    }
    if (nv > 0) {
      v->iov_base = (uint8_t *)v->iov_base + got;
      v->iov_len -= (size_t)got;
    }
  }
  return 0;
}

static void dec_run(void *ctx, int ith, int nth) {
  dec_job *j = ctx;
  long lo, hi;
  pw_split((long)j->n, ith, nth, &lo, &hi);
  const uint64_t rl = WEIGHTS_PWE_NONCE + j->h->chunk + WEIGHTS_PWE_TAG;
  for (long k = lo; k < hi; k++) {
    const uint64_t i = j->first + (uint64_t)k;
    uint8_t *out = j->out + i * j->h->chunk;
    int rc;
    if (j->r) {
      uint8_t nonce[WEIGHTS_PWE_NONCE], tag[WEIGHTS_PWE_TAG];
      rc = read_record(j, i, nonce, tag, j->errs[ith]);
      const double t0 = pw_now_s();
      if (!rc) rc = weights_dec_record(j->decs[ith], j->h, i, nonce, out, tag, out, j->errs[ith]);
      j->dec_s[ith] += pw_now_s() - t0;
    } else {
      const uint8_t *rec = j->recs + (uint64_t)k * rl;
      const double t0 = pw_now_s();
      rc = weights_dec_record(j->decs[ith], j->h, i, rec, rec + WEIGHTS_PWE_NONCE,
                              rec + WEIGHTS_PWE_NONCE + weights_pwe_rec_len(j->h, i), out, j->errs[ith]);
      j->dec_s[ith] += pw_now_s() - t0;
    }
    if (rc) {
      j->bad[ith] = i;
      return;
    }
  }
}

/* Decrypts records [first, first + n) at recs; the lowest failing record's
 * error when any fails. */
static int dec_span(weights *w, dec_job *j, pw_pool *pool, int nth, uint64_t first, uint64_t n, const uint8_t *recs,
                    char *err) {
  j->first = first;
  j->n = n;
  j->recs = recs;
  for (int t = 0; t < nth; t++) j->bad[t] = UINT64_MAX;
  const double t0 = pw_now_s();
  pw_pool_run(pool, dec_run, j);
  w->info.decrypt_s += pw_now_s() - t0;
  int worst = -1;
  for (int t = 0; t < nth; t++) w->info.decrypt_core_s += j->dec_s[t], j->dec_s[t] = 0;
  for (int t = 0; t < nth; t++)
    if (j->bad[t] != UINT64_MAX && (worst < 0 || j->bad[t] < j->bad[worst])) worst = t;
  if (worst >= 0) return pw_seterr(err, PW_EFORMAT, "%s", j->errs[worst]);
  (void)w;
  return 0;
}

static void rlimit_text(char *lim, size_t cap) {
  struct rlimit rl;
  snprintf(lim, cap, "unknown");
  if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
    if (rl.rlim_cur == RLIM_INFINITY) snprintf(lim, cap, "unlimited");
    else snprintf(lim, cap, "%llu bytes", (unsigned long long)rl.rlim_cur);
  }
}

int weights_mlock_error(const char *path, size_t n, int e, char *err) {
  char lim[64];
  rlimit_text(lim, sizeof lim);
  return pw_seterr(err, PW_EUNSUPPORTED,
                   "%s: --mlock: cannot lock %.1f MiB of weights in memory (mlock: %s; RLIMIT_MEMLOCK is %s): raise "
                   "the limit (ulimit -l, LimitMEMLOCK=), grant CAP_IPC_LOCK, or run without --mlock",
                   path, n / 1048576.0, strerror(e), lim);
}

/* --hugepages: an error where transparent huge pages are off. */
static int hugepages_check(const weights_opts *o, char *err) {
  if (!o->hugepages) return 0;
  if (o->io == WEIGHTS_IO_MMAP)
    return pw_seterr(err, PW_EINVAL,
                     "--hugepages applies to owned weight buffers: use it with --weights-io pread or direct (the "
                     "mmap strategy asks for 2 MiB pages of the page cache on its own where the kernel allows)");
  char line[128] = "";
  FILE *fp = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "re");
  if (!fp) return pw_seterr(err, PW_EUNSUPPORTED, "--hugepages: this kernel has no transparent huge pages");
  if (!fgets(line, sizeof line, fp)) line[0] = 0;
  fclose(fp);
  if (strstr(line, "[never]"))
    return pw_seterr(err, PW_EUNSUPPORTED,
                     "--hugepages: transparent huge pages are disabled (/sys/kernel/mm/transparent_hugepage/enabled "
                     "is 'never')");
  return 0;
}

static void lock_plaintext(weights *w, const char *path) {
#ifdef MADV_DONTDUMP
  madvise(w->buf, w->buf_cap, MADV_DONTDUMP);
#endif
  if (mlock(w->buf, w->buf_cap) == 0) {
    w->info.locked = true;
    return;
  }
  const int e = errno;
  char lim[64];
  rlimit_text(lim, sizeof lim);
  pw_log(PW_LOG_WARN,
         "%s: cannot lock the %.1f MiB of decrypted weights in memory (mlock: %s; RLIMIT_MEMLOCK is %s): they "
         "may be written to swap; raise the limit (ulimit -l, LimitMEMLOCK=) or grant CAP_IPC_LOCK",
         path, w->buf_cap / 1048576.0, strerror(e), lim);
}

static int open_encrypted(weights *w, reader *r, const char *key_file, pw_pool *pool, char *err) {
  weights_key *key = NULL;
  weights_pwe_hdr h;
  dec_job *job = NULL;
  uint8_t *win = NULL;
  size_t win_cap = 0;
  char e2[PW_ERRMAX];
  int nth = pool ? pw_pool_size(pool) : 1;
  if (nth > 256) nth = 256;
  int rc = weights_key_load(key_file, &key, err);
  if (rc) return rc;
  uint8_t first[WEIGHTS_PWE_HEADER];
  if (r->map) memcpy(first, r->map, WEIGHTS_PWE_HEADER);
  else {
    /* the header through the strategy's own path (an aligned block) */
    if (!(win = buf_alloc(CRYPT_WINDOW, &win_cap))) {
      rc = pw_seterr(err, PW_ENOMEM, "out of memory");
      goto done;
    }
    uint64_t n = r->size < DIO_ALIGN ? r->size : DIO_ALIGN;
    if ((rc = weights_reader_read(r, 0, n, win, err))) goto done;
    memcpy(first, win, WEIGHTS_PWE_HEADER);
  }
  if ((rc = weights_pwe_parse(first, r->size, &h, e2))) {
    rc = pw_seterr(err, rc, "%s: %s", r->path, e2);
    goto done;
  }
  if (!(w->buf = buf_alloc(h.size, &w->buf_cap))) {
    rc = pw_seterr(err, PW_ENOMEM, "%s: out of memory for %.1f MiB of weights", r->path, h.size / 1048576.0);
    goto done;
  }
  const double tl = pw_now_s();
  lock_plaintext(w, r->path);
  pw_log(PW_LOG_DEBUG, "%s: %.1f MiB for the decrypted weights allocated and locked in %.3f s", r->path,
         w->buf_cap / 1048576.0, pw_now_s() - tl);
  job = calloc(1, sizeof *job);
  if (!job || !(job->decs = calloc((size_t)nth, sizeof *job->decs))) {
    rc = pw_seterr(err, PW_ENOMEM, "out of memory");
    goto done;
  }
  for (int t = 0; t < nth; t++)
    if ((rc = weights_dec_create(key, &job->decs[t], err))) goto done;
  weights_key_destroy(key); /* the cipher contexts hold the key schedule */
  key = NULL;
  job->h = &h;
  job->out = w->buf;
  w->info.decrypt_threads = nth;
  const uint64_t rl = WEIGHTS_PWE_NONCE + h.chunk + WEIGHTS_PWE_TAG;
  if (r->map) {
#ifdef MADV_SEQUENTIAL
    madvise((void *)r->map, (size_t)r->size, MADV_SEQUENTIAL);
#endif
    rc = dec_span(w, job, pool, nth, 0, h.n_chunks, r->map + WEIGHTS_PWE_HEADER, e2);
  } else if (r->io == WEIGHTS_IO_PREAD) {
    job->r = r;
    rc = dec_span(w, job, pool, nth, 0, h.n_chunks, NULL, e2);
  } else {
    /* windows of whole records, each read from the aligned block holding
     * its first byte; the window buffer has room for that slack */
    uint64_t per = (CRYPT_WINDOW - DIO_ALIGN) / rl;
    if (per < 1) per = 1;
    if (per * rl + DIO_ALIGN > win_cap) {
      munmap(win, win_cap);
      if (!(win = buf_alloc(per * rl + DIO_ALIGN, &win_cap))) {
        rc = pw_seterr(err, PW_ENOMEM, "out of memory");
        goto done;
      }
    }
    for (uint64_t i = 0; i < h.n_chunks && !rc; i += per) {
      const uint64_t n = h.n_chunks - i < per ? h.n_chunks - i : per;
      const uint64_t start = weights_pwe_rec_off(&h, i), end = i + n < h.n_chunks ? weights_pwe_rec_off(&h, i + n) : h.file_size;
      const uint64_t a = start / DIO_ALIGN * DIO_ALIGN;
      if ((rc = weights_reader_read(r, a, end - a, win, e2))) break;
      rc = dec_span(w, job, pool, nth, i, n, win + (start - a), e2);
    }
  }
  if (rc) pw_seterr(err, rc, "%s: %s", r->path, e2);
done:
  if (job && job->decs)
    for (int t = 0; t < nth; t++) weights_dec_destroy(job->decs[t]);
  if (job) free(job->decs);
  free(job);
  if (win) munmap(win, win_cap);
  weights_key_destroy(key);
  if (!rc) {
    w->info.encrypted = true;
    w->info.bytes = h.size;
  }
  return rc;
}

/* ---- open / close ---------------------------------------------------------------- */

/* One file: an ordinary model, or one part of a split (n_layer >= 0). */
static int open_one(const char *path, const weights_opts *o, int n_layer, weights **out, char *err) {
  *out = NULL;
  const weights_opts def = {0};
  if (!o) o = &def;
  if (o->io < 0 || o->io >= WEIGHTS_IO_COUNT)
    return pw_seterr(err, PW_EINVAL, "unknown weights read strategy %d", o->io);
  if (o->residency != WEIGHTS_RES_LRU && o->residency != WEIGHTS_RES_LFRU)
    return pw_seterr(err, PW_EINVAL, "unknown residency policy %d", o->residency);
  if (o->mem_budget_frac < 0 || o->mem_budget_frac > 1)
    return pw_seterr(err, PW_EINVAL, "memory budget of %g of the model: expected 0 < P <= 100%%", o->mem_budget_frac * 100);
  int rc = hugepages_check(o, err);
  if (rc) return rc;
  weights *w = calloc(1, sizeof *w);
  if (!w || !(w->path = strdup(path))) {
    free(w);
    return pw_seterr(err, PW_ENOMEM, "out of memory");
  }
  const double t0 = pw_now_s();
  w->info.io = o->io;
  reader r;
  rc = weights_reader_open(&r, path, o->io, err);
  if (rc) {
    free(w->path);
    free(w);
    return rc;
  }
  w->info.file_bytes = r.size;
  uint8_t magic[8] = {0};
  ssize_t got = pread(r.fd, magic, sizeof magic, 0);
  const bool container = got == (ssize_t)sizeof magic && weights_pwe_is(magic, sizeof magic);
  const bool keyed = o->key_file && *o->key_file;
  if (container && !keyed) {
    rc = pw_seterr(err, PW_EINVAL, "%s is an encrypted weights container and no key file was given", path);
    goto fail;
  }
  if (!container && keyed) {
    rc = pw_seterr(err, PW_EINVAL,
                   "%s is not an encrypted weights container, but a weights key file was given: refusing to load "
                   "it as plain weights",
                   path);
    goto fail;
  }
  if (o->mem_budget > 0 || o->mem_budget_frac > 0) {
    if (container) {
      rc = pw_seterr(err, PW_EUNSUPPORTED,
                     "%s: an encrypted container cannot stream under a memory budget (its chunks do not follow "
                     "layer boundaries): load it without --mem-budget, or decrypt it (power decrypt) to a file on "
                     "protected storage",
                     path);
      goto fail;
    }
    weights_reader_close(&r);
    rc = weights_stream_open(path, o, UINT64_MAX, n_layer, &w->st, &w->f, NULL, err);
    if (rc < 0 || (rc == 0 && (rc = abandoned(o, path, err)))) goto fail;
    if (rc == 0) {
      weights_budget_info bi;
      weights_stream_budget(w->st, &bi);
      w->info.bytes = gguf_size(w->f);
      w->info.locked = o->mlock;
      w->res.bytes = bi.base_bytes + bi.pinned_bytes + bi.pool_bytes;
      w->res.huge_bytes = -1;
      w->info.read_s = pw_now_s() - t0;
      *out = w;
      return 0;
    }
    /* the budget holds the whole file: an ordinary load */
    if ((rc = weights_reader_open(&r, path, o->io, err))) goto fail;
  }
  if (!container && o->io == WEIGHTS_IO_MMAP) {
    weights_reader_close(&r);
    if ((rc = gguf_open_file(path, &w->f, err)) || (rc = populate_cancellable(o, w->f, path, err))) goto fail;
    gguf_make_resident(w->f, &w->res);
    if (o->mlock) {
      if (mlock(gguf_base(w->f), (size_t)gguf_size(w->f))) {
        rc = weights_mlock_error(path, (size_t)gguf_size(w->f), errno, err);
        goto fail;
      }
      w->info.locked = true;
    }
    w->info.bytes = gguf_size(w->f);
    w->info.read_s = pw_now_s() - t0;
    *out = w;
    return 0;
  }
  if (container && o->io == WEIGHTS_IO_MMAP) {
    if (r.size < WEIGHTS_PWE_HEADER) {
      rc = pw_seterr(err, PW_EFORMAT, "%s: truncated container: %llu bytes", path, (unsigned long long)r.size);
      goto fail;
    }
    void *m = mmap(NULL, (size_t)r.size, PROT_READ, MAP_PRIVATE, r.fd, 0);
    if (m == MAP_FAILED) {
      rc = pw_seterr(err, PW_EIO, "%s: mmap: %s", path, strerror(errno));
      goto fail;
    }
    r.map = m;
  }
  rc = container ? open_encrypted(w, &r, o->key_file, o->pool, err) : open_owned_plain(w, &r, o, err);
  weights_reader_close(&r);
  if (rc) goto fail;
  if (o->hugepages && madvise(w->buf, w->buf_cap, MADV_HUGEPAGE)) {
    rc = pw_seterr(err, PW_EUNSUPPORTED, "--hugepages: madvise(MADV_HUGEPAGE): %s", strerror(errno));
    goto fail;
  }
  if (o->mlock && !w->info.locked) {
    if (mlock(w->buf, w->buf_cap)) {
      rc = weights_mlock_error(path, w->buf_cap, errno, err);
      goto fail;
    }
    w->info.locked = true;
  }
  if (!container) w->info.bytes = r.size;
  if ((rc = gguf_open_mem(w->buf, (size_t)w->info.bytes, &w->f, err))) goto fail;
  gguf_split sp;
  if (container && gguf_split_get(w->f, &sp) && sp.count > 1) {
    rc = pw_seterr(err, PW_EUNSUPPORTED,
                   "%s: an encrypted part of a split model: join the parts into one GGUF (power split --merge) "
                   "before encrypting",
                   path);
    goto fail;
  }
  w->res.bytes = w->info.bytes;
  int64_t kb = smaps_kb(w->buf, "AnonHugePages");
  w->res.huge_bytes = kb < 0 ? -1 : kb * 1024;
  w->info.read_s = pw_now_s() - t0;
  *out = w;
  return 0;
fail:
  weights_reader_close(&r);
  weights_close(w);
  return rc;
}

void weights_close(weights *w) {
  if (!w) return;
  if (w->sub) {
    gguf_close(w->f); /* the merge: borrows the parts' files */
    w->f = NULL;
    for (int i = 0; i < w->n_sub; i++) weights_close(w->sub[i]);
    free(w->sub);
  }
  gguf_split_free_names(w->sub_path, w->n_sub);
  free(w->ubase);
  free(w->comp);
  free(w->layer_g);
  free(w->g_layer);
  if (w->st) {
    weights_stream_close(w->st); /* owns f */
    w->f = NULL;
  }
  gguf_close(w->f);
  if (w->buf) {
    /* decrypted weights are the secret the container protects: wiped
     * before the pages go back to the kernel */
    if (w->info.encrypted || w->info.locked) explicit_bzero(w->buf, w->buf_cap);
    if (w->info.locked) munlock(w->buf, w->buf_cap);
    munmap(w->buf, w->buf_cap);
  }
  free(w->path);
  free(w);
}

gguf_file *weights_gguf(const weights *w) { return w->f; }
const gguf_residency *weights_residency(const weights *w) { return &w->res; }
const weights_info *weights_get_info(const weights *w) { return &w->info; }

/* ---- memory budget ------------------------------------------------------------------ */

static bool split_streams(const weights *w) {
  for (int i = 0; i < w->n_sub; i++)
    if (w->sub[i]->st) return true;
  return false;
}

bool weights_streaming(const weights *w) { return w && (w->st || split_streams(w)); }

void weights_tensor_rows(const weights *w, const char *name, weights_rows *out) {
  memset(out, 0, sizeof *out);
  if (w->st) weights_stream_tensor_rows(w->st, name, out);
  for (int t = 0; w->sub && t < 2; t++)
    if (!strcmp(w->tr[t].name, name)) *out = w->tr[t].rows;
}

int weights_layer_unit(const weights *w, int il) {
  if (w->sub) return il >= 0 && il < w->n_layer && w->layer_g ? w->layer_g[il] : -1;
  return w->st ? weights_stream_layer_unit(w->st, il) : -1;
}

int weights_acquire(weights *w, int u, char *err) {
  if (w->sub) {
    if (u < 0) return 0;
    int rc = split_acquire(w, u, err);
    if (!rc && u < w->n_gunits + w->n_comp && w->g_layer[u] >= 0) split_read_ahead(w, w->g_layer[u]);
    return rc;
  }
  return w->st && u >= 0 ? weights_stream_acquire(w->st, u, err) : 0;
}

void weights_release(weights *w, int u) {
  if (w->sub && u >= 0) split_release(w, u);
  else if (w->st && u >= 0) weights_stream_release(w->st, u);
}

int weights_copy(weights *w, const void *src, size_t n, void *dst, char *err) {
  for (int i = 0; i < w->n_sub; i++)
    if (w->sub[i]->st && weights_stream_holds(w->sub[i]->st, src)) return weights_stream_copy(w->sub[i]->st, src, n, dst, err);
  if (w->st) return weights_stream_copy(w->st, src, n, dst, err);
  memcpy(dst, src, n);
  return 0;
}

bool weights_get_budget(const weights *w, weights_budget_info *out) {
  memset(out, 0, sizeof *out);
  if (!w) return false;
  if (w->sub) {
    if (!split_streams(w)) return false;
    /* the parts' sums; a part that fits its share whole counts as base */
    for (int i = 0; i < w->n_sub; i++) {
      weights_budget_info b;
      if (!weights_get_budget(w->sub[i], &b)) {
        out->base_bytes += w->sub[i]->info.bytes;
        out->budget += w->sub[i]->info.bytes;
        out->min_budget += w->sub[i]->info.bytes;
        continue;
      }
      out->budget += b.budget;
      out->tensor_bytes += b.tensor_bytes;
      out->base_bytes += b.base_bytes;
      out->pinned_bytes += b.pinned_bytes;
      out->pool_bytes += b.pool_bytes;
      out->min_budget += b.min_budget;
      if (b.chunk > out->chunk) out->chunk = b.chunk;
      out->policy = b.policy;
      out->n_units += b.n_units;
      out->loads += b.loads;
      out->hits += b.hits;
      out->read_bytes += b.read_bytes;
      out->read_s += b.read_s;
      out->wait_s += b.wait_s;
    }
    out->min_budget = w->min_sum;
    return true;
  }
  if (!w->st) return false;
  weights_stream_budget(w->st, out);
  return true;
}

void weights_get_unit(const weights *w, int i, weights_unit_info *out) {
  memset(out, 0, sizeof *out);
  if (w->sub) {
    int u;
    weights *p = i >= 0 && i < w->n_gunits ? sub_of(w, i, &u) : NULL;
    if (p) weights_stream_unit(p->st, u, out);
    return;
  }
  if (w->st) weights_stream_unit(w->st, i, out);
}

/* The digest of a file's bytes read again with pread, into c. */
static int hash_file(const char *path, uint64_t expect, pw_sha256_ctx *c, char *err) {
  reader r;
  int rc = weights_reader_open(&r, path, WEIGHTS_IO_PREAD, err);
  if (rc) return rc;
  if (r.size != expect) {
    weights_reader_close(&r);
    return pw_seterr(err, PW_EIO, "%s: the file changed size since it was loaded", path);
  }
  uint8_t *buf = malloc((size_t)READ_PIECE);
  if (!buf) rc = pw_seterr(err, PW_ENOMEM, "out of memory");
  for (uint64_t off = 0; !rc && off < r.size; off += READ_PIECE) {
    const uint64_t n = r.size - off < READ_PIECE ? r.size - off : READ_PIECE;
    if (!(rc = weights_reader_read(&r, off, n, buf, err))) pw_sha256_update(c, buf, (size_t)n);
  }
  free(buf);
  weights_reader_close(&r);
  return rc;
}

int weights_sha256(const weights *w, uint8_t dig[32], char *err) {
  if (w->sub) {
    /* a split model: the digest of its parts' bytes in order */
    pw_sha256_ctx *c = pw_sha256_begin();
    if (!c) return pw_seterr(err, PW_ENOMEM, "out of memory");
    int rc = 0;
    for (int i = 0; i < w->n_sub && !rc; i++) rc = hash_file(w->sub_path[i], w->sub[i]->info.file_bytes, c, err);
    if (rc) pw_sha256_free(c);
    else pw_sha256_end(c, dig);
    return rc;
  }
  if (!w->st) {
    pw_sha256(gguf_base(w->f), (size_t)gguf_size(w->f), dig);
    return 0;
  }
  /* not all resident: the same bytes again from the file, which must
   * still be the file that was opened */
  reader r;
  int rc = weights_reader_open(&r, w->path, WEIGHTS_IO_PREAD, err);
  if (rc) return rc;
  if (r.size != gguf_size(w->f)) {
    weights_reader_close(&r);
    return pw_seterr(err, PW_EIO, "%s: the file changed size since it was loaded", w->path);
  }
  uint8_t *buf = malloc((size_t)READ_PIECE);
  pw_sha256_ctx *c = pw_sha256_begin();
  if (!buf || !c) rc = pw_seterr(err, PW_ENOMEM, "out of memory");
  for (uint64_t off = 0; !rc && off < r.size; off += READ_PIECE) {
    const uint64_t n = r.size - off < READ_PIECE ? r.size - off : READ_PIECE;
    if (!(rc = weights_reader_read(&r, off, n, buf, err))) pw_sha256_update(c, buf, (size_t)n);
  }
  if (c) {
    if (!rc) pw_sha256_end(c, dig); /* frees c */
    else pw_sha256_free(c);
  }
  free(buf);
  weights_reader_close(&r);
  return rc;
}

/* ---- page cache control -------------------------------------------------------------- */

/* The files of path: its split parts (owned names, *n of them), or NULL
 * and *n = 0 for an ordinary file (or one that is no GGUF). */
static char **parts_of(const char *path, int *n) {
  gguf_file *f = NULL, **parts = NULL;
  char **names = NULL, e[PW_ERRMAX];
  *n = 0;
  if (gguf_open_file(path, &f, e)) return NULL;
  if (gguf_split_open_parts(path, f, &parts, &names, n, e)) *n = 0;
  free(parts);
  gguf_close(f);
  return names;
}

static int drop_one(const char *path, char *err);
static int cached_one(const char *path, uint64_t *cached, uint64_t *size, char *err);

int weights_drop_cache(const char *path, char *err) {
  int n = 0, rc = 0;
  char **names = parts_of(path, &n);
  if (!names) return drop_one(path, err);
  for (int i = 0; i < n && !rc; i++) rc = drop_one(names[i], err);
  gguf_split_free_names(names, n);
  return rc;
}

int weights_cached_bytes(const char *path, uint64_t *cached, uint64_t *size, char *err) {
  int n = 0, rc = 0;
  char **names = parts_of(path, &n);
  if (!names) return cached_one(path, cached, size, err);
  *cached = *size = 0;
  for (int i = 0; i < n && !rc; i++) {
    uint64_t c = 0, z = 0;
    rc = cached_one(names[i], &c, &z, err);
    *cached += c;
    *size += z;
  }
  gguf_split_free_names(names, n);
  return rc;
}

static int drop_one(const char *path, char *err) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return pw_seterr(err, PW_EIO, "%s: %s", path, strerror(errno));
  int e = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  close(fd);
  if (e) return pw_seterr(err, PW_EIO, "%s: posix_fadvise(DONTNEED): %s", path, strerror(e));
  return 0;
}

static int cached_one(const char *path, uint64_t *cached, uint64_t *size, char *err) {
  *cached = *size = 0;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return pw_seterr(err, PW_EIO, "%s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st)) {
    close(fd);
    return pw_seterr(err, PW_EIO, "%s: %s", path, strerror(errno));
  }
  *size = (uint64_t)st.st_size;
  if (st.st_size == 0) {
    close(fd);
    return 0;
  }
  void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (m == MAP_FAILED) return pw_seterr(err, PW_EIO, "%s: mmap: %s", path, strerror(errno));
  const long pg = sysconf(_SC_PAGESIZE) > 0 ? sysconf(_SC_PAGESIZE) : 4096;
  const size_t np = ((size_t)st.st_size + (size_t)pg - 1) / (size_t)pg;
  unsigned char *vec = malloc(np);
  int rc = 0;
  if (!vec) rc = pw_seterr(err, PW_ENOMEM, "out of memory");
  else if (mincore(m, (size_t)st.st_size, vec)) rc = pw_seterr(err, PW_EIO, "%s: mincore: %s", path, strerror(errno));
  else {
    uint64_t n = 0;
    for (size_t i = 0; i < np; i++) n += vec[i] & 1;
    *cached = n * (uint64_t)pg;
    if (*cached > *size) *cached = *size;
  }
  free(vec);
  munmap(m, (size_t)st.st_size);
  return rc;
}

/* ---- split models --------------------------------------------------------------------- */

static weights *sub_of(const weights *w, int g, int *local) {
  for (int i = w->n_sub - 1; i >= 0; i--)
    if (w->sub[i]->st && g >= w->ubase[i]) {
      *local = g - w->ubase[i];
      return w->sub[i];
    }
  return NULL;
}

static int split_acquire(weights *w, int g, char *err) {
  if (g >= w->n_gunits) {
    const int *m = &w->comp[(size_t)(g - w->n_gunits) * (size_t)w->n_sub];
    for (int k = 0; k < w->n_sub && m[k] >= 0; k++) {
      int rc = split_acquire(w, m[k], err);
      if (rc) {
        while (k-- > 0) weights_release(w, m[k]);
        return rc;
      }
    }
    return 0;
  }
  int u;
  weights *p = sub_of(w, g, &u);
  return p ? weights_stream_acquire(p->st, u, err) : 0;
}

/* The units of global id g (a composite's members, or g itself) into m;
 * returns their count. */
static int members(const weights *w, int g, int *m) {
  if (g < 0) return 0;
  if (g < w->n_gunits) {
    m[0] = g;
    return 1;
  }
  const int *c = &w->comp[(size_t)(g - w->n_gunits) * (size_t)w->n_sub];
  int k = 0;
  while (k < w->n_sub && c[k] >= 0) m[k] = c[k], k++;
  return k;
}

/* Each part's stream reads ahead in its own pass order; across a part
 * boundary nobody would: when layer il is taken, start the units of what
 * comes next (layer il + 1, or the output rows after the last layer) that
 * lie in a part layer il has no unit in. */
static void split_read_ahead(weights *w, int il) {
  int cur[64], nxt[64], nc, nn = 0;
  if (w->n_sub > 64 || !w->layer_g) return;
  nc = members(w, w->layer_g[il], cur);
  if (il + 1 < w->n_layer) {
    nn = members(w, w->layer_g[il + 1], nxt);
  } else {
    const weights_rows *o = w->tr[1].rows.n ? &w->tr[1].rows : &w->tr[0].rows;
    if (o->n) nn = members(w, o->unit[0], nxt);
  }
  for (int j = 0; j < nn; j++) {
    int u;
    weights *p = sub_of(w, nxt[j], &u);
    bool same = false;
    for (int i = 0; i < nc && !same; i++) {
      int v;
      same = sub_of(w, cur[i], &v) == p;
    }
    if (p && !same) weights_stream_prefetch(p->st, u);
  }
}

static void split_release(weights *w, int g) {
  if (g >= w->n_gunits) {
    const int *m = &w->comp[(size_t)(g - w->n_gunits) * (size_t)w->n_sub];
    for (int k = 0; k < w->n_sub && m[k] >= 0; k++) split_release(w, m[k]);
    return;
  }
  int u;
  weights *p = sub_of(w, g, &u);
  if (p) weights_stream_release(p->st, u);
}

/* The units of a streamed split: one id sequence, the layers' (composite
 * where a layer has units in several parts), the matrices' row pieces. */
static int split_units(weights *w, char *err) {
  int n = 0;
  for (int i = 0; i < w->n_sub; i++) {
    w->ubase[i] = n;
    weights_budget_info bi;
    if (weights_get_budget(w->sub[i], &bi)) {
      weights_stream_offset_units(w->sub[i]->st, n);
      n += bi.n_units;
    }
  }
  w->n_gunits = n;
  if (w->n_layer > 0) {
    w->layer_g = malloc((size_t)w->n_layer * sizeof *w->layer_g);
    w->comp = malloc((size_t)w->n_layer * (size_t)w->n_sub * sizeof *w->comp);
    if (!w->layer_g || !w->comp) return pw_seterr(err, PW_ENOMEM, "out of memory");
  }
  for (int il = 0; il < w->n_layer; il++) {
    int *m = &w->comp[(size_t)w->n_comp * (size_t)w->n_sub], k = 0;
    for (int i = 0; i < w->n_sub; i++) {
      const int u = w->sub[i]->st ? weights_stream_layer_unit(w->sub[i]->st, il) : -1;
      if (u >= 0) m[k++] = w->ubase[i] + u;
    }
    for (int j = k; j < w->n_sub; j++) m[j] = -1;
    w->layer_g[il] = k == 0 ? -1 : k == 1 ? m[0] : w->n_gunits + w->n_comp++;
  }
  if (!(w->g_layer = malloc(((size_t)w->n_gunits + (size_t)w->n_comp + 1) * sizeof *w->g_layer)))
    return pw_seterr(err, PW_ENOMEM, "out of memory");
  for (int g = 0; g < w->n_gunits + w->n_comp; g++) w->g_layer[g] = -1;
  for (int il = 0; il < w->n_layer; il++)
    if (w->layer_g[il] >= 0) w->g_layer[w->layer_g[il]] = il;
  static const char *const mats[2] = {"token_embd.weight", "output.weight"};
  for (int t = 0; t < 2; t++) {
    w->tr[t].name = mats[t];
    for (int i = 0; i < w->n_sub; i++) {
      weights_rows r;
      weights_tensor_rows(w->sub[i], mats[t], &r);
      if (r.n > 0) w->tr[t].rows = r; /* unit ids already offset */
    }
  }
  return 0;
}

static int open_split(weights *w, char **names, int n, int n_layer, const weights_opts *o, char *err) {
  int rc = 0;
  w->sub_path = names;
  w->n_sub = n;
  w->n_layer = n_layer > 0 ? n_layer : 0;
  uint64_t *size = calloc((size_t)n, sizeof *size), *min = calloc((size_t)n, sizeof *min);
  gguf_file **fs = calloc((size_t)n, sizeof *fs);
  if (!(w->sub = calloc((size_t)n, sizeof *w->sub)) || !(w->ubase = calloc((size_t)n, sizeof *w->ubase)) || !size ||
      !min || !fs) {
    rc = pw_seterr(err, PW_ENOMEM, "out of memory");
    goto done;
  }
  uint64_t total = 0;
  for (int i = 0; i < n; i++) {
    struct stat st;
    if (stat(names[i], &st)) {
      rc = pw_seterr(err, PW_EIO, "%s: %s", names[i], strerror(errno));
      goto done;
    }
    size[i] = (uint64_t)st.st_size;
    total += size[i];
  }
  uint64_t budget = o->mem_budget;
  if (!budget && o->mem_budget_frac > 0) budget = (uint64_t)(o->mem_budget_frac * (double)total);
  weights_opts po = *o;
  po.mem_budget = 0;
  po.mem_budget_frac = 0;
  if (budget && budget < total) {
    /* one budget shared by the parts: each its minimum, the rest by size */
    uint64_t sum_min = 0;
    for (int i = 0; i < n; i++) {
      wstream *s = NULL;
      gguf_file *f = NULL;
      char e2[PW_ERRMAX];
      rc = weights_stream_open(names[i], o, 1, n_layer, &s, &f, &min[i], e2);
      weights_stream_close(s);
      if (rc == 1) min[i] = 0, rc = 0; /* (a part of fewer bytes than a page) */
      if (rc && !min[i]) {
        pw_seterr(err, rc, "%s", e2);
        goto done;
      }
      rc = 0;
      sum_min += min[i];
    }
    w->min_sum = sum_min;
    if (budget < sum_min) {
      rc = pw_seterr(err, PW_EINVAL,
                     "memory budget of %.1f MiB is below this %d-part split model's minimum of %.1f MiB (the "
                     "sum of its parts' minimums)",
                     budget / 1048576.0, n, sum_min / 1048576.0);
      goto done;
    }
    for (int i = 0; i < n; i++) {
      if ((rc = abandoned(o, names[i], err))) goto done;
      const double share = (double)(budget - sum_min) * ((double)size[i] / (double)total);
      po.mem_budget = min[i] + (uint64_t)share;
      if (!po.mem_budget) po.mem_budget = 1;
      if ((rc = open_one(names[i], &po, n_layer, &w->sub[i], err))) goto done;
    }
  } else {
    for (int i = 0; i < n; i++)
      if ((rc = abandoned(o, names[i], err)) || (rc = open_one(names[i], &po, n_layer, &w->sub[i], err))) goto done;
  }
  for (int i = 0; i < n; i++) {
    fs[i] = w->sub[i]->f;
    const weights_info *pi = &w->sub[i]->info;
    w->info.file_bytes += pi->file_bytes;
    w->info.bytes += pi->bytes;
    w->info.locked = i == 0 ? pi->locked : w->info.locked && pi->locked;
    w->res.bytes += w->sub[i]->res.bytes;
    w->res.huge_bytes = i == 0 ? w->sub[i]->res.huge_bytes
                        : w->res.huge_bytes < 0 || w->sub[i]->res.huge_bytes < 0 ? -1
                                                                                 : w->res.huge_bytes + w->sub[i]->res.huge_bytes;
    w->res.refreshed |= w->sub[i]->res.refreshed;
  }
  if ((rc = gguf_merge(fs, n, 0, (const char *const *)names, &w->f, err))) goto done;
  rc = split_units(w, err);
done:
  free(size);
  free(min);
  free(fs);
  return rc;
}

int weights_open(const char *path, const weights_opts *o, weights **out, char *err) {
  *out = NULL;
  const weights_opts def = {0};
  if (!o) o = &def;
  /* A split model is known by its first part's keys; an encrypted
   * container is not GGUF (open_one refuses a split inside one). */
  gguf_file *hdr = NULL, **parts = NULL;
  char **names = NULL;
  int n = 0;
  char e2[PW_ERRMAX];
  if (gguf_open_file(path, &hdr, e2) == 0) {
    int rc = gguf_split_open_parts(path, hdr, &parts, &names, &n, err);
    free(parts);
    int n_layer = -1;
    char arch[64], key[96];
    uint32_t nl = 0;
    if (n > 0 && gguf_get_cstr(hdr, "general.architecture", arch, sizeof arch)) {
      snprintf(key, sizeof key, "%s.block_count", arch);
      if (gguf_get_u32(hdr, key, &nl) && nl <= 4096) n_layer = (int)nl;
    }
    gguf_close(hdr);
    if (rc) return rc;
    if (n > 0) {
      weights *w = calloc(1, sizeof *w);
      if (!w || !(w->path = strdup(path))) {
        free(w);
        gguf_split_free_names(names, n);
        return pw_seterr(err, PW_ENOMEM, "out of memory");
      }
      const double t0 = pw_now_s();
      w->info.io = o->io;
      rc = open_split(w, names, n, n_layer < 0 ? 0 : n_layer, o, err); /* w owns names now */
      if (rc) {
        weights_close(w);
        return rc;
      }
      w->info.read_s = pw_now_s() - t0;
      *out = w;
      return 0;
    }
  }
  return open_one(path, o, -1, out, err);
}
