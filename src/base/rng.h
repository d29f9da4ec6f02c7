/* rng.h - small deterministic PRNG (xoshiro256**), one state per request.
 * Same seed gives the same stream on every machine and thread count. */
#ifndef PW_BASE_RNG_H
#define PW_BASE_RNG_H
#include <stdint.h>
typedef struct pw_rng {
  uint64_t s[4];
} pw_rng;
void pw_rng_seed(pw_rng *r, uint64_t seed);
uint64_t pw_rng_next(pw_rng *r);
/* Uniform double in [0, 1). */
double pw_rng_uniform(pw_rng *r);
#endif
