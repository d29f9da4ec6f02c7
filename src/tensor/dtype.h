/* dtype.h - weight data types by their GGUF/ggml id: name, block size and
 * bytes per block. Pure data, so the GGUF reader can validate tensor sizes
 * without knowing any kernel. Kernels live in the traits table (traits.h). */
#ifndef PW_TENSOR_DTYPE_H
#define PW_TENSOR_DTYPE_H
#include <stdint.h>

/* ids as in the GGUF specification (ggml_type). */
typedef enum pw_dtype {
  PW_DT_F32 = 0,
  PW_DT_F16 = 1,
  PW_DT_Q4_0 = 2,
  PW_DT_Q4_1 = 3,
  PW_DT_Q5_0 = 6,
  PW_DT_Q5_1 = 7,
  PW_DT_Q8_0 = 8,
  PW_DT_Q8_1 = 9,
  PW_DT_Q2_K = 10,
  PW_DT_Q3_K = 11,
  PW_DT_Q4_K = 12,
  PW_DT_Q5_K = 13,
  PW_DT_Q6_K = 14,
  PW_DT_Q8_K = 15,
  PW_DT_IQ4_NL = 20,
  PW_DT_IQ4_XS = 23,
  PW_DT_BF16 = 30,
  PW_DT_MXFP4 = 39,
  PW_DT_COUNT = 40 /* bound on ids we index by */
} pw_dtype;

typedef struct pw_dtype_info {
  const char *name;    /* "Q4_K" */
  uint32_t blck;       /* elements per block */
  uint32_t type_size;  /* bytes per block */
  int weight_ok;       /* 1 if supported as a model weight type */
} pw_dtype_info;

/* NULL when id is unknown to Power. */
const pw_dtype_info *pw_dtype_get(uint32_t id);
/* Name of a known id, or "type <id>" into a static buffer-free form: returns
 * NULL for unknown ids; callers print the number. */
const char *pw_dtype_name(uint32_t id);
/* Bytes for a row of n elements; 0 if n is not a multiple of the block size
 * or the type is unknown. */
uint64_t pw_dtype_row_size(uint32_t id, uint64_t n);

#endif
