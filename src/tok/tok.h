/* tok.h - tokenizer layer: vocabulary from GGUF metadata, SentencePiece
 * ("llama"), byte-level BPE ("gpt2"), WordPiece ("bert") and unigram ("t5") encoders with
 * their pre-tokenizers,
 * special tokens, and detokenization (pieces and a streaming UTF-8-safe
 * detokenizer). Token ids match llama.cpp's tokenizer.
 *
 * Not here: chat templates (chat/), sampling, model weights.
 *
 * Ownership: a tok_vocab keeps views into the gguf_file's mapping (token
 * texts, merges), so the gguf_file must outlive the tok_vocab. The vocab is
 * immutable after load: every function below may be called concurrently on
 * the same vocab from many threads. */
#ifndef PW_TOK_TOK_H
#define PW_TOK_TOK_H

#include "gguf/gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct tok_vocab tok_vocab;

/* Token attributes (as llama.cpp's llama_token_attr), from
 * tokenizer.ggml.token_type plus llama.cpp's load-time fix-ups. */
enum {
  TOK_ATTR_UNKNOWN = 1 << 0,
  TOK_ATTR_UNUSED = 1 << 1,
  TOK_ATTR_NORMAL = 1 << 2,
  TOK_ATTR_CONTROL = 1 << 3,
  TOK_ATTR_USER_DEFINED = 1 << 4,
  TOK_ATTR_BYTE = 1 << 5,
  TOK_ATTR_LSTRIP = 1 << 7, /* special-token match eats whitespace to its left */
  TOK_ATTR_RSTRIP = 1 << 8, /* ... and to its right */
};

/* Loads the vocabulary described by f's tokenizer.ggml.* metadata.
 * Validates everything: array types and lengths, every id against the
 * vocabulary size, merges naming known pieces, duplicate pieces; an unknown
 * tokenizer.ggml.pre is PW_EUNSUPPORTED naming it. On success *out is an
 * owned vocab (free with tok_vocab_destroy); it borrows f (see above). */
int tok_vocab_load(const gguf_file *f, tok_vocab **out, char *err);
void tok_vocab_destroy(tok_vocab *v);

int32_t tok_n_vocab(const tok_vocab *v);
const char *tok_kind(const tok_vocab *v); /* "spm", "bpe", "wpm" (WordPiece, BERT) or "ugm" (unigram, T5) */
const char *tok_pre(const tok_vocab *v);  /* pre-tokenizer name ("default" for SPM) */
bool tok_add_bos(const tok_vocab *v);     /* add_special adds BOS */
bool tok_add_eos(const tok_vocab *v);     /* add_special adds EOS */
bool tok_add_space_prefix(const tok_vocab *v); /* SPM: text gets a leading space */
/* Special ids; -1 when the vocabulary has none. */
int32_t tok_bos(const tok_vocab *v);
int32_t tok_eos(const tok_vocab *v);
int32_t tok_eot(const tok_vocab *v);
int32_t tok_eom(const tok_vocab *v);
int32_t tok_pad(const tok_vocab *v);
int32_t tok_unk(const tok_vocab *v);
int32_t tok_sep(const tok_vocab *v); /* [SEP] of WordPiece vocabularies */
/* End of generation: eos, eot, eom and the tokens llama.cpp recognises by
 * text (<|im_end|>, <|eot_id|>, <|endoftext|>, ...). False for bad ids. */
bool tok_is_eog(const tok_vocab *v, int32_t id);
bool tok_is_control(const tok_vocab *v, int32_t id);
/* Attribute bits (TOK_ATTR_*); 0 for bad ids. */
uint32_t tok_attr(const tok_vocab *v, int32_t id);
/* Exact piece lookup (the stored token text, e.g. "▁the" or "Ġthe"); -1 if
 * none. */
int32_t tok_find(const tok_vocab *v, const char *text, size_t len);
/* Stored text of a token (view into the mapping, not NUL-terminated); NULL
 * for bad ids. */
const char *tok_text(const tok_vocab *v, int32_t id, size_t *len);

/* Tokenizes text[0..len) (any bytes; invalid UTF-8 is handled as llama.cpp
 * does). add_special adds BOS/EOS as the vocabulary's flags say.
 * parse_special matches control/user-defined token texts in the input as
 * those tokens (longest first); without it only user-defined tokens are
 * matched (as llama.cpp does) and control-token text is plain text.
 * Writes up to cap ids to out and the total count to *n_out; if cap is too
 * small returns PW_ERANGE with *n_out = the count needed. Allocates scratch
 * proportional to len per call; no shared mutable state. */
int tok_encode(const tok_vocab *v, const char *text, size_t len, bool add_special,
               bool parse_special, int32_t *out, size_t cap, size_t *n_out, char *err);

/* A byte range of a text. */
typedef struct tok_range {
  size_t off, len;
} tok_range;
/* tok_encode, except that with parse_special a control token's text that
 * overlaps one of the plain spans (sorted by offset, disjoint; borrowed)
 * stays plain text: message content inside a rendered chat prompt cannot
 * forge the template's markers. Text outside the spans tokenizes exactly as
 * tok_encode's. */
int tok_encode_spans(const tok_vocab *v, const char *text, size_t len, bool add_special, bool parse_special,
                     const tok_range *plain, size_t n_plain, int32_t *out, size_t cap, size_t *n_out, char *err);
/* Where text holds control-token texts that tok_encode with parse_special
 * would take as those tokens: up to cap spans in order into out, the count
 * into *n_out (PW_ERANGE when more than cap). */
int tok_control_spans(const tok_vocab *v, const char *text, size_t len, tok_range *out, size_t cap, size_t *n_out,
                      char *err);

/* The bytes a token stands for: SPM "▁" -> " " and <0xNN> -> the byte; BPE
 * byte-level code points -> bytes. Control/unknown tokens render their text
 * only when render_special (else empty); user-defined tokens always render.
 * Copies into buf and returns the length; PW_ERANGE if cap is too small,
 * PW_EINVAL for a bad id. A piece never exceeds tok_max_piece(v) bytes. */
int tok_piece(const tok_vocab *v, int32_t id, bool render_special, char *buf, size_t cap);
/* Same without copying: *ptr gets a view owned by the vocab; returns the
 * length (0 with *ptr = "" for bad ids). */
size_t tok_piece_ref(const tok_vocab *v, int32_t id, bool render_special, const char **ptr);
size_t tok_max_piece(const tok_vocab *v);

/* Detokenization flags. */
enum {
  TOK_DETOK_SPECIAL = 1 << 0,     /* render control tokens' text */
  TOK_DETOK_STRIP_SPACE = 1 << 1, /* drop one leading space of the first token's
                                     piece when the vocab adds a space prefix
                                     (SPM), as llama.cpp's detokenize does */
};

/* Concatenates the pieces of ids (raw bytes, not UTF-8-checked). Writes up
 * to cap bytes; *n_out gets the full length; PW_ERANGE if it did not fit,
 * PW_EINVAL for a bad id. */
int tok_decode(const tok_vocab *v, const int32_t *ids, size_t n, unsigned flags, char *buf,
               size_t cap, size_t *n_out, char *err);

/* Streaming detokenizer: feed ids one at a time, get text that is always
 * valid UTF-8. Bytes of an incomplete character are held back until it
 * completes; a sequence that can no longer become valid is replaced by
 * U+FFFD (one per maximal invalid subpart), as is an incomplete tail at
 * flush. The state is caller-owned and fixed-size; feeding allocates
 * nothing. */
typedef struct tok_detok {
  const tok_vocab *v; /* borrowed */
  unsigned flags;     /* TOK_DETOK_* */
  bool first;         /* no token fed yet */
  uint8_t pend[4];    /* bytes of an incomplete character */
  uint8_t n_pend;
} tok_detok;

void tok_detok_init(tok_detok *d, const tok_vocab *v, unsigned flags);
/* Output bound for one feed: a buf of this many bytes always suffices. */
size_t tok_detok_max_out(const tok_vocab *v);
/* Feeds one id; appends the newly complete text to buf and returns its
 * length. PW_ERANGE (state unchanged) if cap < what this token may produce
 * (use tok_detok_max_out), PW_EINVAL for a bad id. */
int tok_detok_feed(tok_detok *d, int32_t id, char *buf, size_t cap);
/* Emits U+FFFD for held-back bytes (if any) and resets the hold-back;
 * returns the length written (0 or 3); cap must be >= 3 when bytes are held. */
int tok_detok_flush(tok_detok *d, char *buf, size_t cap);

#endif
