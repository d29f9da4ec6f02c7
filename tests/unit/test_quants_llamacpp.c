/* test_quants_llamacpp.c - Power's IQ4_NL, IQ4_XS and MXFP4 quantizers and
 * dequantizers against llama.cpp's own, bit for bit.
 *
 * llama-quantize turns rows into these types with ggml_quantize_chunk (no
 * importance matrix given); that function and the dequantizers live in
 * libggml-base.so of node-llama-cpp's prebuilt release (tests/peer's
 * node_modules), which this test loads with dlopen. Rows of varied shapes
 * and magnitudes (Gaussian, heavy-tailed, all-zero and one-hot groups,
 * tiny and large scales, exact grid points) are quantized by both; every
 * output byte must match. Dequantized blocks (random indices and valid
 * scales) must match to the bit as well.
 *
 * Needs the peer's node_modules (scripts/install-node-deps.sh); fails with
 * a message saying so when it is missing. */
#include "tensor/dtype.h"
#include "tensor/quants.h"
#include "tensor/traits.h"
#include "test.h"

#include <dlfcn.h>
#include <math.h>
#include <libgen.h>
#include <stdint.h>

/* ggml's ABI: the type ids are the GGUF ones (PW_DT_*) */
typedef size_t (*quantize_chunk_fn)(int type, const float *src, void *dst, int64_t start, int64_t nrows,
                                    int64_t n_per_row, const float *imatrix);
typedef void (*dequant_fn)(const void *x, float *y, int64_t k);

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(void) {
  g_rng ^= g_rng << 13;
  g_rng ^= g_rng >> 7;
  g_rng ^= g_rng << 17;
  return (uint32_t)(g_rng >> 16);
}
static float frand(void) { return (float)(rnd() & 0xFFFFFF) / 16777216.0f * 2 - 1; }
static float grand(void) { return (frand() + frand() + frand() + frand()) * 0.8660254f; }

enum { NROW = 6, NCOL = 2048, NKIND = 9 };

/* row kind k of NCOL values */
static void make_row(float *x, int kind) {
  for (int i = 0; i < NCOL; i++) {
    float v = grand();
    switch (kind) {
    case 0: break;                                                  /* Gaussian */
    case 1: v = v * v * v; break;                                   /* heavy tails */
    case 2: v *= 1e-20f; break;                                     /* tiny */
    case 3: v *= 3e4f; break;                                       /* large */
    case 4: if ((i / 32) % 3 == 0) v = 0; break;                    /* zero groups */
    case 5: v = (i % 32 == 7) ? 5.0f : 0.0f; break;                 /* one-hot groups */
    case 6: v = (float)((int)(rnd() % 25) - 12) * 0.125f; break;    /* exact grid points */
    case 7: v = (i / 256) % 2 ? v * 1e-3f : v; break;               /* mixed scales */
    default: v = 0.02f * v + ((i / 64) % 2 ? 0.3f : -0.3f); break;   /* one-sided groups */
    }
    x[i] = v;
  }
}

static void check_type(quantize_chunk_fn qc, uint32_t dt) {
  static float x[NROW * NCOL];
  static uint8_t mine[NROW * NCOL], theirs[NROW * NCOL];
  const size_t rb = (size_t)pw_dtype_row_size(dt, NCOL), bs = pw_dtype_get(dt)->type_size;
  int bad_blocks = 0, blocks = 0;
  for (int kind = 0; kind < NKIND; kind++) {
    for (int r = 0; r < NROW; r++) make_row(x + (size_t)r * NCOL, kind);
    memset(mine, 0xAA, sizeof mine);
    memset(theirs, 0x55, sizeof theirs);
    for (int r = 0; r < NROW; r++) pw_traits_get(dt)->from_float(x + (size_t)r * NCOL, mine + r * rb, NCOL);
    const size_t got = qc((int)dt, x, theirs, 0, NROW, NCOL, NULL);
    CHECK_MSG(got == NROW * rb, "%s: llama.cpp wrote %zu bytes, expected %zu", pw_dtype_name(dt), got, NROW * rb);
    for (size_t b = 0; b < NROW * rb / bs; b++) {
      blocks++;
      if (memcmp(mine + b * bs, theirs + b * bs, bs) != 0) {
        if (bad_blocks < 3) {
          fprintf(stderr, "%s row kind %d block %zu differs:\n  power:", pw_dtype_name(dt), kind, b);
          for (size_t k = 0; k < bs && k < 24; k++) fprintf(stderr, " %02x", mine[b * bs + k]);
          fprintf(stderr, "\n  llama:");
          for (size_t k = 0; k < bs && k < 24; k++) fprintf(stderr, " %02x", theirs[b * bs + k]);
          fprintf(stderr, "\n");
        }
        bad_blocks++;
      }
    }
  }
  CHECK_MSG(bad_blocks == 0, "%s: %d of %d blocks differ from llama.cpp's quantizer", pw_dtype_name(dt), bad_blocks,
            blocks);
  fprintf(stderr, "  %-6s quantize: %d blocks, %d differ\n", pw_dtype_name(dt), blocks, bad_blocks);
}

/* The IQ4 quantizers pick an index by counting the table's midpoints not
 * above v; llama.cpp by bisecting to the pair around v and taking the
 * lower one where v - t[lo] < t[lo + 1] - v. That test is monotonic in v
 * (each side rounds monotonically), so the two agree everywhere if, for
 * each pair, it holds just below the midpoint and fails at it. */
static int below_mid(float v, int k) {
  const int8_t *t = pw_kvalues_iq4nl;
  return v - t[k] < t[k + 1] - v;
}
static void check_iq4_midpoints(void) {
  const float *m = pw_iq4_midpoints();
  const int8_t *t = pw_kvalues_iq4nl;
  for (int k = 0; k < 15; k++) {
    CHECK_MSG(m[k] == (t[k] + t[k + 1]) * 0.5f, "IQ4 midpoint %d is %g", k, (double)m[k]);
    CHECK_MSG(below_mid(nextafterf(m[k], -INFINITY), k) && !below_mid(m[k], k),
              "IQ4 pair %d: llama.cpp's nearest-value test does not turn at %g", k, (double)m[k]);
    CHECK(below_mid((float)t[k], k) && !below_mid((float)t[k + 1], k));
  }
}

static void check_dequant(dequant_fn theirs, uint32_t dt) {
  enum { N = 4096 };
  static uint8_t w[N];
  static float a[N], b[N];
  const pw_dtype_info *di = pw_dtype_get(dt);
  for (int trial = 0; trial < 20; trial++) {
    for (size_t i = 0; i < sizeof w; i++) w[i] = (uint8_t)rnd();
    for (int64_t k = 0; k < N / di->blck; k++) {
      uint8_t *p = w + k * di->type_size;
      if (dt == PW_DT_MXFP4) {
        p[0] = (uint8_t)(trial == 0 ? rnd() % 2 : trial == 1 ? 250 + rnd() % 6 : 100 + rnd() % 50);
      } else { /* a finite fp16 scale */
        uint16_t h = pw_fp32_to_fp16(frand() * (trial == 1 ? 6e4f : 0.1f));
        memcpy(p, &h, 2);
      }
    }
    pw_ref_dequant(dt, w, a, N);
    theirs(w, b, N);
    CHECK_MSG(memcmp(a, b, sizeof a) == 0, "%s dequantize differs from llama.cpp's (trial %d)", pw_dtype_name(dt),
              trial);
    pw_traits_get(dt)->to_float(w, a, N);
    CHECK_MSG(memcmp(a, b, sizeof a) == 0, "%s installed dequantize differs (trial %d)", pw_dtype_name(dt), trial);
  }
}

int main(void) {
  char src[1024], lib[2048];
  snprintf(src, sizeof src, "%s", __FILE__);
  snprintf(lib, sizeof lib, "%s/../peer/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so",
           dirname(src));
  void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    fprintf(stderr, "FAIL: cannot load llama.cpp's libggml-base.so (%s); run scripts/install-node-deps.sh first\n",
            dlerror());
    return 1;
  }
  quantize_chunk_fn qc;
  dequant_fn d_nl, d_xs, d_mx;
  *(void **)&qc = dlsym(h, "ggml_quantize_chunk");
  *(void **)&d_nl = dlsym(h, "dequantize_row_iq4_nl");
  *(void **)&d_xs = dlsym(h, "dequantize_row_iq4_xs");
  *(void **)&d_mx = dlsym(h, "dequantize_row_mxfp4");
  CHECK(qc && d_nl && d_xs && d_mx);
  if (!qc || !d_nl || !d_xs || !d_mx) return 1;
  pw_tensor_init();
  check_iq4_midpoints();
  check_type(qc, PW_DT_IQ4_NL);
  check_type(qc, PW_DT_IQ4_XS);
  check_type(qc, PW_DT_MXFP4);
  check_dequant(d_nl, PW_DT_IQ4_NL);
  check_dequant(d_xs, PW_DT_IQ4_XS);
  check_dequant(d_mx, PW_DT_MXFP4);
  dlclose(h);
  TEST_DONE();
}
