/* traits.c - fills the per-dtype kernel tables once: scalar references
 * first, then one table per SIMD level the CPU supports (each level starts
 * from the one below and replaces what it implements), and installs the
 * highest level allowed by the environment. Not a kernel file: the kernels
 * live in quants.c and arch/. */
#include "tensor/traits.h"

#include "tensor/dtype.h"
#include "tensor/ops.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pw_traits g_lvl[PW_IMPL_COUNT][PW_DT_COUNT];
static int g_max;   /* highest level available (CPU and environment) */
static int g_vbmi;  /* the AVX-512 level's VBMI GEMM is installed */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) || defined(__i386__)
/* F16C from CPUID leaf 1 (ECX bit 29): some clang releases do not accept
 * "f16c" in __builtin_cpu_supports. */
static int cpu_f16c(void) {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}
#endif

static int cpu_level(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_f16c()))
    return PW_IMPL_SCALAR;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vnni"))
    return PW_IMPL_AVX512;
  return PW_IMPL_AVX2;
#else
  return PW_IMPL_SCALAR;
#endif
}

/* the AVX-512 level's GEMM also needs VBMI and BITALG */
static int cpu_vbmi(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512vbmi") && __builtin_cpu_supports("avx512bitalg");
#else
  return 0;
#endif
}

/* POWER_NO_SIMD=1 -> scalar; POWER_SIMD=scalar|avx2|avx512 caps the level;
 * POWER_SIMD=avx512novbmi keeps the AVX-512 level without its VBMI GEMM
 * (as on a CPU with VNNI but not VBMI, e.g. Cascade Lake). */
static int env_cap(void) {
  const char *no = getenv("POWER_NO_SIMD");
  if (no && *no && strcmp(no, "0") != 0) return PW_IMPL_SCALAR;
  const char *s = getenv("POWER_SIMD");
  if (!s || !*s) return PW_IMPL_COUNT - 1;
  if (strcmp(s, "scalar") == 0) return PW_IMPL_SCALAR;
  if (strcmp(s, "avx2") == 0) return PW_IMPL_AVX2;
  return PW_IMPL_COUNT - 1;
}

static void init_once(void) {
  quants_fill_ref(g_lvl[PW_IMPL_SCALAR]);
  const int cpu = cpu_level(), cap = env_cap();
  g_max = cpu < cap ? cpu : cap;
  if (g_max >= PW_IMPL_AVX2) {
    memcpy(g_lvl[PW_IMPL_AVX2], g_lvl[PW_IMPL_SCALAR], sizeof g_lvl[0]);
    quants_fill_avx2(g_lvl[PW_IMPL_AVX2]);
    gemm_fill_avx2(g_lvl[PW_IMPL_AVX2]);
  }
  if (g_max >= PW_IMPL_AVX512) {
    memcpy(g_lvl[PW_IMPL_AVX512], g_lvl[PW_IMPL_AVX2], sizeof g_lvl[0]);
    /* the AVX-512 vec_dot kernels beat the AVX2 GEMM; this level's own
     * GEMM (VBMI) is installed below where the CPU has it */
    for (int i = 0; i < PW_DT_COUNT; i++) {
      g_lvl[PW_IMPL_AVX512][i].gemm = NULL;
      g_lvl[PW_IMPL_AVX512][i].gemm_pack = NULL;
      g_lvl[PW_IMPL_AVX512][i].gemm_xrow = NULL;
    }
    quants_fill_avx512(g_lvl[PW_IMPL_AVX512]);
    const char *simd = getenv("POWER_SIMD");
    if (cpu_vbmi() && !(simd && strcmp(simd, "avx512novbmi") == 0)) {
      gemm_fill_avx512vbmi(g_lvl[PW_IMPL_AVX512]);
      g_vbmi = 1;
    }
  }
  ops_select(g_max >= PW_IMPL_AVX2);
}

void pw_tensor_init(void) { pthread_once(&g_once, init_once); }

int pw_tensor_simd(void) {
  pw_tensor_init();
  return g_max >= PW_IMPL_AVX2;
}

int pw_tensor_level(void) {
  pw_tensor_init();
  return g_max;
}

const char *pw_tensor_kernels(void) {
  pw_tensor_init();
  if (g_max >= PW_IMPL_AVX512) return g_vbmi ? "avx512-vbmi" : "avx512";
  return g_max >= PW_IMPL_AVX2 ? "avx2" : "scalar";
}

const pw_traits *pw_traits_get_impl(uint32_t dtype, int level) {
  pw_tensor_init();
  if (level < 0 || level > g_max || dtype >= PW_DT_COUNT || !g_lvl[level][dtype].to_float) return NULL;
  return &g_lvl[level][dtype];
}

const pw_traits *pw_traits_get(uint32_t dtype) { return pw_traits_get_impl(dtype, pw_tensor_level()); }

const pw_traits *pw_traits_ref(uint32_t dtype) { return pw_traits_get_impl(dtype, PW_IMPL_SCALAR); }
