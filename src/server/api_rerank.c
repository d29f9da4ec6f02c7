/* api_rerank.c - POST /v1/rerank (and /rerank, /v1/reranking, /reranking):
 * scores documents against a query with a reranker (an encoder with a
 * classification head and rank pooling), in the Jina/Cohere shape llama.cpp's
 * server answers:
 *   {"model", "query", "documents": [string | {"text": string}], "top_n",
 *    "return_documents"}
 *   -> {"model", "object": "list", "usage": {"prompt_tokens", "total_tokens"},
 *       "results": [{"index", "relevance_score", "document": {"text"}?}]}
 * results sorted by score, highest first, the first top_n of them. Each
 * (query, document) pair is one input to the model, built as llama.cpp's
 * server builds it without a rerank template: [BOS] query [EOS] [SEP]
 * document [EOS], each special token where the vocabulary adds it (BERT:
 * [CLS] query [SEP] document). relevance_score is the head's raw first
 * output, as llama.cpp's (not passed through a sigmoid).
 *
 * The pairs go through the embeddings core (srv_embed) one at a time:
 * deadlines, disconnects, receipts and metrics are the embeddings'.
 * Policy: a field is honoured or refused with a 400 naming it; limits on
 * the count and size of documents and on each pair's tokens (the context).
 * Not here: TEI's "texts"/"return_text" variant, rerank prompt templates
 * (tokenizer.chat_template.rerank). */
#include "server/api.h"

#include "base/error.h"
#include "server/sbuf.h"
#include "tok/tok.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RERANK_MAX_DOCS 1024            /* documents per request */
#define RERANK_MAX_TEXT (256u << 10)    /* bytes of the query or of one document */

typedef struct rerank_ctx {
  const char *model; /* echoed (borrowed) */
  json_t *docs;      /* the request's documents (borrowed: r.root holds them) */
  size_t n_docs;
  int top_n;
  bool return_documents;
  float *scores;     /* [n_docs] */
} rerank_ctx;

static const char *doc_text(json_t *d, size_t *len) {
  json_t *t = json_is_object(d) ? json_object_get(d, "text") : d;
  *len = json_string_length(t);
  return json_string_value(t);
}

static void rr_begin(void *ctx, sbuf *out) {
  (void)ctx;
  (void)out;
}

static void rr_item(void *ctx, size_t index, const float *vec, int n, sbuf *out) {
  rerank_ctx *x = ctx;
  (void)out;
  if (index < x->n_docs && n > 0) x->scores[index] = vec[0];
}

static void rr_end(void *ctx, long long prompt_tokens, uint64_t t0, uint64_t t_end, const oai_resp *ro, sbuf *out) {
  rerank_ctx *x = ctx;
  (void)t0;
  (void)t_end;
  (void)ro;
  /* indices by score, highest first; equal scores keep document order
   * (insertion sort: stable, and n is bounded by RERANK_MAX_DOCS) */
  size_t *ord = malloc((x->n_docs ? x->n_docs : 1) * sizeof *ord);
  if (!ord) {
    sbuf_puts(out, "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}");
    return;
  }
  for (size_t i = 0; i < x->n_docs; i++) {
    size_t j = i;
    while (j > 0 && x->scores[ord[j - 1]] < x->scores[i]) {
      ord[j] = ord[j - 1];
      j--;
    }
    ord[j] = i;
  }
  sbuf_puts(out, "{\"model\":");
  sbuf_json_str(out, x->model, strlen(x->model));
  sbuf_printf(out, ",\"object\":\"list\",\"usage\":{\"prompt_tokens\":%lld,\"total_tokens\":%lld},\"results\":[",
              prompt_tokens, prompt_tokens);
  size_t n = (size_t)x->top_n < x->n_docs ? (size_t)x->top_n : x->n_docs;
  for (size_t k = 0; k < n; k++) {
    size_t i = ord[k];
    sbuf_printf(out, "%s{\"index\":%zu,\"relevance_score\":", k ? "," : "", i);
    sbuf_json_num(out, x->scores[i]);
    if (x->return_documents) {
      size_t len;
      const char *t = doc_text(json_array_get(x->docs, i), &len);
      sbuf_puts(out, ",\"document\":{\"text\":");
      sbuf_json_str(out, t, len);
      sbuf_puts(out, "}");
    }
    sbuf_puts(out, "}");
  }
  sbuf_puts(out, "]}");
  free(ord);
}

const embed_api rerank_embed_api = {rr_begin, rr_item, rr_end};

/* Appends the tokens of text (no special tokens added or parsed, as
 * llama.cpp tokenizes a query or document). */
static int put_text(const tok_vocab *v, const char *t, size_t len, json_t *arr, const char *param, size_t idx,
                    oai_error *e) {
  size_t n = 0;
  char err[PW_ERRMAX];
  int rc = tok_encode(v, t, len, false, false, NULL, 0, &n, err);
  if (rc < 0 && rc != PW_ERANGE) return oai_seterr(e, 400, "invalid_value", param, "%s: %s", param, err);
  int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
  if (!ids) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  rc = tok_encode(v, t, len, false, false, ids, n, &n, err);
  if (rc < 0) {
    free(ids);
    return oai_seterr(e, 400, "invalid_value", param, "%s %zu: %s", param, idx, err);
  }
  for (size_t i = 0; i < n; i++) json_array_append_new(arr, json_integer(ids[i]));
  free(ids);
  return 0;
}

static void put_id(json_t *arr, int32_t id) {
  if (id >= 0) json_array_append_new(arr, json_integer(id));
}

/* The members of a rerank request; any other (Cohere's rank_fields, TEI's
 * texts, ...) is a 400 naming it. */
static const char *const k_fields[] = {"model", "query", "documents", "top_n", "return_documents", NULL};

/* Reads and checks the body into x and r->inputs (one token array per
 * document). 0 or PW_EINVAL with e set. */
static int rr_parse(conn *k, struct MHD_Connection *c, const char *body, size_t blen, oai_request *r, rerank_ctx *x,
                    oai_error *e) {
  json_error_t je;
  r->root = json_loadb(body, blen, JSON_REJECT_DUPLICATES, &je);
  if (!r->root || !json_is_object(r->root))
    return oai_seterr(e, 400, "invalid_json", NULL, "the body is not a JSON object%s%s", r->root ? "" : ": ",
                      r->root ? "" : je.text);
  json_t *val;
  const char *key = oai_unknown_member(r->root, k_fields);
  if (key)
    return oai_seterr(e, 400, "unknown_field", key,
                      "'%.64s' is not a field of this request (model, query, documents, top_n, return_documents)", key);
  json_t *m = json_object_get(r->root, "model");
  if (m && !json_is_string(m) && !json_is_null(m))
    return oai_seterr(e, 400, "invalid_type", "model", "'model' must be a string");
  r->model = json_string_value(m);
  /* one model: any or no name; serving the store: the named model */
  if (srv_use_model(k, c, r->model, true, e)) return PW_EINVAL;
  if (engine_get_pooling(srv_engine(k)) != ENGINE_POOL_RANK)
    return oai_seterr(e, 400, "model_not_reranker", "model",
                      "model '%.100s' is not a reranker (no classification head with rank pooling): /v1/rerank "
                      "needs one",
                      engine_model_id(srv_engine(k)));
  json_t *q = json_object_get(r->root, "query");
  if (!q) return oai_seterr(e, 400, "missing_field", "query", "'query' is required");
  if (!json_is_string(q)) return oai_seterr(e, 400, "invalid_type", "query", "'query' must be a string");
  if (json_string_length(q) > RERANK_MAX_TEXT)
    return oai_seterr(e, 400, "invalid_value", "query", "'query' exceeds %u bytes", RERANK_MAX_TEXT);
  json_t *docs = json_object_get(r->root, "documents");
  if (!docs) return oai_seterr(e, 400, "missing_field", "documents", "'documents' is required");
  if (!json_is_array(docs) || json_array_size(docs) == 0)
    return oai_seterr(e, 400, "invalid_type", "documents", "'documents' must be a non-empty array");
  if (json_array_size(docs) > RERANK_MAX_DOCS)
    return oai_seterr(e, 400, "invalid_value", "documents", "'documents' holds at most %d items", RERANK_MAX_DOCS);
  size_t i;
  json_array_foreach(docs, i, val) {
    json_t *t = json_is_object(val) ? json_object_get(val, "text") : val;
    if (json_is_object(val) && json_object_size(val) != 1)
      return oai_seterr(e, 400, "invalid_value", "documents", "documents[%zu] may only have a 'text' field", i);
    if (!json_is_string(t))
      return oai_seterr(e, 400, "invalid_type", "documents",
                        "documents[%zu] must be a string or an object with a string 'text'", i);
    if (json_string_length(t) > RERANK_MAX_TEXT)
      return oai_seterr(e, 400, "invalid_value", "documents", "documents[%zu] exceeds %u bytes", i, RERANK_MAX_TEXT);
  }
  x->docs = docs;
  x->n_docs = json_array_size(docs);
  x->top_n = (int)x->n_docs;
  json_t *tn = json_object_get(r->root, "top_n");
  if (tn && !json_is_null(tn)) {
    if (!json_is_integer(tn) || json_integer_value(tn) < 1)
      return oai_seterr(e, 400, "invalid_value", "top_n", "'top_n' must be a positive integer");
    if (json_integer_value(tn) < x->top_n) x->top_n = (int)json_integer_value(tn);
  }
  json_t *rd = json_object_get(r->root, "return_documents");
  if (rd && !json_is_null(rd)) {
    if (!json_is_boolean(rd))
      return oai_seterr(e, 400, "invalid_type", "return_documents", "'return_documents' must be a boolean");
    x->return_documents = json_is_true(rd);
  }
  /* the model inputs: [BOS] query [EOS] [SEP] document [EOS] */
  engine *en = srv_engine(k);
  const tok_vocab *v = engine_vocab(en);
  const int n_ctx = engine_n_ctx(en);
  json_t *qa = json_array();
  r->inputs = json_array();
  if (!qa || !r->inputs) {
    json_decref(qa);
    return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  }
  int rc = put_text(v, json_string_value(q), json_string_length(q), qa, "query", 0, e);
  const int32_t eos = tok_eos(v) >= 0 ? tok_eos(v) : tok_sep(v);
  const bool add_sep = !strcmp(tok_kind(v), "wpm");
  json_array_foreach(docs, i, val) {
    if (rc) break;
    json_t *a = json_array();
    if (!a) {
      rc = oai_seterr(e, 500, "internal_error", NULL, "out of memory");
      break;
    }
    if (tok_add_bos(v)) put_id(a, tok_bos(v));
    json_array_extend(a, qa);
    if (tok_add_eos(v)) put_id(a, eos);
    if (add_sep) put_id(a, tok_sep(v));
    size_t len;
    const char *t = doc_text(val, &len);
    rc = put_text(v, t, len, a, "documents", i, e);
    if (!rc && tok_add_eos(v)) put_id(a, eos);
    if (!rc && (json_array_size(a) == 0 || json_array_size(a) > (size_t)n_ctx))
      rc = oai_seterr(e, 400, "invalid_value", "documents",
                      "documents[%zu]: the query and the document make %zu tokens; the context holds %d", i,
                      json_array_size(a), n_ctx);
    if (!rc) json_array_append(r->inputs, a);
    json_decref(a);
  }
  json_decref(qa);
  return rc;
}

enum MHD_Result rerank_handle(conn *k, struct MHD_Connection *c) {
  oai_request r;
  oai_error e;
  rerank_ctx x;
  memset(&r, 0, sizeof r);
  memset(&x, 0, sizeof x);
  r.kind = OAI_EMBEDDING;
  enum MHD_Result res;
  size_t blen;
  const char *body = srv_body(k, &blen);
  if (rr_parse(k, c, body, blen, &r, &x, &e)) {
    res = srv_reply_error(k, c, &e);
    goto done;
  }
  engine *en = srv_engine(k);
  x.model = r.model && *r.model ? r.model : engine_model_id(en);
  x.scores = calloc(x.n_docs, sizeof *x.scores);
  if (!x.scores) {
    oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
    res = srv_reply_error(k, c, &e);
    goto done;
  }
  /* r.root stays alive until rr_end: srv_embed takes r, x borrows from it */
  json_incref(r.root);
  json_t *root = r.root;
  res = srv_embed(k, c, &r, false, &rerank_embed_api, &x);
  json_decref(root);
  free(x.scores);
  return res;
done:
  free(x.scores);
  oai_request_free(&r);
  return res;
}
