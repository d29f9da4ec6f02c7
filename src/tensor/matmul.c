/* matmul.c - the threaded quantized matrix multiply.
 *
 * Two pool runs: (1) quantize X into scratch, split by whole activation
 * blocks; (2) split output rows into contiguous ranges (pw_split), and for
 * each small tile of rows walk the tokens 4 at a time so a weight row is
 * read once per 4 tokens while the 4 quantized token rows stay in L1. The
 * vec_dot contract (traits.h) makes each (row, token) result independent of
 * how tokens are grouped, which is what makes results batch- and
 * thread-count-invariant. */
#include "tensor/matmul.h"

#include "base/error.h"
#include "tensor/dtype.h"
#include "tensor/traits.h"

#include <string.h>

/* rows per tile: 16 weight rows (a few KB each) stay in L2 while the token
 * groups pass over them */
#define ROW_TILE 16
/* below this many activation elements, quantize on the caller: a pool run
 * costs more than the work */
#define QUANT_POOL_MIN 16384

typedef struct {
  const pw_traits *tr;
  const pw_traits *vt; /* vec_dot_type traits */
  const uint8_t *W;
  size_t w_row;  /* bytes per weight row */
  const float *X;
  uint8_t *Xq;   /* quantized activations (or X itself for F32) */
  size_t x_row;  /* bytes per activation row in Xq */
  int64_t n_in, n_out, n_tok;
  float *Y;
} mm_ctx;

size_t pw_matmul_scratch_size(uint32_t wtype, int64_t n_in, int64_t n_tok) {
  const pw_traits *tr = pw_traits_get(wtype);
  PW_ASSERT(tr && tr->vec_dot && n_in >= 0 && n_tok >= 0);
  if (tr->vec_dot_type == PW_DT_F32) return 0;
  return (size_t)pw_dtype_row_size(tr->vec_dot_type, (uint64_t)n_in) * (size_t)n_tok;
}

static void quant_task(void *vctx, int ith, int nth) {
  mm_ctx *c = vctx;
  const int64_t blck = c->vt->blck;
  const int64_t nblk = c->n_tok * c->n_in / blck;
  long lo, hi;
  pw_split((long)nblk, ith, nth, &lo, &hi);
  if (hi <= lo) return;
  /* X and Xq are both contiguous, and blocks never straddle rows because
   * n_in is a multiple of blck, so rows can be treated as one long row. */
  c->vt->from_float(c->X + lo * blck, c->Xq + (size_t)lo * c->vt->type_size, (int64_t)(hi - lo) * blck);
}

static void dot_task(void *vctx, int ith, int nth) {
  mm_ctx *c = vctx;
  long lo, hi;
  pw_split((long)c->n_out, ith, nth, &lo, &hi);
  float out[PW_VEC_DOT_MAX_NX];
  for (long r0 = lo; r0 < hi; r0 += ROW_TILE) {
    const long r1 = r0 + ROW_TILE < hi ? r0 + ROW_TILE : hi;
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

void pw_matmul(pw_pool *pool, uint32_t wtype, const void *W, int64_t n_in, int64_t n_out,
               const float *X, int64_t n_tok, float *Y, void *scratch) {
  const pw_traits *tr = pw_traits_get(wtype);
  PW_ASSERT(tr && tr->vec_dot);
  const pw_traits *vt = pw_traits_get(tr->vec_dot_type);
  PW_ASSERT(vt && n_in > 0 && n_out >= 0 && n_tok >= 0);
  PW_ASSERT(n_in % tr->blck == 0 && n_in % vt->blck == 0);
  if (n_tok == 0 || n_out == 0) return;
  mm_ctx c = {
      .tr = tr,
      .vt = vt,
      .W = W,
      .w_row = (size_t)pw_dtype_row_size(wtype, (uint64_t)n_in),
      .X = X,
      .n_in = n_in,
      .n_out = n_out,
      .n_tok = n_tok,
      .Y = Y,
  };
  if (tr->vec_dot_type == PW_DT_F32) {
    c.Xq = (uint8_t *)(uintptr_t)X; /* read-only use */
    c.x_row = (size_t)n_in * sizeof(float);
  } else {
    PW_ASSERT(scratch != NULL);
    c.Xq = scratch;
    c.x_row = (size_t)pw_dtype_row_size(tr->vec_dot_type, (uint64_t)n_in);
    if (n_tok * n_in < QUANT_POOL_MIN)
      quant_task(&c, 0, 1);
    else
      pw_pool_run(pool, quant_task, &c);
  }
  pw_pool_run(pool, dot_task, &c);
}

void pw_get_row(uint32_t dtype, const void *W, int64_t n_in, int64_t row, float *dst) {
  const pw_traits *tr = pw_traits_get(dtype);
  PW_ASSERT(tr && n_in % tr->blck == 0 && row >= 0);
  const size_t rb = (size_t)pw_dtype_row_size(dtype, (uint64_t)n_in);
  tr->to_float((const uint8_t *)W + (size_t)row * rb, dst, n_in);
}
