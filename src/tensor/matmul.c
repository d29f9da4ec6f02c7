/* matmul.c - the threaded quantized matrix multiply.
 *
 * Every matmul is a set of ops over one X (pw_matmul_ex is one op).
 * (1) X is quantized into scratch: on the caller when small, else in a
 * pool run split by whole activation blocks, or, for passes of 2..8 tokens,
 * by each thread into its own buffer (PRIVATE_X_BYTES); (2) output rows
 * are handed out, by stealing for passes of a few tokens, else in chunks
 * from a shared counter, and for each small tile of rows the tokens are
 * walked PW_VEC_DOT_MAX_NX at a time so a weight row is read once per
 * group while its token rows stay in L1. The
 * vec_dot contract (traits.h) makes each (row, token) result independent of
 * how tokens are grouped, which is what makes results batch- and
 * thread-count-invariant.
 *
 * Weight types whose level has a tiled kernel (traits.h gemm) take the
 * other road: X is packed once per row in the kernel's own layout, and each
 * thread hands its rows, ROW_TILE at a time, with every token to the
 * kernel, which keeps a tile of rows x tokens in registers. */
#include "tensor/matmul.h"

#include "base/error.h"
#include "tensor/dtype.h"
#include "tensor/traits.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

/* rows per tile: 16 weight rows (a few KB each) stay in L2 while the token
 * groups pass over them */
#define ROW_TILE 16
/* weight bytes per row block of a many-token vec_dot pass (see dot_units) */
#define ROW_BLOCK_BYTES (256u << 10)
/* below this many activation elements, quantize on the caller: a pool run
 * costs more than the work */
#define QUANT_POOL_MIN 16384
/* up to this many tokens a matmul is treated as memory-bound */
#define MM_STREAM_TOKENS 8
/* below this many multiply-adds a matmul runs on the calling thread: the
 * pool's hand-off and barrier would cost more than the split saves */
#define MM_POOL_MIN_MACS 262144.0
/* each op's activation rows in a multi-op scratch start on a cache line
 * (as the scratch itself should: the tiles read them with 64-byte loads) */
#define LINE_UP(b) (((b) + 63) / 64 * 64)

/* ---- row stealing for streamed passes ---------------------------------
 * A pass of a few tokens streams the weights from memory, best as one long
 * run per thread, so each thread starts on its own contiguous share of the
 * rows (pw_split). A thread that finishes its share takes the back half of
 * the largest share left, and so on: the threads end together even when
 * one streams slower (a busier core, a worse share of the memory
 * bandwidth), and each still reads long contiguous runs. Which thread
 * computes a row never changes its value. Measured on decode steps
 * alternated in one process against one fixed half per thread, medians,
 * both orders: 0.5B Q8_0 +4..6%, 0.5B Q4_K_M +2..9%, 1B Q4_K_M +2..3%.
 * Shares are cut in tiles of about STEAL_TILE_BYTES of weights (at most
 * ROW_TILE units), and an owner claims STEAL_GRAIN tiles at a time: what a
 * thread has claimed cannot be stolen, so a claim bounds how long the
 * other may wait at the end. With ROW_TILE units for every type, a claim
 * of the 0.5B shape's ffn_down (units of four 4864-wide K-quant rows) was
 * 0.7-1 MB, and its two threads ended up to 20 us apart. */
#define STEAL_MAX 16  /* at most this many threads (else chunks) */
#define STEAL_GRAIN 4 /* tiles an owner claims at a time */
#define STEAL_TILE_BYTES (16u << 10)

typedef struct {
  _Alignas(64) _Atomic uint64_t r; /* a share, in tiles: lo | hi << 32 */
} steal_slot;

typedef struct {
  steal_slot s[STEAL_MAX];
  int nth;
  long rows; /* the units handed out (rows, or units of streams) */
  long tile; /* units per tile */
} steal_set;

static uint64_t share_pack(long lo, long hi) { return (uint64_t)lo | (uint64_t)hi << 32; }
static long share_lo(uint64_t v) { return (long)(uint32_t)v; }
static long share_hi(uint64_t v) { return (long)(v >> 32); }

/* units per tile, for units of unit_bytes */
static long steal_tile(size_t unit_bytes) {
  const long tile = unit_bytes ? (long)(STEAL_TILE_BYTES / unit_bytes) : ROW_TILE;
  return tile < 1 ? 1 : tile > ROW_TILE ? ROW_TILE : tile;
}

/* thread ith's first share of rows units cut in tiles of tile units, in
 * tiles [*lo, *hi) */
static void steal_share(long rows, long tile, int ith, int nth, long *lo, long *hi) {
  pw_split((rows + tile - 1) / tile, ith, nth, lo, hi);
}

/* unit_bytes: the weight bytes of the largest unit handed out */
static void steal_init(steal_set *ss, long rows, int nth, size_t unit_bytes) {
  const long tile = steal_tile(unit_bytes);
  PW_ASSERT(nth <= STEAL_MAX && (rows + tile - 1) / tile <= (long)UINT32_MAX);
  ss->nth = nth;
  ss->rows = rows;
  ss->tile = tile;
  for (int i = 0; i < nth; i++) {
    long lo, hi;
    steal_share(rows, tile, i, nth, &lo, &hi);
    atomic_store_explicit(&ss->s[i].r, share_pack(lo, hi), memory_order_relaxed);
  }
}

/* Thread ith's next rows [*lo, *hi): the front of its own share, else
 * (having stolen the back half of the largest other share) the front of
 * that. Returns 0 when no rows are left to take. The barrier of the pool
 * run orders the results; the shares only decide who computes what. */
static int steal_next(steal_set *ss, int ith, long *lo, long *hi) {
  _Atomic uint64_t *own = &ss->s[ith].r;
  for (;;) {
    uint64_t v = atomic_load_explicit(own, memory_order_relaxed);
    const long a = share_lo(v), b = share_hi(v);
    if (a < b) {
      /* an eighth of what is left, at least STEAL_GRAIN tiles */
      const long g = (b - a) / 8 > STEAL_GRAIN ? (b - a) / 8 : STEAL_GRAIN, e = a + g < b ? a + g : b;
      if (!atomic_compare_exchange_weak_explicit(own, &v, share_pack(e, b), memory_order_relaxed,
                                                 memory_order_relaxed))
        continue;
      *lo = a * ss->tile;
      *hi = e * ss->tile < ss->rows ? e * ss->tile : ss->rows;
      return 1;
    }
    int victim = -1;
    long most = 0;
    uint64_t vv = 0;
    for (int j = 0; j < ss->nth; j++) {
      const uint64_t w = atomic_load_explicit(&ss->s[j].r, memory_order_relaxed);
      if (j != ith && share_hi(w) - share_lo(w) > most) {
        most = share_hi(w) - share_lo(w);
        victim = j;
        vv = w;
      }
    }
    if (victim < 0) return 0;
    const long va = share_lo(vv), vb = share_hi(vv), k = most > 1 ? most / 2 : most;
    if (!atomic_compare_exchange_strong_explicit(&ss->s[victim].r, &vv, share_pack(va, vb - k),
                                                 memory_order_relaxed, memory_order_relaxed))
      continue;
    atomic_store_explicit(own, share_pack(vb - k, vb), memory_order_relaxed);
  }
}

/* rows of a pass of n_tok tokens on nth threads go by stealing (else in
 * chunks) */
static int use_steal(int nth, int64_t n_tok) { return n_tok <= MM_STREAM_TOKENS && nth > 1 && nth <= STEAL_MAX; }

typedef struct {
  const pw_traits *tr;
  int gemm;      /* tr->gemm is used: Xq holds gemm_pack rows */
  unsigned gflags; /* PW_GEMM_* */
  const pw_traits *vt; /* vec_dot_type traits */
  const uint8_t *W;
  size_t w_row;  /* bytes per weight row */
  const float *X;
  uint8_t *Xq;   /* quantized activations (or X itself for F32) */
  size_t x_row;  /* bytes per activation row in Xq */
  int64_t n_in, n_out, n_tok;
  float *Y;
  long seg;          /* > 0: rows go in four streams (see streams_of) */
  long units;        /* what is handed out: rows, or seg rows of streams */
} mm_ctx;

/* ---- four streams ----------------------------------------------------
 * A pass that streams its weights from memory (up to PW_GEMM_STREAM_TOKENS
 * tokens of a gemm type, or one token of a type with vec_dot4) reads them
 * best as four far-apart runs at once: the rows are cut into four equal
 * segments of seg rows, and unit v of the hand-out stands for rows v + k *
 * seg, k < 4, computed together (traits.h); the 0..3 rows past 4 * seg are
 * the first thread's, as plain rows. Each thread still takes contiguous
 * units, so it reads four contiguous runs. Decode steps alternated in one
 * process (medians, both orders): 0.5B Q4_K_M shape +8..13% on two threads
 * and +15% on one (the gemm types), 1B Q4_K_M +3% and +7% (the K-quants).
 * Two runs measured 13% slower than four, eight 16% slower. Close together
 * the runs were slower than one (with 16 rows between them, Q5_0 from
 * memory 14 GB/s against 23), so segments shorter than STREAM_MIN_BYTES
 * keep one run. Which stream computes a row never changes its value. */
#define STREAM_MIN_BYTES (64u << 10)

static long streams_of(const mm_ctx *c) {
  if (c->gflags & PW_GEMM_RESIDENT) return 0;
  if (c->gemm ? c->n_tok > PW_GEMM_STREAM_TOKENS : !c->tr->vec_dot4 || c->n_tok != 1) return 0;
  const long seg = (long)c->n_out / PW_GEMM_STREAMS;
  return (double)seg * (double)c->w_row >= STREAM_MIN_BYTES ? seg : 0;
}

/* sets c->seg and c->units */
static void set_units(mm_ctx *c) {
  c->seg = streams_of(c);
  c->units = c->seg ? c->seg : (long)c->n_out;
}

/* the weight bytes of one unit: a row, or a row of each stream */
static size_t unit_bytes(const mm_ctx *c) { return (c->seg ? PW_GEMM_STREAMS : 1) * c->w_row; }

/* bytes per activation row in scratch (0: X is used as it is) */
static size_t x_row_size(const pw_traits *tr, int64_t n_in) {
  if (tr->gemm) return tr->gemm_xrow(n_in);
  if (tr->vec_dot_type == PW_DT_F32) return 0;
  return (size_t)pw_dtype_row_size(tr->vec_dot_type, (uint64_t)n_in);
}

/* activation rows can be shared between two weight types */
static int same_x(const pw_traits *a, const pw_traits *b) {
  if (a->gemm || b->gemm) return a->gemm && b->gemm && a->gemm_pack == b->gemm_pack;
  return a->vec_dot_type == b->vec_dot_type;
}

size_t pw_matmul_scratch_size(uint32_t wtype, int64_t n_in, int64_t n_tok) {
  const pw_traits *tr = pw_traits_get(wtype);
  PW_ASSERT(tr && tr->vec_dot && n_in >= 0 && n_tok >= 0);
  if (tr->gemm) return tr->gemm_xrow(n_in) * (size_t)n_tok;
  if (tr->vec_dot_type == PW_DT_F32) return 0;
  return (size_t)pw_dtype_row_size(tr->vec_dot_type, (uint64_t)n_in) * (size_t)n_tok;
}

static void quant_task(void *vctx, int ith, int nth) {
  mm_ctx *c = vctx;
  if (c->gemm) { /* whole rows */
    long lo, hi;
    pw_split((long)c->n_tok, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++) c->tr->gemm_pack(c->X + t * c->n_in, c->Xq, c->n_in, (int)t, (int)c->n_tok);
    return;
  }
  const int64_t blck = c->vt->blck;
  const int64_t nblk = c->n_tok * c->n_in / blck;
  long lo, hi;
  pw_split((long)nblk, ith, nth, &lo, &hi);
  if (hi <= lo) return;
  /* X and Xq are both contiguous, and blocks never straddle rows because
   * n_in is a multiple of blck, so rows can be treated as one long row. */
  c->vt->from_float(c->X + lo * blck, c->Xq + (size_t)lo * c->vt->type_size, (int64_t)(hi - lo) * blck);
}

/* Units [lo, hi) of one matrix (rows, or with seg > 0 the rows v + k *
 * seg of each unit v) against every token: for each tile of rows, walk the
 * tokens PW_VEC_DOT_MAX_NX at a time. */
static void dot_units(const mm_ctx *c, long seg, long lo, long hi) {
  if (c->gemm) {
    for (long r0 = lo; r0 < hi; r0 += ROW_TILE) {
      const int nr = (int)(hi - r0 < ROW_TILE ? hi - r0 : ROW_TILE);
      c->tr->gemm(c->n_in, c->W + (size_t)r0 * c->w_row, c->w_row, nr, (size_t)seg, c->Xq, (int)c->n_tok,
                  c->Y + r0, (size_t)c->n_out, c->gflags);
    }
    return;
  }
  float out[PW_VEC_DOT_MAX_NX];
  if (seg) { /* one token, four rows at a time */
    const size_t rs = (size_t)seg * c->w_row;
    for (long v = lo; v < hi; v++) {
      c->tr->vec_dot4(c->n_in, c->W + (size_t)v * c->w_row, rs, c->Xq, out);
      for (int k = 0; k < PW_GEMM_STREAMS; k++) c->Y[v + k * seg] = out[k];
    }
    return;
  }
  /* many tokens: blocks of rows that stay in L2 while every token group
   * passes over them, so the activations are read once per block rather
   * than once per 16 rows (1B-shaped Q4_K_M prefill +6%, alternated) */
  long blk = ROW_TILE;
  if (c->n_tok > PW_VEC_DOT_MAX_NX && (long)(ROW_BLOCK_BYTES / c->w_row) > ROW_TILE)
    blk = (long)(ROW_BLOCK_BYTES / c->w_row) / ROW_TILE * ROW_TILE;
  for (long r0 = lo; r0 < hi; r0 += blk) {
    const long r1 = r0 + blk < hi ? r0 + blk : hi;
    for (int64_t t = 0; t < c->n_tok; t += PW_VEC_DOT_MAX_NX) {
      const int nx = (int)(c->n_tok - t < PW_VEC_DOT_MAX_NX ? c->n_tok - t : PW_VEC_DOT_MAX_NX);
      const uint8_t *xq = c->Xq + (size_t)t * c->x_row;
      for (long r = r0; r < r1; r++) {
        c->tr->vec_dot(c->n_in, c->W + (size_t)r * c->w_row, xq, c->x_row, nx, out);
        for (int j = 0; j < nx; j++) c->Y[(t + j) * c->n_out + r] = out[j];
      }
    }
  }
}

/* Without stealing (many tokens, or more than STEAL_MAX threads), rows are
 * handed out in chunks from a shared counter, so a thread that runs slower
 * takes fewer chunks instead of keeping the others waiting at the barrier
 * (one chunk per thread for a few tokens, which are memory-bound). Which
 * thread computes a row never changes its value. */
static long chunk_rows(long rows, int nth, int64_t n_tok) {
  /* a few tokens stream the weights from memory: one long run per thread
   * keeps the prefetchers on a single sequential stream */
  long c = n_tok <= MM_STREAM_TOKENS ? (rows + nth - 1) / nth : rows / ((long)nth * 8);
  c = (c + ROW_TILE - 1) / ROW_TILE * ROW_TILE;
  return c < ROW_TILE ? ROW_TILE : c;
}

/* the multiply-adds are too few to be worth the pool (PW_MM_SPLIT: split
 * anyway) */
static int on_caller(unsigned hints, int64_t rows, int64_t n_in, int64_t n_tok) {
  return !(hints & PW_MM_SPLIT) && (double)rows * (double)n_in * (double)n_tok < MM_POOL_MIN_MACS;
}

/* the rows past the streams (first thread) */
static void stream_rest(const mm_ctx *c) {
  if (c->seg && c->n_out > PW_GEMM_STREAMS * c->seg) dot_units(c, 0, PW_GEMM_STREAMS * c->seg, (long)c->n_out);
}

void pw_matmul(pw_pool *pool, uint32_t wtype, const void *W, int64_t n_in, int64_t n_out,
               const float *X, int64_t n_tok, float *Y, void *scratch) {
  pw_matmul_ex(pool, wtype, W, n_in, n_out, X, n_tok, Y, scratch, 0);
}

void pw_matmul_ex(pw_pool *pool, uint32_t wtype, const void *W, int64_t n_in, int64_t n_out, const float *X,
                  int64_t n_tok, float *Y, void *scratch, unsigned hints) {
  PW_ASSERT(n_out >= 0);
  const pw_mm_op op = {wtype, W, n_out, Y};
  pw_matmul_multi_ex(pool, &op, 1, n_in, X, n_tok, scratch, hints);
}

/* ---- several matrices over one X ------------------------------------- */

typedef struct {
  mm_ctx mm[PW_MM_MAX_OPS]; /* per op; Xq shared between ops of one vec_dot_type */
  int n_ops;
  int64_t total_rows;       /* sum of n_out */
  long total_units;         /* sum of units */
  _Atomic long next;        /* next row to hand out (multi_dot_task) */
  steal_set *steal;         /* or this hands them out */
  /* quantization jobs: one per distinct vec_dot_type */
  mm_ctx *quant[PW_MM_MAX_OPS];
  int n_quant;
  /* each thread packs X for itself (PRIVATE_X_BYTES): the scratch span
   * the ops' Xq point into, which each thread moves to its own buffer */
  int x_private;
  const uint8_t *x_base;
  size_t x_bytes;
} mm_multi;

static void multi_quant_task(void *vctx, int ith, int nth) {
  mm_multi *m = vctx;
  for (int i = 0; i < m->n_quant; i++) quant_task(m->quant[i], ith, nth);
}

/* units [lo, hi) of the concatenated units of all matrices */
static void multi_units(const mm_multi *m, long lo, long hi) {
  long base = 0;
  for (int k = 0; k < m->n_ops; k++) {
    const mm_ctx *c = &m->mm[k];
    long a = lo - base, b = hi - base;
    base += c->units;
    if (b <= 0 || a >= c->units) continue;
    dot_units(c, c->seg, a < 0 ? 0 : a, b > c->units ? c->units : b);
  }
}

/* A pass of 2..8 tokens whose packed X fits PRIVATE_X_BYTES: each thread
 * packs X itself, into its own stack, as its share starts, instead of the
 * caller packing it into the shared scratch before the run. So nothing is
 * packed serially, and no packed line is written by one core while the
 * other holds it: those stores cost the caller 15-22 us a pass for 8
 * tokens of the 0.5B shape's 896-wide rows, five times the packing itself.
 * 8 sequences decoding together: 0.5B shape +4.7-6.6%, 1B +0.9% (steps
 * alternated, both orders); one token measured 1.4% slower this way and
 * keeps the shared scratch.
 * Every thread packs the same bytes, so no value changes. */
#define PRIVATE_X_BYTES (64u << 10)

static void multi_dot_task(void *vctx, int ith, int nth) {
  mm_multi *m = vctx;
  long lo, hi;
  mm_multi own;
  _Alignas(64) uint8_t xbuf[PRIVATE_X_BYTES];
  if (m->x_private) { /* the ops' packed rows at the same offsets in xbuf */
    own = *m;
    for (int k = 0; k < own.n_ops; k++)
      if (own.mm[k].Xq >= m->x_base && own.mm[k].Xq < m->x_base + m->x_bytes)
        own.mm[k].Xq = xbuf + (own.mm[k].Xq - m->x_base);
    for (int i = 0; i < own.n_quant; i++) own.quant[i] = &own.mm[m->quant[i] - m->mm];
    multi_quant_task(&own, 0, 1);
    m = &own;
  }
  if (ith == 0)
    for (int k = 0; k < m->n_ops; k++) stream_rest(&m->mm[k]);
  if (m->steal) {
    while (steal_next(m->steal, ith, &lo, &hi)) multi_units(m, lo, hi);
    return;
  }
  const long chunk = chunk_rows(m->total_units, nth, m->mm[0].n_tok);
  for (;;) {
    lo = atomic_fetch_add_explicit(&m->next, chunk, memory_order_relaxed);
    if (lo >= m->total_units) break;
    hi = lo + chunk < m->total_units ? lo + chunk : m->total_units;
    multi_units(m, lo, hi);
  }
}

size_t pw_matmul_multi_scratch_size(const pw_mm_op *ops, int n_ops, int64_t n_in, int64_t n_tok) {
  size_t total = 0;
  const pw_traits *seen[PW_MM_MAX_OPS];
  int n_seen = 0;
  PW_ASSERT(n_ops >= 1 && n_ops <= PW_MM_MAX_OPS);
  for (int i = 0; i < n_ops; i++) {
    const pw_traits *tr = pw_traits_get(ops[i].wtype);
    PW_ASSERT(tr && tr->vec_dot);
    int dup = 0;
    for (int j = 0; j < n_seen; j++) dup |= same_x(seen[j], tr);
    if (dup) continue;
    seen[n_seen++] = tr;
    total += LINE_UP(pw_matmul_scratch_size(ops[i].wtype, n_in, n_tok));
  }
  return total;
}

void pw_matmul_multi(pw_pool *pool, const pw_mm_op *ops, int n_ops, int64_t n_in, const float *X, int64_t n_tok,
                     void *scratch) {
  pw_matmul_multi_ex(pool, ops, n_ops, n_in, X, n_tok, scratch, 0);
}

/* the per-op contexts of ops over one X and their units (Xq left unset) */
static void multi_init(mm_multi *m, const pw_mm_op *ops, int n_ops, int64_t n_in, const float *X, int64_t n_tok,
                       unsigned hints) {
  PW_ASSERT(n_ops >= 1 && n_ops <= PW_MM_MAX_OPS && n_in > 0 && n_tok >= 0);
  memset(m, 0, sizeof *m);
  m->n_ops = n_ops;
  for (int i = 0; i < n_ops; i++) {
    mm_ctx *c = &m->mm[i];
    c->tr = pw_traits_get(ops[i].wtype);
    PW_ASSERT(c->tr && c->tr->vec_dot);
    c->vt = pw_traits_get(c->tr->vec_dot_type);
    PW_ASSERT(c->vt && n_in % c->tr->blck == 0 && n_in % c->vt->blck == 0);
    c->W = ops[i].W;
    c->w_row = (size_t)pw_dtype_row_size(ops[i].wtype, (uint64_t)n_in);
    c->X = X;
    c->n_in = n_in;
    c->n_out = ops[i].n_out;
    c->n_tok = n_tok;
    c->Y = ops[i].Y;
    m->total_rows += ops[i].n_out;
    c->gemm = c->tr->gemm != NULL;
    c->gflags = hints & PW_MM_RESIDENT ? PW_GEMM_RESIDENT : 0;
    set_units(c);
    m->total_units += c->units;
  }
}

/* the weight bytes of the largest unit of any op */
static size_t multi_unit_bytes(const mm_multi *m) {
  size_t ub = 0;
  for (int i = 0; i < m->n_ops; i++)
    if (unit_bytes(&m->mm[i]) > ub) ub = unit_bytes(&m->mm[i]);
  return ub;
}

void pw_matmul_multi_ex(pw_pool *pool, const pw_mm_op *ops, int n_ops, int64_t n_in, const float *X, int64_t n_tok,
                        void *scratch, unsigned hints) {
  mm_multi m;
  multi_init(&m, ops, n_ops, n_in, X, n_tok, hints);
  if (n_tok == 0) return;
  uint8_t *next = scratch;
  for (int i = 0; i < n_ops; i++) {
    mm_ctx *c = &m.mm[i];
    if (!c->gemm && c->tr->vec_dot_type == PW_DT_F32) {
      c->Xq = (uint8_t *)(uintptr_t)X;
      c->x_row = (size_t)n_in * sizeof(float);
      continue;
    }
    c->x_row = x_row_size(c->tr, n_in);
    for (int j = 0; j < i; j++)
      if (same_x(m.mm[j].tr, c->tr) && m.mm[j].x_row == c->x_row) c->Xq = m.mm[j].Xq;
    if (!c->Xq) {
      PW_ASSERT(scratch != NULL);
      c->Xq = next;
      next += LINE_UP(c->x_row * (size_t)n_tok);
      m.quant[m.n_quant++] = c;
    }
  }
  const int caller = on_caller(hints, m.total_rows, n_in, n_tok), nth = pool ? pw_pool_size(pool) : 1;
  if (m.n_quant && !caller && n_tok >= 2 && use_steal(nth, n_tok) &&
      (size_t)(next - (uint8_t *)scratch) <= PRIVATE_X_BYTES) {
    m.x_private = 1;
    m.x_base = scratch;
    m.x_bytes = (size_t)(next - (uint8_t *)scratch);
  } else if (m.n_quant) {
    if (n_tok * n_in < QUANT_POOL_MIN) multi_quant_task(&m, 0, 1);
    else pw_pool_run(pool, multi_quant_task, &m);
  }
  if (caller) {
    multi_dot_task(&m, 0, 1);
    return;
  }
  steal_set ss;
  if (use_steal(nth, n_tok)) {
    steal_init(&ss, m.total_units, nth, multi_unit_bytes(&m));
    m.steal = &ss;
  }
  pw_pool_run(pool, multi_dot_task, &m);
}

int pw_matmul_first_spans(const pw_mm_op *ops, int n_ops, int64_t n_in, int64_t n_tok, unsigned hints, int ith,
                          int nth, pw_span *out, int max) {
  mm_multi m;
  multi_init(&m, ops, n_ops, n_in, NULL, n_tok, hints);
  if (n_tok == 0 || !use_steal(nth, n_tok) || ith < 0 || ith >= nth || on_caller(hints, m.total_rows, n_in, n_tok))
    return 0;
  /* the share steal_init gives thread ith */
  const long tile = steal_tile(multi_unit_bytes(&m));
  long lo, hi;
  steal_share(m.total_units, tile, ith, nth, &lo, &hi);
  lo *= tile;
  hi = hi * tile < m.total_units ? hi * tile : m.total_units;
  int n = 0;
  long base = 0;
  for (int i = 0; i < n_ops; i++) {
    const mm_ctx *c = &m.mm[i];
    const long a = lo - base, b = hi - base;
    base += c->units;
    if (b <= 0 || a >= c->units) continue;
    const long u0 = a < 0 ? 0 : a, u1 = b > c->units ? c->units : b;
    for (long k = 0; k < (c->seg ? PW_GEMM_STREAMS : 1) && n < max; k++)
      out[n++] = (pw_span){c->W + (size_t)(u0 + k * c->seg) * c->w_row, (size_t)(u1 - u0) * c->w_row};
  }
  return n;
}

void pw_get_row(uint32_t dtype, const void *W, int64_t n_in, int64_t row, float *dst) {
  const pw_traits *tr = pw_traits_get(dtype);
  PW_ASSERT(tr && n_in % tr->blck == 0 && row >= 0);
  const size_t rb = (size_t)pw_dtype_row_size(dtype, (uint64_t)n_in);
  tr->to_float((const uint8_t *)W + (size_t)row * rb, dst, n_in);
}
