/* grammar.h - constrained decoding: grammars over bytes and the set of
 * vocabulary tokens they allow at each step.
 *
 * What it is:
 *   - a parser of GBNF (the grammar syntax of llama.cpp: rules
 *     `name ::= ...`, alternation `|`, sequences, groups `( )`, `* + ?`,
 *     `{m}`, `{m,}`, `{m,n}`, character classes `[a-z]`, `[^...]`, string
 *     literals with escapes \n \r \t \\ \" \[ \] \xHH \uHHHH \UHHHHHHHH,
 *     `.` (any character), `#` comments; the start rule is `root`);
 *   - a compiler of JSON Schema to GBNF (see grammar_schema_to_gbnf for the
 *     supported keywords) and a grammar of any JSON object;
 *   - a matcher: the parse state of a grammar over the bytes generated so
 *     far, and the mask of tokens whose bytes may come next.
 * What it is not: tokenization (the caller passes each token's bytes),
 * sampling, HTTP or request JSON.
 *
 * Grammars work on bytes: a character class or `.` matches whole UTF-8
 * encoded characters, so a token may end in the middle of a character and
 * the next token completes it. Matching is left-recursion-free stack
 * based (the grammar is checked for left recursion at parse time), with
 * every stack and state interned so that each distinct parse state is
 * computed once per matcher and its token mask cached.
 *
 * Limits (hostile input gets an error, never a hang or unbounded memory):
 * GBNF text <= GRAMMAR_MAX_TEXT bytes, <= GRAMMAR_MAX_ELEMS elements,
 * <= GRAMMAR_MAX_RULES rules, repetition counts <= GRAMMAR_MAX_REPEAT,
 * group nesting <= GRAMMAR_MAX_NEST; a matcher holds at most
 * GRAMMAR_MAX_STACKS stack frames and GRAMMAR_MAX_STATES states (then it
 * forgets its caches and starts over from the current state) and one
 * advance over one byte does at most GRAMMAR_MAX_WORK expansions and keeps
 * at most GRAMMAR_MAX_ALIVE stacks: a byte whose advance would exceed that
 * is treated as not allowed (the grammar is too ambiguous to follow).
 *
 * Threads: a grammar and a grammar_vocab are immutable after creation and
 * may be shared by any number of threads and matchers; a matcher belongs to
 * one thread at a time. */
#ifndef PW_GRAMMAR_GRAMMAR_H
#define PW_GRAMMAR_GRAMMAR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GRAMMAR_MAX_TEXT (4u << 20)
#define GRAMMAR_MAX_ELEMS (1u << 21)
#define GRAMMAR_MAX_RULES (1u << 18)
#define GRAMMAR_MAX_REPEAT 10000
#define GRAMMAR_MAX_NEST 128
#define GRAMMAR_MAX_STACKS (1u << 21)
#define GRAMMAR_MAX_STATES (1u << 16)
#define GRAMMAR_MAX_WORK (1u << 16)
#define GRAMMAR_MAX_ALIVE 4096

typedef struct grammar grammar;
typedef struct grammar_vocab grammar_vocab;
typedef struct grammar_matcher grammar_matcher;

/* ---- grammars ----------------------------------------------------------- */

/* Parses GBNF text[0..len). On success *out is an owned grammar (free with
 * grammar_destroy). Errors (PW_EINVAL with line and column, PW_ELIMIT for
 * the limits above) go to err (PW_ERRMAX bytes). Rejects undefined rules,
 * rules defined twice, a missing root, and left recursion (naming the
 * rule). */
int grammar_parse(const char *text, size_t len, grammar **out, char *err);
/* Grammars are reference counted (atomically, so holders may live on
 * different threads): grammar_ref adds a holder and returns g;
 * grammar_destroy drops one and frees the grammar with the last. */
grammar *grammar_ref(grammar *g);
void grammar_destroy(grammar *g);
/* Rules, elements (a measure of size). */
int grammar_n_rules(const grammar *g);
int grammar_n_elems(const grammar *g);

/* Compiles a JSON Schema (JSON text schema[0..len)) to GBNF. *gbnf_out is
 * an owned NUL-terminated string (free()). Supported keywords:
 *   type (a name or an array of names: nullable types), properties,
 *   required, additionalProperties, enum, const, items, prefixItems,
 *   minItems, maxItems, anyOf, oneOf, allOf (of object schemas: merged),
 *   $ref (JSON pointers into the document: #, #/$defs/..., #/definitions/...,
 *   recursion included), $defs, definitions, minLength, maxLength, format
 *   (date, time, date-time, uuid, email), pattern (see below), minimum,
 *   maximum (integers; for numbers, see below), nullable (OpenAPI), and the
 *   annotations title, description, $schema, $id, $comment, default,
 *   examples, deprecated, readOnly, writeOnly. Any other keyword is
 *   PW_EUNSUPPORTED with a message naming it (and *bad_keyword, when not
 *   NULL, gets it: a view into a static string or NUL-terminated copy of at
 *   most 63 bytes in the caller's 64-byte buffer).
 * The grammar produces a subset of the documents the schema accepts, each
 * one valid:
 *   - objects list their declared properties in declaration order (optional
 *     ones may be left out); keys outside `properties` are produced only
 *     when the schema declares no properties (then additionalProperties, a
 *     schema or true, gives their values);
 *   - oneOf is compiled as anyOf: its branches are taken to be mutually
 *     exclusive as the schema says, not checked;
 *   - numbers with minimum/maximum are written as decimals (no exponent)
 *     whose integer part lies in the range; when no integer lies in the
 *     range the schema is PW_EUNSUPPORTED;
 *   - bounds must lie within +-1e15; minItems/maxItems/minLength/maxLength
 *     within GRAMMAR_MAX_REPEAT;
 *   - pattern: a regex subset searched as Python's re.search does
 *     (unanchored unless it starts with ^ / ends with $): literals and
 *     escapes (\. \\ \/ \- \t \n ...), classes [...] with ranges and
 *     negation, \d \w \s \D \W \S (ASCII meanings), `.`, groups (...) and
 *     (?:...), `|`, quantifiers * + ? {m} {m,} {m,n} (a lazy `?` suffix is
 *     accepted); anchors only at the ends; no backreferences or lookaround.
 *     Characters that JSON must escape are produced in escaped form;
 *     control characters are not produced. pattern, format and
 *     min/maxLength cannot be combined with each other.
 *   - strings never contain \u escapes of surrogates (so their length is
 *     the same counted in code points or UTF-16 units).
 * Whitespace between tokens is limited to a few characters. */
int grammar_schema_to_gbnf(const char *schema, size_t len, char **gbnf_out, char *bad_keyword, char *err);
/* grammar_schema_to_gbnf + grammar_parse. */
int grammar_from_schema(const char *schema, size_t len, grammar **out, char *bad_keyword, char *err);
/* GBNF of any JSON object (the "json_object" response format). Static
 * string. */
const char *grammar_json_object_gbnf(void);

/* ---- vocabulary --------------------------------------------------------- */

/* A token trie over the vocabulary's bytes. pieces[i] / lens[i] are the
 * bytes token i stands for (borrowed during the call, copied); is_eog[i]
 * marks end-of-generation tokens, which a grammar allows only where it can
 * end. Tokens with no bytes (control tokens) are never allowed. Owned
 * result. */
int grammar_vocab_create(int32_t n_vocab, const char *const *pieces, const size_t *lens, const bool *is_eog,
                         grammar_vocab **out, char *err);
void grammar_vocab_destroy(grammar_vocab *gv);
int32_t grammar_vocab_size(const grammar_vocab *gv);

/* ---- matcher ------------------------------------------------------------ */

/* A matcher at the start of g. g and gv are borrowed and must outlive it. */
int grammar_matcher_create(const grammar *g, const grammar_vocab *gv, grammar_matcher **out, char *err);
void grammar_matcher_destroy(grammar_matcher *m);

/* Allowed tokens in the current state: *mask points at a bitset of
 * n_vocab bits (bit i of word i/64 = token i), owned by the matcher and
 * valid until its next call. End-of-generation tokens are set only when
 * the grammar can end here. Cached per state. 0 or PW_ENOMEM. */
int grammar_matcher_mask(grammar_matcher *m, const uint64_t **mask);
/* Sets logits[i] = -INFINITY for every token the grammar does not allow
 * (logits has n_vocab entries). allow_eog false also removes
 * end-of-generation tokens. Returns the number of allowed tokens left
 * (0 = the grammar allows nothing here), or PW_ENOMEM. */
int grammar_matcher_apply(grammar_matcher *m, float *logits, bool allow_eog);
/* Advances over token tok. PW_EINVAL (state unchanged) when the grammar
 * does not allow it. An end-of-generation token is accepted when the
 * grammar can end; the matcher is then finished. */
int grammar_matcher_accept_token(grammar_matcher *m, int32_t tok);
/* Advances over raw bytes (tests, and checking text). PW_EINVAL (state
 * unchanged) when they do not fit the grammar. */
int grammar_matcher_accept_bytes(grammar_matcher *m, const char *bytes, size_t len);
/* True when the token (by its bytes) may come next; no state change. */
bool grammar_matcher_allows(grammar_matcher *m, int32_t tok);
/* How many of toks[0..n) the grammar accepts in a row from the current
 * state (an end-of-generation token counts when the grammar can end there,
 * and nothing after it); no state change. Speculative proposals are cut
 * there. */
int grammar_matcher_prefix(grammar_matcher *m, const int32_t *toks, int n);
/* The bytes so far form a complete document. */
bool grammar_matcher_can_end(const grammar_matcher *m);
/* Complete, and nothing can follow: generation must stop. */
bool grammar_matcher_done(const grammar_matcher *m);
/* Back to the start of the grammar (caches kept). */
void grammar_matcher_reset(grammar_matcher *m);

/* Counters of a matcher (for benchmarks and tests). */
typedef struct grammar_matcher_stats {
  uint64_t masks;        /* grammar_matcher_mask calls */
  uint64_t mask_hits;    /* answered from the cache */
  uint64_t trie_nodes;   /* trie nodes visited computing masks */
  uint64_t resets;       /* caches forgotten because a limit was reached */
  uint32_t states, stacks;
} grammar_matcher_stats;
void grammar_matcher_get_stats(const grammar_matcher *m, grammar_matcher_stats *out);

#endif
