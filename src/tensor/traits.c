/* traits.c - fills the per-dtype kernel tables once: scalar references
 * first, then one table per SIMD level the CPU supports (each level starts
 * from the AVX2 table, AVX2 from the scalar one, and replaces what it
 * implements), and installs the highest level allowed by the environment. Not a kernel file: the kernels
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
static int g_avail[PW_IMPL_COUNT]; /* the levels filled (CPU and environment) */
static int g_max;   /* the installed level: the highest one available */
static int g_vbmi;  /* the AVX-512 level's VBMI GEMM is installed */
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

#if defined(__x86_64__) || defined(__i386__)
/* F16C from CPUID leaf 1 (ECX bit 29): some clang releases do not accept
 * "f16c" in __builtin_cpu_supports. */
static int cpu_f16c(void) {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}

/* AVX-VNNI (VEX-encoded vpdpbusd on ymm): CPUID leaf 7 subleaf 1, EAX bit
 * 4, which __builtin_cpu_supports names only in newer compilers; the OS
 * must save the ymm state (OSXSAVE and XCR0 bits 1-2), as for AVX2. */
static int cpu_avxvnni(void) {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & (1u << 27))) return 0;
  unsigned lo, hi;
  __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  if ((lo & 6u) != 6u) return 0;
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4));
}
#endif

/* the levels the CPU can run: has[level] */
static void cpu_levels(int has[PW_IMPL_COUNT]) {
  memset(has, 0, sizeof(int) * PW_IMPL_COUNT);
  has[PW_IMPL_SCALAR] = 1;
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_f16c())) return;
  has[PW_IMPL_AVX2] = 1;
  has[PW_IMPL_AVX2VNNI] = cpu_avxvnni();
  has[PW_IMPL_AVX512] = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512vnni");
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

/* POWER_NO_SIMD=1 -> scalar; POWER_SIMD=scalar|avx2|avx2vnni|avx512 caps
 * the level;
 * POWER_SIMD=avx512novbmi keeps the AVX-512 level without its VBMI GEMM
 * (as on a CPU with VNNI but not VBMI, e.g. Cascade Lake). */
static int env_cap(void) {
  const char *no = getenv("POWER_NO_SIMD");
  if (no && *no && strcmp(no, "0") != 0) return PW_IMPL_SCALAR;
  const char *s = getenv("POWER_SIMD");
  if (!s || !*s) return PW_IMPL_COUNT - 1;
  if (strcmp(s, "scalar") == 0) return PW_IMPL_SCALAR;
  if (strcmp(s, "avx2") == 0) return PW_IMPL_AVX2;
  if (strcmp(s, "avx2vnni") == 0) return PW_IMPL_AVX2VNNI;
  return PW_IMPL_COUNT - 1;
}

static void init_once(void) {
  quants_fill_ref(g_lvl[PW_IMPL_SCALAR]);
  int has[PW_IMPL_COUNT];
  cpu_levels(has);
  const int cap = env_cap();
  for (int l = 0; l < PW_IMPL_COUNT; l++) {
    g_avail[l] = has[l] && l <= cap;
    if (g_avail[l]) g_max = l;
  }
  if (g_avail[PW_IMPL_AVX2]) {
    memcpy(g_lvl[PW_IMPL_AVX2], g_lvl[PW_IMPL_SCALAR], sizeof g_lvl[0]);
    quants_fill_avx2(g_lvl[PW_IMPL_AVX2]);
    gemm_fill_avx2(g_lvl[PW_IMPL_AVX2]);
  }
  if (g_avail[PW_IMPL_AVX2VNNI]) {
    /* the AVX2 kernels with their integer dots on vpdpbusd/vpdpwssd */
    memcpy(g_lvl[PW_IMPL_AVX2VNNI], g_lvl[PW_IMPL_AVX2], sizeof g_lvl[0]);
    quants_fill_avxvnni(g_lvl[PW_IMPL_AVX2VNNI]);
    gemm_fill_avxvnni(g_lvl[PW_IMPL_AVX2VNNI]);
  }
  if (g_avail[PW_IMPL_AVX512]) {
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
  if (g_max == PW_IMPL_AVX2VNNI) return "avx2vnni";
  return g_max >= PW_IMPL_AVX2 ? "avx2" : "scalar";
}

const pw_traits *pw_traits_get_impl(uint32_t dtype, int level) {
  pw_tensor_init();
  if (level < 0 || level >= PW_IMPL_COUNT || !g_avail[level] || dtype >= PW_DT_COUNT ||
      !g_lvl[level][dtype].to_float)
    return NULL;
  return &g_lvl[level][dtype];
}

const pw_traits *pw_traits_get(uint32_t dtype) { return pw_traits_get_impl(dtype, pw_tensor_level()); }

const pw_traits *pw_traits_ref(uint32_t dtype) { return pw_traits_get_impl(dtype, PW_IMPL_SCALAR); }
