/* prompt.c - chat templates and tokenization for API requests. See prompt.h. */
#include "server/prompt.h"

#include "base/error.h"

#include <stdlib.h>
#include <string.h>

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
  if (!template_src) return pw_seterr(err, PW_EINVAL, "the model has no chat template");
  return jinja_parse(template_src, strlen(template_src), 0, &pb->tmpl, err);
}

void prompt_builder_free(prompt_builder *pb) {
  if (!pb) return;
  jinja_destroy(pb->tmpl);
  pb->tmpl = NULL;
}

int prompt_tokenize(const prompt_builder *pb, const char *text, size_t len, bool add_special,
                    bool parse_special, const char *param, int32_t **out, int *n_out, oai_error *e) {
  char err[PW_ERRMAX] = "";
  size_t cap = len + 8, n = 0;
  if (len > (size_t)OAI_MAX_TOKENS_IN * 16)
    return oai_seterr(e, 400, "invalid_value", param, "'%s' is too long", param);
  for (int attempt = 0; attempt < 2; attempt++) {
    int32_t *ids = malloc(cap * sizeof *ids);
    if (!ids) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
    int rc = tok_encode(pb->vocab, text, len, add_special, parse_special, ids, cap, &n, err);
    if (rc == 0) {
      if (n > OAI_MAX_TOKENS_IN) {
        free(ids);
        return oai_seterr(e, 400, "invalid_value", param, "'%s' has more than %d tokens", param, OAI_MAX_TOKENS_IN);
      }
      *out = ids;
      *n_out = (int)n;
      return 0;
    }
    free(ids);
    if (rc != PW_ERANGE) return oai_seterr(e, 400, "invalid_value", param, "cannot tokenize '%s': %s", param, err);
    cap = n + 1;
  }
  return oai_seterr(e, 500, "internal_error", NULL, "tokenizer size mismatch");
}

int prompt_render(const prompt_builder *pb, json_t *messages, char **text, size_t *off, size_t *len, oai_error *e) {
  *text = NULL;
  json_t *vars = json_pack("{s:O,s:b,s:s,s:s}", "messages", messages, "add_generation_prompt", 1, "bos_token",
                           pb->bos, "eos_token", pb->eos);
  if (!vars) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  jinja_limits lim = {0};
  lim.max_output = (size_t)64 << 20;
  lim.max_memory = (size_t)256 << 20;
  char err[PW_ERRMAX] = "";
  size_t n = 0;
  int rc = jinja_render(pb->tmpl, vars, &lim, text, &n, err);
  json_decref(vars);
  if (rc == PW_ENOMEM) return oai_seterr(e, 500, "internal_error", NULL, "out of memory rendering the chat template");
  if (rc) return oai_seterr(e, 400, "template_error", "messages", "chat template: %s", err);
  size_t bl = strlen(pb->bos);
  *off = 0;
  if (bl && tok_add_bos(pb->vocab) && n >= bl && !memcmp(*text, pb->bos, bl))
    *off = bl; /* the template wrote BOS; the tokenizer adds it back once */
  *len = n - *off;
  return 0;
}

int prompt_chat_text(const prompt_builder *pb, json_t *messages, int32_t **out, int *n_out, char **text,
                     size_t *off, size_t *len, oai_error *e) {
  int rc = prompt_render(pb, messages, text, off, len, e);
  if (rc) return rc;
  rc = prompt_tokenize(pb, *text + *off, *len, true, true, "messages", out, n_out, e);
  if (rc) {
    free(*text);
    *text = NULL;
  }
  return rc;
}

int prompt_chat(const prompt_builder *pb, json_t *messages, int32_t **out, int *n_out, oai_error *e) {
  char *text;
  size_t off, len;
  int rc = prompt_chat_text(pb, messages, out, n_out, &text, &off, &len, e);
  free(text);
  return rc;
}

int prompt_check_ids(const prompt_builder *pb, const int32_t *ids, int n, const char *param, oai_error *e) {
  int32_t nv = tok_n_vocab(pb->vocab);
  for (int i = 0; i < n; i++)
    if (ids[i] < 0 || ids[i] >= nv)
      return oai_seterr(e, 400, "invalid_value", param, "'%s' token id %d is outside the vocabulary (0..%d)", param,
                        ids[i], nv - 1);
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
