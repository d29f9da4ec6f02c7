/* traits.c - fills the per-dtype kernel table once: scalar references
 * first, then the AVX2/FMA/F16C variants when the CPU has all three and
 * POWER_NO_SIMD is not set. Not a kernel file: the kernels live in
 * quants.c and arch/. */
#include "tensor/traits.h"

#include "tensor/dtype.h"
#include "tensor/ops.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

static pw_traits g_tab[PW_DT_COUNT];
static pw_traits g_ref[PW_DT_COUNT];
static int g_simd;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static int cpu_has_avx2(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
#else
  return 0;
#endif
}

static void init_once(void) {
  quants_fill_ref(g_ref);
  memcpy(g_tab, g_ref, sizeof g_tab);
  const char *no = getenv("POWER_NO_SIMD");
  int forbid = no && *no && strcmp(no, "0") != 0;
  g_simd = !forbid && cpu_has_avx2();
  if (g_simd) quants_fill_avx2(g_tab);
  ops_select(g_simd);
}

void pw_tensor_init(void) { pthread_once(&g_once, init_once); }

int pw_tensor_simd(void) {
  pw_tensor_init();
  return g_simd;
}

const pw_traits *pw_traits_get(uint32_t dtype) {
  pw_tensor_init();
  if (dtype >= PW_DT_COUNT || !g_tab[dtype].to_float) return NULL;
  return &g_tab[dtype];
}

const pw_traits *pw_traits_ref(uint32_t dtype) {
  pw_tensor_init();
  if (dtype >= PW_DT_COUNT || !g_ref[dtype].to_float) return NULL;
  return &g_ref[dtype];
}
