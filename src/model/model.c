/* model.c - a GGUF transformer: hyperparameters, the output and embedding
 * weights, the table of architectures, the KV cache, batch scratch, and the
 * forward pass's frame (embed, each layer of the architecture, final norm,
 * logits). model_int.h lists the model's other files: the architectures'
 * layers (arch_*.c) and the op interface they run on (backend_*.c). */
#include "model/model_int.h"

#include "base/error.h"
#include "base/log.h"
#include "base/mem.h"
#include "tensor/attn.h"
#include "tensor/dtype.h"
#include "tensor/traits.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const model_arch_ops *const model_archs[] = {
    &model_arch_llama,  &model_arch_qwen2,   &model_arch_qwen3,      &model_arch_gemma3,   &model_arch_phi3,
    &model_arch_qwen35, &model_arch_bert,    &model_arch_nomic_bert, &model_arch_qwen3moe, &model_arch_qwen2moe,
    &model_arch_gemma2, &model_arch_smollm3, &model_arch_granite,    &model_arch_mistral3, &model_arch_qwen35moe,
    &model_arch_gptoss, &model_arch_jina_bert_v2, NULL};

/* ---- loading ---------------------------------------------------------- */

#define MODEL_RESIDENT_BYTES (16u << 20)

static int get_u32_key(const gguf_file *f, const char *arch, const char *suffix, bool required, uint32_t *out,
                       char *err) {
  char key[128];
  snprintf(key, sizeof key, "%s.%s", arch, suffix);
  if (gguf_get_u32(f, key, out)) return 0;
  if (!required) return 1;
  if (gguf_find_kv(f, key)) return pw_seterr(err, PW_EFORMAT, "metadata %s has a non-integer type", key);
  return pw_seterr(err, PW_EFORMAT, "metadata %s is missing", key);
}

int model_bind_weight(const gguf_file *f, const char *name, int64_t n_in, int64_t n_out, model_weight *w,
                       bool required, char *err) {
  const gguf_tensor *t = gguf_find_tensor(f, name);
  memset(w, 0, sizeof *w);
  if (!t) return required ? pw_seterr(err, PW_EFORMAT, "tensor %s is missing", name) : 1;
  const pw_dtype_info *di = pw_dtype_get(t->type);
  if (!di || !di->weight_ok || !pw_traits_get(t->type))
    return pw_seterr(err, PW_EUNSUPPORTED, "tensor %s has unsupported type %s (%u)", name,
                     di ? di->name : "unknown", t->type);
  if (t->n_dims > 2 || (int64_t)t->ne[0] != n_in || (int64_t)t->ne[1] != n_out)
    return pw_seterr(err, PW_EFORMAT, "tensor %s has shape [%llu, %llu], expected [%lld, %lld]", name,
                     (unsigned long long)t->ne[0], (unsigned long long)t->ne[1], (long long)n_in,
                     (long long)n_out);
  w->data = t->data;
  w->type = t->type;
  w->n_in = n_in;
  w->n_out = n_out;
  return 0;
}

/* A 1-D F32 vector of n elements (norm weights, biases). */
int model_bind_vec(const gguf_file *f, const char *name, int64_t n, const float **out, bool required,
                    char *err) {
  const gguf_tensor *t = gguf_find_tensor(f, name);
  *out = NULL;
  if (!t) return required ? pw_seterr(err, PW_EFORMAT, "tensor %s is missing", name) : 1;
  if (t->type != PW_DT_F32)
    return pw_seterr(err, PW_EUNSUPPORTED, "tensor %s: type %s, expected F32", name,
                     pw_dtype_name(t->type) ? pw_dtype_name(t->type) : "unknown");
  if (t->n_dims != 1 || (int64_t)t->ne[0] != n)
    return pw_seterr(err, PW_EFORMAT, "tensor %s has %llu elements, expected %lld", name,
                     (unsigned long long)t->ne[0], (long long)n);
  if ((uintptr_t)t->data % 4) return pw_seterr(err, PW_EFORMAT, "tensor %s is misaligned", name);
  *out = t->data;
  return 0;
}

int model_rope_yarn(model_hparams *hp, float attn, float beta_fast, float beta_slow, float log_mul, char *err) {
  /* YaRN (the ramp between the dimension pairs whose wavelengths fit
   * beta_fast and beta_slow rotations in the original context). The
   * magnitude correction 1 + 0.1 ln(factor) is applied where the angles are
   * made; llama.cpp computes it twice, once cancelled, and the float steps
   * are kept. With log_mul (mscale_all_dim) the factor given to the angles
   * is llama.cpp's mscale(1) / mscale(log_mul). */
  if (!(beta_fast > 0) || !(beta_slow > 0) || beta_fast > 1e4f || beta_slow > 1e4f || !(log_mul >= 0) || log_mul > 1e3f)
    return pw_seterr(err, PW_EFORMAT, "invalid YaRN beta_fast %g, beta_slow %g or log multiplier %g", (double)beta_fast,
                     (double)beta_slow, (double)log_mul);
  hp->rope_ext_factor = 1.0f;
  const float fs = 1.0f / hp->rope_scale;
  float mscale = fs <= 1.0f ? 1.0f : 0.1f * logf(fs) + 1.0f;
  if (log_mul != 0.0f) mscale /= fs <= 1.0f ? 1.0f : 0.1f * log_mul * logf(fs) + 1.0f;
  mscale *= 1.0f / (1.0f + 0.1f * logf(fs));
  attn *= mscale;
  const int nd = hp->head_dim;
  const float oc = (float)hp->n_ctx_orig;
  float lo = floorf((float)nd * logf(oc / (beta_fast * 2 * (float)M_PI)) / (2 * logf(hp->rope_base)));
  float hi = ceilf((float)nd * logf(oc / (beta_slow * 2 * (float)M_PI)) / (2 * logf(hp->rope_base)));
  hp->rope_corr[0] = lo > 0 ? lo : 0;
  hp->rope_corr[1] = hi < (float)(nd - 1) ? hi : (float)(nd - 1);
  if (!(attn > 0) || attn > 1e3) return pw_seterr(err, PW_EFORMAT, "invalid rope attention factor %g", (double)attn);
  hp->rope_attn_factor = attn;
  return 0;
}

static int load_hparams(model *m, char *err) {
  const gguf_file *f = m->f;
  model_hparams *hp = &m->hp;
  int rc;
  if (!gguf_get_cstr(f, "general.architecture", hp->arch_name, sizeof hp->arch_name))
    return pw_seterr(err, PW_EFORMAT, "metadata general.architecture is missing");
  char names[128] = "";
  for (int i = 0; model_archs[i]; i++) {
    if (!strcmp(hp->arch_name, model_archs[i]->name)) m->ad = model_archs[i];
    snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "", model_archs[i]->name);
  }
  if (!m->ad) return pw_seterr(err, PW_EUNSUPPORTED, "unsupported architecture '%s' (supported: %s)", hp->arch_name, names);
  hp->arch = m->ad->arch;
  hp->rope_neox = m->ad->rope_neox;
  const char *a = hp->arch_name;
  uint32_t v;
  if ((rc = get_u32_key(f, a, "embedding_length", true, &v, err))) return rc;
  hp->n_embd = (int32_t)v;
  if ((rc = get_u32_key(f, a, "block_count", true, &v, err))) return rc;
  hp->n_layer = (int32_t)v;
  if ((rc = get_u32_key(f, a, "attention.head_count", true, &v, err))) return rc;
  hp->n_head = (int32_t)v;
  hp->n_head_kv = hp->n_head;
  if ((rc = get_u32_key(f, a, "attention.head_count_kv", false, &v, err)) < 0) return rc;
  if (rc == 0) hp->n_head_kv = (int32_t)v;
  v = 0;
  if ((rc = get_u32_key(f, a, "feed_forward_length", !m->ad->ff_optional, &v, err)) < 0) return rc;
  hp->n_ff = (int32_t)v;
  const bool ff_absent = rc == 1;
  hp->n_ctx_train = 2048;
  if ((rc = get_u32_key(f, a, "context_length", false, &v, err)) < 0) return rc;
  if (rc == 0) hp->n_ctx_train = (int32_t)v;
  if (hp->n_embd <= 0 || hp->n_embd > 65536 || hp->n_layer <= 0 || hp->n_layer > 1024 || hp->n_head <= 0 ||
      hp->n_head > 1024 || hp->n_head_kv <= 0 || hp->n_head % hp->n_head_kv || (hp->n_ff <= 0 && !ff_absent) ||
      hp->n_ff > 1 << 20 || hp->n_ctx_train <= 0)
    return pw_seterr(err, PW_EFORMAT,
                     "invalid hyperparameters: n_embd %d, n_layer %d, n_head %d, n_head_kv %d, n_ff %d, n_ctx %d",
                     hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv, hp->n_ff, hp->n_ctx_train);
  hp->head_dim = hp->n_embd / hp->n_head;
  if ((rc = get_u32_key(f, a, "attention.key_length", false, &v, err)) < 0) return rc;
  if (rc == 0) hp->head_dim = (int32_t)v;
  uint32_t vlen;
  if (get_u32_key(f, a, "attention.value_length", false, &vlen, err) == 0 && (int32_t)vlen != hp->head_dim)
    return pw_seterr(err, PW_EUNSUPPORTED, "value_length %u differs from key_length %d", vlen, hp->head_dim);
  if (hp->head_dim <= 0 || hp->head_dim % 2 || hp->head_dim > 1024)
    return pw_seterr(err, PW_EFORMAT, "invalid head dimension %d", hp->head_dim);
  uint32_t rope_dims;
  hp->n_rot = hp->head_dim;
  if (get_u32_key(f, a, "rope.dimension_count", false, &rope_dims, err) == 0 && (int32_t)rope_dims != hp->head_dim) {
    if (!m->ad->partial_rope || rope_dims == 0 || rope_dims % 2 || (int32_t)rope_dims > hp->head_dim)
      return pw_seterr(err, PW_EUNSUPPORTED, "partial RoPE (%u of %d dims) is not supported for %s", rope_dims,
                       hp->head_dim, hp->arch_name);
    hp->n_rot = (int32_t)rope_dims;
  }
  char key[128];
  hp->rope_base = 10000.0f;
  snprintf(key, sizeof key, "%s.rope.freq_base", a);
  gguf_get_f32(f, key, &hp->rope_base);
  hp->rope_scale = 1.0f;
  hp->rope_attn_factor = 1.0f;
  char stype[32] = "linear";
  snprintf(key, sizeof key, "%s.rope.scaling.type", a);
  gguf_get_cstr(f, key, stype, sizeof stype);
  snprintf(key, sizeof key, "%s.rope.scaling.factor", a);
  float factor = 0;
  gguf_get_f32(f, key, &factor);
  if (strcmp(stype, "none") && strcmp(stype, "linear") && strcmp(stype, "yarn"))
    return pw_seterr(err, PW_EUNSUPPORTED, "rope scaling type '%s' is not supported (none, linear, yarn)", stype);
  if (!(factor >= 0) || factor > 1e6) return pw_seterr(err, PW_EFORMAT, "invalid rope scaling factor %g", (double)factor);
  /* As llama.cpp: the scale is 1/factor unless the type is none. */
  if (factor > 0 && strcmp(stype, "none")) hp->rope_scale = 1.0f / factor;
  uint32_t oc = (uint32_t)hp->n_ctx_train;
  snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", a);
  gguf_get_u32(f, key, &oc);
  if (oc == 0 || oc > (1u << 24)) return pw_seterr(err, PW_EFORMAT, "invalid original context %u", oc);
  hp->n_ctx_orig = (int32_t)oc;
  float attn = 1.0f;
  snprintf(key, sizeof key, "%s.rope.scaling.attn_factor", a);
  gguf_get_f32(f, key, &attn);
  if (!strcmp(stype, "yarn")) {
    if ((rc = model_rope_yarn(hp, attn, 32.0f, 1.0f, 0.0f, err))) return rc;
  } else {
    if (!(attn > 0) || attn > 1e3) return pw_seterr(err, PW_EFORMAT, "invalid rope attention factor %g", (double)attn);
    hp->rope_attn_factor = attn;
  }
  hp->rms_eps = 1e-5f;
  snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", a);
  gguf_get_f32(f, key, &hp->rms_eps);
  if (!(hp->rope_base > 0) || !(hp->rms_eps >= 0))
    return pw_seterr(err, PW_EFORMAT, "invalid rope base %g or rms epsilon %g", (double)hp->rope_base,
                     (double)hp->rms_eps);
  if (m->ad->load_hparams && (rc = m->ad->load_hparams(m, err))) return rc;
  if (hp->n_ff <= 0 || hp->n_ff > 1 << 20) return pw_seterr(err, PW_EFORMAT, "invalid feed-forward width %d", hp->n_ff);
  return 0;
}

static int bind_weights(model *m, char *err) {
  const gguf_file *f = m->f;
  model_hparams *hp = &m->hp;
  int rc;
  const gguf_tensor *te = gguf_find_tensor(f, "token_embd.weight");
  if (!te) return pw_seterr(err, PW_EFORMAT, "tensor token_embd.weight is missing");
  if (te->ne[1] < 1 || te->ne[1] > (1u << 24)) return pw_seterr(err, PW_EFORMAT, "token_embd.weight: bad vocabulary size");
  hp->n_vocab = (int32_t)te->ne[1];
  if ((rc = model_bind_weight(f, "token_embd.weight", hp->n_embd, hp->n_vocab, &m->tok_embd, true, err))) return rc;
  if (!m->ad->encoder) { /* an encoder has no output head (arch_bert.c binds its own) */
    rc = model_bind_weight(f, "output.weight", hp->n_embd, hp->n_vocab, &m->output, false, err);
    if (rc < 0) return rc;
    if (rc == 1) m->output = m->tok_embd; /* tied output */
    if ((rc = model_bind_vec(f, "output_norm.weight", hp->n_embd, &m->output_norm, true, err))) return rc;
    rc = model_bind_vec(f, "rope_freqs.weight", hp->n_rot / 2, &m->rope_freqs, false, err);
    if (rc < 0) return rc;
  } else {
    m->output = m->tok_embd; /* never multiplied: sizes the logits scratch only */
  }
  m->layers = calloc((size_t)hp->n_layer, sizeof *m->layers);
  if (!m->layers) return pw_seterr(err, PW_ENOMEM, "out of memory");
  for (int il = 0; il < hp->n_layer; il++) {
    m->layers[il].kv_slot = m->layers[il].rs_slot = -1;
    if ((rc = m->ad->bind_layer(m, il, err))) return rc;
    /* a layer has a KV slot unless its architecture gave it a recurrent
     * state instead */
    if (m->layers[il].rs_slot >= 0) m->layers[il].rs_slot = m->n_rs_layers++;
    else m->layers[il].kv_slot = m->n_kv_layers++;
  }
  /* an encoder's K and V live for one layer of one pass: its layers share
   * one slot of the cache */
  if (m->ad->encoder) {
    for (int il = 0; il < hp->n_layer; il++) m->layers[il].kv_slot = 0;
    m->n_kv_layers = 1;
  }
  return 0;
}

int model_load(const char *path, const model_opts *opts, model **out, char *err) {
  *out = NULL;
  pw_tensor_init();
  model *m = calloc(1, sizeof *m);
  if (!m) return pw_seterr(err, PW_ENOMEM, "out of memory");
  int rc = 0;
  int nt = opts && opts->n_threads > 0 ? opts->n_threads : 2;
  /* the pool first: an encrypted file is decrypted on its threads */
  if (opts && opts->pool) {
    m->pool = opts->pool;
    m->pool_borrowed = true;
  } else {
    m->pool = pw_pool_create(nt);
  }
  if (!m->pool) {
    rc = pw_seterr(err, PW_ENOMEM, "cannot start %d threads", nt);
    goto fail;
  }
  weights_opts wo = {0};
  if (opts) wo = opts->weights;
  wo.pool = m->pool;
  if ((rc = weights_open(path, &wo, &m->w, err))) goto fail;
  m->f = weights_gguf(m->w);
  m->res = *weights_residency(m->w);
  if ((rc = load_hparams(m, err)) || (rc = bind_weights(m, err))) goto fail;
  m->be = &model_backend_cpu;
  const weights_info *wi = weights_get_info(m->w);
  if (m->res.huge_bytes >= 0)
    pw_log(PW_LOG_INFO, "model %s: %.1f MiB %s (%s%s) in %.3f s, %.1f MiB of them in 2 MiB pages%s", path,
           m->res.bytes / 1048576.0, wi->io == WEIGHTS_IO_MMAP && !wi->encrypted ? "mapped" : "read",
           weights_io_name(wi->io), wi->encrypted ? ", decrypted" : "", wi->read_s, m->res.huge_bytes / 1048576.0,
           m->res.refreshed ? " (page cache re-read to get them)" : "");
  weights_budget_info bi;
  if (weights_get_budget(m->w, &bi))
    pw_log(PW_LOG_INFO,
           "model %s: memory budget %.1f MiB (%s): %.1f MiB always resident, %.1f MiB pinned, %.1f MiB streamed "
           "through a pool of %.1f MiB",
           path, bi.budget / 1048576.0, weights_residency_name(bi.policy), bi.base_bytes / 1048576.0,
           bi.pinned_bytes / 1048576.0, (gguf_size(m->f) - bi.base_bytes - bi.pinned_bytes) / 1048576.0,
           bi.pool_bytes / 1048576.0);
  if (wi->encrypted)
    pw_log(PW_LOG_INFO, "model %s: decrypted %.1f MiB in %.3f s on %d threads (AES-GCM %.2f GB/s per core)%s", path,
           wi->bytes / 1048576.0, wi->decrypt_s, wi->decrypt_threads,
           wi->decrypt_core_s > 0 ? wi->bytes / wi->decrypt_core_s / 1e9 : 0.0, wi->locked ? ", locked in memory" : "");
  /* a file this small stays in the caches between tokens (the L2s and a
   * share of L3 of a small CPU): decode is compute-bound, not streaming */
  if (gguf_size(m->f) <= MODEL_RESIDENT_BYTES) m->mm_hints = PW_MM_RESIDENT;
  *out = m;
  return 0;
fail:
  model_destroy(m);
  return rc;
}

void model_destroy(model *m) {
  if (!m) return;
  if (!m->pool_borrowed) pw_pool_destroy(m->pool);
  free(m->layers);
  free(m->layer_recurrent);
  weights_close(m->w);
  free(m);
}

const model_hparams *model_hp(const model *m) { return &m->hp; }
bool model_is_encoder(const model *m) { return m->ad->encoder; }
model_pooling model_get_pooling(const model *m) { return m->pooling; }
int model_n_cls_out(const model *m) { return m->n_cls_out; }
bool model_has_recurrent(const model *m) { return m->n_rs_layers > 0; }
const gguf_file *model_gguf(const model *m) { return m->f; }
const gguf_residency *model_residency(const model *m) { return &m->res; }
const weights_info *model_weights_info(const model *m) { return weights_get_info(m->w); }
weights *model_weights(const model *m) { return m->w; }
pw_pool *model_pool(const model *m) { return m->pool; }

/* Buffers the kernels stream through start on a cache line: they are read
 * with 64-byte loads, and a line split on every load (what malloc's 16-byte
 * alignment gives) measured 10-20% slower in the matmul tiles. Freed with
 * free(). */
static void *alloc_lines(size_t bytes) {
  if (bytes > SIZE_MAX - 64) return NULL;
  /* Big buffers (the KV cache, a large batch's scratch) are read whole
   * every step: in 2 MiB pages, for the same reason as the weights
   * (gguf_make_resident). */
  if (bytes >= (2u << 20)) return pw_alloc_huge(bytes);
  return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

/* ---- KV cache --------------------------------------------------------- */

int model_kv_type_parse(const char *name) {
  static const struct {
    const char *name;
    int type;
  } k_types[] = {{"f16", PW_DT_F16}, {"q8_0", PW_DT_Q8_0}, {"q4_0", PW_DT_Q4_0}};
  for (size_t i = 0; name && i < sizeof k_types / sizeof k_types[0]; i++)
    if (!strcasecmp(name, k_types[i].name)) return k_types[i].type;
  return -1;
}

const char *model_kv_type_name(uint32_t type) {
  return type == PW_DT_F16 ? "f16" : type == PW_DT_Q8_0 ? "q8_0" : type == PW_DT_Q4_0 ? "q4_0" : "?";
}

/* bytes of one head's row of K or V in type t (0: unsupported here) */
static size_t kv_row_bytes(uint32_t t, int head_dim, char *err) {
  if (t != PW_DT_F16 && t != PW_DT_Q8_0 && t != PW_DT_Q4_0) {
    pw_seterr(err, PW_EINVAL, "unsupported KV cache type %u (f16, q8_0 or q4_0)", t);
    return 0;
  }
  const pw_traits *tr = pw_traits_get(t);
  if (head_dim % (int)tr->blck || head_dim > PW_ATTN_MAX_HD) {
    pw_seterr(err, PW_EINVAL, "KV cache type %s needs a head size that is a multiple of %u (this model's is %d)",
              model_kv_type_name(t), tr->blck, head_dim);
    return 0;
  }
  return (size_t)head_dim / tr->blck * tr->type_size;
}

/* A cache of n_kv_layers attention layers in the types of o (NULL: F16),
 * with the model's recurrent state when rs (the decoder's cache) or
 * without (the MTP block's). */
static int kv_create(const model *m, int n_seq, int n_ctx, int n_kv_layers, bool rs, const model_kv_opts *o,
                     model_kv **out, char *err) {
  *out = NULL;
  if (n_seq < 1 || n_seq > 4096 || n_ctx < 1 || n_ctx > (1 << 22))
    return pw_seterr(err, PW_EINVAL, "invalid KV cache size: %d sequences x %d positions", n_seq, n_ctx);
  const model_hparams *hp = &m->hp;
  const uint32_t tk = o && o->type_k ? o->type_k : PW_DT_F16, tv = o && o->type_v ? o->type_v : PW_DT_F16;
  const size_t rk = kv_row_bytes(tk, hp->head_dim, err), rv = rk ? kv_row_bytes(tv, hp->head_dim, err) : 0;
  if (!rk || !rv) return PW_EINVAL;
  if ((tk != PW_DT_F16 || tv != PW_DT_F16) && hp->head_dim > PW_ATTN_KVQ_MAX_HD)
    return pw_seterr(err, PW_EINVAL, "a quantized KV cache needs a head size of at most %d (this model's is %d)",
                     PW_ATTN_KVQ_MAX_HD, hp->head_dim);
  model_kv *kv = calloc(1, sizeof *kv);
  if (!kv) return pw_seterr(err, PW_ENOMEM, "out of memory");
  kv->n_layer = n_kv_layers;
  kv->n_seq = n_seq;
  kv->n_ctx = n_ctx;
  kv->n_head_kv = hp->n_head_kv;
  kv->head_dim = hp->head_dim;
  kv->type_k = tk;
  kv->type_v = tv;
  kv->row_k = rk;
  kv->row_v = rv;
  size_t n = (size_t)kv->n_layer * n_seq * n_ctx * kv->n_head_kv;
  kv->k = alloc_lines((n ? n : 1) * rk);
  kv->v = alloc_lines((n ? n : 1) * rv);
  kv->len = calloc((size_t)n_seq, sizeof(int));
  kv->rs_len = calloc((size_t)n_seq, sizeof(int));
  if (!kv->k || !kv->v || !kv->len || !kv->rs_len) {
    model_kv_destroy(kv);
    return pw_seterr(err, PW_ENOMEM, "out of memory for a KV cache of %zu MiB", n * (rk + rv) >> 20);
  }
  if (rs && m->n_rs_layers > 0) {
    kv->n_rs_layer = m->n_rs_layers;
    kv->conv_w = hp->ssm_d_conv - 1;
    kv->conv_dim = hp->ssm_d_inner + 2 * hp->ssm_n_group * hp->ssm_d_state;
    kv->n_v_heads = hp->ssm_dt_rank;
    kv->d_state = hp->ssm_d_state;
    size_t nc = (size_t)kv->n_rs_layer * n_seq * kv->conv_dim * kv->conv_w;
    size_t ns = (size_t)kv->n_rs_layer * n_seq * kv->n_v_heads * model_kv_ssm_head(kv);
    kv->conv = alloc_lines((nc ? nc : 1) * sizeof(float));
    kv->ssm = alloc_lines(ns * sizeof(float));
    if (!kv->conv || !kv->ssm) {
      model_kv_destroy(kv);
      return pw_seterr(err, PW_ENOMEM, "out of memory for a recurrent state of %zu MiB", (nc + ns) * 4 >> 20);
    }
    for (int s = 0; s < n_seq; s++) model_kv_truncate(kv, s, 0);
  }
  *out = kv;
  return 0;
}

int model_kv_create(const model *m, int n_seq, int n_ctx, model_kv **out, char *err) {
  return kv_create(m, n_seq, n_ctx, m->n_kv_layers, true, NULL, out, err);
}

int model_kv_create_ex(const model *m, int n_seq, int n_ctx, const model_kv_opts *o, model_kv **out, char *err) {
  return kv_create(m, n_seq, n_ctx, m->n_kv_layers, true, o, out, err);
}

bool model_has_mtp(const model *m) { return m->has_mtp; }

int model_mtp_kv_create(const model *m, int n_seq, int n_ctx, model_kv **out, char *err) {
  *out = NULL;
  if (!m->has_mtp) return pw_seterr(err, PW_EUNSUPPORTED, "the model has no MTP block");
  return kv_create(m, n_seq, n_ctx, 1, false, NULL, out, err);
}

void model_kv_destroy(model_kv *kv) {
  if (!kv) return;
  free(kv->k);
  free(kv->v);
  free(kv->len);
  free(kv->rs_len);
  free(kv->conv);
  free(kv->ssm);
  free(kv);
}

int model_kv_n_seq(const model_kv *kv) { return kv->n_seq; }
int model_kv_n_ctx(const model_kv *kv) { return kv->n_ctx; }
int model_kv_len(const model_kv *kv, int seq) { return kv->len[seq]; }
static size_t seq_state_floats(const model_kv *kv) {
  return (size_t)kv->n_rs_layer *
         ((size_t)kv->conv_dim * kv->conv_w + (size_t)kv->n_v_heads * model_kv_ssm_head(kv));
}

size_t model_kv_bytes(const model_kv *kv) {
  return (size_t)kv->n_layer * kv->n_seq * kv->n_ctx * kv->n_head_kv * (kv->row_k + kv->row_v) +
         (size_t)kv->n_seq * seq_state_floats(kv) * sizeof(float);
}

size_t model_kv_bytes_f16(const model_kv *kv) {
  return (size_t)kv->n_layer * kv->n_seq * kv->n_ctx * kv->n_head_kv * kv->head_dim * 2 * sizeof(uint16_t) +
         (size_t)kv->n_seq * seq_state_floats(kv) * sizeof(float);
}

size_t model_kv_pos_bytes(const model_kv *kv) { return (size_t)kv->n_layer * kv->n_head_kv * (kv->row_k + kv->row_v); }

uint32_t model_kv_type_k(const model_kv *kv) { return kv->type_k; }
uint32_t model_kv_type_v(const model_kv *kv) { return kv->type_v; }

/* Zeroes sequence seq's recurrent state (a sequence that starts over). */
static void rs_reset(model_kv *kv, int seq) {
  for (int l = 0; l < kv->n_rs_layer; l++) {
    memset(model_kv_conv(kv, l, seq), 0, (size_t)kv->conv_dim * kv->conv_w * sizeof(float));
    memset(model_kv_ssm(kv, l, seq), 0, (size_t)kv->n_v_heads * model_kv_ssm_head(kv) * sizeof(float));
  }
  kv->rs_len[seq] = 0;
}

void model_kv_truncate(model_kv *kv, int seq, int len) {
  PW_ASSERT(seq >= 0 && seq < kv->n_seq && len >= 0 && len <= kv->len[seq]);
  kv->len[seq] = len;
  /* A recurrent state cannot be cut back: only a restart is exact. */
  if (kv->n_rs_layer > 0) {
    if (len == 0) rs_reset(kv, seq);
    else if (len != kv->rs_len[seq]) kv->rs_len[seq] = -1;
  }
}

bool model_kv_seq_exact(const model_kv *kv, int seq) {
  return kv->n_rs_layer == 0 || kv->rs_len[seq] == kv->len[seq];
}

size_t model_kv_state_bytes(const model_kv *kv) {
  return kv->n_rs_layer ? sizeof(int64_t) + seq_state_floats(kv) * sizeof(float) : 0;
}

void model_kv_state_save(const model_kv *kv, int seq, void *buf) {
  PW_ASSERT(seq >= 0 && seq < kv->n_seq);
  if (!kv->n_rs_layer) return;
  const int64_t len = kv->rs_len[seq];
  memcpy(buf, &len, sizeof len);
  float *p = (float *)((char *)buf + sizeof len);
  const size_t nc = (size_t)kv->conv_dim * kv->conv_w, ns = (size_t)kv->n_v_heads * model_kv_ssm_head(kv);
  for (int l = 0; l < kv->n_rs_layer; l++) {
    memcpy(p, model_kv_conv(kv, l, seq), nc * sizeof(float));
    memcpy(p + nc, model_kv_ssm(kv, l, seq), ns * sizeof(float));
    p += nc + ns;
  }
}

int model_kv_state_restore(model_kv *kv, int seq, const void *buf, char *err) {
  PW_ASSERT(seq >= 0 && seq < kv->n_seq);
  if (!kv->n_rs_layer) return 0;
  int64_t len;
  memcpy(&len, buf, sizeof len);
  if (len < 0 || len > kv->len[seq])
    return pw_seterr(err, PW_EINVAL, "state snapshot of %lld positions does not fit sequence %d of %d", (long long)len,
                     seq, kv->len[seq]);
  const float *p = (const float *)((const char *)buf + sizeof len);
  const size_t nc = (size_t)kv->conv_dim * kv->conv_w, ns = (size_t)kv->n_v_heads * model_kv_ssm_head(kv);
  for (int l = 0; l < kv->n_rs_layer; l++) {
    memcpy(model_kv_conv(kv, l, seq), p, nc * sizeof(float));
    memcpy(model_kv_ssm(kv, l, seq), p + nc, ns * sizeof(float));
    p += nc + ns;
  }
  kv->len[seq] = (int)len;
  kv->rs_len[seq] = (int)len;
  return 0;
}

void model_kv_copy(model_kv *kv, int dst, int src, int len) {
  PW_ASSERT(len >= 0 && len <= kv->len[src]);
  if (dst == src) {
    model_kv_truncate(kv, dst, len);
    return;
  }
  if (kv->n_rs_layer > 0 && dst != src) {
    if (len == 0) rs_reset(kv, dst);
    else if (len != kv->rs_len[src]) kv->rs_len[dst] = -1;
    else {
      for (int l = 0; l < kv->n_rs_layer; l++) {
        memcpy(model_kv_conv(kv, l, dst), model_kv_conv(kv, l, src), (size_t)kv->conv_dim * kv->conv_w * sizeof(float));
        memcpy(model_kv_ssm(kv, l, dst), model_kv_ssm(kv, l, src),
               (size_t)kv->n_v_heads * model_kv_ssm_head(kv) * sizeof(float));
      }
      kv->rs_len[dst] = len;
    }
  }
  if (dst != src)
    for (int l = 0; l < kv->n_layer; l++)
      for (int h = 0; h < kv->n_head_kv; h++) {
        memcpy(model_kv_k(kv, l, dst, h, 0), model_kv_k(kv, l, src, h, 0), (size_t)len * kv->row_k);
        memcpy(model_kv_v(kv, l, dst, h, 0), model_kv_v(kv, l, src, h, 0), (size_t)len * kv->row_v);
      }
  kv->len[dst] = len;
}

/* ---- batch scratch and the forward pass --------------------------------- */

int model_ctx_create(const model *m, int max_batch, int max_ctx, model_ctx **out, char *err) {
  *out = NULL;
  if (max_batch < 1 || max_batch > 65536 || max_ctx < 1)
    return pw_seterr(err, PW_EINVAL, "invalid batch size %d", max_batch);
  model_ctx *c = calloc(1, sizeof *c);
  if (!c) return pw_seterr(err, PW_ENOMEM, "out of memory");
  const model_hparams *hp = &m->hp;
  c->m = m;
  c->max_batch = max_batch;
  c->max_ctx = max_ctx;
  size_t B = (size_t)max_batch, qd = (size_t)hp->n_head * hp->head_dim, kvd = (size_t)hp->n_head_kv * hp->head_dim;
  c->x = alloc_lines(B * hp->n_embd * sizeof(float));
  c->xn = alloc_lines(B * (qd > (size_t)hp->n_embd ? qd : (size_t)hp->n_embd) * sizeof(float));
  c->q = alloc_lines(B * qd * sizeof(float));
  c->k = alloc_lines(B * kvd * sizeof(float));
  c->v = alloc_lines(B * kvd * sizeof(float));
  c->att = alloc_lines(B * qd * sizeof(float));
  c->gate = alloc_lines(B * hp->n_ff * sizeof(float));
  c->up = alloc_lines(B * hp->n_ff * sizeof(float));
  c->rows = alloc_lines(B * hp->n_embd * sizeof(float));
  c->rope_cos = malloc(B * hp->head_dim / 2 * sizeof(float));
  c->rope_sin = malloc(B * hp->head_dim / 2 * sizeof(float));
  if (hp->n_swa > 0 && hp->rope_base_swa > 0) {
    c->rope_cos_swa = malloc(B * hp->head_dim / 2 * sizeof(float));
    c->rope_sin_swa = malloc(B * hp->head_dim / 2 * sizeof(float));
  }
  c->att_groups = malloc((B + 1) * sizeof(int));
  bool split_err = false;
  if (pw_attn_spans(max_ctx) > 1) {
    /* enough rows for one span of a full batch, and up to about 16 MiB for
     * several spans per wave (fewer waves, fewer pool runs) */
    const size_t one = B * hp->n_head, all = one * (size_t)pw_attn_spans(max_ctx);
    size_t rows = ((size_t)16 << 20) / (((size_t)hp->head_dim + 2) * sizeof(float));
    if (rows > all) rows = all;
    if (rows < one) rows = one;
    c->att_part_rows = rows;
    c->att_part = alloc_lines(rows * hp->head_dim * sizeof(float));
    c->att_part_ms = malloc(rows * 2 * sizeof(float));
    c->att_rms = malloc(one * 2 * sizeof(float));
    split_err = !c->att_part || !c->att_part_ms || !c->att_rms;
  }
  size_t act = m->ad->act_floats ? m->ad->act_floats(m, max_batch) : 0;
  if (act) c->arch_act = alloc_lines(act * sizeof(float));
  /* Scratch for the largest activation quantization of any matmul. */
  size_t mm = 0;
  for (int l = 0; l < hp->n_layer; l++) {
    size_t s = m->ad->scratch_size(m, l, max_batch);
    if (s > mm) mm = s;
  }
  size_t so = pw_matmul_scratch_size(m->output.type, m->output.n_in, max_batch);
  if (so > mm) mm = so;
  if (m->has_mtp && (so = model_mtp_scratch_size(m, max_batch)) > mm) mm = so;
  c->mm_scratch = alloc_lines(mm ? mm : 1);
  if (!c->x || !c->xn || !c->q || !c->k || !c->v || !c->att || !c->gate || !c->up || !c->rows ||
      !c->rope_cos || !c->rope_sin || !c->att_groups || !c->mm_scratch || (act && !c->arch_act) || split_err ||
      (hp->n_swa > 0 && hp->rope_base_swa > 0 && (!c->rope_cos_swa || !c->rope_sin_swa))) {
    model_ctx_destroy(c);
    return pw_seterr(err, PW_ENOMEM, "out of memory for batch scratch");
  }
  *out = c;
  return 0;
}

void model_ctx_destroy(model_ctx *c) {
  if (!c) return;
  free(c->x);
  free(c->xn);
  free(c->q);
  free(c->k);
  free(c->v);
  free(c->att);
  free(c->gate);
  free(c->up);
  free(c->rows);
  free(c->rope_cos);
  free(c->rope_sin);
  free(c->att_part);
  free(c->att_part_ms);
  free(c->att_rms);
  free(c->rope_cos_swa);
  free(c->rope_sin_swa);
  free(c->att_groups);
  free(c->arch_act);
  free(c->mm_scratch);
  free(c);
}

/* ---- streamed matrices (a memory budget, weights.h) ----------------------
 * The embedding and output matrices stream in row pieces: an entry's row
 * is read with its piece held; the logits are computed piece by piece, one
 * entry at a time when there are several (batch invariance: the same bits
 * as one matmul over all of them). */
static const char *output_name(const model *m) {
  return m->output.data == m->tok_embd.data ? "token_embd.weight" : "output.weight";
}

static int embed_rows(model_ctx *c, const model_entry *e, int n, char *err) {
  const model *m = c->m;
  const int E = m->hp.n_embd;
  if (!weights_streaming(m->w)) {
    for (int t = 0; t < n; t++) pw_get_row(m->tok_embd.type, m->tok_embd.data, E, e[t].token, c->x + (size_t)t * E);
    return 0;
  }
  /* a row's bytes (at most n_embd floats) through c->xn, free until the
   * first layer's norm */
  const uint64_t rb = pw_dtype_row_size(m->tok_embd.type, (uint64_t)E);
  for (int t = 0; t < n; t++) {
    int rc = weights_copy(m->w, (const uint8_t *)m->tok_embd.data + (uint64_t)e[t].token * rb, (size_t)rb, c->xn, err);
    if (rc) return rc;
    pw_get_row(m->tok_embd.type, c->xn, E, 0, c->x + (size_t)t * E);
  }
  return 0;
}

static int output_logits(model_ctx *c, int nw, float *logits, char *err) {
  const model *m = c->m;
  weights_rows wr;
  weights_tensor_rows(m->w, output_name(m), &wr);
  if (wr.n == 0) {
    m->be->matmul(c, &m->output, c->rows, nw, logits);
    return 0;
  }
  const int E = m->hp.n_embd;
  const uint64_t rb = pw_dtype_row_size(m->output.type, (uint64_t)m->output.n_in);
  for (int k = 0; k < wr.n; k++) {
    model_weight piece = m->output;
    piece.data = (const uint8_t *)m->output.data + (uint64_t)wr.row0[k] * rb;
    piece.n_out = wr.row0[k + 1] - wr.row0[k];
    int rc = weights_acquire(m->w, wr.unit[k], err);
    if (rc) return rc;
    if (nw == 1) m->be->matmul(c, &piece, c->rows, 1, logits + wr.row0[k]);
    else
      for (int i = 0; i < nw; i++)
        m->be->matmul(c, &piece, c->rows + (size_t)i * E, 1, logits + (size_t)i * m->hp.n_vocab + wr.row0[k]);
    weights_release(m->w, wr.unit[k]);
  }
  return 0;
}

int model_forward(model_ctx *c, model_kv *kv, const model_entry *e, int n, float *logits, float *hidden,
                  char *err) {
  const model *m = c->m;
  const model_hparams *hp = &m->hp;
  if (n < 1 || n > c->max_batch) return pw_seterr(err, PW_EINVAL, "batch of %d entries (limit %d)", n, c->max_batch);
  /* Validate every entry before touching the cache: positions must extend
   * each sequence contiguously. */
  for (int t = 0; t < n; t++) {
    if (e[t].seq < 0 || e[t].seq >= kv->n_seq)
      return pw_seterr(err, PW_EINVAL, "entry %d: sequence %d out of range", t, e[t].seq);
    if (e[t].token < 0 || e[t].token >= hp->n_vocab)
      return pw_seterr(err, PW_EINVAL, "entry %d: token %d out of range (vocabulary %d)", t, e[t].token, hp->n_vocab);
    int expect = kv->len[e[t].seq];
    for (int u = 0; u < t; u++)
      if (e[u].seq == e[t].seq) expect++;
    if (e[t].pos != expect)
      return pw_seterr(err, PW_EINVAL, "entry %d: position %d does not continue sequence %d (expected %d)", t,
                       e[t].pos, e[t].seq, expect);
    if (e[t].pos >= kv->n_ctx || e[t].pos >= c->max_ctx)
      return pw_seterr(err, PW_ECONTEXT, "sequence %d: position %d exceeds the context of %d", e[t].seq, e[t].pos,
                       kv->n_ctx);
    /* a recurrent state holds exactly the positions it has seen: a
     * sequence cut back to the middle must be restored or restarted */
    if (kv->n_rs_layer > 0 && e[t].pos > 0 && kv->rs_len[e[t].seq] != kv->len[e[t].seq])
      return pw_seterr(err, PW_EINVAL,
                       "sequence %d: its recurrent state does not match its %d positions (cut back without a "
                       "snapshot)",
                       e[t].seq, kv->len[e[t].seq]);
  }
  if (kv->n_rs_layer > 0)
    for (int t = 0; t < n; t++)
      if (e[t].pos == 0) rs_reset(kv, e[t].seq);
  if (m->ad->encoder && logits) return pw_seterr(err, PW_EINVAL, "%s is an embedding model: it has no logits", hp->arch_name);
  const int E = hp->n_embd;
  const model_backend *be = m->be;
  int rc = embed_rows(c, e, n, err);
  if (rc) return rc;
  if (hp->emb_scale != 0) be->scale(c, c->x, c->x, hp->emb_scale, (int64_t)n * E);
  if (m->ad->embed && (rc = m->ad->embed(c, e, n, err)) < 0) return rc;
  be->begin(c, e, n);
  for (int il = 0; il < hp->n_layer; il++) {
    /* under a memory budget the layer's weights are streamed in: held
     * for the layer, the next one read meanwhile (weights.h) */
    const int u = weights_layer_unit(m->w, il);
    if ((rc = weights_acquire(m->w, u, err))) return rc;
    m->ad->layer(c, kv, e, n, il);
    weights_release(m->w, u);
  }
  for (int t = 0; t < n; t++) kv->len[e[t].seq] = e[t].pos + 1 > kv->len[e[t].seq] ? e[t].pos + 1 : kv->len[e[t].seq];
  if (kv->n_rs_layer > 0)
    for (int t = 0; t < n; t++) kv->rs_len[e[t].seq] = kv->len[e[t].seq];
  int nw = 0;
  for (int t = 0; t < n; t++)
    if (e[t].want_logits) {
      if (m->ad->encoder) /* the last layer ends with its own norm */
        memcpy(c->rows + (size_t)nw * E, c->x + (size_t)t * E, (size_t)E * sizeof(float));
      else
        be->rmsnorm(c, c->rows + (size_t)nw * E, c->x + (size_t)t * E, m->output_norm, 1, E, hp->rms_eps);
      nw++;
    }
  if (nw == 0) return 0;
  if (hidden) memcpy(hidden, c->rows, (size_t)nw * E * sizeof(float));
  if (logits) {
    /* the next step starts with layer 0's q, k and v */
    m->ad->prefetch_layer(c, 0, nw);
    if ((rc = output_logits(c, nw, logits, err))) return rc;
    if (hp->logit_scale != 0) { /* granite: as llama.cpp, times the reciprocal */
      const float inv = 1.0f / hp->logit_scale;
      for (size_t i = 0; i < (size_t)nw * hp->n_vocab; i++) logits[i] *= inv;
    }
    if (hp->logit_softcap > 0) { /* cap * tanh(logits / cap), as llama.cpp's scale, tanh, scale */
      const float cap = hp->logit_softcap;
      for (size_t i = 0; i < (size_t)nw * hp->n_vocab; i++) logits[i] = tanhf(logits[i] * (1.0f / cap)) * cap;
    }
  }
  return 0;
}

void model_ctx_hidden(model_ctx *c, int n, float *out) {
  const model *m = c->m;
  PW_ASSERT(n >= 0 && n <= c->max_batch);
  m->be->rmsnorm(c, out, c->x, m->output_norm, n, m->hp.n_embd, m->hp.rms_eps);
}
