/* grammar_int.h - the compiled form of a grammar, shared by the parser
 * (gbnf.c) and the matcher (match.c). Not a public interface.
 *
 * A grammar is a set of rules; a rule is a list of alternatives; an
 * alternative is a sequence of elements ended by GE_END. Elements live in
 * one array, so "the element after p" is el[p + 1]. An element is either a
 * byte set (GE_SET: one byte out of a 256-bit set) or a reference to a rule
 * (GE_REF). Characters and classes of the GBNF text have been lowered to
 * byte sets and rules over UTF-8 byte sequences by the parser. */
#ifndef PW_GRAMMAR_GRAMMAR_INT_H
#define PW_GRAMMAR_GRAMMAR_INT_H

#include "grammar/grammar.h"

#include <stdint.h>

enum { GE_END = 0, GE_REF = 1, GE_SET = 2 };

typedef struct gelem {
  uint32_t type : 2; /* GE_* */
  uint32_t v : 30;   /* GE_REF: rule index; GE_SET: set index */
} gelem;

typedef struct gset {
  uint64_t w[4]; /* bit b of w[b >> 6]: byte b is in the set */
} gset;

struct grammar {
  gelem *el;          /* [n_el], owned */
  uint32_t n_el;
  uint32_t *alt;      /* [n_alt] first element of each alternative, grouped by rule; owned */
  uint32_t n_alt;
  uint32_t *rule_alt; /* [n_rules + 1] rule r's alternatives are alt[rule_alt[r] .. rule_alt[r+1]); owned */
  uint32_t n_rules;
  gset *sets;         /* [n_sets], owned */
  uint32_t n_sets;
  uint32_t root;      /* rule index of "root" */
  _Atomic int refs;   /* grammar_ref / grammar_destroy */
};

static inline int gset_has(const gset *s, unsigned b) { return (int)((s->w[b >> 6] >> (b & 63)) & 1u); }

#endif
