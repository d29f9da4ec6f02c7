/* matmul.h - Y = X * W^T over the worker pool, for every weight dtype, plus
 * single-row dequantization (embedding lookup).
 *
 * Activations are quantized once per call into the weight's vec_dot_type
 * (ggml's recipe, so results track llama.cpp), then output rows are split
 * across the pool. Results are bit-identical for any thread count and any
 * batch size: row t of Y depends only on row t of X and W ("batch
 * invariance"). Not an attention kernel and not a general GEMM: W is always
 * a GGUF weight matrix, X and Y are f32. */
#ifndef PW_TENSOR_MATMUL_H
#define PW_TENSOR_MATMUL_H

#include "base/pool.h"

#include <stddef.h>
#include <stdint.h>

/* Bytes of scratch pw_matmul needs for these shapes (0 for F32 weights).
 * n_in must be a multiple of the weight type's block size (and of 256 for
 * K-quants, 32 for Q4_0..Q8_0). Size it once at load/admission time. */
size_t pw_matmul_scratch_size(uint32_t wtype, int64_t n_in, int64_t n_tok);

/* W: n_out rows of n_in elements of wtype, each pw_dtype_row_size(wtype,
 * n_in) bytes, contiguous (a GGUF [ne0=n_in, ne1=n_out] tensor); borrowed,
 * typically a view into the mmap. X: n_tok rows of n_in floats (borrowed).
 * Y: n_tok rows of n_out floats (caller-owned, written):
 * Y[t*n_out + o] = dot(W row o, X row t). scratch: caller-owned, at least
 * pw_matmul_scratch_size bytes, any alignment but faster 64-byte aligned
 * (may be NULL when that is 0). pool may be NULL (runs on the caller). Y
 * must not alias X.
 * Unsupported types or bad shapes are internal invariant violations
 * (PW_ASSERT): callers validate at load time. */
void pw_matmul(pw_pool *pool, uint32_t wtype, const void *W, int64_t n_in, int64_t n_out,
               const float *X, int64_t n_tok, float *Y, void *scratch);

/* pw_matmul with hints (PW_MM_*); the results are the same for any. */
#define PW_MM_RESIDENT 1u /* the weights are small enough to stay in cache */
#define PW_MM_SPLIT 2u    /* split across the pool even when the work is small
                             (otherwise that runs on the caller) */
void pw_matmul_ex(pw_pool *pool, uint32_t wtype, const void *W, int64_t n_in, int64_t n_out, const float *X,
                  int64_t n_tok, float *Y, void *scratch, unsigned hints);

/* Several matrices over the same X (e.g. Q, K and V; or gate and up), in
 * one pool run: X is quantized once per distinct vec_dot_type and the rows
 * of all matrices are split across the pool together, so small matrices
 * don't each pay a barrier. Each op's Y is exactly what pw_matmul gives. */
typedef struct pw_mm_op {
  uint32_t wtype;
  const void *W;  /* n_out rows of n_in elements (borrowed) */
  int64_t n_out;
  float *Y;       /* n_tok rows of n_out floats (written) */
} pw_mm_op;

#define PW_MM_MAX_OPS 4

size_t pw_matmul_multi_scratch_size(const pw_mm_op *ops, int n_ops, int64_t n_in, int64_t n_tok);
void pw_matmul_multi(pw_pool *pool, const pw_mm_op *ops, int n_ops, int64_t n_in, const float *X, int64_t n_tok,
                     void *scratch);
void pw_matmul_multi_ex(pw_pool *pool, const pw_mm_op *ops, int n_ops, int64_t n_in, const float *X, int64_t n_tok,
                        void *scratch, unsigned hints);

/* The weight spans thread ith of a pool of nth reads first when
 * pw_matmul_multi_ex runs these ops (pw_matmul_ex is one op with the same
 * Y): for a pass of a few tokens, its first share of the rows, one span per
 * stream, at most max. 0 when such a pass does not hand out shares (many
 * tokens, one thread, work too small for the pool). For pw_pool_prefetch:
 * a worker can bring these in while the caller works alone. */
int pw_matmul_first_spans(const pw_mm_op *ops, int n_ops, int64_t n_in, int64_t n_tok, unsigned hints, int ith,
                          int nth, pw_span *out, int max);

/* dst[0..n_in) = row `row` of W dequantized (W, dst as above). */
void pw_get_row(uint32_t dtype, const void *W, int64_t n_in, int64_t row, float *dst);

#endif
