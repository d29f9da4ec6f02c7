/* cmd_quantize.c - `power quantize IN.gguf OUT.gguf TYPE`: converts the
 * F32/F16/BF16 weights of a GGUF file to a quantized mix the way
 * llama-quantize does (same file types, per-tensor rules, fallbacks for
 * rows that are not a multiple of 256, tensor order, reference quantizers),
 * copying all metadata and setting general.file_type.
 *
 * Also home of what `power synth` shares with it (cmd_synth.h): the file
 * type table, the mix rules and the row-parallel streaming converter.
 *
 * IQ4_NL, IQ4_XS and MXFP4_MOE are quantized as llama-quantize does
 * without an importance matrix (Power has none): the same quantizers (bit
 * for bit) and the rules that apply without one (ffn_down of the first
 * eighth of the layers in Q5_K, attn_v in Q5_K where n_head/n_head_kv >=
 * 4; MXFP4_MOE: expert tensors MXFP4, everything else Q8_0). --pure, as
 * llama-quantize's, gives every converted tensor the file type's own type
 * (before the row-length fallbacks).
 *
 * Deviations from llama.cpp, on purpose:
 *  - 1-D tensors in F16/BF16 are widened to F32 (Power binds norms and
 *    biases as F32); llama.cpp copies them as they are.
 *  - Rules for MoE models other than MXFP4_MOE's, imatrix files, Falcon and
 *    70B models, and the IQ1/IQ2/IQ3 types are not carried over (Power runs
 *    none of them).
 * Input tensors that are already quantized are an error: requantizing
 * compounds the error and llama.cpp refuses it by default too. */
#include "cli/cmd_synth.h"

#include "base/clock.h"
#include "base/error.h"
#include "cli/cli.h"
#include "gguf/gguf.h"
#include "tensor/dtype.h"
#include "tensor/quants.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- file types and mix rules ---------------------------------------- */

/* LLAMA_FTYPE_* values from llama.h. */
static const quant_ftype k_ftypes[] = {
    {"F32", 0, PW_DT_F32},       {"F16", 1, PW_DT_F16},       {"BF16", 32, PW_DT_BF16},
    {"Q4_0", 2, PW_DT_Q4_0},     {"Q4_1", 3, PW_DT_Q4_1},     {"Q5_0", 8, PW_DT_Q5_0},
    {"Q5_1", 9, PW_DT_Q5_1},     {"Q8_0", 7, PW_DT_Q8_0},     {"Q2_K", 10, PW_DT_Q2_K},
    {"Q3_K_S", 11, PW_DT_Q3_K},  {"Q3_K_M", 12, PW_DT_Q3_K},  {"Q3_K_L", 13, PW_DT_Q3_K},
    {"Q4_K_S", 14, PW_DT_Q4_K},  {"Q4_K_M", 15, PW_DT_Q4_K},  {"Q5_K_S", 16, PW_DT_Q5_K},
    {"Q5_K_M", 17, PW_DT_Q5_K},  {"Q6_K", 18, PW_DT_Q6_K},      {"IQ4_NL", 25, PW_DT_IQ4_NL},
    {"IQ4_XS", 30, PW_DT_IQ4_XS}, {"MXFP4_MOE", 38, PW_DT_MXFP4},
};
#define QF_Q2_K 10
#define QF_Q3_K_M 12
#define QF_Q3_K_L 13
#define QF_Q4_K_S 14
#define QF_Q4_K_M 15
#define QF_Q5_K_M 17
#define QF_IQ4_NL 25
#define QF_IQ4_XS 30
#define QF_MXFP4_MOE 38

const quant_ftype *quant_ftype_find(const char *name) {
  if (!name) return NULL;
  static const struct {
    const char *alias, *to;
  } aliases[] = {{"Q3_K", "Q3_K_M"}, {"Q4_K", "Q4_K_M"}, {"Q5_K", "Q5_K_M"}};
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
    if (!strcasecmp(name, aliases[i].alias)) name = aliases[i].to;
  for (size_t i = 0; i < sizeof k_ftypes / sizeof k_ftypes[0]; i++)
    if (!strcasecmp(name, k_ftypes[i].name)) return &k_ftypes[i];
  return NULL;
}

const char *quant_ftype_names(void) {
  return "Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K, Q3_K_S, Q3_K_M (Q3_K), Q3_K_L, Q4_K_S, Q4_K_M (Q4_K), "
         "Q5_K_S, Q5_K_M (Q5_K), Q6_K, IQ4_NL, IQ4_XS, MXFP4_MOE, F16, BF16, F32";
}

bool quant_ftype_is_quantized(const quant_ftype *q) {
  return q->base != PW_DT_F32 && q->base != PW_DT_F16 && q->base != PW_DT_BF16;
}

static int layer_of(const char *s);

static bool ends_with(const char *s, const char *suf) {
  size_t a = strlen(s), b = strlen(suf);
  return a >= b && !memcmp(s + a - b, suf, b);
}

/* As llama.cpp: matrices, except the small conv1d kernels of recurrent
 * layers (their kernel reads F32 taps) and the routers of mixtures of
 * experts (ffn_gate_inp: a choice between experts is kept exact). */
bool quant_mix_converts(const char *name, uint32_t n_dims) {
  return n_dims >= 2 && ends_with(name, "weight") && !strstr(name, "ssm_conv1d") && !strstr(name, "ffn_gate_inp");
}

void quant_mix_init(quant_mix *m, const quant_ftype *q, const char *const *names, int n, int n_gqa) {
  memset(m, 0, sizeof *m);
  m->q = q;
  m->n_gqa = n_gqa > 0 ? n_gqa : 1;
  for (int i = 0; i < n; i++) {
    if (strstr(names[i], "attn_v.weight") || strstr(names[i], "attn_qkv.weight")) m->n_attn_v++;
    if (strstr(names[i], "ffn_down")) m->n_ffn_down++;
    if (!strcmp(names[i], "output.weight")) m->has_output = true;
    if (strstr(names[i], "_exps.")) m->moe = true;
    const int l = layer_of(names[i]);
    if (l >= m->n_layer) m->n_layer = l + 1;
  }
}

/* llama.cpp: more bits for the first and last eighth of the layers and
 * every third layer in between. */
static bool use_more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

uint32_t quant_mix_type(quant_mix *m, const char *name, const uint64_t *ne) {
  const quant_ftype *q = m->q;
  uint32_t t = q->base;
  if (!quant_ftype_is_quantized(q)) return t;
  uint32_t ft = q->ftype;
  uint64_t nx = ne[0];
  const bool iq4 = ft == QF_IQ4_NL || ft == QF_IQ4_XS;
  if (m->pure) {
    /* every tensor the base type; only the row-length fallbacks below */
  } else if (!strcmp(name, "output.weight") || (!m->has_output && !strcmp(name, "token_embd.weight"))) {
    /* The output projection (or the tied embedding that serves as it). */
    if (ft == QF_MXFP4_MOE || nx % pw_dtype_get(t)->blck) t = PW_DT_Q8_0;
    else if (t != PW_DT_Q8_0) t = PW_DT_Q6_K;
  } else if (ft == QF_MXFP4_MOE) {
    /* the experts (3-D: one matrix per expert) in MXFP4, the rest Q8_0 */
    t = ne[2] > 1 ? PW_DT_MXFP4 : PW_DT_Q8_0;
  } else if (!strcmp(name, "token_embd.weight")) {
    /* stays at the base type */
  } else if (strstr(name, "attn_v.weight") || strstr(name, "attn_qkv.weight")) {
    int i = m->i_attn_v, n = m->n_attn_v;
    if (ft == QF_Q2_K) t = m->n_gqa >= 4 ? PW_DT_Q4_K : PW_DT_Q3_K;
    else if (ft == QF_Q3_K_M) t = i < 2 ? PW_DT_Q5_K : PW_DT_Q4_K;
    else if (ft == QF_Q3_K_L) t = PW_DT_Q5_K;
    else if ((ft == QF_Q4_K_M || ft == QF_Q5_K_M) && use_more_bits(i, n)) t = PW_DT_Q6_K;
    else if (iq4 && m->n_gqa >= 4) t = PW_DT_Q5_K;
    else if (ft == QF_Q4_K_S && i < 4) t = PW_DT_Q5_K;
    m->i_attn_v++;
  } else if (strstr(name, "ffn_down")) {
    int i = m->i_ffn_down, n = m->n_ffn_down;
    if (m->moe) {
      i = layer_of(name);
      n = m->n_layer;
    }
    if (ft == QF_Q2_K) t = PW_DT_Q3_K;
    else if (ft == QF_Q3_K_M) t = i < n / 16 ? PW_DT_Q5_K : PW_DT_Q4_K;
    else if (ft == QF_Q3_K_L) t = PW_DT_Q5_K;
    else if (ft == QF_Q4_K_M) {
      if (use_more_bits(i, n)) t = PW_DT_Q6_K;
    } else if (iq4 && i < n / 8) t = PW_DT_Q5_K; /* llama.cpp: only without an importance matrix */
    else if (ft == QF_Q5_K_M && use_more_bits(i, n)) t = PW_DT_Q6_K;
    else if (ft == QF_Q4_K_S && i < n / 8) t = PW_DT_Q5_K;
    m->i_ffn_down++;
  } else if (strstr(name, "attn_output.weight")) {
    if (ft == QF_Q2_K) t = PW_DT_Q3_K;
    else if (ft == QF_Q3_K_M) t = PW_DT_Q4_K;
    else if (ft == QF_Q3_K_L) t = PW_DT_Q5_K;
  }
  /* Rows that the chosen type's block does not divide. */
  if (nx % pw_dtype_get(t)->blck) {
    switch (t) {
    case PW_DT_Q2_K:
    case PW_DT_Q3_K: t = PW_DT_Q4_0; break;
    case PW_DT_IQ4_XS: t = PW_DT_IQ4_NL; break;
    case PW_DT_Q4_K: t = PW_DT_Q5_0; break;
    case PW_DT_Q5_K: t = PW_DT_Q5_1; break;
    case PW_DT_Q6_K: t = PW_DT_Q8_0; break;
    default: t = PW_DT_F16; break;
    }
    if (nx % pw_dtype_get(t)->blck) t = PW_DT_F16;
  }
  return t;
}

static int layer_of(const char *s) {
  int l = -1;
  if (!strncmp(s, "blk.", 4)) {
    char *end;
    long v = strtol(s + 4, &end, 10);
    if (end != s + 4 && *end == '.' && v >= 0 && v < 1 << 30) l = (int)v;
  }
  return l;
}

int quant_name_cmp(const char *a, const char *b) {
  int la = layer_of(a), lb = layer_of(b);
  if (la != lb) return la < lb ? -1 : 1;
  return strcmp(a, b);
}

/* ---- row-parallel streaming conversion ------------------------------- */

#define QS_CHUNK_BYTES (4u << 20)

typedef struct qs_job {
  quant_row_fn src;
  void *ctx;
  int64_t row0, n_rows, n_per_row;
  uint32_t dtype;
  size_t row_bytes;
  uint8_t *out;    /* [n_rows][row_bytes] */
  float *scratch;  /* [nth][n_per_row] */
} qs_job;

static void qs_row_convert(uint32_t dtype, const float *x, void *dst, int64_t n) {
  if (dtype == PW_DT_F32) {
    memcpy(dst, x, (size_t)n * sizeof(float));
  } else if (dtype == PW_DT_F16) {
    uint16_t *o = dst;
    for (int64_t i = 0; i < n; i++) o[i] = pw_fp32_to_fp16(x[i]);
  } else if (dtype == PW_DT_BF16) {
    uint16_t *o = dst;
    for (int64_t i = 0; i < n; i++) o[i] = pw_fp32_to_bf16(x[i]);
  } else {
    pw_ref_quantize(dtype, x, dst, n);
  }
}

static void qs_worker(void *p, int ith, int nth) {
  qs_job *j = p;
  long lo, hi;
  pw_split((long)j->n_rows, ith, nth, &lo, &hi);
  float *x = j->scratch + (size_t)ith * (size_t)j->n_per_row;
  for (long r = lo; r < hi; r++) {
    j->src(j->ctx, j->row0 + r, x);
    qs_row_convert(j->dtype, x, j->out + (size_t)r * j->row_bytes, j->n_per_row);
  }
}

int quant_stream(pw_pool *pool, quant_row_fn src, void *ctx, int64_t n_rows, int64_t n_per_row, uint32_t dtype,
                 gguf_emit_fn emit, void *sink, char *err) {
  uint64_t rb = pw_dtype_row_size(dtype, (uint64_t)n_per_row);
  if (!rb || n_rows < 0) return pw_seterr(err, PW_EINVAL, "cannot convert rows of %lld to %s", (long long)n_per_row,
                                          pw_dtype_name(dtype) ? pw_dtype_name(dtype) : "?");
  int nth = pool ? pw_pool_size(pool) : 1;
  int64_t chunk = (int64_t)(QS_CHUNK_BYTES / rb);
  if (chunk < nth) chunk = nth;
  if (chunk > n_rows) chunk = n_rows > 0 ? n_rows : 1;
  qs_job j = {src, ctx, 0, 0, n_per_row, dtype, (size_t)rb, NULL, NULL};
  j.out = malloc((size_t)chunk * (size_t)rb);
  j.scratch = malloc((size_t)nth * (size_t)n_per_row * sizeof(float));
  int rc = 0;
  if (!j.out || !j.scratch) {
    rc = pw_seterr(err, PW_ENOMEM, "out of memory for a %lld-row conversion buffer", (long long)chunk);
    goto done;
  }
  for (int64_t r = 0; r < n_rows; r += chunk) {
    j.row0 = r;
    j.n_rows = n_rows - r < chunk ? n_rows - r : chunk;
    pw_pool_run(pool, qs_worker, &j);
    if ((rc = emit(sink, j.out, (size_t)j.n_rows * (size_t)rb))) {
      pw_seterr(err, rc, "write failed");
      goto done;
    }
  }
done:
  free(j.out);
  free(j.scratch);
  return rc;
}

/* ---- power quantize --------------------------------------------------- */

typedef struct qz_tensor {
  const gguf_tensor *in;
  char name[128];
  uint32_t out_type;
} qz_tensor;

typedef struct qz_ctx {
  qz_tensor *t;   /* [n] in write order */
  uint64_t n;
  pw_pool *pool;
  int quiet;
  double t0;
  const gguf_tensor *cur; /* tensor being converted */
} qz_ctx;

static void qz_row(void *p, int64_t row, float *out) {
  const gguf_tensor *t = p;
  int64_t n = (int64_t)t->ne[0];
  if (t->type == PW_DT_F32) {
    memcpy(out, (const float *)t->data + row * n, (size_t)n * sizeof(float));
  } else {
    const uint16_t *h = (const uint16_t *)t->data + row * n;
    if (t->type == PW_DT_F16)
      for (int64_t i = 0; i < n; i++) out[i] = pw_fp16_to_fp32(h[i]);
    else
      for (int64_t i = 0; i < n; i++) out[i] = pw_bf16_to_fp32(h[i]);
  }
}

static int qz_data(void *p, uint64_t i, gguf_emit_fn emit, void *sink, char *err) {
  qz_ctx *c = p;
  qz_tensor *t = &c->t[i];
  const gguf_tensor *in = t->in;
  if (!c->quiet) {
    fprintf(stderr, "[%4llu/%4llu] %-32s [%6llu, %6llu] %-5s -> %-5s (%.1fs)\n", (unsigned long long)i + 1,
            (unsigned long long)c->n, t->name, (unsigned long long)in->ne[0],
            (unsigned long long)(in->ne[1] * in->ne[2] * in->ne[3]), pw_dtype_name(in->type),
            pw_dtype_name(t->out_type), pw_now_s() - c->t0);
  }
  if (in->type == t->out_type) return emit(sink, in->data, (size_t)in->nbytes);
  int64_t rows = (int64_t)(in->ne[1] * in->ne[2] * in->ne[3]);
  return quant_stream(c->pool, qz_row, (void *)in, rows, (int64_t)in->ne[0], t->out_type, emit, sink, err);
}

static int qz_cmp(const void *a, const void *b) {
  return quant_name_cmp(((const qz_tensor *)a)->name, ((const qz_tensor *)b)->name);
}

static void quantize_usage(FILE *out) {
  fprintf(out,
          "usage: power quantize IN.gguf OUT.gguf TYPE [--pure] [--threads N] [--quiet]\n"
          "  converts the F32/F16/BF16 weights of IN to TYPE with llama.cpp's per-tensor mix\n"
          "  (without an importance matrix, as llama-quantize does when given none)\n"
          "  TYPE: %s\n"
          "  --pure        no mix: every converted tensor in TYPE's own type (as llama-quantize\n"
          "                --pure; rows it cannot hold still fall back)\n"
          "  --threads N   conversion threads (default 2; the output is the same for any N)\n"
          "  --quiet       no per-tensor progress on stderr\n",
          quant_ftype_names());
}

int cmd_quantize(int argc, char **argv) {
  const char *pos[3];
  int npos = 0, quiet = 0, pure = 0;
  long threads = 2;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      quantize_usage(stdout);
      return 0;
    } else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
      if (i + 1 >= argc) {
        fprintf(stderr, "power quantize: option %s needs a value\n", a);
        return 2;
      }
      if (cli_parse_long("quantize", a, argv[++i], 1, 256, &threads)) return 2;
    } else if (!strcmp(a, "--quiet") || !strcmp(a, "-q")) {
      quiet = 1;
    } else if (!strcmp(a, "--pure")) {
      pure = 1;
    } else if (a[0] == '-' && a[1]) {
      fprintf(stderr, "power quantize: unknown option %s (try --help)\n", a);
      return 2;
    } else if (npos < 3) {
      pos[npos++] = a;
    } else {
      fprintf(stderr, "power quantize: too many arguments (try --help)\n");
      return 2;
    }
  }
  if (npos != 3) {
    quantize_usage(stderr);
    return 2;
  }
  const quant_ftype *q = quant_ftype_find(pos[2]);
  if (!q) {
    fprintf(stderr, "power quantize: unknown type '%s' (known: %s)\n", pos[2], quant_ftype_names());
    return 2;
  }
  char err[PW_ERRMAX];
  gguf_file *in = NULL;
  gguf_writer *w = NULL;
  qz_ctx c = {0};
  const char **names = NULL;
  int rc = 1;
  if (gguf_open(pos[0], &in, err)) {
    fprintf(stderr, "power quantize: %s: %s\n", pos[0], err);
    goto done;
  }
  c.n = gguf_n_tensors(in);
  c.t = calloc(c.n ? c.n : 1, sizeof *c.t);
  names = calloc(c.n ? c.n : 1, sizeof *names);
  w = gguf_writer_create();
  if (!c.t || !names || !w) {
    fprintf(stderr, "power quantize: out of memory\n");
    goto done;
  }
  for (uint64_t i = 0; i < c.n; i++) {
    const gguf_tensor *t = gguf_tensor_at(in, i);
    if (t->name.len >= sizeof c.t[i].name || memchr(t->name.ptr, 0, t->name.len)) {
      fprintf(stderr, "power quantize: %s: tensor name too long or malformed\n", pos[0]);
      goto done;
    }
    c.t[i].in = t;
    memcpy(c.t[i].name, t->name.ptr, t->name.len);
    c.t[i].name[t->name.len] = 0;
  }
  qsort(c.t, c.n, sizeof *c.t, qz_cmp);
  for (uint64_t i = 0; i < c.n; i++) names[i] = c.t[i].name;
  /* n_gqa only matters for Q2_K's attn_v rule. */
  int n_gqa = 1;
  char arch[64], key[160];
  if (gguf_get_cstr(in, "general.architecture", arch, sizeof arch)) {
    uint32_t nh = 0, nkv = 0;
    snprintf(key, sizeof key, "%s.attention.head_count", arch);
    gguf_get_u32(in, key, &nh);
    snprintf(key, sizeof key, "%s.attention.head_count_kv", arch);
    if (!gguf_get_u32(in, key, &nkv)) nkv = nh;
    if (nh && nkv) n_gqa = (int)(nh / nkv);
  }
  quant_mix mix;
  quant_mix_init(&mix, q, names, (int)c.n, n_gqa);
  mix.pure = pure;
  uint64_t in_bytes = 0, n_conv = 0;
  for (uint64_t i = 0; i < c.n; i++) {
    qz_tensor *t = &c.t[i];
    const gguf_tensor *it = t->in;
    in_bytes += it->nbytes;
    bool is_float = it->type == PW_DT_F32 || it->type == PW_DT_F16 || it->type == PW_DT_BF16;
    if (quant_mix_converts(t->name, it->n_dims)) {
      if (!is_float) {
        fprintf(stderr,
                "power quantize: %s: tensor %s is already quantized (%s); quantize needs F32, F16 or BF16 "
                "weights\n",
                pos[0], t->name, pw_dtype_name(it->type) ? pw_dtype_name(it->type) : "?");
        goto done;
      }
      t->out_type = quant_mix_type(&mix, t->name, it->ne);
      n_conv++;
    } else if (it->n_dims == 1 && (it->type == PW_DT_F16 || it->type == PW_DT_BF16)) {
      t->out_type = PW_DT_F32;
    } else {
      t->out_type = it->type; /* copied as is */
    }
    if (gguf_writer_add_tensor(w, t->name, it->n_dims, it->ne, t->out_type, err)) {
      fprintf(stderr, "power quantize: %s\n", err);
      goto done;
    }
  }
  if (gguf_writer_copy_kvs_prefix(w, in, "", err) < 0 ||
      gguf_writer_set_u32(w, "general.quantization_version", 2, err) ||
      gguf_writer_set_u32(w, "general.file_type", q->ftype, err)) {
    fprintf(stderr, "power quantize: %s\n", err);
    goto done;
  }
  /* A split file's parts are merged into one. */
  gguf_writer_remove_kv(w, "split.no");
  gguf_writer_remove_kv(w, "split.count");
  gguf_writer_remove_kv(w, "split.tensors.count");
  c.pool = pw_pool_create((int)threads);
  if (!c.pool) {
    fprintf(stderr, "power quantize: cannot start %ld threads\n", threads);
    goto done;
  }
  c.quiet = quiet;
  c.t0 = pw_now_s();
  if (gguf_writer_write(w, pos[1], qz_data, &c, err)) {
    fprintf(stderr, "power quantize: %s\n", err);
    goto done;
  }
  if (!quiet)
    fprintf(stderr, "power quantize: %s: %llu tensors (%llu converted), %.1f MB -> %.1f MB in %.1fs\n", pos[1],
            (unsigned long long)c.n, (unsigned long long)n_conv, (double)in_bytes / 1e6,
            (double)gguf_writer_file_size(w) / 1e6, pw_now_s() - c.t0);
  rc = 0;
done:
  pw_pool_destroy(c.pool);
  gguf_writer_destroy(w);
  free(names);
  free(c.t);
  gguf_close(in);
  return rc;
}
