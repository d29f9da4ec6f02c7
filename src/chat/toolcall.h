/* toolcall.h - tool calls and reasoning in a model's output: which format a
 * chat template uses, the grammar that keeps a model's calls well formed,
 * and the parser that turns generated text (whole or streamed) into
 * content, reasoning and calls.
 *
 * What it is: format detection from the template's text and the
 * vocabulary's special tokens (never from a file or model name), a
 * grammar builder over the tools' parameter schemas, and one incremental
 * parser used for streamed and whole answers alike (so both give the same
 * result for the same text).
 * What it is not: request JSON validation or response rendering (the
 * server's oai.c), call ids (the server makes them), sampling.
 *
 * Formats (the text after the template's generation prompt):
 *   TC_HERMES       <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
 *                   (Hermes 2/3, Qwen2.5, Qwen3, SmolLM3: templates that
 *                   write <tool_call> without <function=)
 *   TC_QWEN3_CODER  <tool_call>\n<function=f>\n<parameter=p>\nvalue\n</parameter>\n
 *                   </function>\n</tool_call> (string values raw, others JSON)
 *   TC_LLAMA3       {"name": "f", "parameters": {...}} as the whole answer,
 *                   optionally after <|python_tag|> (Llama 3.1 / 3.2)
 *   TC_MISTRAL      [TOOL_CALLS][{"name": "f", "arguments": {...}, "id": "..."}]
 *                   (Mistral Nemo and templates without [ARGS])
 *   TC_DEVSTRAL     [TOOL_CALLS]f[ARGS]{...} (repeated per call)
 *   TC_GRANITE      <|tool_call|>[{"name": "f", "arguments": {...}}]
 *   TC_HARMONY      gpt-oss channels: <|channel|>analysis<|message|>... is
 *                   reasoning, final is content, commentary with
 *                   to=functions.f is a call whose body is the arguments
 * Reasoning: templates that write <think> get <think>...</think> split off
 * as reasoning (also when the generation prompt itself opened <think>).
 *
 * Malformed calls (bad JSON, unknown tool names, a call cut off at the
 * end) stay in the content as the model wrote them, unless a grammar kept
 * them well formed (see tc_parser_create). */
#ifndef PW_CHAT_TOOLCALL_H
#define PW_CHAT_TOOLCALL_H

#include "grammar/grammar.h"
#include "tok/tok.h"

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TC_MAX_TOOLS 128        /* tools in one request */
#define TC_MAX_NAME 64          /* bytes of a tool name: [A-Za-z0-9_.-] */
#define TC_MAX_CALL_BYTES (1u << 20) /* an open call longer than this is text */
#define TC_MAX_CALLS 64         /* calls parsed from one answer; more stay text */

typedef enum tc_format {
  TC_NONE = 0,
  TC_HERMES,
  TC_QWEN3_CODER,
  TC_LLAMA3,
  TC_MISTRAL,
  TC_DEVSTRAL,
  TC_GRANITE,
  TC_HARMONY,
} tc_format;

/* What a template and vocabulary say about tool calls and reasoning. */
typedef struct tc_syntax {
  tc_format format;
  bool think;             /* <think>...</think> reasoning */
  bool special_markers;   /* a marker of the format is a control token: the
                           * engine must render control tokens as text */
  int32_t open_token;     /* the call opener as a control token; -1 = none */
  bool open_is_text;      /* the opener can be generated as bytes (a grammar can
                           * produce it) */
  bool reasoning_effort;  /* the template reads `reasoning_effort` */
} tc_syntax;

/* Detects the format from the template text (NUL-terminated) and, when v is
 * not NULL, the vocabulary's special tokens. Never fails: TC_NONE when no
 * format is known. */
void tc_detect(const char *template_src, const tok_vocab *v, tc_syntax *out);
const char *tc_format_name(tc_format f);

/* ---- grammar ------------------------------------------------------------- */

/* A grammar for the calls of tools (an OpenAI tools array, validated by
 * the caller: each {"type":"function","function":{"name":...,
 * "parameters": {...}}}). only: restrict to the tool of that name (NULL =
 * any). parallel: one or more calls, else exactly one. lazy: the grammar
 * waits for the format's opener (grammar_set_lazy) and constrains from
 * there; else it constrains from the first token (tool_choice required or
 * a named function). *out is owned. PW_EUNSUPPORTED when the format cannot
 * be constrained this way (a marker inside a call is a control token), or
 * the schema errors of grammar_schemas_to_gbnf (bad_keyword as there). */
int tc_grammar(const tc_syntax *sx, const json_t *tools, const char *only, bool parallel, bool lazy, grammar **out,
               char *bad_keyword, char *err);

/* ---- parser ---------------------------------------------------------------- */

typedef enum tc_ev_type {
  TC_EV_CONTENT = 1,   /* text of the answer */
  TC_EV_REASONING = 2, /* text of the reasoning */
  TC_EV_CALL_START = 3, /* a call begins: index, name */
  TC_EV_CALL_ARGS = 4,  /* more of the arguments of call index (text) */
} tc_ev_type;

typedef struct tc_event {
  tc_ev_type type;
  const char *text; /* CONTENT/REASONING: the text; CALL_ARGS: a fragment of the arguments */
  size_t len;
  int index;        /* CALL_*: 0, 1, ... */
  const char *name; /* CALL_START: the tool's name (NUL-terminated) */
} tc_event;

/* Receives events; the pointers are valid during the call only. */
typedef void (*tc_emit_fn)(void *ctx, const tc_event *ev);

typedef struct tc_parser tc_parser;

/* A parser for one answer. tools (borrowed, may be NULL: no calls are
 * parsed) lists the names a call may use and, for TC_QWEN3_CODER, the
 * parameter types. in_reasoning: the generation prompt opened the
 * reasoning block. bare_call: the answer was constrained to start with a
 * call whose opener is a control token the grammar could not produce, so
 * a call may start without it. constrained: a grammar from tc_grammar kept
 * the calls well formed, so a call's arguments are streamed as they come
 * (Hermes, Llama 3, Devstral forms; others at the call's end) and a call
 * cut off by the end of the answer stays a call with the arguments it got;
 * unconstrained calls are emitted whole once complete and checked.
 * Arguments concatenated are a JSON object: the model's own bytes where
 * the format writes the object as such, else the object written compactly
 * (Qwen3-Coder, lists). */
int tc_parser_create(const tc_syntax *sx, const json_t *tools, bool in_reasoning, bool bare_call, bool constrained,
                     tc_parser **out, char *err);
void tc_parser_destroy(tc_parser *p);
/* Adds text; emits what is certain. final: the answer is complete (flush
 * everything). 0 or PW_ENOMEM. */
int tc_parser_feed(tc_parser *p, const char *text, size_t len, bool final, tc_emit_fn emit, void *ctx);
/* Calls emitted so far. */
int tc_parser_calls(const tc_parser *p);

/* Whether a rendered prompt ends inside an opened reasoning block
 * (a generation prompt ending in "<think>" and white space). */
bool tc_prompt_opens_reasoning(const char *text, size_t len);

#endif
