/* mem.h - buffers in 2 MiB pages. */
#ifndef PW_BASE_MEM_H
#define PW_BASE_MEM_H
#include <stddef.h>
/* bytes rounded up to whole 2 MiB, 2 MiB-aligned, and asked for 2 MiB pages
 * where the kernel gives them (buffers read whole every step: one TLB entry
 * per 2 MiB). NULL on failure or overflow. Freed with free(). */
void *pw_alloc_huge(size_t bytes);
#endif
