/* pretok.h - byte-level BPE pre-tokenizers: split text (as code points) into
 * the words BPE merges within. Each pre-tokenizer is llama.cpp's list of
 * regexes for a tokenizer.ggml.pre name, applied one after another (each
 * splits every piece of the previous one), implemented as hand-written
 * matchers over Unicode categories with the exact semantics llama.cpp gets
 * (its custom GPT-2/Llama-3 splitters, std::regex for the others).
 * Not here: byte-level encoding and merging (bpe.c). */
#ifndef PW_TOK_PRETOK_H
#define PW_TOK_PRETOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tok_pre_def tok_pre_def;

/* The pre-tokenizer for a tokenizer.ggml.pre value; NULL if unsupported. */
const tok_pre_def *tok_pre_lookup(const char *name, size_t len);
/* Flags llama.cpp attaches to the name. */
bool tok_pre_ignore_merges(const tok_pre_def *d); /* whole word in vocab -> one token */
bool tok_pre_add_bos(const tok_pre_def *d);       /* default add_bos */
bool tok_pre_no_bos(const tok_pre_def *d);        /* default has no BOS at all */
/* Comma-separated list of supported names (for error messages). */
const char *tok_pre_supported(void);

/* Splits cp[0..n) (n > 0; fl[i] = tok_uflags(cp[i])) into pieces and writes
 * their lengths in code points to seg; returns the piece count (<= n).
 * seg and tmp are caller scratch of n entries each; n < 2^32. */
size_t tok_pretok_split(const tok_pre_def *d, const uint32_t *cp, const uint8_t *fl, size_t n,
                        uint32_t *seg, uint32_t *tmp);

#endif
