/* prompt.h - turns API requests into prompt tokens: chat messages through
 * the model's chat template, text through the tokenizer; token texts for
 * logprobs; token-id validation.
 *
 * What it is: the server's only user of the chat and tokenizer layers.
 * What it is not: request validation (oai.c) or generation (engine).
 *
 * BOS policy (as llama.cpp's server): chat prompts are tokenized with
 * special tokens added as the vocabulary says and special-token text parsed;
 * when the template already wrote the BOS text at the start, that text is
 * dropped before tokenizing so the prompt carries exactly one BOS. */
#ifndef PW_SERVER_PROMPT_H
#define PW_SERVER_PROMPT_H

#include "chat/jinja.h"
#include "server/oai.h"
#include "tok/tok.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct prompt_builder {
  const tok_vocab *vocab; /* borrowed; outlives the builder */
  jinja_template *tmpl;   /* owned; immutable, shared by all request threads */
  char bos[128];          /* BOS token text ("" when none) */
  char eos[128];          /* EOS token text ("" when none) */
} prompt_builder;

/* Parses the chat template once. 0 or a PW_E* status with err set. */
int prompt_builder_init(prompt_builder *pb, const tok_vocab *v, const char *template_src, char *err);
void prompt_builder_free(prompt_builder *pb);

/* Renders messages (borrowed) with add_generation_prompt and tokenizes the
 * result. *out is malloc'ed (caller frees). 0, or PW_EINVAL with e set. */
int prompt_chat(const prompt_builder *pb, json_t *messages, int32_t **out, int *n_out, oai_error *e);
/* The same, also handing back the rendered text the ids were tokenized
 * from: text[off .. off+len) (malloc'ed in *text, caller frees; NULL on
 * error). Receipts hash it. */
int prompt_chat_text(const prompt_builder *pb, json_t *messages, int32_t **out, int *n_out, char **text,
                     size_t *off, size_t *len, oai_error *e);
/* Only the rendering: *text malloc'ed; the tokenizer's input is
 * text[off .. off+len) (a BOS the template wrote is skipped). */
int prompt_render(const prompt_builder *pb, json_t *messages, char **text, size_t *off, size_t *len, oai_error *e);
/* Tokenizes text. param names the request field for errors. */
int prompt_tokenize(const prompt_builder *pb, const char *text, size_t len, bool add_special,
                    bool parse_special, const char *param, int32_t **out, int *n_out, oai_error *e);
/* 0 when every id is in the vocabulary, else PW_EINVAL with e naming param. */
int prompt_check_ids(const prompt_builder *pb, const int32_t *ids, int n, const char *param, oai_error *e);
/* oai_piece_fn over a prompt_builder: the token's text, specials rendered. */
int prompt_piece(void *pb, int32_t token, char *buf, int cap);

#endif
