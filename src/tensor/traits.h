/* traits.h - the per-dtype kernel table: how to turn a row of a dtype into
 * floats, how to quantize floats into it, and the dot product of a weight
 * row with an activation row in the weight's vec_dot_type.
 *
 * pw_tensor_init() detects the CPU once and fills one table per
 * implementation level the CPU supports (scalar references; AVX2/FMA/F16C;
 * AVX2 with AVX-VNNI; AVX-512 F/BW/VL/DQ + VNNI on top of AVX2, with a GEMM
 * that also needs VBMI and BITALG) and installs the highest.
 * POWER_NO_SIMD=1 keeps the scalar references;
 * POWER_SIMD=scalar|avx2|avx2vnni|avx512 caps the level (for comparisons). This is not the place for kernels themselves (quants.c,
 * arch/) nor for the matrix multiply (matmul.h). */
#ifndef PW_TENSOR_TRAITS_H
#define PW_TENSOR_TRAITS_H

#include <stddef.h>
#include <stdint.h>

/* n elements (a multiple of the block size); src/dst borrowed. */
typedef void (*pw_to_float_fn)(const void *src, float *dst, int64_t n);
typedef void (*pw_from_float_fn)(const float *src, void *dst, int64_t n);
/* out[j] = dot(w, x + j*x_stride bytes) for j in [0, nx), 1 <= nx <=
 * PW_VEC_DOT_MAX_NX, n
 * elements. Contract relied on by the matmul's batch invariance: out[j] is
 * bit-identical to what a call with nx == 1 on that x row returns, so
 * grouping tokens never changes a result. */
typedef void (*pw_vec_dot_fn)(int64_t n, const void *w, const void *x, size_t x_stride, int nx,
                              float *out);

/* Optional, for the four streams of a one-token pass (matmul.c): out[k]
 * = vec_dot of row w + k * rs (k < 4) with activation row x, the same bits
 * as vec_dot with nx = 1 gives each row. */
typedef void (*pw_vec_dot4_fn)(int64_t n, const void *w, size_t rs, const void *x, float *out);

/* Optional register-tiled matrix multiply (set only where a level has one):
 * the nt activation rows of a pass are first packed with gemm_pack from f32
 * into a level-private layout of nt * gemm_xrow(n) bytes (gemm_pack(x, xp,
 * n, t, nt) packs row t; rows may be packed in any order and by different
 * threads, and the layout may depend on nt; one pack serves every weight
 * type with the same gemm_pack function), then
 *   y[t * ys + r] = dot(W row r, packed row t)  for r < nr, t < nt,
 * W rows w_row bytes apart. Contract relied on by the matmul's batch
 * invariance: each result is bit-identical whatever nr and nt are (the
 * float operations applied to one (row, token) pair never depend on the
 * tile it was computed in). */
typedef size_t (*pw_gemm_xrow_fn)(int64_t n);
typedef void (*pw_gemm_pack_fn)(const float *x, void *xp, int64_t n, int t, int nt);
typedef void (*pw_gemm_fn)(int64_t n, const void *w, size_t w_row, int nr, size_t seg, const void *xp, int nt,
                           float *y, size_t ys, unsigned flags);
/* seg > 0 (only with nt <= PW_GEMM_STREAM_TOKENS): four streams. Each of
 * the nr rows v stands for the four rows v + k * seg, k < 4, computed
 * together, results y[t * ys + v + k * seg]: a pass streaming its weights
 * from memory then reads four far-apart runs at once. */
#define PW_GEMM_STREAMS 4
#define PW_GEMM_STREAM_TOKENS 4
/* gemm flags: the weights are likely cache-resident (a small model), so a
 * single token is better served by wide tiles than by one streamed row at
 * a time. Never changes a result. */
#define PW_GEMM_RESIDENT 1u

/* Rows per pass: a weight block is read and unpacked once per this many
 * activation rows (batched decode, prefill). */
#define PW_VEC_DOT_MAX_NX 8

/* Kernel implementation levels in order of preference: the highest one
 * the CPU has is installed. Each needs AVX2 + FMA + F16C (but scalar);
 * AVX2VNNI and AVX512 are independent of each other (Ice Lake and Cascade
 * Lake have AVX-512 VNNI but not AVX-VNNI; Alder Lake the reverse), so
 * "level >= PW_IMPL_AVX2" means "has the AVX2 kernels" and nothing more is
 * implied by the order. */
enum {
  PW_IMPL_SCALAR = 0,   /* the references */
  PW_IMPL_AVX2 = 1,     /* AVX2 + FMA + F16C */
  PW_IMPL_AVX2VNNI = 2, /* AVX2 + AVX-VNNI (256-bit VEX vpdpbusd/vpdpwssd) */
  PW_IMPL_AVX512 = 3,   /* AVX-512 F/BW/VL/DQ + VNNI (on top of AVX2) */
  PW_IMPL_COUNT
};

typedef struct pw_traits {
  uint32_t dtype;          /* ggml id */
  const char *name;        /* "Q4_K" */
  uint32_t blck;           /* elements per block */
  uint32_t type_size;      /* bytes per block */
  pw_to_float_fn to_float;     /* always set for known types */
  pw_from_float_fn from_float; /* always set for known types */
  pw_vec_dot_fn vec_dot;       /* NULL for activation-only types (Q8_1, Q8_K) */
  uint32_t vec_dot_type;   /* dtype the activation row must be in */
  const char *impl;        /* "scalar", "avx2", "avx2vnni" or "avx512vnni": the level's name */
  pw_gemm_fn gemm;             /* NULL: the matmul uses vec_dot */
  pw_gemm_pack_fn gemm_pack;   /* set with gemm */
  pw_gemm_xrow_fn gemm_xrow;   /* set with gemm */
  pw_vec_dot4_fn vec_dot4;     /* optional: four rows, one token */
} pw_traits;

/* Detects CPU features and fills the table. Thread-safe and idempotent;
 * pw_traits_get calls it, so explicit calls are optional. */
void pw_tensor_init(void);
/* NULL if the id is unknown or has no kernels. The pointer is static. */
const pw_traits *pw_traits_get(uint32_t dtype);
/* The scalar reference table entry (the oracles), regardless of CPU. */
const pw_traits *pw_traits_ref(uint32_t dtype);
/* The table entry of one implementation level (PW_IMPL_*), for tests and
 * benchmarks that compare levels; NULL if the CPU lacks that level, the
 * environment forbids it, or the dtype is unknown. Static pointer. */
const pw_traits *pw_traits_get_impl(uint32_t dtype, int level);
/* 1 when the AVX2/FMA/F16C variants (or better) are installed. */
int pw_tensor_simd(void);
/* The installed level (PW_IMPL_*). */
int pw_tensor_level(void);
/* The installed kernels by name: "scalar", "avx2", "avx2vnni", "avx512",
 * or "avx512-vbmi" (AVX-512 with the VBMI GEMM). Static string. */
const char *pw_tensor_kernels(void);

/* Internal: each kernel family fills the entries it implements. */
void quants_fill_ref(pw_traits *tab);
void quants_fill_avx2(pw_traits *tab);
void quants_fill_avx512(pw_traits *tab);
void gemm_fill_avx2(pw_traits *tab);
void quants_fill_avxvnni(pw_traits *tab);
void gemm_fill_avxvnni(pw_traits *tab);
void gemm_fill_avx512vbmi(pw_traits *tab);

#endif
