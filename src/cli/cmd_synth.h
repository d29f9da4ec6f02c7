/* cmd_synth.h - `power synth` (GGUF files with the shapes of real models and
 * seeded dummy weights) and `power quantize` (F32/F16/BF16 GGUF to a
 * quantized mix), plus what the two share: llama.cpp's file types, its
 * per-tensor quantization mix, its tensor write order, and a row-parallel
 * converter that streams rows of floats into any dtype.
 *
 * Not here: the GGUF format (gguf/writer.h) and the block formats and
 * reference quantizers (tensor/quants.h). */
#ifndef PW_CLI_CMD_SYNTH_H
#define PW_CLI_CMD_SYNTH_H

#include "base/pool.h"
#include "gguf/writer.h"

#include <stdbool.h>
#include <stdint.h>

int cmd_synth(int argc, char **argv);
int cmd_quantize(int argc, char **argv);

/* A target file type as llama-quantize names it. */
typedef struct quant_ftype {
  const char *name; /* "Q4_K_M" */
  uint32_t ftype;   /* llama.cpp's LLAMA_FTYPE_* value, for general.file_type */
  uint32_t base;    /* pw_dtype of 2-D weights before the mix rules */
} quant_ftype;

/* Case-insensitive lookup (also the aliases Q3_K, Q4_K, Q5_K for the _M
 * mixes, as llama-quantize has them); NULL if unknown. The pointer is
 * static. */
const quant_ftype *quant_ftype_find(const char *name);
/* Comma-separated list of accepted names, for messages (static). */
const char *quant_ftype_names(void);
/* True when the type is a quantized one (the mix rules apply). */
bool quant_ftype_is_quantized(const quant_ftype *q);

/* Per-file state of the mix rules: counters over attn_v / ffn_down tensors
 * visited in write order, as llama.cpp keeps them. */
typedef struct quant_mix {
  const quant_ftype *q;
  int n_attn_v, i_attn_v;     /* tensors named *attn_v.weight */
  int n_ffn_down, i_ffn_down; /* tensors named *ffn_down* */
  bool has_output;            /* output.weight present (else tied) */
  int n_gqa;                  /* n_head / n_head_kv (1 if unknown) */
  bool pure;                  /* no mix: every converted tensor q->base
                                 (then the row-length fallbacks) */
  bool moe;                   /* stacked experts (*_exps) present: as
                                 llama.cpp for a mixture of experts, an
                                 ffn_down's index is its layer's, out of
                                 n_layer (the routed and shared experts'
                                 ffn_down of a layer share it) */
  int n_layer;                /* layers (blk.N.) of the file */
} quant_mix;

/* names[n]: every tensor of the output file (to count the above). */
void quant_mix_init(quant_mix *m, const quant_ftype *q, const char *const *names, int n, int n_gqa);
/* True if llama.cpp would convert this tensor (a 2-D+ "*weight"). */
bool quant_mix_converts(const char *name, uint32_t n_dims);
/* Output dtype of a converted tensor. Must be called once per converted
 * tensor, in write order (the counters advance). ne[0..3]: the tensor's
 * dimensions, ne[0] the row length, unused ones 1. */
uint32_t quant_mix_type(quant_mix *m, const char *name, const uint64_t *ne);

/* llama.cpp's tensor order (non-layer tensors first, then by layer number,
 * each group by name); a strcmp-like comparison. */
int quant_name_cmp(const char *a, const char *b);

/* Fills out[0..n_per_row) with row `row` of a tensor as floats. Called from
 * several threads at once with distinct rows; must depend only on row. */
typedef void (*quant_row_fn)(void *ctx, int64_t row, float *out);

/* Produces n_rows rows of n_per_row elements, converts each to dtype (F32,
 * F16, BF16 or any quantized type, with the reference quantizers so results
 * are bit-exact with ggml's) on the pool's threads, and emits them in row
 * order in chunks of a few MB. Bytes never depend on the thread count. */
int quant_stream(pw_pool *pool, quant_row_fn src, void *ctx, int64_t n_rows, int64_t n_per_row, uint32_t dtype,
                 gguf_emit_fn emit, void *sink, char *err);

#endif
