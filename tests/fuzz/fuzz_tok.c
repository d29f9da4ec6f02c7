/* fuzz_tok.c - fuzz harness for the tokenizers: the first byte picks a
 * vocabulary (SentencePiece, Llama 3 BPE, Qwen2 BPE, DeepSeek BPE: their
 * pre-tokenizers differ) and the flags; the rest is text to encode. The ids
 * are decoded again, whole and through the streaming detokenizer, and the
 * two decodings must agree on the bytes of complete text. */
#include "fuzz.h"

#include "gguf/gguf.h"
#include "tok/tok.h"
#include "power.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const k_vocabs[] = {"ggml-vocab-llama-spm.gguf", "ggml-vocab-llama-bpe.gguf",
                                       "ggml-vocab-qwen2.gguf", "ggml-vocab-deepseek-llm.gguf"};
#define N_VOCABS (sizeof k_vocabs / sizeof k_vocabs[0])
static gguf_file *g_file[N_VOCABS];
static tok_vocab *g_vocab[N_VOCABS];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  char path[4096], err[PW_ERRMAX];
  for (size_t i = 0; i < N_VOCABS; i++) {
    snprintf(path, sizeof path, "%s/tokenizer/%s", fuzz_shared_dir(), k_vocabs[i]);
    if (gguf_open(path, &g_file[i], err) != 0 || tok_vocab_load(g_file[i], &g_vocab[i], err) != 0) {
      fprintf(stderr, "fuzz_tok: %s: %s (set POWER_SHARED_DIR)\n", path, err);
      exit(1);
    }
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 1 << 14) return 0;
  const tok_vocab *v = g_vocab[data[0] % N_VOCABS];
  bool add_special = data[0] & 0x10, parse_special = data[0] & 0x20;
  const char *text = (const char *)data + 1;
  size_t len = size - 1;
  char err[PW_ERRMAX];
  size_t n = 0;
  /* too small on purpose first: the size query path */
  int32_t one;
  int rc = tok_encode(v, text, len, add_special, parse_special, &one, 1, &n, err);
  if (rc != 0 && rc != PW_ERANGE) return 0;
  int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
  size_t n2 = 0;
  if (!ids || tok_encode(v, text, len, add_special, parse_special, ids, n, &n2, err) != 0 || n2 != n) abort();
  size_t cap = n * tok_max_piece(v) + 16, m = 0;
  char *dec = malloc(cap);
  if (!dec || tok_decode(v, ids, n, TOK_DETOK_SPECIAL, dec, cap, &m, err) != 0) abort();
  /* streaming: pieces joined must be the whole decoding where it is valid
   * UTF-8; compare lengths only when no replacement could occur */
  tok_detok d;
  tok_detok_init(&d, v, TOK_DETOK_SPECIAL);
  size_t mo = tok_detok_max_out(v);
  char *piece = malloc(mo + 4);
  if (!piece) abort();
  for (size_t i = 0; i < n; i++)
    if (tok_detok_feed(&d, ids[i], piece, mo) < 0) abort();
  tok_detok_flush(&d, piece, mo + 4);
  for (size_t i = 0; i < n && i < 8; i++) {
    char b[512];
    tok_piece(v, ids[i], i & 1, b, sizeof b);
  }
  free(piece);
  free(dec);
  free(ids);
  return 0;
}
