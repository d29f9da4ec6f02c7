/* match.c - the vocabulary trie and the grammar matcher.
 *
 * Parse state. A stack is a list of grammar positions: its top is a byte
 * set the next byte must match, the rest are the positions to return to
 * when the rules above end. A state is the set of stacks alive after the
 * bytes so far (several when the grammar is ambiguous so far). Stacks are
 * interned as (top position, rest) pairs, so a stack is one id and equal
 * stacks are equal ids; states are interned as sorted id lists. Each
 * state keeps its transitions by byte once computed, so walking the token
 * trie again from a known state costs a table lookup per trie node, and
 * its token mask once computed (a bounded cache of masks), so a state met
 * again (inside a string, after each array element, ...) costs nothing.
 *
 * Rule references are expanded when pushed (a reference that ends its
 * alternative pushes nothing to return to: right recursion, as repetition
 * is lowered to, keeps stacks flat). Left recursion was refused by the
 * parser, so expansion terminates; the work limits of grammar.h bound it
 * anyway.
 *
 * Token mask. The trie holds every token's bytes, nodes in depth-first
 * order so that a subtree's tokens are a contiguous range of the tokens
 * sorted by bytes. The walk descends only where the state survives the
 * byte; where a state loops to itself on every byte of a subtree (string
 * contents, digits) the subtree's tokens are taken as a range without
 * descending.
 *
 * Not here: parsing (gbnf.c), JSON Schema (schema.c). */
#include "grammar/grammar_int.h"

#include "base/error.h"
#include "power.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define DEAD UINT32_MAX
#define UNKNOWN (UINT32_MAX - 1)
#define MASK_SLOTS 64       /* cached masks per matcher */
#define BM_MIN_TOKENS 16    /* trie nodes with this many tokens below keep a byte summary */
#define MAX_DEPTH 1024      /* expansion recursion */

/* ---- vocabulary trie ------------------------------------------------------ */

struct grammar_vocab {
  int32_t n_vocab;
  uint8_t *bytes;     /* all pieces, concatenated; owned */
  uint32_t *off;      /* [n_vocab + 1] token i = bytes[off[i] .. off[i+1]); owned */
  uint64_t *eog;      /* [n_words] end-of-generation tokens; owned */
  uint32_t n_words;   /* 64-bit words of a token bitset */
  int32_t *sorted;    /* [n_sorted] token ids sorted by bytes (tokens with bytes, not EOG); owned */
  uint32_t n_sorted;
  uint32_t n_nodes;   /* node 0 is the root */
  uint8_t *nb;        /* [n_nodes] byte leading to the node */
  uint32_t *nnext;    /* [n_nodes] first node after the node's subtree */
  uint32_t *nlo, *nhi;/* [n_nodes] sorted-token range of the subtree */
  uint32_t *nend;     /* [n_nodes] tokens ending at the node: sorted[nlo .. nlo + nend) */
  int32_t *nbm;       /* [n_nodes] index into bms of the subtree's byte set, -1 = none kept */
  gset *bms;          /* owned */
};

static int cmp_tok(const void *a, const void *b, void *ctx) {
  const grammar_vocab *gv = ctx;
  int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
  uint32_t lx = gv->off[x + 1] - gv->off[x], ly = gv->off[y + 1] - gv->off[y];
  int c = memcmp(gv->bytes + gv->off[x], gv->bytes + gv->off[y], lx < ly ? lx : ly);
  if (c) return c;
  if (lx != ly) return lx < ly ? -1 : 1;
  return x < y ? -1 : x > y;
}

void grammar_vocab_destroy(grammar_vocab *gv) {
  if (!gv) return;
  free(gv->bytes);
  free(gv->off);
  free(gv->eog);
  free(gv->sorted);
  free(gv->nb);
  free(gv->nnext);
  free(gv->nlo);
  free(gv->nhi);
  free(gv->nend);
  free(gv->nbm);
  free(gv->bms);
  free(gv);
}

int32_t grammar_vocab_size(const grammar_vocab *gv) { return gv->n_vocab; }

int grammar_vocab_create(int32_t n_vocab, const char *const *pieces, const size_t *lens, const bool *is_eog,
                         grammar_vocab **out, char *err) {
  *out = NULL;
  if (n_vocab <= 0 || n_vocab > (1 << 24)) return pw_seterr(err, PW_EINVAL, "grammar: vocabulary size %d", n_vocab);
  grammar_vocab *gv = calloc(1, sizeof *gv);
  gset *tmp = NULL;
  uint32_t *open = NULL;
  int rc = PW_ENOMEM;
  if (!gv) goto fail;
  gv->n_vocab = n_vocab;
  gv->n_words = (uint32_t)(n_vocab + 63) / 64;
  size_t total = 0;
  for (int32_t i = 0; i < n_vocab; i++) {
    if (lens[i] > 65536) {
      rc = pw_seterr(err, PW_EINVAL, "grammar: token %d has %zu bytes", i, lens[i]);
      goto fail;
    }
    total += lens[i];
  }
  if (total > UINT32_MAX / 2) {
    rc = pw_seterr(err, PW_ELIMIT, "grammar: vocabulary too large");
    goto fail;
  }
  gv->bytes = malloc(total ? total : 1);
  gv->off = malloc(((size_t)n_vocab + 1) * sizeof *gv->off);
  gv->eog = calloc(gv->n_words, sizeof *gv->eog);
  gv->sorted = malloc((size_t)n_vocab * sizeof *gv->sorted);
  if (!gv->bytes || !gv->off || !gv->eog || !gv->sorted) goto fail;
  size_t o = 0, maxlen = 0;
  for (int32_t i = 0; i < n_vocab; i++) {
    gv->off[i] = (uint32_t)o;
    if (lens[i]) memcpy(gv->bytes + o, pieces[i], lens[i]);
    o += lens[i];
    if (lens[i] > maxlen) maxlen = lens[i];
    if (is_eog && is_eog[i]) gv->eog[i >> 6] |= 1ull << (i & 63);
    else if (lens[i] > 0) gv->sorted[gv->n_sorted++] = i;
  }
  gv->off[n_vocab] = (uint32_t)o;
  qsort_r(gv->sorted, gv->n_sorted, sizeof *gv->sorted, cmp_tok, gv);
  /* Nodes: at most one per byte plus the root. */
  size_t cap = total + 1;
  gv->nb = malloc(cap);
  gv->nnext = malloc(cap * sizeof *gv->nnext);
  gv->nlo = malloc(cap * sizeof *gv->nlo);
  gv->nhi = malloc(cap * sizeof *gv->nhi);
  gv->nend = calloc(cap, sizeof *gv->nend);
  open = malloc((maxlen + 2) * sizeof *open);
  if (!gv->nb || !gv->nnext || !gv->nlo || !gv->nhi || !gv->nend || !open) goto fail;
  uint32_t n = 1, depth = 0; /* open[0..depth] = path of open nodes */
  gv->nb[0] = 0;
  gv->nlo[0] = 0;
  open[0] = 0;
  const uint8_t *prev = NULL;
  uint32_t prev_len = 0;
  for (uint32_t si = 0; si < gv->n_sorted; si++) {
    int32_t t = gv->sorted[si];
    const uint8_t *s = gv->bytes + gv->off[t];
    uint32_t len = gv->off[t + 1] - gv->off[t];
    uint32_t l = 0;
    while (prev && l < len && l < prev_len && s[l] == prev[l]) l++;
    while (depth > l) { /* close nodes below the common prefix */
      uint32_t nd = open[depth--];
      gv->nnext[nd] = n;
      gv->nhi[nd] = si;
    }
    for (uint32_t k = l; k < len; k++) {
      gv->nb[n] = s[k];
      gv->nlo[n] = si;
      open[++depth] = n++;
    }
    gv->nend[open[depth]]++;
    prev = s;
    prev_len = len;
  }
  while (depth > 0) {
    uint32_t nd = open[depth--];
    gv->nnext[nd] = n;
    gv->nhi[nd] = gv->n_sorted;
  }
  gv->nnext[0] = n;
  gv->nhi[0] = gv->n_sorted;
  gv->n_nodes = n;
  /* Byte summaries, children before parents (reverse depth-first order). */
  tmp = calloc(n, sizeof *tmp);
  gv->nbm = malloc((size_t)n * sizeof *gv->nbm);
  if (!tmp || !gv->nbm) goto fail;
  uint32_t n_bm = 0;
  for (uint32_t i = n; i-- > 1;) {
    tmp[i].w[gv->nb[i] >> 6] |= 1ull << (gv->nb[i] & 63);
    for (uint32_t c = i + 1; c < gv->nnext[i]; c = gv->nnext[c])
      for (int w = 0; w < 4; w++) tmp[i].w[w] |= tmp[c].w[w];
    if (gv->nhi[i] - gv->nlo[i] >= BM_MIN_TOKENS) n_bm++;
  }
  gv->bms = malloc((n_bm ? n_bm : 1) * sizeof *gv->bms);
  if (!gv->bms) goto fail;
  n_bm = 0;
  gv->nbm[0] = -1;
  for (uint32_t i = 1; i < n; i++) {
    gv->nbm[i] = -1;
    if (gv->nhi[i] - gv->nlo[i] >= BM_MIN_TOKENS) {
      gv->bms[n_bm] = tmp[i];
      gv->nbm[i] = (int32_t)n_bm++;
    }
  }
  free(tmp);
  free(open);
  *out = gv;
  return 0;
fail:
  free(tmp);
  free(open);
  grammar_vocab_destroy(gv);
  if (rc == PW_ENOMEM) pw_seterr(err, rc, "grammar: out of memory for the vocabulary trie");
  return rc;
}

/* ---- matcher -------------------------------------------------------------- */

typedef struct dfs_ent {
  uint32_t node, child, state;
} dfs_ent;

struct grammar_matcher {
  const grammar *g;        /* borrowed */
  const grammar_vocab *gv; /* borrowed */
  /* interned stacks: id -> (top position, rest); id 0 = the empty stack */
  uint32_t *spos, *spar;
  uint32_t n_stk, cap_stk;
  uint32_t *stk_ht;        /* id, 0 = free slot (id 0 is never stored) */
  uint32_t stk_ht_cap;
  /* interned states: id -> pool[off .. off + len) sorted stack ids */
  uint32_t *st_off, *st_len;
  uint32_t n_st, cap_st;
  uint32_t *pool;
  size_t n_pool, cap_pool;
  uint32_t *st_ht;         /* id + 1, 0 = free */
  uint32_t st_ht_cap;
  uint32_t **trans;        /* [cap_st] 256 next states (UNKNOWN, DEAD) per state, allocated on use */
  gset *loop;              /* [cap_st] bytes on which the state goes to itself */
  uint8_t *loop_done;      /* [cap_st] */
  int32_t *st_slot;        /* [cap_st] mask cache slot, -1 = none */
  /* mask cache */
  uint64_t *masks;         /* [MASK_SLOTS][n_words] */
  uint32_t slot_state[MASK_SLOTS];
  int n_slots_used, next_slot;
  uint64_t *sorted_bits;   /* [n_sorted words] scratch of the walk */
  uint64_t *out;           /* [n_words] an uncached mask */
  dfs_ent *dfs;            /* [max token length + 2] */
  uint32_t dfs_cap;
  /* advance scratch */
  uint32_t *scr;
  uint32_t n_scr, cap_scr;
  uint32_t work;
  bool fail;               /* a limit was reached during this advance */
  bool overflow;           /* tables are full: start over at the next safe point */
  /* position */
  uint32_t init, cur;
  bool ended;              /* an end-of-generation token was accepted */
  grammar_matcher_stats st;
};

static uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 33);
}

static uint32_t cons(grammar_matcher *m, uint32_t pos, uint32_t par) {
  uint64_t h = mix(((uint64_t)pos << 32) | par);
  uint32_t mask = m->stk_ht_cap - 1;
  for (uint32_t j = (uint32_t)h & mask;; j = (j + 1) & mask) {
    uint32_t id = m->stk_ht[j];
    if (id == 0) break;
    if (m->spos[id] == pos && m->spar[id] == par) return id;
  }
  if (m->n_stk >= GRAMMAR_MAX_STACKS) {
    m->fail = m->overflow = true;
    return DEAD;
  }
  if (m->n_stk == m->cap_stk) {
    uint32_t nc = m->cap_stk * 2;
    uint32_t *a = realloc(m->spos, nc * sizeof *a);
    if (!a) goto oom;
    m->spos = a;
    uint32_t *b = realloc(m->spar, nc * sizeof *b);
    if (!b) goto oom;
    m->spar = b;
    m->cap_stk = nc;
  }
  if ((m->n_stk + 1) * 2 > m->stk_ht_cap) {
    uint32_t nc = m->stk_ht_cap * 2;
    uint32_t *t = calloc(nc, sizeof *t);
    if (!t) goto oom;
    for (uint32_t id = 1; id < m->n_stk; id++) {
      uint32_t j = (uint32_t)mix(((uint64_t)m->spos[id] << 32) | m->spar[id]) & (nc - 1);
      while (t[j]) j = (j + 1) & (nc - 1);
      t[j] = id;
    }
    free(m->stk_ht);
    m->stk_ht = t;
    m->stk_ht_cap = nc;
    mask = nc - 1;
  }
  uint32_t id = m->n_stk++;
  m->spos[id] = pos;
  m->spar[id] = par;
  uint32_t j = (uint32_t)h & mask;
  while (m->stk_ht[j]) j = (j + 1) & mask;
  m->stk_ht[j] = id;
  return id;
oom:
  m->fail = m->overflow = true;
  return DEAD;
}

static void scr_push(grammar_matcher *m, uint32_t id) {
  if (m->n_scr == m->cap_scr) {
    uint32_t nc = m->cap_scr ? m->cap_scr * 2 : 64;
    uint32_t *n = realloc(m->scr, nc * sizeof *n);
    if (!n) {
      m->fail = true;
      return;
    }
    m->scr = n;
    m->cap_scr = nc;
  }
  m->scr[m->n_scr++] = id;
}

/* Pushes onto scr the stacks of "continue at position p with rest par":
 * references expanded, ended alternatives returned from. */
static void expand(grammar_matcher *m, uint32_t p, uint32_t par, int depth) {
  const grammar *g = m->g;
  if (++m->work > GRAMMAR_MAX_WORK || depth > MAX_DEPTH || m->n_scr > GRAMMAR_MAX_ALIVE) {
    m->fail = true;
    return;
  }
  for (;;) {
    gelem e = g->el[p];
    if (e.type == GE_SET) {
      uint32_t s = cons(m, p, par);
      if (s != DEAD) scr_push(m, s);
      return;
    }
    if (e.type == GE_END) {
      if (par == 0) {
        scr_push(m, 0);
        return;
      }
      p = m->spos[par];
      if (g->el[p].type == GE_SET) { /* the rest is itself a stable stack */
        scr_push(m, par);
        return;
      }
      par = m->spar[par];
      continue; /* a reference to expand (never an end: see GE_REF below) */
    }
    /* GE_REF: what follows it is pushed unless it ends the alternative. */
    uint32_t ret = par;
    if (g->el[p + 1].type != GE_END) {
      ret = cons(m, p + 1, par);
      if (ret == DEAD) return;
    }
    uint32_t r = e.v;
    for (uint32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1] && !m->fail; a++) expand(m, g->alt[a], ret, depth + 1);
    return;
  }
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return x < y ? -1 : x > y;
}

static bool st_grow(grammar_matcher *m) {
  uint32_t nc = m->cap_st ? m->cap_st * 2 : 256;
  uint32_t *a = realloc(m->st_off, nc * sizeof *a);
  if (!a) return false;
  m->st_off = a;
  a = realloc(m->st_len, nc * sizeof *a);
  if (!a) return false;
  m->st_len = a;
  uint32_t **t = realloc(m->trans, nc * sizeof *t);
  if (!t) return false;
  m->trans = t;
  gset *l = realloc(m->loop, nc * sizeof *l);
  if (!l) return false;
  m->loop = l;
  uint8_t *d = realloc(m->loop_done, nc);
  if (!d) return false;
  m->loop_done = d;
  int32_t *s = realloc(m->st_slot, nc * sizeof *s);
  if (!s) return false;
  m->st_slot = s;
  m->cap_st = nc;
  return true;
}

static uint64_t hash_ids(const uint32_t *v, uint32_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  for (uint32_t i = 0; i < n; i++) h = mix(h ^ v[i]);
  return h;
}

/* Interns scr[0..n_scr) (sorted and deduplicated here). */
static uint32_t intern(grammar_matcher *m) {
  if (m->fail) return DEAD;
  if (m->n_scr == 0) return DEAD;
  qsort(m->scr, m->n_scr, sizeof *m->scr, cmp_u32);
  uint32_t n = 0;
  for (uint32_t i = 0; i < m->n_scr; i++)
    if (n == 0 || m->scr[i] != m->scr[n - 1]) m->scr[n++] = m->scr[i];
  if (n > GRAMMAR_MAX_ALIVE) {
    m->fail = true;
    return DEAD;
  }
  uint64_t h = hash_ids(m->scr, n);
  uint32_t mask = m->st_ht_cap - 1;
  uint32_t j = (uint32_t)h & mask;
  for (; m->st_ht[j]; j = (j + 1) & mask) {
    uint32_t id = m->st_ht[j] - 1;
    if (m->st_len[id] == n && memcmp(m->pool + m->st_off[id], m->scr, n * sizeof *m->scr) == 0) return id;
  }
  if (m->n_st >= GRAMMAR_MAX_STATES || m->n_pool + n > (size_t)GRAMMAR_MAX_STACKS * 4) {
    m->fail = m->overflow = true;
    return DEAD;
  }
  if (m->n_st == m->cap_st && !st_grow(m)) goto oom;
  if (m->n_pool + n > m->cap_pool) {
    size_t nc = m->cap_pool * 2;
    while (nc < m->n_pool + n) nc *= 2;
    uint32_t *p = realloc(m->pool, nc * sizeof *p);
    if (!p) goto oom;
    m->pool = p;
    m->cap_pool = nc;
  }
  if ((m->n_st + 1) * 2 > m->st_ht_cap) {
    uint32_t nc = m->st_ht_cap * 2;
    uint32_t *t = calloc(nc, sizeof *t);
    if (!t) goto oom;
    for (uint32_t id = 0; id < m->n_st; id++) {
      uint32_t k = (uint32_t)hash_ids(m->pool + m->st_off[id], m->st_len[id]) & (nc - 1);
      while (t[k]) k = (k + 1) & (nc - 1);
      t[k] = id + 1;
    }
    free(m->st_ht);
    m->st_ht = t;
    m->st_ht_cap = nc;
    mask = nc - 1;
    j = (uint32_t)h & mask;
    while (m->st_ht[j]) j = (j + 1) & mask;
  }
  uint32_t id = m->n_st++;
  m->st_off[id] = (uint32_t)m->n_pool;
  m->st_len[id] = n;
  memcpy(m->pool + m->n_pool, m->scr, n * sizeof *m->scr);
  m->n_pool += n;
  m->trans[id] = NULL;
  m->loop_done[id] = 0;
  m->st_slot[id] = -1;
  m->st_ht[j] = id + 1;
  return id;
oom:
  m->fail = m->overflow = true;
  return DEAD;
}

static bool st_accepts(const grammar_matcher *m, uint32_t s) { return m->pool[m->st_off[s]] == 0; }

/* The state after byte b from state s, DEAD if b is not allowed (or a
 * limit was reached: then nothing is cached and overflow may be set). */
static uint32_t advance(grammar_matcher *m, uint32_t s, unsigned b) {
  uint32_t *t = m->trans[s];
  if (t && t[b] != UNKNOWN) return t[b];
  if (!t) {
    t = malloc(256 * sizeof *t);
    if (!t) {
      m->overflow = true;
      return DEAD;
    }
    for (int i = 0; i < 256; i++) t[i] = UNKNOWN;
    m->trans[s] = t;
  }
  m->n_scr = 0;
  m->work = 0;
  m->fail = false;
  const grammar *g = m->g;
  uint32_t off = m->st_off[s], len = m->st_len[s];
  for (uint32_t i = 0; i < len && !m->fail; i++) {
    uint32_t k = m->pool[off + i];
    if (k == 0) continue;
    uint32_t p = m->spos[k];
    if (gset_has(&g->sets[g->el[p].v], b)) expand(m, p + 1, m->spar[k], 0);
  }
  uint32_t r = intern(m);
  if (m->fail) return DEAD; /* not cached: a limit, not the grammar, refused it */
  m->trans[s][b] = r;       /* (intern may have grown trans: index again) */
  return r;
}

static void free_tables(grammar_matcher *m) {
  for (uint32_t i = 0; i < m->n_st; i++) free(m->trans[i]);
  m->n_st = 0;
  m->n_pool = 0;
  memset(m->st_ht, 0, m->st_ht_cap * sizeof *m->st_ht);
  m->n_stk = 1;
  memset(m->stk_ht, 0, m->stk_ht_cap * sizeof *m->stk_ht);
  m->n_slots_used = m->next_slot = 0;
}

static uint32_t initial_state(grammar_matcher *m) {
  m->n_scr = 0;
  m->work = 0;
  m->fail = false;
  const grammar *g = m->g;
  for (uint32_t a = g->rule_alt[g->root]; a < g->rule_alt[g->root + 1] && !m->fail; a++) expand(m, g->alt[a], 0, 0);
  return intern(m);
}

/* Forgets every table and re-interns the current state (its stacks copied
 * out as position lists first). DEAD on failure. */
static uint32_t rebuild(grammar_matcher *m, uint32_t cur) {
  m->st.resets++;
  uint32_t n = m->st_len[cur];
  size_t cap = 64, len = 0;
  uint32_t *flat = malloc(cap * sizeof *flat); /* per stack: top .. bottom, then UINT32_MAX */
  if (!flat) return DEAD;
  for (uint32_t i = 0; i < n; i++) {
    for (uint32_t k = m->pool[m->st_off[cur] + i];; k = m->spar[k]) {
      if (len + 2 > cap) {
        cap *= 2;
        uint32_t *f = realloc(flat, cap * sizeof *f);
        if (!f) {
          free(flat);
          return DEAD;
        }
        flat = f;
      }
      if (k == 0) break;
      flat[len++] = m->spos[k];
    }
    flat[len++] = UINT32_MAX;
  }
  free_tables(m);
  m->overflow = false;
  m->init = initial_state(m);
  m->n_scr = 0;
  m->fail = false;
  uint32_t *stk_ids = malloc((n ? n : 1) * sizeof *stk_ids);
  if (!stk_ids) {
    free(flat);
    return DEAD;
  }
  size_t i = 0;
  for (uint32_t s = 0; s < n; s++) {
    size_t start = i;
    while (flat[i] != UINT32_MAX) i++;
    uint32_t id = 0;
    for (size_t k = i; k-- > start;) id = cons(m, flat[k], id);
    stk_ids[s] = id;
    i++;
  }
  free(flat);
  m->n_scr = 0;
  for (uint32_t s = 0; s < n; s++) scr_push(m, stk_ids[s]);
  free(stk_ids);
  return intern(m);
}

/* At a safe point (no walk in progress): start over if the tables filled. */
static int settle(grammar_matcher *m) {
  if (!m->overflow) return 0;
  uint32_t c = rebuild(m, m->cur);
  if (c == DEAD || m->init == DEAD) return PW_ENOMEM;
  m->cur = c;
  return 0;
}

int grammar_matcher_create(const grammar *g, const grammar_vocab *gv, grammar_matcher **out, char *err) {
  *out = NULL;
  grammar_matcher *m = calloc(1, sizeof *m);
  if (!m) return pw_seterr(err, PW_ENOMEM, "grammar: out of memory");
  m->g = g;
  m->gv = gv;
  m->cap_stk = 1024;
  m->spos = malloc(m->cap_stk * sizeof *m->spos);
  m->spar = malloc(m->cap_stk * sizeof *m->spar);
  m->stk_ht_cap = 4096;
  m->stk_ht = calloc(m->stk_ht_cap, sizeof *m->stk_ht);
  m->st_ht_cap = 1024;
  m->st_ht = calloc(m->st_ht_cap, sizeof *m->st_ht);
  m->cap_pool = 1024;
  m->pool = malloc(m->cap_pool * sizeof *m->pool);
  size_t sw = (gv->n_sorted + 63) / 64;
  m->masks = malloc((size_t)MASK_SLOTS * gv->n_words * sizeof *m->masks);
  m->sorted_bits = malloc((sw ? sw : 1) * sizeof *m->sorted_bits);
  m->out = malloc(gv->n_words * sizeof *m->out);
  uint32_t maxlen = 0;
  for (int32_t i = 0; i < gv->n_vocab; i++)
    if (gv->off[i + 1] - gv->off[i] > maxlen) maxlen = gv->off[i + 1] - gv->off[i];
  m->dfs_cap = maxlen + 2;
  m->dfs = malloc(m->dfs_cap * sizeof *m->dfs);
  if (!m->spos || !m->spar || !m->stk_ht || !m->st_ht || !m->pool || !m->masks || !m->sorted_bits || !m->out ||
      !m->dfs || !st_grow(m)) {
    grammar_matcher_destroy(m);
    return pw_seterr(err, PW_ENOMEM, "grammar: out of memory");
  }
  m->spos[0] = UINT32_MAX;
  m->spar[0] = 0;
  m->n_stk = 1;
  m->init = m->cur = initial_state(m);
  if (m->init == DEAD) {
    grammar_matcher_destroy(m);
    return pw_seterr(err, PW_ELIMIT, "grammar: the start of the grammar exceeds the matcher's limits");
  }
  *out = m;
  return 0;
}

void grammar_matcher_destroy(grammar_matcher *m) {
  if (!m) return;
  for (uint32_t i = 0; i < m->n_st; i++) free(m->trans[i]);
  free(m->spos);
  free(m->spar);
  free(m->stk_ht);
  free(m->st_off);
  free(m->st_len);
  free(m->pool);
  free(m->st_ht);
  free(m->trans);
  free(m->loop);
  free(m->loop_done);
  free(m->st_slot);
  free(m->masks);
  free(m->sorted_bits);
  free(m->out);
  free(m->dfs);
  free(m->scr);
  free(m);
}

void grammar_matcher_reset(grammar_matcher *m) {
  m->cur = m->init;
  m->ended = false;
}

static void fill(uint64_t *bits, uint32_t a, uint32_t b) {
  while (a < b && (a & 63)) {
    bits[a >> 6] |= 1ull << (a & 63);
    a++;
  }
  while (a + 64 <= b) {
    bits[a >> 6] = ~0ull;
    a += 64;
  }
  while (a < b) {
    bits[a >> 6] |= 1ull << (a & 63);
    a++;
  }
}

/* The bytes on which s goes to itself. */
static const gset *loop_of(grammar_matcher *m, uint32_t s) {
  if (!m->loop_done[s]) {
    gset l = {{0}};
    for (unsigned b = 0; b < 256; b++) {
      uint32_t r = advance(m, s, b);
      if (r == s) l.w[b >> 6] |= 1ull << (b & 63);
    }
    m->loop[s] = l;
    m->loop_done[s] = 1;
  }
  return &m->loop[s];
}

static bool covers(const gset *l, const gset *x) {
  return !((x->w[0] & ~l->w[0]) | (x->w[1] & ~l->w[1]) | (x->w[2] & ~l->w[2]) | (x->w[3] & ~l->w[3]));
}

/* Computes the mask of state s into dst (token-id order). Returns false if
 * a limit cut the walk short (dst is then a subset of the true mask). */
static bool compute_mask(grammar_matcher *m, uint32_t s, uint64_t *dst) {
  const grammar_vocab *gv = m->gv;
  size_t sw = (gv->n_sorted + 63) / 64;
  memset(m->sorted_bits, 0, sw * sizeof *m->sorted_bits);
  bool cut = false;
  uint32_t sp = 0;
  m->dfs[sp++] = (dfs_ent){0, 1, s};
  uint64_t visited = 0;
  while (sp > 0) {
    dfs_ent *top = &m->dfs[sp - 1];
    uint32_t c = top->child;
    if (c >= gv->nnext[top->node]) {
      sp--;
      continue;
    }
    top->child = gv->nnext[c];
    uint32_t st = top->state;
    uint32_t s2 = advance(m, st, gv->nb[c]);
    if (s2 == DEAD) {
      if (m->fail) cut = true;
      continue;
    }
    visited++;
    if (s2 == st && gv->nbm[c] >= 0 && covers(loop_of(m, st), &gv->bms[gv->nbm[c]])) {
      fill(m->sorted_bits, gv->nlo[c], gv->nhi[c]);
      continue;
    }
    if (gv->nend[c]) fill(m->sorted_bits, gv->nlo[c], gv->nlo[c] + gv->nend[c]);
    if (c + 1 < gv->nnext[c]) {
      PW_ASSERT(sp < m->dfs_cap);
      m->dfs[sp++] = (dfs_ent){c, c + 1, s2};
    }
  }
  m->st.trie_nodes += visited;
  memset(dst, 0, gv->n_words * sizeof *dst);
  for (size_t w = 0; w < sw; w++) {
    uint64_t x = m->sorted_bits[w];
    while (x) {
      int b = __builtin_ctzll(x);
      x &= x - 1;
      int32_t t = gv->sorted[w * 64 + (size_t)b];
      dst[t >> 6] |= 1ull << (t & 63);
    }
  }
  if (st_accepts(m, s))
    for (uint32_t w = 0; w < gv->n_words; w++) dst[w] |= gv->eog[w];
  return !cut;
}

int grammar_matcher_mask(grammar_matcher *m, const uint64_t **mask) {
  m->st.masks++;
  if (settle(m) < 0) return PW_ENOMEM;
  uint32_t s = m->cur;
  if (m->ended) { /* nothing may follow an end-of-generation token */
    memset(m->out, 0, m->gv->n_words * sizeof *m->out);
    *mask = m->out;
    return 0;
  }
  if (m->st_slot[s] >= 0) {
    m->st.mask_hits++;
    *mask = m->masks + (size_t)m->st_slot[s] * m->gv->n_words;
    return 0;
  }
  bool complete = compute_mask(m, s, m->out);
  if (!complete || m->overflow) {
    /* a subset, or tables that will be forgotten: not cached */
    *mask = m->out;
    return 0;
  }
  int slot = m->next_slot;
  m->next_slot = (m->next_slot + 1) % MASK_SLOTS;
  if (m->n_slots_used < MASK_SLOTS) m->n_slots_used++;
  else m->st_slot[m->slot_state[slot]] = -1;
  m->slot_state[slot] = s;
  m->st_slot[s] = slot;
  uint64_t *dst = m->masks + (size_t)slot * m->gv->n_words;
  memcpy(dst, m->out, m->gv->n_words * sizeof *dst);
  *mask = dst;
  return 0;
}

int grammar_matcher_apply(grammar_matcher *m, float *logits, bool allow_eog) {
  const uint64_t *mask;
  int rc = grammar_matcher_mask(m, &mask);
  if (rc < 0) return rc;
  const grammar_vocab *gv = m->gv;
  int allowed = 0;
  for (uint32_t w = 0; w < gv->n_words; w++) {
    uint64_t x = mask[w];
    if (!allow_eog) x &= ~gv->eog[w];
    uint32_t base = w * 64;
    uint32_t lim = (uint32_t)gv->n_vocab - base < 64 ? (uint32_t)gv->n_vocab - base : 64;
    uint64_t valid = lim == 64 ? ~0ull : (1ull << lim) - 1;
    x &= valid;
    allowed += __builtin_popcountll(x);
    if (x == valid) continue;
    uint64_t ban = ~x & valid;
    while (ban) {
      int b = __builtin_ctzll(ban);
      ban &= ban - 1;
      logits[base + (uint32_t)b] = -INFINITY;
    }
  }
  return allowed;
}

static bool is_eog(const grammar_vocab *gv, int32_t tok) { return (gv->eog[tok >> 6] >> (tok & 63)) & 1u; }

/* The state after tok's bytes from s; DEAD if not allowed. */
static uint32_t advance_token(grammar_matcher *m, uint32_t s, int32_t tok) {
  const grammar_vocab *gv = m->gv;
  uint32_t a = gv->off[tok], b = gv->off[tok + 1];
  if (a == b) return DEAD;
  for (uint32_t i = a; i < b && s != DEAD; i++) s = advance(m, s, gv->bytes[i]);
  return s;
}

int grammar_matcher_accept_token(grammar_matcher *m, int32_t tok) {
  if (tok < 0 || tok >= m->gv->n_vocab || m->ended) return PW_EINVAL;
  if (settle(m) < 0) return PW_ENOMEM;
  if (is_eog(m->gv, tok)) {
    if (!st_accepts(m, m->cur)) return PW_EINVAL;
    m->ended = true;
    return 0;
  }
  uint32_t s = advance_token(m, m->cur, tok);
  if (s == DEAD) {
    /* The tables may have filled midway: start over once and retry. */
    if (m->overflow && settle(m) == 0) s = advance_token(m, m->cur, tok);
    if (s == DEAD) return PW_EINVAL;
  }
  m->cur = s;
  return 0;
}

int grammar_matcher_accept_bytes(grammar_matcher *m, const char *bytes, size_t len) {
  if (m->ended) return len ? PW_EINVAL : 0;
  if (settle(m) < 0) return PW_ENOMEM;
  uint32_t s = m->cur;
  for (size_t i = 0; i < len && s != DEAD; i++) {
    s = advance(m, s, (unsigned char)bytes[i]);
    if (s == DEAD && m->overflow) { /* start over from where we were and go on */
      if (settle(m) < 0) return PW_ENOMEM;
      s = m->cur;
      for (size_t k = 0; k <= i && s != DEAD; k++) s = advance(m, s, (unsigned char)bytes[k]);
    }
  }
  if (s == DEAD) return PW_EINVAL;
  m->cur = s;
  return 0;
}

bool grammar_matcher_allows(grammar_matcher *m, int32_t tok) {
  if (tok < 0 || tok >= m->gv->n_vocab || m->ended) return false;
  if (settle(m) < 0) return false;
  if (is_eog(m->gv, tok)) return st_accepts(m, m->cur);
  return advance_token(m, m->cur, tok) != DEAD;
}

int grammar_matcher_prefix(grammar_matcher *m, const int32_t *toks, int n) {
  if (m->ended || settle(m) < 0) return 0;
  uint32_t s = m->cur;
  for (int i = 0; i < n; i++) {
    int32_t t = toks[i];
    if (t < 0 || t >= m->gv->n_vocab) return i;
    if (is_eog(m->gv, t)) return st_accepts(m, s) ? i + 1 : i;
    s = advance_token(m, s, t);
    if (s == DEAD) return i;
  }
  return n;
}

bool grammar_matcher_can_end(const grammar_matcher *m) { return m->ended || st_accepts(m, m->cur); }

bool grammar_matcher_done(const grammar_matcher *m) {
  return m->ended || (m->st_len[m->cur] == 1 && m->pool[m->st_off[m->cur]] == 0);
}

void grammar_matcher_get_stats(const grammar_matcher *m, grammar_matcher_stats *out) {
  *out = m->st;
  out->states = m->n_st;
  out->stacks = m->n_stk;
}
