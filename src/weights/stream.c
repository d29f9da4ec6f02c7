/* stream.c - memory budgets: which parts of a weights file stay resident,
 * and the reader thread that streams the others in ahead of use (see
 * weights.h for the model). Not here: the read strategies' reads
 * (weights.c), what the tensors mean (model/).
 *
 * Address layout. Every tensor keeps the address it has in a whole-file
 * layout for its life: with mmap it is the file's mapping; with pread and
 * direct it is an anonymous range of the file's size, reserved PROT_NONE,
 * whose resident parts are read into place. A unit's own pages [a, b) are
 * the whole pages inside its bytes; pages shared with a neighbour belong to
 * the base and stay resident, so mapping a unit in or out never touches
 * bytes another unit is using.
 *
 * The pool (pread/direct) is a memfd of pool_bytes, cut into chunks. Each
 * chunk is mapped exactly once at all times - in the spare view while
 * free, at its unit's place while in use - so the process's RSS shows the
 * pool whole, and the budget a test measures is the memory really held. */
#include "weights/weights_int.h"

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

enum { U_ABSENT, U_LOADING, U_READY, U_FAILED };

typedef struct unit {
  char name[48];
  uint64_t lo, hi;   /* file bytes of its tensors or rows */
  uint64_t a, b;     /* its own pages, page-aligned, a < b */
  uint64_t need;     /* pool bytes it takes when resident */
  bool pinned;
  int state;
  int refs;
  bool fresh;        /* read since its last use: that use is no hit */
  uint64_t last, loads, hits;
  uint32_t *chunks;  /* pread/direct: pool chunk of each chunk-sized piece of [a, b) */
  int next;          /* the unit the pass uses after it (-1: none) */
  char err[PW_ERRMAX];
} unit;

typedef struct tpieces {
  const char *name; /* the tensor's name (view into the gguf) */
  int n;
  int64_t *row0;    /* [n + 1] */
  int *unit;        /* [n] */
} tpieces;

struct wstream {
  int io;
  reader r;
  char *path;
  gguf_file *f;
  uint8_t *va;       /* first byte of the whole-file layout */
  size_t va_len;     /* pread/direct: the reserved range (page-rounded file) */
  uint64_t page, chunk;
  unit *u;
  int n_units;
  int *layer_unit;   /* [n_layer] */
  int n_layer;
  int n_layer_hint;  /* >= 0: the model's layer count (a split part other
                      * than the first has no metadata to read it from) */
  tpieces tp[2];     /* token_embd.weight, output.weight */
  int n_tp;
  int tp_embd, tp_out; /* their index in tp, or -1 */
  int memfd;
  uint8_t *spare;    /* spare view of the pool: chunk i at spare + i * chunk */
  uint32_t *free_c;  /* stack of free chunks */
  uint32_t n_free, n_chunks;
  uint64_t pool_used; /* mmap: bytes of the resident streamed units */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_t th;
  bool th_on, stop;
  int *q;            /* FIFO of units to read */
  int q_head, q_len;
  uint64_t clock;
  weights_budget_info bi;
};

/* ---- parsing the budget ------------------------------------------------------ */

int weights_residency_parse(const char *s) {
  if (!strcmp(s, "lru")) return WEIGHTS_RES_LRU;
  if (!strcmp(s, "lfru")) return WEIGHTS_RES_LFRU;
  return -1;
}

const char *weights_residency_name(int p) { return p == WEIGHTS_RES_LFRU ? "lfru" : "lru"; }

int weights_budget_parse(const char *s, uint64_t *bytes, double *frac, char *err) {
  *bytes = 0;
  *frac = 0;
  char *end = NULL;
  errno = 0;
  const double v = strtod(s, &end);
  if (end == s || errno || !(v > 0) || v > 1e18)
    return pw_seterr(err, PW_EINVAL, "memory budget '%s': expected a positive size (e.g. 512M, 2G, 25%%)", s);
  double mul = 1;
  if (*end == '%') {
    if (end[1] || v > 100)
      return pw_seterr(err, PW_EINVAL, "memory budget '%s': a percentage is 0 < P <= 100 of the weights", s);
    *frac = v / 100.0;
    return 0;
  }
  switch (*end) {
    case 0: break;
    case 'k': case 'K': mul = 1024.0; end++; break;
    case 'm': case 'M': mul = 1048576.0; end++; break;
    case 'g': case 'G': mul = 1073741824.0; end++; break;
    case 't': case 'T': mul = 1099511627776.0; end++; break;
    default: end = (char *)"?";
  }
  if ((*end == 'i' || *end == 'B') && mul > 1) end += *end == 'i' && end[1] == 'B' ? 2 : 1;
  if (*end || v * mul < 1 || v * mul > 1.8e19)
    return pw_seterr(err, PW_EINVAL, "memory budget '%s': expected bytes with an optional K, M, G or T suffix, or P%%", s);
  *bytes = (uint64_t)(v * mul);
  return 0;
}

/* ---- planning ------------------------------------------------------------------ */

static uint64_t up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }
static uint64_t down(uint64_t x, uint64_t a) { return x / a * a; }

static uint64_t t_off(const wstream *s, const gguf_tensor *t) {
  return (uint64_t)((const uint8_t *)t->data - (const uint8_t *)gguf_base(s->f));
}

static int add_unit(wstream *s, const char *name, uint64_t lo, uint64_t hi) {
  unit *u = &s->u[s->n_units];
  memset(u, 0, sizeof *u);
  snprintf(u->name, sizeof u->name, "%s", name);
  u->lo = lo;
  u->hi = hi;
  u->a = up(lo, s->page);
  u->b = down(hi, s->page);
  u->next = -1;
  if (u->a >= u->b) return -1; /* all of it on shared pages: base */
  return s->n_units++;
}

/* Row pieces of a matrix of about `piece` bytes each (one piece if smaller). */
static int plan_pieces(wstream *s, tpieces *tp, const gguf_tensor *t, uint64_t piece, char *err) {
  const uint64_t off = t_off(s, t);
  int64_t rows = t->n_dims == 2 ? (int64_t)t->ne[1] : 1;
  uint64_t row_bytes = t->nbytes / (uint64_t)rows;
  if (row_bytes * (uint64_t)rows != t->nbytes) rows = 1, row_bytes = t->nbytes;
  int64_t per = (int64_t)(piece / row_bytes);
  if (per < (rows + 3999) / 4000) per = (rows + 3999) / 4000; /* at most 4000 pieces (s->u's room) */
  if (per < 1) per = 1;
  const int n = (int)((rows + per - 1) / per);
  const int first = s->n_units;
  tp->row0 = calloc((size_t)n + 1, sizeof *tp->row0);
  tp->unit = calloc((size_t)n, sizeof *tp->unit);
  if (!tp->row0 || !tp->unit) return pw_seterr(err, PW_ENOMEM, "out of memory");
  for (int k = 0; k < n; k++) {
    const int64_t r0 = (int64_t)k * per, r1 = r0 + per < rows ? r0 + per : rows;
    char nm[48];
    snprintf(nm, sizeof nm, "%.*s[%lld:%lld)", (int)(t->name.len < 24 ? t->name.len : 24), t->name.ptr,
             (long long)r0, (long long)r1);
    tp->row0[k] = r0;
    tp->row0[k + 1] = r1;
    tp->unit[k] = add_unit(s, nm, off + (uint64_t)r0 * row_bytes, off + (uint64_t)r1 * row_bytes);
    if (tp->unit[k] < 0) { /* a piece that small: the tensor stays resident */
      s->n_units = first;
      tp->n = 0;
      return 0;
    }
  }
  tp->n = n;
  return 0;
}

static uint64_t max_need(const wstream *s) {
  uint64_t m = 0;
  for (int i = 0; i < s->n_units; i++)
    if (!s->u[i].pinned && s->u[i].need > m) m = s->u[i].need;
  return m;
}

static int plan(wstream *s, uint64_t budget, char *err) {
  const gguf_file *f = s->f;
  char arch[64] = "", key[96];
  uint32_t n_layer = 0;
  if (s->n_layer_hint >= 0) {
    n_layer = (uint32_t)s->n_layer_hint;
  } else if (gguf_get_cstr(f, "general.architecture", arch, sizeof arch)) {
    snprintf(key, sizeof key, "%s.block_count", arch);
    gguf_get_u32(f, key, &n_layer);
  }
  const uint64_t nt = gguf_n_tensors(f);
  uint64_t *lo = calloc(n_layer + 1, sizeof *lo), *hi = calloc(n_layer + 1, sizeof *hi);
  s->layer_unit = calloc(n_layer + 1, sizeof *s->layer_unit);
  if (!lo || !hi || !s->layer_unit) {
    free(lo);
    free(hi);
    return pw_seterr(err, PW_ENOMEM, "out of memory");
  }
  if (n_layer > 4096) {
    free(lo);
    free(hi);
    return pw_seterr(err, PW_EFORMAT, "%s: %u layers (at most 4096 stream)", s->path, n_layer);
  }
  s->n_layer = (int)n_layer;
  for (uint32_t l = 0; l < n_layer; l++) lo[l] = UINT64_MAX;
  const gguf_tensor *embd = NULL, *outp = NULL;
  uint64_t tensor_bytes = 0;
  for (uint64_t i = 0; i < nt; i++) {
    const gguf_tensor *t = gguf_tensor_at(f, i);
    tensor_bytes += t->nbytes;
    unsigned l;
    int k = 0;
    char nm[80];
    snprintf(nm, sizeof nm, "%.*s", (int)(t->name.len < 79 ? t->name.len : 79), t->name.ptr);
    if (sscanf(nm, "blk.%u.%n", &l, &k) == 1 && k > 0 && l < n_layer) {
      const uint64_t o = t_off(s, t);
      if (o < lo[l]) lo[l] = o;
      if (o + t->nbytes > hi[l]) hi[l] = o + t->nbytes;
    } else if (!strcmp(nm, "token_embd.weight")) {
      embd = t;
    } else if (!strcmp(nm, "output.weight")) {
      outp = t;
    }
  }
  /* a layer streams as one range: no other tensor may sit inside it */
  uint64_t piece = 0;
  for (uint32_t l = 0; l < n_layer; l++) {
    if (lo[l] == UINT64_MAX) continue;
    for (uint64_t i = 0; i < nt; i++) {
      const gguf_tensor *t = gguf_tensor_at(f, i);
      const uint64_t o = t_off(s, t);
      unsigned tl;
      int k = 0;
      char nm[80];
      snprintf(nm, sizeof nm, "%.*s", (int)(t->name.len < 79 ? t->name.len : 79), t->name.ptr);
      const bool own = sscanf(nm, "blk.%u.%n", &tl, &k) == 1 && k > 0 && tl == l;
      if (!own && o < hi[l] && o + t->nbytes > lo[l]) {
        free(lo);
        free(hi);
        return pw_seterr(err, PW_EUNSUPPORTED,
                         "%s: cannot stream under a memory budget: tensor %s lies among layer %u's tensors in the "
                         "file (a layer must be one contiguous range)",
                         s->path, nm, l);
      }
    }
    if (hi[l] - lo[l] > piece) piece = hi[l] - lo[l];
  }
  s->u = calloc(n_layer + 8200, sizeof *s->u); /* layers, and two matrices of at most 4001 pieces */
  if (!s->u) {
    free(lo);
    free(hi);
    return pw_seterr(err, PW_ENOMEM, "out of memory");
  }
  for (uint32_t l = 0; l < n_layer; l++) {
    char nm[32];
    snprintf(nm, sizeof nm, "blk.%u", l);
    s->layer_unit[l] = lo[l] == UINT64_MAX ? -1 : add_unit(s, nm, lo[l], hi[l]);
  }
  free(lo);
  free(hi);
  if (!piece) piece = gguf_size(f) / 8 + 1;
  /* the big matrices in pieces of about a layer: a layer's worth is what
   * the pool must hold twice anyway; at most 4000 pieces */
  const gguf_tensor *mats[2] = {embd, outp};
  s->tp_embd = s->tp_out = -1;
  for (int i = 0; i < 2; i++) {
    if (!mats[i]) continue;
    *(i == 0 ? &s->tp_embd : &s->tp_out) = s->n_tp;
    uint64_t p = piece;
    if (mats[i]->nbytes / p > 4000) p = mats[i]->nbytes / 4000 + 1;
    tpieces *tp = &s->tp[s->n_tp++];
    tp->name = i == 0 ? "token_embd.weight" : "output.weight";
    int rc = plan_pieces(s, tp, mats[i], p, err);
    if (rc) return rc;
  }
  /* pool granularity: about an eighth of the largest unit, 64 KiB..4 MiB */
  uint64_t big = 0;
  for (int i = 0; i < s->n_units; i++)
    if (s->u[i].b - s->u[i].a > big) big = s->u[i].b - s->u[i].a;
  uint64_t ch = 64 << 10;
  while (ch < (4u << 20) && ch * 8 < big) ch *= 2;
  if (ch < s->page) ch = s->page;
  s->chunk = ch;
  uint64_t own = 0;
  for (int i = 0; i < s->n_units; i++) {
    unit *u = &s->u[i];
    u->need = s->io == WEIGHTS_IO_MMAP ? u->b - u->a : up(u->b - u->a, ch);
    own += u->b - u->a;
  }
  const uint64_t file_pages = up(gguf_size(f), s->page);
  weights_budget_info *bi = &s->bi;
  bi->budget = budget;
  bi->tensor_bytes = tensor_bytes;
  bi->base_bytes = file_pages - own;
  bi->chunk = s->io == WEIGHTS_IO_MMAP ? s->page : ch;
  bi->n_units = s->n_units;
  /* the pool holds the unit in use and the next one being read */
  bi->min_budget = bi->base_bytes + 2 * max_need(s);
  if (budget < bi->min_budget)
    return pw_seterr(err, PW_EINVAL,
                     "memory budget of %.1f MiB is below this model's minimum of %.1f MiB (%.1f MiB always "
                     "resident: header, small tensors and shared pages; plus two buffers of the largest streamed "
                     "unit, %.1f MiB each)",
                     budget / 1048576.0, bi->min_budget / 1048576.0, bi->base_bytes / 1048576.0,
                     max_need(s) / 1048576.0);
  /* Pinned, in order, as the budget allows with the pool at its minimum:
   * the output matrix (every pass reads all of it), the first and last
   * layers, then an untied embedding matrix (a pass reads one row of it
   * per token, so a piece of it streamed costs least). */
  int cand[8192];
  int nc = 0;
  const int first_tp = s->tp_out >= 0 ? s->tp_out : s->tp_embd;
  for (int k = 0; first_tp >= 0 && k < s->tp[first_tp].n && nc < 4000; k++) cand[nc++] = s->tp[first_tp].unit[k];
  if (n_layer > 0 && s->layer_unit[0] >= 0) cand[nc++] = s->layer_unit[0];
  if (n_layer > 1 && s->layer_unit[n_layer - 1] >= 0) cand[nc++] = s->layer_unit[n_layer - 1];
  if (s->tp_out >= 0 && s->tp_embd >= 0)
    for (int k = 0; k < s->tp[s->tp_embd].n && nc < 8100; k++) cand[nc++] = s->tp[s->tp_embd].unit[k];
  uint64_t pinned = 0;
  for (int i = 0; i < nc; i++) {
    unit *u = &s->u[cand[i]];
    u->pinned = true;
    const uint64_t need = bi->base_bytes + pinned + (u->b - u->a) + 2 * max_need(s);
    if (max_need(s) == 0 || need > budget) {
      u->pinned = false;
      continue;
    }
    pinned += u->b - u->a;
  }
  bi->pinned_bytes = pinned;
  bi->pool_bytes = budget - bi->base_bytes - pinned;
  if (s->io != WEIGHTS_IO_MMAP) bi->pool_bytes = down(bi->pool_bytes, ch);
  /* the order a pass uses them: layers, then the output rows */
  int order[8192 + 1024];
  int no = 0;
  for (uint32_t l = 0; l < n_layer; l++)
    if (s->layer_unit[l] >= 0) order[no++] = s->layer_unit[l];
  /* tied models read the embedding matrix as their output */
  const int oi = s->tp_out >= 0 ? s->tp_out : s->tp_embd;
  const tpieces *ot = oi >= 0 ? &s->tp[oi] : NULL;
  if (ot)
    for (int k = 0; k < ot->n && no < (int)(sizeof order / sizeof *order); k++) order[no++] = ot->unit[k];
  for (int i = 0; i < no; i++) s->u[order[i]].next = order[(i + 1) % no];
  return 0;
}

/* ---- residency ---------------------------------------------------------------- */

/* Reads [a, b) of unit u into its place: called by the reader thread with
 * the lock released; the unit is LOADING, so nobody else touches it. */
static int load_unit(wstream *s, unit *u, char *err) {
  if (s->io == WEIGHTS_IO_MMAP) {
    if (madvise(s->va + u->a, (size_t)(u->b - u->a), MADV_POPULATE_READ) == 0) return 0;
    if (errno != EINVAL) return pw_seterr(err, PW_EIO, "%s: reading %s: %s", s->path, u->name, strerror(errno));
    /* kernels before 5.14: fault the pages in by reading them */
    volatile uint8_t sink = 0;
    for (uint64_t o = u->a; o < u->b; o += s->page) sink ^= s->va[o];
    (void)sink;
    return 0;
  }
  const uint64_t n = (u->b - u->a + s->chunk - 1) / s->chunk;
  for (uint64_t j = 0; j < n; j++) {
    const uint64_t o = u->a + j * s->chunk, len = u->b - o < s->chunk ? u->b - o : s->chunk;
    void *p = mmap(s->va + o, (size_t)len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED | MAP_POPULATE, s->memfd,
                   (off_t)u->chunks[j] * (off_t)s->chunk);
    if (p == MAP_FAILED) return pw_seterr(err, PW_ENOMEM, "%s: mapping %s: %s", s->path, u->name, strerror(errno));
    /* now mapped twice: out of the spare view, so it counts once */
    mmap(s->spare + (uint64_t)u->chunks[j] * s->chunk, (size_t)s->chunk, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
    int rc = weights_reader_read(&s->r, o, len, s->va + o, err);
    if (rc) return rc;
  }
  return 0;
}

/* Gives u's pages back (lock held; u READY or FAILED with no users). */
static void evict(wstream *s, unit *u) {
  if (s->io == WEIGHTS_IO_MMAP) {
    madvise(s->va + u->a, (size_t)(u->b - u->a), MADV_DONTNEED);
    s->pool_used -= u->need;
  } else if (u->chunks) {
    const uint64_t n = u->need / s->chunk;
    for (uint64_t j = 0; j < n; j++) {
      const uint32_t c = u->chunks[j];
      if (c == UINT32_MAX) continue;
      mmap(s->spare + (uint64_t)c * s->chunk, (size_t)s->chunk, PROT_READ | PROT_WRITE,
           MAP_SHARED | MAP_FIXED | MAP_POPULATE, s->memfd, (off_t)c * (off_t)s->chunk);
      s->free_c[s->n_free++] = c;
      u->chunks[j] = UINT32_MAX;
    }
    mmap(s->va + u->a, (size_t)(u->b - u->a), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  }
  u->state = U_ABSENT;
}

static uint64_t pool_free(const wstream *s) {
  return s->io == WEIGHTS_IO_MMAP ? s->bi.pool_bytes - s->pool_used : (uint64_t)s->n_free * s->chunk;
}

/* The unit to evict for room, or -1 (lock held). */
static int victim(const wstream *s, int keep) {
  int best = -1;
  for (int i = 0; i < s->n_units; i++) {
    const unit *u = &s->u[i];
    if (i == keep || u->pinned || u->refs || (u->state != U_READY && u->state != U_FAILED)) continue;
    if (best < 0) {
      best = i;
      continue;
    }
    const unit *b = &s->u[best];
    if (u->state == U_FAILED) return i;
    bool better = u->last < b->last;
    /* LFRU: fewest reuse hits first; among equals the most recently used,
     * which a pass's cyclic order needs last - so the units that stay
     * collect hits and keep their place instead of all taking turns */
    if (s->bi.policy == WEIGHTS_RES_LFRU) better = u->hits != b->hits ? u->hits < b->hits : u->last > b->last;
    if (better) best = i;
  }
  return best;
}

/* Makes room for u and queues its read; false when the pool cannot make
 * room now (lock held). */
static bool start_load(wstream *s, int ui) {
  unit *u = &s->u[ui];
  while (pool_free(s) < u->need) {
    const int v = victim(s, ui);
    if (v < 0) return false;
    evict(s, &s->u[v]);
  }
  if (s->io == WEIGHTS_IO_MMAP) {
    s->pool_used += u->need;
  } else {
    const uint64_t n = u->need / s->chunk;
    for (uint64_t j = 0; j < n; j++) u->chunks[j] = s->free_c[--s->n_free];
  }
  u->state = U_LOADING;
  s->q[(s->q_head + s->q_len) % s->n_units] = ui;
  s->q_len++;
  pthread_cond_broadcast(&s->cv);
  return true;
}

static void *reader_main(void *arg) {
  wstream *s = arg;
  pthread_mutex_lock(&s->mu);
  for (;;) {
    while (!s->stop && s->q_len == 0) pthread_cond_wait(&s->cv, &s->mu);
    if (s->stop) break;
    const int ui = s->q[s->q_head];
    s->q_head = (s->q_head + 1) % s->n_units;
    s->q_len--;
    unit *u = &s->u[ui];
    pthread_mutex_unlock(&s->mu);
    const double t0 = pw_now_s();
    char e[PW_ERRMAX];
    const int rc = load_unit(s, u, e);
    const double dt = pw_now_s() - t0;
    pthread_mutex_lock(&s->mu);
    s->bi.read_s += dt;
    if (rc) {
      snprintf(u->err, sizeof u->err, "%s", e);
      u->state = U_FAILED;
    } else {
      u->state = U_READY;
      u->fresh = true;
      u->loads++;
      s->bi.loads++;
      s->bi.read_bytes += u->b - u->a;
    }
    pthread_cond_broadcast(&s->cv);
  }
  pthread_mutex_unlock(&s->mu);
  return NULL;
}

int weights_stream_acquire(wstream *s, int ui, char *err) {
  if (ui < 0 || ui >= s->n_units || s->u[ui].pinned) return 0;
  unit *u = &s->u[ui];
  pthread_mutex_lock(&s->mu);
  u->refs++;
  const double t0 = pw_now_s();
  bool waited = false;
  for (;;) {
    if (u->state == U_READY) break;
    if (u->state == U_FAILED) {
      int rc = pw_seterr(err, PW_EIO, "%s", u->err);
      u->refs--;
      if (!u->refs) evict(s, u); /* the next use reads it again */
      pthread_mutex_unlock(&s->mu);
      return rc;
    }
    if (u->state == U_ABSENT && start_load(s, ui)) continue;
    waited = true;
    pthread_cond_wait(&s->cv, &s->mu);
  }
  if (waited) s->bi.wait_s += pw_now_s() - t0;
  if (!u->fresh) {
    u->hits++;
    s->bi.hits++;
  }
  u->fresh = false;
  u->last = ++s->clock;
  /* read the next streamed unit of the pass while this one is used */
  int nx = u->next;
  for (int k = 0; nx >= 0 && k < s->n_units && s->u[nx].pinned; k++) nx = s->u[nx].next;
  if (nx >= 0 && nx != ui && !s->u[nx].pinned && s->u[nx].state == U_ABSENT) start_load(s, nx);
  pthread_mutex_unlock(&s->mu);
  return 0;
}

void weights_stream_prefetch(wstream *s, int ui) {
  if (ui < 0 || ui >= s->n_units || s->u[ui].pinned) return;
  pthread_mutex_lock(&s->mu);
  if (s->u[ui].state == U_ABSENT) start_load(s, ui); /* no room now: the use reads it */
  pthread_mutex_unlock(&s->mu);
}

void weights_stream_release(wstream *s, int ui) {
  if (ui < 0 || ui >= s->n_units || s->u[ui].pinned) return;
  pthread_mutex_lock(&s->mu);
  PW_ASSERT(s->u[ui].refs > 0);
  if (--s->u[ui].refs == 0) pthread_cond_broadcast(&s->cv);
  pthread_mutex_unlock(&s->mu);
}

/* Copies n bytes at src (inside the file's layout) to dst: from memory
 * when its unit is resident (or it has none), else straight from the file
 * - an embedding row must not cost the read of a whole piece. */
int weights_stream_copy(wstream *s, const void *src, size_t n, void *dst, char *err) {
  const uint64_t off = (uint64_t)((const uint8_t *)src - s->va);
  PW_ASSERT(off <= gguf_size(s->f) && n <= gguf_size(s->f) - off);
  pthread_mutex_lock(&s->mu);
  bool mem = true;
  for (int i = 0; i < s->n_units && mem; i++) {
    const unit *u = &s->u[i];
    if (!u->pinned && u->state != U_READY && off < u->b && off + n > u->a) mem = false;
  }
  if (mem) { /* resident units stay so while the lock is held */
    memcpy(dst, src, n);
    pthread_mutex_unlock(&s->mu);
    return 0;
  }
  pthread_mutex_unlock(&s->mu);
  uint8_t *d = dst;
  while (n > 0) {
    ssize_t got = pread(s->r.fd, d, n, (off_t)off);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return pw_seterr(err, PW_EIO, "%s: read at byte %llu: %s", s->path, (unsigned long long)off, strerror(errno));
    if (got == 0)
      return pw_seterr(err, PW_EFORMAT, "%s: truncated file: it ends before byte %llu", s->path,
                       (unsigned long long)(off + n));
    d += got;
    n -= (size_t)got;
  }
  return 0;
}

/* ---- open / close --------------------------------------------------------------- */

/* Reads the resident parts of [x, y) into the reserved range (pread and
 * direct), or faults them in (mmap). */
static int load_base(wstream *s, uint64_t x, uint64_t y, char *err) {
  if (x >= y) return 0;
  if (s->io == WEIGHTS_IO_MMAP) {
    if (madvise(s->va + x, (size_t)(y - x), MADV_POPULATE_READ) && errno != EINVAL)
      return pw_seterr(err, PW_EIO, "%s: %s", s->path, strerror(errno));
    return 0;
  }
  if (mprotect(s->va + x, (size_t)(up(y, s->page) - x), PROT_READ | PROT_WRITE))
    return pw_seterr(err, PW_ENOMEM, "%s: %s", s->path, strerror(errno));
  if (y > s->r.size) y = s->r.size;
  return weights_reader_read(&s->r, x, y - x, s->va + x, err);
}

static int cmp_unit_a(const void *pa, const void *pb) {
  const unit *a = *(unit *const *)pa, *b = *(unit *const *)pb;
  return a->a < b->a ? -1 : a->a > b->a;
}

static int lock_range(wstream *s, void *p, size_t n, char *err) {
  if (!n || mlock(p, n) == 0) return 0;
  return weights_mlock_error(s->path, n, errno, err);
}

int weights_stream_open(const char *path, const weights_opts *o, uint64_t budget_override, int n_layer,
                        wstream **out, gguf_file **f_out, uint64_t *min_out, char *err) {
  *out = NULL;
  *f_out = NULL;
  if (min_out) *min_out = 0;
  wstream *s = calloc(1, sizeof *s);
  if (!s) return pw_seterr(err, PW_ENOMEM, "out of memory");
  s->io = o->io;
  s->memfd = -1;
  s->r.fd = s->r.dfd = -1;
  s->bi.policy = o->residency;
  s->n_layer_hint = n_layer;
  const long pg = sysconf(_SC_PAGESIZE);
  s->page = pg > 0 ? (uint64_t)pg : 4096;
  if (s->page < 4096) s->page = 4096;
  pthread_mutex_init(&s->mu, NULL);
  pthread_cond_init(&s->cv, NULL);
  int rc;
  gguf_file *hdr = NULL;
  unit **sorted = NULL;
  if (!(s->path = strdup(path))) {
    rc = pw_seterr(err, PW_ENOMEM, "out of memory");
    goto fail;
  }
  /* the directory first, from a mapping (header pages only are read) */
  if ((rc = gguf_open_file(path, s->io == WEIGHTS_IO_MMAP ? &s->f : &hdr, err))) goto fail;
  if (!s->f) s->f = hdr;
  s->va = (uint8_t *)gguf_base(s->f);
  uint64_t budget = budget_override != UINT64_MAX ? budget_override : o->mem_budget;
  if (!budget) budget = (uint64_t)(o->mem_budget_frac * (double)gguf_size(s->f));
  if (budget >= gguf_size(s->f)) { /* it all fits: no streaming */
    if (hdr && s->f == hdr) s->f = NULL;
    gguf_close(hdr);
    weights_stream_close(s);
    return 1;
  }
  if ((rc = plan(s, budget, err))) {
    if (min_out) *min_out = s->bi.min_budget;
    goto fail;
  }
  if ((rc = weights_reader_open(&s->r, path, s->io, err))) goto fail;
  if (s->io != WEIGHTS_IO_MMAP) {
    if (s->r.size != gguf_size(hdr)) {
      rc = pw_seterr(err, PW_EIO, "%s: the file changed size while it was opened", path);
      goto fail;
    }
    s->va_len = (size_t)up(s->r.size, s->page);
    void *va = mmap(NULL, s->va_len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (va == MAP_FAILED) {
      rc = pw_seterr(err, PW_ENOMEM, "%s: cannot reserve %.1f MiB of address space", path, s->va_len / 1048576.0);
      goto fail;
    }
    s->va = va;
    if (o->hugepages && madvise(s->va, s->va_len, MADV_HUGEPAGE)) {
      rc = pw_seterr(err, PW_EUNSUPPORTED, "--hugepages: madvise(MADV_HUGEPAGE): %s", strerror(errno));
      goto fail;
    }
    s->n_chunks = (uint32_t)(s->bi.pool_bytes / s->chunk);
    s->memfd = memfd_create("power-weights-pool", MFD_CLOEXEC);
    if (s->memfd < 0 || ftruncate(s->memfd, (off_t)s->bi.pool_bytes)) {
      rc = pw_seterr(err, PW_ENOMEM, "%s: weights pool of %.1f MiB: %s", path, s->bi.pool_bytes / 1048576.0,
                     strerror(errno));
      goto fail;
    }
    s->spare = mmap(NULL, (size_t)s->bi.pool_bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, s->memfd, 0);
    s->free_c = malloc(((size_t)s->n_chunks + 1) * sizeof *s->free_c);
    if (s->spare == MAP_FAILED || !s->free_c) {
      s->spare = NULL;
      rc = pw_seterr(err, PW_ENOMEM, "%s: weights pool of %.1f MiB: out of memory", path, s->bi.pool_bytes / 1048576.0);
      goto fail;
    }
    for (uint32_t c = 0; c < s->n_chunks; c++) s->free_c[s->n_free++] = s->n_chunks - 1 - c;
    for (int i = 0; i < s->n_units; i++) {
      unit *u = &s->u[i];
      if (u->pinned) continue;
      if (!(u->chunks = malloc((size_t)(u->need / s->chunk) * sizeof *u->chunks))) {
        rc = pw_seterr(err, PW_ENOMEM, "out of memory");
        goto fail;
      }
      for (uint64_t j = 0; j < u->need / s->chunk; j++) u->chunks[j] = UINT32_MAX;
    }
  } else {
    /* no read-ahead or fault-around into the streamed units' pages */
    madvise(s->va, (size_t)gguf_size(s->f), MADV_RANDOM);
  }
  /* the base and the pinned units: everything outside the streamed units */
  if (!(sorted = malloc(((size_t)s->n_units + 1) * sizeof *sorted))) {
    rc = pw_seterr(err, PW_ENOMEM, "out of memory");
    goto fail;
  }
  int ns = 0;
  for (int i = 0; i < s->n_units; i++)
    if (!s->u[i].pinned) sorted[ns++] = &s->u[i];
  qsort(sorted, (size_t)ns, sizeof *sorted, cmp_unit_a);
  uint64_t at = 0;
  const uint64_t end = gguf_size(s->f);
  for (int i = 0; i <= ns; i++) {
    const uint64_t to = i < ns ? sorted[i]->a : end;
    if ((rc = load_base(s, at, to, err))) goto fail;
    if (o->mlock && to > at && (rc = lock_range(s, s->va + at, (size_t)(up(to, s->page) - at), err))) goto fail;
    if (i < ns) at = sorted[i]->b;
  }
  if (o->mlock && s->spare && (rc = lock_range(s, s->spare, (size_t)s->bi.pool_bytes, err))) goto fail;
  for (int i = 0; i < s->n_units; i++)
    if (s->u[i].pinned) s->u[i].state = U_READY;
  if (hdr) {
    /* the directory again, over the bytes now in place */
    if ((rc = gguf_open_mem(s->va, (size_t)s->r.size, &s->f, err))) {
      s->f = NULL;
      goto fail;
    }
    gguf_close(hdr);
    hdr = NULL;
  }
  if (!(s->q = calloc((size_t)s->n_units + 1, sizeof *s->q))) {
    rc = pw_seterr(err, PW_ENOMEM, "out of memory");
    goto fail;
  }
  if (pthread_create(&s->th, NULL, reader_main, s)) {
    rc = pw_seterr(err, PW_ENOMEM, "cannot start the weights reader thread");
    goto fail;
  }
  s->th_on = true;
  free(sorted);
  *out = s;
  *f_out = s->f;
  return 0;
fail:
  free(sorted);
  if (hdr && s->f == hdr) s->f = NULL;
  gguf_close(hdr);
  weights_stream_close(s);
  return rc;
}

void weights_stream_close(wstream *s) {
  if (!s) return;
  if (s->th_on) {
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
  }
  const bool mapped_file = s->io == WEIGHTS_IO_MMAP;
  gguf_close(s->f); /* mmap: the file's mapping goes with it */
  if (!mapped_file && s->va) munmap(s->va, s->va_len);
  if (s->spare) munmap(s->spare, (size_t)s->bi.pool_bytes);
  if (s->memfd >= 0) close(s->memfd);
  weights_reader_close(&s->r);
  for (int i = 0; i < s->n_units; i++) free(s->u[i].chunks);
  for (int i = 0; i < s->n_tp; i++) {
    free(s->tp[i].row0);
    free(s->tp[i].unit);
  }
  free(s->u);
  free(s->layer_unit);
  free(s->free_c);
  free(s->q);
  free(s->path);
  pthread_mutex_destroy(&s->mu);
  pthread_cond_destroy(&s->cv);
  free(s);
}

/* ---- queries -------------------------------------------------------------------- */

bool weights_stream_holds(const wstream *s, const void *p) {
  const uint8_t *b = p;
  return b >= s->va && b < s->va + gguf_size(s->f);
}

void weights_stream_offset_units(wstream *s, int base) {
  for (int i = 0; i < s->n_tp; i++)
    for (int k = 0; k < s->tp[i].n; k++) s->tp[i].unit[k] += base;
}

void weights_stream_tensor_rows(const wstream *s, const char *name, weights_rows *out) {
  memset(out, 0, sizeof *out);
  for (int i = 0; i < s->n_tp; i++)
    if (!strcmp(s->tp[i].name, name)) {
      out->n = s->tp[i].n;
      out->row0 = s->tp[i].row0;
      out->unit = s->tp[i].unit;
      /* pinned pieces need no acquire, but the caller loops the same */
    }
}

int weights_stream_layer_unit(const wstream *s, int il) {
  if (il < 0 || il >= s->n_layer) return -1;
  const int u = s->layer_unit[il];
  return u >= 0 && !s->u[u].pinned ? u : -1;
}

void weights_stream_budget(wstream *s, weights_budget_info *out) {
  pthread_mutex_lock(&s->mu);
  *out = s->bi;
  pthread_mutex_unlock(&s->mu);
}

void weights_stream_unit(wstream *s, int i, weights_unit_info *out) {
  memset(out, 0, sizeof *out);
  if (i < 0 || i >= s->n_units) return;
  pthread_mutex_lock(&s->mu);
  const unit *u = &s->u[i];
  snprintf(out->name, sizeof out->name, "%s", u->name);
  out->bytes = u->b - u->a;
  out->pinned = u->pinned;
  out->resident = u->state == U_READY;
  out->loads = u->loads;
  out->hits = u->hits;
  pthread_mutex_unlock(&s->mu);
}
