/* fuzz.h - the contract between a fuzz harness and its two drivers.
 *
 * Each fuzz_<name>.c defines LLVMFuzzerTestOneInput (one input, any bytes;
 * must neither crash, leak nor hang) and may define fuzz_init (run once).
 * Built with clang and -fsanitize=fuzzer it is a libFuzzer binary
 * (`make fuzz`); built with replay.c under the normal toolchain it replays
 * a seed corpus, which is how the test suite runs it. */
#ifndef PW_FUZZ_H
#define PW_FUZZ_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Directory of the shared test assets (vocabularies): the environment's
 * POWER_SHARED_DIR, else the path the build was configured with. */
const char *fuzz_shared_dir(void);

#endif
