/* prompt.c - chat templates and tokenization for every front end. See
 * prompt.h. */
#include "chat/prompt.h"

#include "base/clock.h"
#include "chat/chat.h"

#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int perr(prompt_error *pe, int status, const char *param, const char *fmt, ...) {
  if (!pe) return status;
  pe->status = status;
  pe->param = param;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(pe->message, sizeof pe->message, fmt, ap);
  va_end(ap);
  return status;
}

static void token_text(const tok_vocab *v, int32_t id, char *out, size_t cap) {
  out[0] = 0;
  if (id < 0) return;
  size_t n = 0;
  const char *t = tok_text(v, id, &n);
  if (!t || n >= cap) return;
  memcpy(out, t, n);
  out[n] = 0;
}

int prompt_builder_init(prompt_builder *pb, const tok_vocab *v, const char *template_src, char *err) {
  memset(pb, 0, sizeof *pb);
  pb->vocab = v;
  token_text(v, tok_bos(v), pb->bos, sizeof pb->bos);
  token_text(v, tok_eos(v), pb->eos, sizeof pb->eos);
  if (!template_src) template_src = chat_default_template();
  if (!(pb->template_src = strdup(template_src))) return pw_seterr(err, PW_ENOMEM, "out of memory");
  int rc = jinja_parse(template_src, strlen(template_src), 0, &pb->tmpl, err);
  if (rc) prompt_builder_free(pb);
  return rc;
}

void prompt_builder_free(prompt_builder *pb) {
  if (!pb) return;
  jinja_destroy(pb->tmpl);
  free(pb->template_src);
  pb->tmpl = NULL;
  pb->template_src = NULL;
}

static int tokenize_spans(const prompt_builder *pb, const char *text, size_t len, bool add_special, bool parse_special,
                          const tok_range *plain, size_t n_plain, const char *param, int32_t **out, int *n_out,
                          prompt_error *pe) {
  char err[PW_ERRMAX] = "";
  size_t cap = len + 8, n = 0;
  if (len > PROMPT_MAX_TEXT_BYTES)
    return perr(pe, PW_EINVAL, param, "'%s' is too long (%zu bytes; at most %u)", param, len, PROMPT_MAX_TEXT_BYTES);
  for (int attempt = 0; attempt < 2; attempt++) {
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return perr(pe, PW_ENOMEM, NULL, "out of memory");
    int rc = tok_encode_spans(pb->vocab, text, len, add_special, parse_special, plain, n_plain, ids, cap, &n, err);
    if (rc == 0) {
      if (n > PROMPT_MAX_TOKENS) {
        free(ids);
        return perr(pe, PW_EINVAL, param, "'%s' has more than %d tokens", param, PROMPT_MAX_TOKENS);
      }
      *out = ids;
      *n_out = (int)n;
      return 0;
    }
    free(ids);
    if (rc == PW_ENOMEM) return perr(pe, PW_ENOMEM, NULL, "out of memory tokenizing '%s'", param);
    if (rc != PW_ERANGE) return perr(pe, PW_EINVAL, param, "cannot tokenize '%s': %s", param, err);
    cap = n + 1;
  }
  return perr(pe, PW_EINVAL, param, "tokenizer size mismatch");
}

int prompt_tokenize(const prompt_builder *pb, const char *text, size_t len, bool add_special, bool parse_special,
                    const char *param, int32_t **out, int *n_out, prompt_error *pe) {
  return tokenize_spans(pb, text, len, add_special, parse_special, NULL, 0, param, out, n_out, pe);
}

/* ---- control-token text in message contents ---------------------------------
 * Before rendering, each control-token text inside a message's content is
 * replaced by a placeholder: U+E000, a per-render nonce and the index of the
 * original text in hex, U+E001 (private-use characters that templates pass
 * through unchanged). After rendering, each placeholder is put back and its
 * bytes become a plain span for the tokenizer. Contents without such text
 * are left alone (no copy of the messages). */

#define PH_OPEN "\xEE\x80\x80"
#define PH_CLOSE "\xEE\x80\x81"

typedef struct protect {
  char nonce[17];
  const char **texts; /* [n] original texts (views into the caller's messages) */
  size_t *lens;
  size_t n, cap;
} protect;

static int protect_add(protect *p, const char *t, size_t len) {
  if (p->n == p->cap) {
    size_t nc = p->cap ? p->cap * 2 : 16;
    const char **nt = realloc(p->texts, nc * sizeof *nt);
    if (!nt) return PW_ENOMEM;
    p->texts = nt;
    size_t *nl = realloc(p->lens, nc * sizeof *nl);
    if (!nl) return PW_ENOMEM;
    p->lens = nl;
    p->cap = nc;
  }
  p->texts[p->n] = t;
  p->lens[p->n++] = len;
  return 0;
}

/* The control-token spans of s (malloc'ed into *sp); 0 or PW_ENOMEM. */
static int control_spans(const tok_vocab *v, const char *s, size_t len, tok_range **sp, size_t *n) {
  char err[PW_ERRMAX];
  *sp = NULL;
  size_t cnt = 0;
  int rc = tok_control_spans(v, s, len, NULL, 0, &cnt, err);
  if (rc == 0 || cnt == 0) {
    *n = 0;
    return rc == PW_ENOMEM ? rc : 0;
  }
  if (!(*sp = malloc(cnt * sizeof **sp))) return PW_ENOMEM;
  if ((rc = tok_control_spans(v, s, len, *sp, cnt, n, err))) {
    free(*sp);
    *sp = NULL;
    return rc;
  }
  return 0;
}

/* A copy of messages with placeholders, or NULL in *out when no content
 * needs one. The original texts stay views into messages. */
static int protect_messages(const prompt_builder *pb, const json_t *messages, protect *p, json_t **out,
                            prompt_error *pe) {
  *out = NULL;
  size_t i;
  const json_t *m;
  json_array_foreach(messages, i, m) {
    const json_t *c = json_object_get(m, "content");
    if (!json_is_string(c)) continue;
    const char *s = json_string_value(c);
    size_t len = json_string_length(c);
    tok_range *sp = NULL;
    size_t n = 0;
    if (control_spans(pb->vocab, s, len, &sp, &n)) return perr(pe, PW_ENOMEM, NULL, "out of memory");
    if (n == 0) continue;
    if (!*out && !(*out = json_deep_copy(messages))) {
      free(sp);
      return perr(pe, PW_ENOMEM, NULL, "out of memory");
    }
    size_t cap = len + n * 64 + 1, w = 0, at = 0;
    char *buf = malloc(cap);
    int rc = buf ? 0 : PW_ENOMEM;
    for (size_t k = 0; k < n && rc == 0; k++) {
      memcpy(buf + w, s + at, sp[k].off - at);
      w += sp[k].off - at;
      w += (size_t)snprintf(buf + w, cap - w, PH_OPEN "%s%zx" PH_CLOSE, p->nonce, p->n);
      rc = protect_add(p, s + sp[k].off, sp[k].len);
      at = sp[k].off + sp[k].len;
    }
    if (rc == 0) {
      memcpy(buf + w, s + at, len - at);
      w += len - at;
      rc = json_object_set_new(json_array_get(*out, i), "content", json_stringn(buf, w)) ? PW_ENOMEM : 0;
    }
    free(buf);
    free(sp);
    if (rc) return perr(pe, PW_ENOMEM, NULL, "out of memory");
  }
  return 0;
}

/* Puts the original texts back into text (in place: a placeholder is
 * longer than nothing but may be shorter than its text, so a new buffer)
 * and lists their spans. Placeholders the template dropped are fine;
 * placeholders it mangled are left as they are (plain text). */
static int protect_restore(const protect *p, char **text, size_t *len, tok_range **spans, size_t *n_spans) {
  const char *t = *text;
  size_t tl = *len, extra = 0;
  for (size_t k = 0; k < p->n; k++) extra += p->lens[k];
  char *out = malloc(tl + extra + 1);
  tok_range *sp = malloc((p->n ? p->n : 1) * sizeof *sp);
  if (!out || !sp) {
    free(out);
    free(sp);
    return PW_ENOMEM;
  }
  size_t w = 0, ns = 0, nl = strlen(p->nonce);
  for (size_t i = 0; i < tl;) {
    if (tl - i >= 3 + nl + 1 + 3 && memcmp(t + i, PH_OPEN, 3) == 0 && memcmp(t + i + 3, p->nonce, nl) == 0) {
      size_t j = i + 3 + nl, idx = 0;
      bool digits = false;
      while (j < tl && j - i < 40 && ((t[j] >= '0' && t[j] <= '9') || (t[j] >= 'a' && t[j] <= 'f'))) {
        idx = idx * 16 + (size_t)(t[j] <= '9' ? t[j] - '0' : t[j] - 'a' + 10);
        digits = true;
        j++;
      }
      if (digits && idx < p->n && tl - j >= 3 && memcmp(t + j, PH_CLOSE, 3) == 0 && ns < p->n) {
        sp[ns++] = (tok_range){w, p->lens[idx]};
        memcpy(out + w, p->texts[idx], p->lens[idx]);
        w += p->lens[idx];
        i = j + 3;
        continue;
      }
    }
    out[w++] = t[i++];
  }
  out[w] = 0;
  free(*text);
  *text = out;
  *len = w;
  *spans = sp;
  *n_spans = ns;
  return 0;
}

int prompt_chat(const prompt_builder *pb, const json_t *messages, const prompt_chat_opts *opts, int32_t **out,
                int *n_out, prompt_error *pe) {
  static atomic_ulong counter;
  prompt_chat_opts none = {0};
  if (!opts) opts = &none;
  if (opts->rendered) *opts->rendered = NULL;
  if (!json_is_array(messages)) return perr(pe, PW_EINVAL, "messages", "'messages' must be an array");
  protect p = {0};
  snprintf(p.nonce, sizeof p.nonce, "%016llx",
           (unsigned long long)(pw_now_ns() * 0x9E3779B97F4A7C15ull ^ atomic_fetch_add(&counter, 1)));
  json_t *safe = NULL;
  int rc = opts->special_in_content ? 0 : protect_messages(pb, messages, &p, &safe, pe);
  char *text = NULL;
  size_t len = 0;
  tok_range *spans = NULL;
  size_t n_spans = 0;
  json_t *vars = NULL;
  if (rc) goto out;
  vars = json_pack("{s:O,s:b,s:s,s:s}", "messages", safe ? safe : (json_t *)messages, "add_generation_prompt", 1,
                   "bos_token", pb->bos, "eos_token", pb->eos);
  if (!vars || (opts->extra_vars && json_object_update_missing(vars, (json_t *)opts->extra_vars))) {
    rc = perr(pe, PW_ENOMEM, NULL, "out of memory");
    goto out;
  }
  jinja_limits lim = {0};
  lim.max_output = PROMPT_MAX_RENDER_BYTES;
  lim.max_memory = PROMPT_MAX_RENDER_MEMORY;
  char err[PW_ERRMAX] = "";
  rc = jinja_render(pb->tmpl, vars, &lim, &text, &len, err);
  if (rc == PW_ENOMEM) {
    rc = perr(pe, PW_ENOMEM, NULL, "out of memory rendering the chat template");
    goto out;
  }
  if (rc) {
    rc = perr(pe, PW_ETEMPLATE, "messages", "chat template: %s", err);
    goto out;
  }
  if (p.n && (rc = protect_restore(&p, &text, &len, &spans, &n_spans))) {
    rc = perr(pe, PW_ENOMEM, NULL, "out of memory");
    goto out;
  }
  const char *t = text;
  size_t tl = len, bl = strlen(pb->bos);
  if (bl && tok_add_bos(pb->vocab) && tl >= bl && !memcmp(t, pb->bos, bl)) {
    t += bl; /* the template wrote BOS; the tokenizer adds it back once */
    tl -= bl;
    size_t k = 0; /* spans start after it: a placeholder never yields the template's BOS */
    for (size_t i = 0; i < n_spans; i++)
      if (spans[i].off >= bl) spans[k++] = (tok_range){spans[i].off - bl, spans[i].len};
    n_spans = k;
  }
  rc = tokenize_spans(pb, t, tl, true, true, spans, n_spans, "messages", out, n_out, pe);
  if (rc == 0 && opts->rendered) {
    *opts->rendered = text;
    if (opts->rendered_len) *opts->rendered_len = len;
    text = NULL;
  }
out:
  json_decref(vars);
  json_decref(safe);
  free(text);
  free(spans);
  free(p.texts);
  free(p.lens);
  return rc;
}

int prompt_check_ids(const prompt_builder *pb, const int32_t *ids, int n, const char *param, prompt_error *pe) {
  int32_t nv = tok_n_vocab(pb->vocab);
  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= nv)
      return perr(pe, PW_EINVAL, param, "'%s' token id %d is outside the vocabulary (0..%d)", param, ids[i], nv - 1);
  return 0;
}

int prompt_piece(void *ctx, int32_t token, char *buf, int cap) {
  const prompt_builder *pb = ctx;
  const char *p = NULL;
  size_t n = tok_piece_ref(pb->vocab, token, true, &p);
  if (cap <= 0) return 0;
  if (n > (size_t)cap) n = (size_t)cap;
  if (n) memcpy(buf, p, n);
  return (int)n;
}
