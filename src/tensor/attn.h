/* attn.h - single-query attention over an F16 K/V cache.
 *
 * Semantics are llama.cpp's CPU flash attention, so logits agree with it:
 * q is rounded to F16 (the dot-product type of an F16 K), scores are
 * s_p = dot(q, K_p) * scale, and the output is sum_p softmax(s)_p * V_p
 * computed online: a running max M, running sum S, and an accumulator kept
 * in F16 that is rescaled by exp(M_old - M) whenever the max grows.
 *
 * Split attention (flash-decoding): a long prefix is cut into spans of
 * PW_ATTN_SPLIT positions at fixed offsets (0, PW_ATTN_SPLIT, ...), each
 * span runs the same online softmax from an empty state (pw_attn_part_fn,
 * so spans go to different threads), and the spans' states are merged in
 * span order (pw_attn_merge) as llama.cpp merges its KV chunks: in f32,
 * rescaled to the larger max. The cut points depend only on the query's
 * position, never on the thread count or the batch, so results do not
 * either; a prefix of at most PW_ATTN_SPLIT positions is one span and
 * gives exactly the unsplit kernel's bits.
 *
 * Long prefixes. A query that sees more than PW_ATTN_LONG keys (its whole
 * prefix, split or not) takes the long kernels instead (pw_attn_*_long):
 * the semantics of llama.cpp's tiled flash attention, the one it takes for
 * a batch of queries. Keys come in chunks of PW_ATTN_CHUNK at fixed
 * offsets from the first row passed; q stays f32; per chunk its max M_c
 * and the running max M' = max(M, M_c); where M' > M the accumulator and
 * the running sum are multiplied by exp(M - M'); then w_p = exp(s_p - M'),
 * the sum takes the chunk's sum of w_p and an f32 accumulator takes
 * w_p * V_p key by key (one fused multiply-add per element). Whether a
 * query is long depends on its position alone, never on the batch, so a
 * decode step and a prompt give the same bits. Over a long prefix the F16
 * accumulator's rounding (2^-11 per key) adds up while f32 stays exact to
 * a few 1e-7, and its updates take two conversions per element, key and
 * query, most of the time at long contexts: a 16K-deep decode step 1.9x
 * faster, a 64-token chunk at that depth 2.2x (bench_attn, AVX-512 and
 * AVX2 alike).
 * Not here: RoPE, GQA head mapping, masks (callers pass the visible prefix). */
#ifndef PW_TENSOR_ATTN_H
#define PW_TENSOR_ATTN_H

#include <stddef.h>
#include <stdint.h>

/* q: [hd] f32. k, v: n_pos rows of hd F16 values, consecutive rows
 * `stride` elements apart. out: [hd] f32. hd <= PW_ATTN_MAX_HD, n_pos >= 1. */
typedef void (*pw_attn_fn)(const float *q, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos,
                           int hd, float scale, float *out);

#define PW_ATTN_MAX_HD 1024

/* Prefixes longer than this take the long kernels; keys per chunk of
 * their online softmax. */
#define PW_ATTN_LONG 1024
#define PW_ATTN_CHUNK 64

/* nq queries over the same K/V (the query heads of one KV head, for one or
 * several tokens of a sequence): query h is the hd floats at q[h], sees the
 * first n_pos[h] >= 1 rows of K/V, and its output goes to out[h]. Each
 * output is bit-identical to what the single-query kernel of the same
 * level gives for that query alone. Queries are taken PW_ATTN_GROUP_MAX at
 * a time: each K/V row is converted once per group. */
typedef void (*pw_attn_multi_fn)(const float *const *q, const int *n_pos, int nq, const uint16_t *k,
                                 const uint16_t *v, size_t stride, int hd, float scale, float *const *out);

/* 64: nine tokens of a GQA group of 7 per call; a 64-token chunk at 16K
 * depth in bench_attn took about 5% less than with 32 (each call converts
 * K and V once, so fewer calls convert less) */
#define PW_ATTN_GROUP_MAX 64

/* One span of a split: as pw_attn_multi_fn, but out[h] gets the
 * unnormalised accumulator (the f32 values of its F16 entries) and
 * ms[2h], ms[2h + 1] the running max and sum. ms: [2 nq] floats. */
typedef void (*pw_attn_part_fn)(const float *const *q, const int *n_pos, int nq, const uint16_t *k,
                                const uint16_t *v, size_t stride, int hd, float scale, float *const *out, float *ms);

/* Positions per span of the split (a multiple of PW_ATTN_CHUNK, so a
 * span's chunks are the unsplit kernel's). */
#define PW_ATTN_SPLIT 512

/* Spans of a prefix of n_pos positions. */
static inline int pw_attn_spans(int n_pos) { return (n_pos + PW_ATTN_SPLIT - 1) / PW_ATTN_SPLIT; }

/* The merge, one span at a time in span order: the running state (racc:
 * hd floats starting at 0, rms: max and sum starting at -INFINITY, 0)
 * takes in a span's (acc, ms); pw_attn_finish normalises racc in place.
 * Folding spans in any grouping gives the same bits as long as the order
 * is kept. */
void pw_attn_fold(float *racc, float *rms, const float *acc, const float *ms, int hd);
void pw_attn_finish(float *racc, const float *rms, int hd);

/* Attention over a cache whose K and V rows are each F16, Q8_0 or Q4_0,
 * with llama.cpp's semantics for those types: q is converted to K's
 * dot-product type (F16 for F16, Q8_0 for the quantized types) and
 * s_p = vec_dot(K_p, q) * scale; an F16 V is accumulated in F16 as above,
 * a quantized V is converted to f32 and accumulated in f32. The q.K dot
 * products of up to 8 queries share each K row read (the type's vec_dot
 * over several activation rows), and each V row is converted once for all
 * the queries. Otherwise as pw_attn_part_fn (ms NULL: normalised outputs,
 * as pw_attn_multi_fn): nq <= PW_ATTN_GROUP_MAX, hd <= PW_ATTN_KVQ_MAX_HD
 * and a multiple of the types' blocks. The installed row kernels, or
 * (ref) the scalar references; each query's result is the same bits
 * whatever other queries share the call. */
typedef struct pw_attn_kv {
  const void *k, *v;   /* the first row */
  size_t k_row, v_row; /* bytes from one row to the next */
  uint32_t k_type, v_type;
} pw_attn_kv;
#define PW_ATTN_KVQ_MAX_HD 256
/* softcap > 0: each score is capped as llama.cpp's flash attention caps
 * it, s_p = softcap * tanh(vec_dot(K_p, q) * (scale / softcap)) (Gemma 2);
 * this kernel is the one that does it, for F16 caches too. */
void pw_attn_kvq(const pw_attn_kv *kv, const float *const *q, const int *n_pos, int nq, int hd, float scale,
                 float softcap, float *const *out, float *ms, int ref);

/* The installed (fastest) kernel and the scalar reference; the long
 * kernels (same signatures) and theirs. */
pw_attn_multi_fn pw_attn_multi_long_get(void);
pw_attn_part_fn pw_attn_part_long_get(void);
void pw_attn_ref_long(const float *q, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos, int hd,
                      float scale, float *out);
void pw_attn_ref_long_part(const float *q, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos, int hd,
                           float scale, float *acc, float *ms);
pw_attn_fn pw_attn_get(void);
pw_attn_multi_fn pw_attn_multi_get(void);
pw_attn_part_fn pw_attn_part_get(void);
void pw_attn_ref_part(const float *q, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos, int hd,
                      float scale, float *acc, float *ms);
void pw_attn_ref(const float *q, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos, int hd,
                 float scale, float *out);
/* Internal: the AVX2/F16C variant (arch/attn_avx2.c). */
void attn_avx2(const float *q, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos, int hd, float scale,
               float *out);
void attn_avx2_multi(const float *const *q, const int *n_pos, int nq, const uint16_t *k, const uint16_t *v,
                     size_t stride, int hd, float scale, float *const *out);
void attn_avx2_part(const float *const *q, const int *n_pos, int nq, const uint16_t *k, const uint16_t *v,
                    size_t stride, int hd, float scale, float *const *out, float *ms);
void attn_avx2_multi_long(const float *const *q, const int *n_pos, int nq, const uint16_t *k, const uint16_t *v,
                          size_t stride, int hd, float scale, float *const *out);
void attn_avx2_part_long(const float *const *q, const int *n_pos, int nq, const uint16_t *k, const uint16_t *v,
                         size_t stride, int hd, float scale, float *const *out, float *ms);
/* Internal: pw_attn_kvq's installed path for one chunk of np <= 64 keys
 * (hd a multiple of 8): sc[h][p] holds query h's score of key p (capped
 * and scaled) for p < lim[h]; vf the chunk's V rows as f32, hd apart. Per
 * query, the running max before each key from a prefix max over 8 keys at
 * a time and the weights from the vector exp (sc is overwritten with
 * them); then key by key, as the scalar loop: the accumulator rescaled
 * where the max grew, plus V times the weight, each step rounded to F16
 * when f16acc (an F16 V), and the running sum S. */
#define PW_ATTN_KVQ_CHUNK 64
void attn_avx2_kvq_chunk(float (*acc)[PW_ATTN_KVQ_MAX_HD], float *M, float *S, float (*sc)[PW_ATTN_KVQ_CHUNK],
                         const float *vf, const int *lim, int nq, int hd, int np, int f16acc);
/* Internal: the AVX-512 variants (arch/attn_avx512.c). */
void attn_avx512(const float *q, const uint16_t *k, const uint16_t *v, size_t stride, int n_pos, int hd,
                 float scale, float *out);
void attn_avx512_multi(const float *const *q, const int *n_pos, int nq, const uint16_t *k, const uint16_t *v,
                       size_t stride, int hd, float scale, float *const *out);
void attn_avx512_part(const float *const *q, const int *n_pos, int nq, const uint16_t *k, const uint16_t *v,
                      size_t stride, int hd, float scale, float *const *out, float *ms);
void attn_avx512_multi_long(const float *const *q, const int *n_pos, int nq, const uint16_t *k, const uint16_t *v,
                            size_t stride, int hd, float scale, float *const *out);
void attn_avx512_part_long(const float *const *q, const int *n_pos, int nq, const uint16_t *k, const uint16_t *v,
                           size_t stride, int hd, float scale, float *const *out, float *ms);

#endif
