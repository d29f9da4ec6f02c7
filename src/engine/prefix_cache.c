/* prefix_cache.c - KV slots and the keyed prefix cache, on the engine
 * thread only. See engine.h ("Prefix cache") for the rules.
 *
 * The KV cache has max_active + prompt_cache_entries sequences ("slots").
 * A running request holds one; an idle cache entry holds one. At most
 * max_active requests run and at most prompt_cache_entries entries exist,
 * so an admitted request always finds a free slot and caching never lowers
 * the running capacity. A drafter that keeps KV (the draft model) has the
 * same slots, so a cache entry carries its KV too. */
#include "engine/engine_int.h"

#include "base/clock.h"
#include "base/error.h"

#include <string.h>

void eng_kv_rollback(engine *e, int slot, int n) {
  model_kv_truncate(e->kv, slot, n);
  if (e->drafter && e->drafter->rollback) e->drafter->rollback(e, slot, n);
}

size_t eng_seq_bytes(const engine *e, int n) {
  return model_kv_seq_bytes(e->kv, n) + (e->dkv ? model_kv_seq_bytes(e->dkv, n) : 0) + (size_t)n * e->tok_bytes;
}

/* ---- engine thread: KV slots and the prefix cache ------------------------ */

static void slot_free(engine *e, int slot) {
  eng_kv_rollback(e, slot, 0);
  PW_ASSERT(e->n_free < e->n_slots);
  e->free_slots[e->n_free++] = slot;
}

static cache_ent *cache_find(engine *e, const uint8_t key[32]) {
  for (int i = 0; i < e->n_cache; i++)
    if (e->cache[i].used && memcmp(e->cache[i].key, key, 32) == 0) return &e->cache[i];
  return NULL;
}

/* Drops an idle entry and returns its slot to the pool. */
static void cache_drop(engine *e, cache_ent *ce, bool eviction) {
  PW_ASSERT(ce->used && !ce->busy);
  slot_free(e, ce->slot);
  ce->used = false;
  ce->n_tok = 0;
  if (eviction) e->d.cache_evictions++;
}

/* The least recently used idle entry, or NULL. */
static cache_ent *cache_lru(engine *e) {
  cache_ent *best = NULL;
  for (int i = 0; i < e->n_cache; i++) {
    cache_ent *c = &e->cache[i];
    if (c->used && !c->busy && (!best || c->last_ns < best->last_ns)) best = c;
  }
  return best;
}

/* One owner's entries (busy ones included) and the KV bytes of its idle
 * ones; its least recently used idle entry, other than keep. */
static int owner_usage(engine *e, const uint8_t owner[32], const cache_ent *keep, size_t *bytes, cache_ent **lru) {
  int n = 0;
  *bytes = 0;
  *lru = NULL;
  for (int i = 0; i < e->n_cache; i++) {
    cache_ent *c = &e->cache[i];
    if (!c->used || memcmp(c->owner, owner, 32)) continue;
    n++;
    if (c->busy) continue;
    *bytes += eng_seq_bytes(e, c->n_tok);
    if (c != keep && (!*lru || c->last_ns < (*lru)->last_ns)) *lru = c;
  }
  return n;
}

/* KV bytes of the idle entries (a busy entry's KV is a running sequence's). */
size_t eng_cache_bytes(const engine *e) {
  size_t n = 0;
  for (int i = 0; i < e->n_cache; i++)
    if (e->cache[i].used && !e->cache[i].busy) n += eng_seq_bytes(e, e->cache[i].n_tok);
  return n;
}

/* Evicts idle entries idle for the TTL; returns the monotonic time of the
 * next expiry (0 = none). Bounded: one pass over the records. */
uint64_t eng_cache_expire(engine *e, uint64_t now) {
  uint64_t ttl = (uint64_t)(e->o.prompt_cache_ttl_s * 1e9), next = 0;
  for (int i = 0; i < e->n_cache; i++) {
    cache_ent *c = &e->cache[i];
    if (!c->used || c->busy) continue;
    if (now - c->last_ns >= ttl) {
      cache_drop(e, c, true);
    } else {
      uint64_t at = c->last_ns + ttl;
      if (!next || at < next) next = at;
    }
  }
  return next;
}

/* Admission of a keyed request: take its idle entry's slot and keep the
 * longest common prefix (at least the last prompt token is evaluated, for
 * its logits). A busy entry is never shared: the request runs uncached. */
static void cache_take(engine *e, engine_req *r) {
  e->d.cache_requests++;
  cache_ent *ce = cache_find(e, r->key);
  int c = 0;
  if (ce && !ce->busy) {
    int lim = ce->n_tok < r->n_prompt - 1 ? ce->n_tok : r->n_prompt - 1;
    while (c < lim && ce->toks[c] == r->prompt[c]) c++;
    /* A recurrent state holds the entry's whole length and cannot be cut
     * back: reuse only when the new prompt extends all of it. */
    if (model_has_recurrent(e->m) && (c != ce->n_tok || !model_kv_seq_exact(e->kv, ce->slot))) c = 0;
    /* Sliding-window layers kept as rings hold the entry's last positions
     * only: a prefix cut back further than the ring keeps is a miss (never
     * a state missing part of its window). */
    if (c > 0 && !model_kv_truncate_exact(e->kv, ce->slot, c)) c = 0;
    ce->busy = true;
    r->ent = ce;
    r->slot = ce->slot;
    PW_ASSERT(model_kv_len(e->kv, r->slot) >= c);
    eng_kv_rollback(e, r->slot, c);
  }
  r->n_fed = c;
  r->u.cached_tokens = c;
  if (c > 0)
    e->d.cache_hits++;
  else
    e->d.cache_misses++;
  e->d.cache_reused += (uint64_t)c;
  e->d.cache_evaluated += (uint64_t)(r->n_prompt - c);
}

/* The end of a keyed request decides where its slot goes. Kept: the
 * positions whose KV is valid (n_fed: prompt and output but the last
 * token), after a normal end or a cancellation; an error drops what the
 * request touched. The latest request to finish owns the key's entry: it
 * replaces an idle one; if another running request holds the entry, the
 * finishing one (which ran uncached) leaves it alone. */
static void cache_store(engine *e, engine_req *r, int status) {
  int slot = r->slot;
  int n = r->n_fed;
  PW_ASSERT(model_kv_len(e->kv, slot) >= n);
  const size_t nb = eng_seq_bytes(e, n);
  bool keep = status == 0 && n > 0 && nb <= e->o.prompt_cache_bytes &&
              (!e->o.prompt_cache_owner_bytes || nb <= e->o.prompt_cache_owner_bytes);
  /* nor a sequence whose rings cannot be cut back to n exactly */
  if (keep && !model_kv_truncate_exact(e->kv, slot, n)) keep = false;
  /* a recurrent state is kept only when it holds exactly the n positions */
  if (keep && model_has_recurrent(e->m) && (model_kv_len(e->kv, slot) != n || !model_kv_seq_exact(e->kv, slot)))
    keep = false;
  cache_ent *ce = r->ent ? r->ent : cache_find(e, r->key);
  r->slot = -1;
  if (ce && ce->busy && ce != r->ent) { /* someone else's running entry */
    slot_free(e, slot);
    return;
  }
  if (ce == r->ent && ce) { /* ours: it comes back idle or goes */
    ce->busy = false;
    r->ent = NULL;
    if (!keep) {
      cache_drop(e, ce, false);
      return;
    }
  } else if (ce) { /* an idle entry of the same key: replaced */
    if (!keep) {
      slot_free(e, slot);
      return;
    }
    slot_free(e, ce->slot);
    ce->slot = slot;
  } else {
    if (!keep) {
      slot_free(e, slot);
      return;
    }
    /* An owner at its entry quota replaces its own oldest entry. */
    size_t ob;
    cache_ent *own = NULL;
    if (e->o.prompt_cache_owner_entries > 0 &&
        owner_usage(e, r->owner, NULL, &ob, &own) >= e->o.prompt_cache_owner_entries) {
      if (!own) { /* all its entries are in use */
        slot_free(e, slot);
        return;
      }
      cache_drop(e, own, true);
      ce = own;
    }
    for (int i = 0; i < e->n_cache && !ce; i++)
      if (!e->cache[i].used) ce = &e->cache[i];
    if (!ce) {
      cache_ent *old = cache_lru(e);
      if (!old) { /* every entry is in use */
        slot_free(e, slot);
        return;
      }
      cache_drop(e, old, true);
      ce = old;
    }
    ce->used = true;
    ce->busy = false;
    memcpy(ce->key, r->key, 32);
    memcpy(ce->owner, r->owner, 32);
  }
  ce->slot = slot;
  ce->n_tok = n;
  memcpy(ce->toks, r->toks, (size_t)n * sizeof *ce->toks);
  eng_kv_rollback(e, slot, n);
  ce->last_ns = pw_now_ns();
  /* The byte bound: least recently used first (this entry is the most
   * recent, and fits alone by the check above). */
  while (eng_cache_bytes(e) > e->o.prompt_cache_bytes) {
    cache_ent *old = cache_lru(e);
    if (!old) break;
    cache_drop(e, old, true);
  }
  /* The owner's byte quota: its own entries only, oldest first. */
  for (int guard = 0; e->o.prompt_cache_owner_bytes && guard < e->n_cache; guard++) {
    size_t ob;
    cache_ent *own;
    owner_usage(e, ce->owner, ce, &ob, &own);
    if (ob <= e->o.prompt_cache_owner_bytes || !own) break;
    cache_drop(e, own, true);
  }
}

/* Gives r a KV slot: its key's entry's (keeping the common prefix) or a
 * free one. */
void eng_slot_take(engine *e, engine_req *r) {
  r->slot = -1;
  r->n_fed = 0;
  if (r->has_key && !r->embedding && e->n_cache > 0) cache_take(e, r);
  if (r->slot < 0) {
    PW_ASSERT(e->n_free > 0);
    r->slot = e->free_slots[--e->n_free];
    PW_ASSERT(model_kv_len(e->kv, r->slot) == 0);
  }
}

void eng_slot_release(engine *e, engine_req *r, int status) {
  if (r->slot < 0) return;
  if (r->has_key && !r->embedding && e->n_cache > 0) {
    cache_store(e, r, status);
  } else {
    slot_free(e, r->slot);
    r->slot = -1;
  }
}

