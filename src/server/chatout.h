/* chatout.h - a chat answer as OpenAI shapes it: the model's text split
 * into content, reasoning_content and tool_calls (chat/toolcall.h), for
 * the whole chat.completion object and for SSE deltas.
 *
 * What it is not: the parser (chat/toolcall.c), request validation
 * (oai.c), HTTP (server.c).
 *
 * Streams: content and reasoning deltas as their text becomes certain; a
 * call as OpenAI sends one: {index, id, type, function: {name, arguments:
 * ""}} first, then {index, function: {arguments: fragment}} deltas (as the
 * model writes them under a grammar, else one when the call is complete). finish_reason is
 * "tool_calls" when the answer holds a call and ended at a stop. Without
 * tools or reasoning markers the text passes through unchanged. */
#ifndef PW_SERVER_CHATOUT_H
#define PW_SERVER_CHATOUT_H

#include "chat/toolcall.h"
#include "server/oai.h"
#include "server/sbuf.h"

typedef struct chatout {
  tc_parser *p;        /* owned; NULL = plain text */
  /* during a feed */
  const oai_resp *o;   /* borrowed */
  sbuf *out;           /* borrowed */
  bool stream;
  const oai_logprobs *lp; /* borrowed: rides on the next delta, then NULL */
  /* whole answers */
  sbuf content, reasoning, calls; /* calls: the rendered tool_calls items */
  sbuf args;           /* whole answers: the open call's arguments so far */
  int n_calls;
  bool short_ids;      /* 9-character call ids (Mistral's templates refuse others) */
} chatout;

/* sx: the template's syntax; r: the prepared request (tools_active,
 * in_reasoning, bare_call, tools, grammar). 0 or PW_ENOMEM. */
int chatout_init(chatout *c, const tc_syntax *sx, const oai_request *r);
void chatout_free(chatout *c);
/* SSE deltas for the next text (final: the answer is over). lp (may be
 * NULL) goes on the first delta rendered, or on an empty content delta. */
void chatout_stream(chatout *c, const oai_resp *o, const char *text, size_t n, bool final, const oai_logprobs *lp,
                    sbuf *out);
/* The finish reason for an answer that ended with f. */
const char *chatout_finish(const chatout *c, engine_finish f);
/* The whole chat.completion object for the text. */
void chatout_render(chatout *c, const oai_resp *o, const char *text, size_t n, const oai_logprobs *lp, engine_finish f,
                    const engine_usage *u, sbuf *out);

/* The whole chat.completion object with n choices (each parsed as above,
 * index 0..n-1) and the summed usage. 0 or PW_ENOMEM. */
int chatout_render_choices(const tc_syntax *sx, const oai_request *r, const oai_resp *o, const oai_choice *cs, int n,
                           const engine_usage *u, sbuf *out);

#endif
