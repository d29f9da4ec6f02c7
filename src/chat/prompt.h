/* prompt.h - the one prompt path: chat messages through the model's chat
 * template, text through the tokenizer, with the limits every front end
 * applies. The server, the CLI (run --chat, chat, bench, ab) and replay all
 * build prompts here, so the same request gives the same tokens whichever
 * front end took it.
 *
 * What it is not: request parsing (the server's oai.c, the CLI's options)
 * or generation (engine). Errors are a status, the request field they
 * concern and a message; front ends map them to their own forms (an HTTP
 * status, a CLI exit code).
 *
 * BOS policy (as llama.cpp's server): chat prompts are tokenized with
 * special tokens added as the vocabulary says and special-token text
 * parsed; when the template already wrote the BOS text at the start, that
 * text is dropped before tokenizing so the prompt carries exactly one BOS.
 *
 * Message content is data, not markup: control-token text inside a
 * message's content (say "<|im_end|><|im_start|>system") stays plain text
 * and cannot forge a turn; only the template's own markers become control
 * tokens. prompt_chat_opts.special_in_content restores the old behaviour
 * for callers that need it. */
#ifndef PW_CHAT_PROMPT_H
#define PW_CHAT_PROMPT_H

#include "base/error.h"
#include "chat/jinja.h"
#include "tok/tok.h"

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#define PROMPT_MAX_TOKENS 1048576           /* tokens of one prompt or token-id array */
#define PROMPT_MAX_TEXT_BYTES (16u << 20)   /* bytes of text tokenized in one call */
#define PROMPT_MAX_RENDER_BYTES (64u << 20) /* bytes a chat template may render */
#define PROMPT_MAX_RENDER_MEMORY (256u << 20)

typedef struct prompt_error {
  int status;         /* PW_EINVAL (bad input), PW_ETEMPLATE (the template failed), PW_ENOMEM */
  const char *param;  /* the input it concerns ("messages", "prompt", ...), static; NULL = none */
  char message[PW_ERRMAX];
} prompt_error;

typedef struct prompt_builder {
  const tok_vocab *vocab; /* borrowed; outlives the builder */
  jinja_template *tmpl;   /* owned; immutable, shared by all request threads */
  char *template_src;     /* owned copy of the template text in use */
  char bos[128];          /* BOS token text ("" when none) */
  char eos[128];          /* EOS token text ("" when none) */
} prompt_builder;

/* Parses the chat template once: template_src (borrowed; NULL = the ChatML
 * default of chat_default_template). 0 or a PW_E* status with err set. */
int prompt_builder_init(prompt_builder *pb, const tok_vocab *v, const char *template_src, char *err);
void prompt_builder_free(prompt_builder *pb);

typedef struct prompt_chat_opts {
  bool special_in_content;    /* control-token text in message contents is parsed as such */
  const json_t *extra_vars;   /* more template globals (an object; borrowed; NULL = none) */
  char **rendered;            /* if not NULL: receives the rendered text (malloc'ed, caller frees) */
  size_t *rendered_len;
} prompt_chat_opts;

/* Renders messages (a JSON array of message objects whose contents are
 * strings or null; borrowed) with add_generation_prompt and tokenizes the
 * result. opts may be NULL. *out is malloc'ed (caller frees). 0, or a
 * PW_E* status with pe set. */
int prompt_chat(const prompt_builder *pb, const json_t *messages, const prompt_chat_opts *opts, int32_t **out,
                int *n_out, prompt_error *pe);
/* Tokenizes text (at most PROMPT_MAX_TEXT_BYTES bytes and PROMPT_MAX_TOKENS
 * tokens). param names the input for errors (static string). */
int prompt_tokenize(const prompt_builder *pb, const char *text, size_t len, bool add_special, bool parse_special,
                    const char *param, int32_t **out, int *n_out, prompt_error *pe);
/* 0 when every id is in the vocabulary, else PW_EINVAL with pe naming param. */
int prompt_check_ids(const prompt_builder *pb, const int32_t *ids, int n, const char *param, prompt_error *pe);
/* The token's text, specials rendered, into buf (at most cap bytes; not
 * NUL-terminated); returns the byte count. ctx is a prompt_builder. */
int prompt_piece(void *ctx, int32_t token, char *buf, int cap);

#endif
