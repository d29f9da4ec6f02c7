/* dtype.c - the dtype size table. */
#include "tensor/dtype.h"
#include <stddef.h>

#define QK_K 256
static const pw_dtype_info g_info[PW_DT_COUNT] = {
    [PW_DT_F32] = {"F32", 1, 4, 1},
    [PW_DT_F16] = {"F16", 1, 2, 1},
    [PW_DT_Q4_0] = {"Q4_0", 32, 18, 1},
    [PW_DT_Q4_1] = {"Q4_1", 32, 20, 1},
    [PW_DT_Q5_0] = {"Q5_0", 32, 22, 1},
    [PW_DT_Q5_1] = {"Q5_1", 32, 24, 1},
    [PW_DT_Q8_0] = {"Q8_0", 32, 34, 1},
    [PW_DT_Q8_1] = {"Q8_1", 32, 36, 0},
    [PW_DT_Q2_K] = {"Q2_K", QK_K, 84, 1},
    [PW_DT_Q3_K] = {"Q3_K", QK_K, 110, 1},
    [PW_DT_Q4_K] = {"Q4_K", QK_K, 144, 1},
    [PW_DT_Q5_K] = {"Q5_K", QK_K, 176, 1},
    [PW_DT_Q6_K] = {"Q6_K", QK_K, 210, 1},
    [PW_DT_Q8_K] = {"Q8_K", QK_K, 292, 0},
    [PW_DT_IQ4_NL] = {"IQ4_NL", 32, 18, 1},
    [PW_DT_IQ4_XS] = {"IQ4_XS", QK_K, 136, 1},
    [PW_DT_BF16] = {"BF16", 1, 2, 1},
    [PW_DT_MXFP4] = {"MXFP4", 32, 17, 1},
};

const pw_dtype_info *pw_dtype_get(uint32_t id) {
  if (id >= PW_DT_COUNT || !g_info[id].name) return NULL;
  return &g_info[id];
}

const char *pw_dtype_name(uint32_t id) {
  const pw_dtype_info *d = pw_dtype_get(id);
  return d ? d->name : NULL;
}

uint64_t pw_dtype_row_size(uint32_t id, uint64_t n) {
  const pw_dtype_info *d = pw_dtype_get(id);
  if (!d || n % d->blck) return 0;
  return n / d->blck * d->type_size;
}
