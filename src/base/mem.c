/* mem.c - buffers in 2 MiB pages. */
#include "base/mem.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>

void *pw_alloc_huge(size_t bytes) {
  const size_t huge = 2u << 20;
  if (bytes > SIZE_MAX - huge) return NULL;
  const size_t cap = (bytes + huge - 1) / huge * huge;
  void *p = aligned_alloc(huge, cap ? cap : huge);
#ifdef MADV_HUGEPAGE
  if (p) madvise(p, cap ? cap : huge, MADV_HUGEPAGE);
#endif
  return p;
}
