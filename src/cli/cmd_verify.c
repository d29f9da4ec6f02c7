/* cmd_verify.c - `power verify` and `power keygen`: wiring for evidence.
 *
 *   power verify RECEIPT.json [--request REQ.json] [--output TEXT_FILE]
 *                [--model M.gguf] [--public-key PUB.pem]
 *   power verify --replay RECEIPT.json --request REQ.json --model M.gguf [-t N]
 *   power verify --replay-all PAIRS.jsonl --model M.gguf [-t N]
 *   power verify --ab REPORT.json
 *   power verify --canonical FILE.jsonl  (each line's RFC 8785 form, one per line)
 *   power keygen KEY.pem [PUB.pem]      (PUB defaults to KEY.pem.pub)
 *
 * RECEIPT.json is a response body that carries "receipt" (and
 * "receipt_sha256"), or a receipt object itself. Checks, in order: the
 * artefacts given (request, output text, model file: each names the field
 * it contradicts), then receipt_sha256 recomputed from the receipt's
 * canonical JSON (any other changed field fails here), then the signature
 * with --public-key. Exit 0 with one "ok:" line per check; 1 naming the
 * first field that does not match; 2 for usage errors and unreadable files.
 *
 * Replay runs the request again in this process through the server's own
 * request path (oai_parse, the prompt builder, oai_engine_params, the
 * engine) with the receipt's seed and max_tokens and its speculation mode,
 * and compares prompt and output digests. A receipt made at another kernel
 * level is said so before comparing: bits may differ across kernel levels,
 * which is a new result, not a broken receipt. --replay-all takes one JSON
 * object per line, {"receipt": {...}, "request": {...}} (a response body
 * works as the receipt), and replays each on one engine.
 *
 * The computations live in evidence/ (digests, canonical JSON, report
 * recomputation); this file reads files and prints. */
#include "base/error.h"
#include "base/sha256.h"
#include "cli/cli.h"
#include "cli/cli_gen.h"
#include "cli/cmd_verify.h"
#include "engine/engine.h"
#include "evidence/abstat.h"
#include "evidence/digest.h"
#include "evidence/jcs.h"
#include "evidence/receipt.h"
#include "evidence/sign.h"
#include "server/oai.h"
#include "chat/prompt.h"
#include "tok/tok.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define VERIFY_MAX_FILE (64L << 20)   /* receipts, requests, reports */
#define VERIFY_MAX_LINE (16L << 20)   /* one --replay-all line */
#define VERIFY_MAX_PAIRS 100000

static void verify_usage(FILE *out) {
  fprintf(out, "usage: power verify RECEIPT.json [--request REQ.json] [--output TEXT_FILE] [--model M.gguf]\n"
               "                    [--public-key PUB.pem]\n"
               "       power verify --replay RECEIPT.json --request REQ.json --model M.gguf [-t N]\n"
               "       power verify --replay-all PAIRS.jsonl --model M.gguf [-t N]\n"
               "       power verify --ab REPORT.json\n"
               "       power verify --canonical FILE.jsonl   (RFC 8785 form of each line)\n"
               "exit 0: every check passed (one line each); 1: the first mismatching field is named;\n"
               "2: usage error or unreadable file\n"
               "replays load the model as the other commands do:\n");
  cli_weights_usage(out);
}

static json_t *load_json(const char *path, char *err) {
  size_t n;
  char *txt = cli_slurp(path, VERIFY_MAX_FILE, &n, err);
  if (!txt) return NULL;
  json_error_t je;
  json_t *v = json_loadb(txt, n, JSON_DECODE_ANY, &je);
  free(txt);
  if (!v) snprintf(err, PW_ERRMAX, "%s: not JSON: %s (line %d)", path, je.text, je.line);
  return v;
}

/* The receipt object in a response body or receipt document (borrowed). */
static json_t *receipt_of(json_t *doc) {
  json_t *r = json_object_get(doc, "receipt");
  return json_is_object(r) ? r : doc;
}

static const char *jstr(const json_t *o, const char *path) {
  /* "a.b.c" */
  char buf[128];
  snprintf(buf, sizeof buf, "%s", path);
  const json_t *v = o;
  for (char *save = NULL, *k = strtok_r(buf, ".", &save); k && v; k = strtok_r(NULL, ".", &save))
    v = json_object_get(v, k);
  return json_string_value(v);
}

static const json_t *jget(const json_t *o, const char *path) {
  char buf[128];
  snprintf(buf, sizeof buf, "%s", path);
  const json_t *v = o;
  for (char *save = NULL, *k = strtok_r(buf, ".", &save); k && v; k = strtok_r(NULL, ".", &save))
    v = json_object_get(v, k);
  return v;
}

static int mismatch(const char *field, const char *want, const char *got) {
  printf("FAIL: %s: the receipt says %s, the artefact gives %s\n", field, want ? want : "(nothing)", got);
  return 1;
}

/* ---- receipt checks ---- */

static int check_receipt(const char *rpath, const char *req, const char *outp, const char *model, const char *pub) {
  char err[PW_ERRMAX], hex[65];
  json_t *doc = load_json(rpath, err);
  if (!doc) {
    fprintf(stderr, "power verify: %s\n", err);
    return 2;
  }
  int status = 1;
  ev_key *key = NULL;
  json_t *rc = receipt_of(doc);
  const char *schema = jstr(rc, "schema");
  if (!schema || strcmp(schema, EV_RECEIPT_SCHEMA)) {
    printf("FAIL: schema: expected %s, got %s\n", EV_RECEIPT_SCHEMA, schema ? schema : "(none)");
    goto done;
  }
  if (req) {
    size_t n;
    char *body = cli_slurp(req, VERIFY_MAX_FILE, &n, err);
    if (!body) {
      fprintf(stderr, "power verify: %s\n", err);
      status = 2;
      goto done;
    }
    int r = ev_request_sha256(body, n, hex, err);
    free(body);
    if (r) {
      printf("FAIL: request.sha256: %s\n", err);
      goto done;
    }
    if (!jstr(rc, "request.sha256") || strcmp(hex, jstr(rc, "request.sha256"))) {
      mismatch("request.sha256", jstr(rc, "request.sha256"), hex);
      goto done;
    }
    printf("ok: request.sha256 %s (canonical request, prompt_cache_key hashed)\n", hex);
  }
  if (outp) {
    uint8_t d[32];
    if (pw_sha256_file(outp, d, err)) {
      fprintf(stderr, "power verify: %s\n", err);
      status = 2;
      goto done;
    }
    pw_hex(d, 32, hex);
    const char *want = jstr(rc, "output.text_sha256");
    if (!want || strcmp(hex, want)) {
      mismatch("output.text_sha256", want, hex);
      goto done;
    }
    printf("ok: output.text_sha256 %s\n", hex);
  }
  if (model) {
    uint8_t d[32];
    pw_file_id id;
    if (pw_file_id_of(model, &id, err) || pw_sha256_file_cached(model, d, err)) {
      fprintf(stderr, "power verify: %s\n", err);
      status = 2;
      goto done;
    }
    const json_t *sz = jget(rc, "model.size");
    if (!json_is_integer(sz) || (uint64_t)json_integer_value(sz) != id.size) {
      char got[32];
      snprintf(got, sizeof got, "%" PRIu64 " bytes", id.size);
      mismatch("model.size", json_is_integer(sz) ? "another size" : NULL, got);
      goto done;
    }
    pw_hex(d, 32, hex);
    if (!jstr(rc, "model.sha256") || strcmp(hex, jstr(rc, "model.sha256"))) {
      mismatch("model.sha256", jstr(rc, "model.sha256"), hex);
      goto done;
    }
    printf("ok: model.sha256 %s (%" PRIu64 " bytes)\n", hex, id.size);
  }
  if (ev_receipt_digest(rc, hex, err)) {
    printf("FAIL: receipt: %s\n", err);
    goto done;
  }
  const char *given = json_string_value(json_object_get(doc, "receipt_sha256"));
  if (rc != doc && !given) {
    printf("FAIL: receipt_sha256: missing beside the receipt\n");
    goto done;
  }
  if (given && strcmp(given, hex)) {
    printf("FAIL: receipt_sha256: given %s, but the receipt's canonical JSON hashes to %s (a receipt field or the "
           "digest was changed)\n", given, hex);
    goto done;
  }
  printf("ok: receipt_sha256 %s%s\n", hex, given ? "" : " (recomputed; none given)");
  const json_t *sig = json_object_get(rc, "signature");
  if (pub) {
    if (ev_key_load_public(pub, &key, err)) {
      fprintf(stderr, "power verify: %s\n", err);
      status = 2;
      goto done;
    }
    const char *val = jstr(rc, "signature.value"), *alg = jstr(rc, "signature.alg");
    if (!sig || !val || !alg || strcmp(alg, "ed25519")) {
      printf("FAIL: signature: the receipt carries no Ed25519 signature\n");
      goto done;
    }
    if (ev_verify_sig(key, hex, 64, val, err)) {
      printf("FAIL: signature: %s\n", err);
      goto done;
    }
    char fp[65];
    if (!ev_key_fingerprint(key, fp, err) && jstr(rc, "signature.key_sha256") &&
        strcmp(fp, jstr(rc, "signature.key_sha256"))) {
      printf("FAIL: signature.key_sha256: the receipt names key %s, the public key is %s\n",
             jstr(rc, "signature.key_sha256"), fp);
      goto done;
    }
    printf("ok: signature ed25519 by key %s\n", fp);
  } else if (sig) {
    printf("ok: signature present (not checked: give --public-key)\n");
  }
  status = 0;
done:
  ev_key_destroy(key);
  json_decref(doc);
  return status;
}

/* ---- replay ---- */

typedef struct replayer {
  engine *eng;
  prompt_builder pb;
  bool have_pb;
  const char *spec; /* the engine's speculation mode name */
} replayer;

/* --weights-io / --weights-key-file of this invocation (replays load the
 * model) */
static cli_weights g_weights;

static int replayer_open(replayer *rp, const char *model, long threads, const char *spec, char *err) {
  memset(rp, 0, sizeof *rp);
  engine_opts eo;
  memset(&eo, 0, sizeof eo);
  eo.model_path = model;
  eo.n_threads = (int)threads;
  cli_weights_apply(&g_weights, &eo);
  int mode = engine_spec_parse(spec ? spec : "off");
  /* The draft model is not named by the receipt; speculation is lossless,
   * so a draft-mode receipt replays on plain decoding. */
  eo.spec_mode = mode == ENGINE_SPEC_DRAFT || mode < 0 ? ENGINE_SPEC_OFF : mode;
  rp->spec = engine_spec_name(eo.spec_mode);
  int rc = engine_create(&eo, &rp->eng, err);
  if (rc) return rc;
  rc = prompt_builder_init(&rp->pb, engine_vocab(rp->eng), engine_chat_template(rp->eng), err);
  rp->have_pb = rc == 0;
  return rc;
}

static void replayer_close(replayer *rp) {
  if (rp->have_pb) prompt_builder_free(&rp->pb);
  engine_destroy(rp->eng);
}

static void piece(const replayer *rp, int32_t id, char *buf, size_t cap) {
  int n = tok_piece(engine_vocab(rp->eng), id, true, buf, cap - 1);
  buf[n > 0 && (size_t)n < cap ? n : 0] = 0;
}

/* Replays one (receipt, request body) pair. 0 = same output, 1 = a
 * mismatch (printed), 2 = unusable input (printed). */
static int replay_one(replayer *rp, const json_t *rc, const char *body, size_t blen, const json_t *ref_ids,
                      const char *label) {
  char err[PW_ERRMAX], hex[65];
  const char *ep = jstr(rc, "endpoint");
  oai_kind kind = ep && !strcmp(ep, "chat.completions") ? OAI_CHAT : ep && !strcmp(ep, "completions") ? OAI_COMPLETION : 0;
  if (!kind) {
    printf("%sFAIL: endpoint: only chat.completions and completions receipts replay (got %s)\n", label,
           ep ? ep : "none");
    return 1;
  }
  if (ev_request_sha256(body, blen, hex, err) || !jstr(rc, "request.sha256") || strcmp(hex, jstr(rc, "request.sha256"))) {
    printf("%sFAIL: request.sha256: the request is not the one the receipt names\n", label);
    return 1;
  }
  const char *mk = jstr(rc, "model.sha256");
  if (!mk || strcmp(mk, engine_model_sha256(rp->eng))) {
    printf("%sFAIL: model.sha256: the model file is not the one the receipt names\n", label);
    return 1;
  }
  const char *kern = jstr(rc, "runtime.kernels");
  if (kern && strcmp(kern, engine_kernels()))
    printf("%snote: the receipt was made with %s kernels, this replay runs %s kernels: bits may differ across kernel "
           "levels; a difference below is a new result, not a broken receipt\n", label, kern, engine_kernels());
  oai_request r;
  oai_error e;
  if (oai_parse(kind, body, blen, &r, &e)) {
    printf("%sFAIL: request: %s\n", label, e.message);
    return 2;
  }
  int status = 1;
  int32_t *prompt = NULL, *ids = NULL;
  int n_prompt = 0;
  char *ptext = NULL;
  size_t plen = 0;
  engine_req *req = NULL;
  ev_gen g;
  memset(&g, 0, sizeof g);
  if (ev_gen_init(&g, ep, NULL)) goto oom;
  int prc;
  prompt_error pe;
  memset(&pe, 0, sizeof pe);
  prompt_chat_opts po = {0};
  po.rendered = &ptext;
  po.rendered_len = &plen;
  if (kind == OAI_CHAT) prc = prompt_chat(&rp->pb, r.messages, &po, &prompt, &n_prompt, &pe);
  else if (r.tokens) {
    prc = prompt_check_ids(&rp->pb, r.tokens, r.n_tokens, "prompt", &pe);
    prompt = r.tokens;
    n_prompt = r.n_tokens;
    r.tokens = NULL;
  } else prc = prompt_tokenize(&rp->pb, r.text, r.text_len, true, true, "prompt", &prompt, &n_prompt, &pe);
  if (prc) {
    printf("%sFAIL: prompt: %s\n", label, pe.message);
    goto done;
  }
  uint8_t pd[32];
  ev_token_ids_sha256(prompt, (size_t)n_prompt, pd);
  pw_hex(pd, 32, hex);
  if (!jstr(rc, "prompt.ids_sha256") || strcmp(hex, jstr(rc, "prompt.ids_sha256"))) {
    printf("%sFAIL: prompt.ids_sha256: the template or tokenizer gives other prompt ids (%d tokens)\n", label, n_prompt);
    goto done;
  }
  engine_params p;
  oai_engine_params(&r, prompt, n_prompt, &p);
  const char *seed = jstr(rc, "decoding.seed");
  const json_t *mt = jget(rc, "decoding.max_tokens");
  char *end = NULL;
  if (!seed || !json_is_integer(mt)) {
    printf("%sFAIL: decoding: the receipt has no seed or max_tokens\n", label);
    goto done;
  }
  p.sampling.seed = strtoull(seed, &end, 10);
  p.max_tokens = (int)json_integer_value(mt);
  if (p.max_tokens > engine_n_ctx(rp->eng) - n_prompt) {
    printf("%sFAIL: decoding.max_tokens: %d does not fit this engine's context of %d after %d prompt tokens\n", label,
           p.max_tokens, engine_n_ctx(rp->eng), n_prompt);
    status = 2;
    goto done;
  }
  ids = malloc((size_t)(p.max_tokens + 1) * sizeof *ids);
  if (!ids) goto oom;
  if (engine_submit(rp->eng, &p, &req, err)) {
    printf("%sFAIL: replay: %s\n", label, err);
    status = 2;
    goto done;
  }
  int n = 0;
  engine_event ev;
  engine_finish fin = ENGINE_FINISH_NONE;
  for (;;) {
    if (engine_next(req, &ev, -1)) break;
    if (ev.type == ENGINE_EV_TOKEN) {
      if (n <= p.max_tokens) ids[n++] = ev.token;
      ev_gen_token(&g, ev.token, ev.text, (size_t)ev.text_len);
    } else if (ev.type == ENGINE_EV_DONE) {
      ev_gen_text(&g, ev.text, (size_t)ev.text_len);
      fin = ev.finish;
      break;
    } else {
      printf("%sFAIL: replay: %s\n", label, ev.message);
      status = 2;
      goto done;
    }
  }
  uint8_t od[32], td[32];
  ev_hasher_final(&g.out_ids, od);
  ev_hasher_final(&g.out_text, td);
  char oh[65], th[65];
  pw_hex(od, 32, oh);
  pw_hex(td, 32, th);
  const char *fin_s = fin == ENGINE_FINISH_LENGTH ? "length" : "stop";
  const char *want_ids = jstr(rc, "output.ids_sha256");
  if (!want_ids || strcmp(oh, want_ids)) {
    const json_t *wt = jget(rc, "output.tokens");
    printf("%sFAIL: output.ids_sha256: the replay generated other tokens (%d tokens, the receipt %lld)\n", label, n,
           json_is_integer(wt) ? (long long)json_integer_value(wt) : -1LL);
    if (json_is_array(ref_ids)) {
      int m = (int)json_array_size(ref_ids), pos = 0;
      while (pos < n && pos < m && json_integer_value(json_array_get(ref_ids, (size_t)pos)) == ids[pos]) pos++;
      char a[64] = "(end)", b[64] = "(end)";
      long long ra = pos < m ? (long long)json_integer_value(json_array_get(ref_ids, (size_t)pos)) : -1;
      if (pos < m) piece(rp, (int32_t)ra, a, sizeof a);
      if (pos < n) piece(rp, ids[pos], b, sizeof b);
      printf("%s  first difference at token %d: receipt %lld '%s', replay %d '%s'\n", label, pos, ra, a,
             pos < n ? ids[pos] : -1, b);
    } else {
      printf("%s  the receipt holds digests only; replay's first tokens:", label);
      for (int i = 0; i < n && i < 8; i++) printf(" %d", ids[i]);
      printf("\n");
    }
    goto done;
  }
  const char *want_text = jstr(rc, "output.text_sha256"), *want_fin = jstr(rc, "output.finish_reason");
  if (!want_text || strcmp(th, want_text)) {
    printf("%sFAIL: output.text_sha256: same tokens, other text (stop strings or detokenizer)\n", label);
    goto done;
  }
  if (!want_fin || strcmp(want_fin, fin_s)) {
    printf("%sFAIL: output.finish_reason: the receipt says %s, the replay %s\n", label, want_fin ? want_fin : "-",
           fin_s);
    goto done;
  }
  printf("%sok: replay gives output.ids_sha256 %s (%d tokens, finish %s)\n", label, oh, n, fin_s);
  status = 0;
  goto done;
oom:
  printf("%sFAIL: out of memory\n", label);
  status = 2;
done:
  engine_release(req);
  ev_gen_free(&g);
  free(ids);
  free(ptext);
  free(prompt);
  oai_request_free(&r);
  return status;
}

static int replay_file(const char *rpath, const char *req, const char *model, long threads) {
  char err[PW_ERRMAX], hex[65];
  json_t *doc = load_json(rpath, err);
  if (!doc) {
    fprintf(stderr, "power verify: %s\n", err);
    return 2;
  }
  size_t blen;
  char *body = cli_slurp(req, VERIFY_MAX_FILE, &blen, err);
  if (!body) {
    fprintf(stderr, "power verify: %s\n", err);
    json_decref(doc);
    return 2;
  }
  json_t *rc = receipt_of(doc);
  int status = 1;
  const char *given = json_string_value(json_object_get(doc, "receipt_sha256"));
  if (ev_receipt_digest(rc, hex, err) || (given && strcmp(given, hex))) {
    printf("FAIL: receipt_sha256: the receipt does not hash to its digest\n");
    goto done;
  }
  printf("ok: receipt_sha256 %s\n", hex);
  replayer rp;
  if (replayer_open(&rp, model, threads, jstr(rc, "runtime.speculation.mode"), err)) {
    fprintf(stderr, "power verify: %s: %s\n", model, err);
    replayer_close(&rp);
    status = 2;
    goto done;
  }
  status = replay_one(&rp, rc, body, blen, json_object_get(doc, "output_ids"), "");
  replayer_close(&rp);
done:
  free(body);
  json_decref(doc);
  return status;
}

/* One engine per speculation mode met in the file (at most the four). */
static int replay_all(const char *path, const char *model, long threads) {
  char err[PW_ERRMAX];
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "power verify: cannot open %s\n", path);
    return 2;
  }
  replayer rps[4];
  bool open_[4] = {false, false, false, false};
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  int lineno = 0, n_ok = 0, n_bad = 0, status = 0;
  while ((len = getline(&line, &cap, f)) > 0 && lineno < VERIFY_MAX_PAIRS) {
    lineno++;
    if (len > VERIFY_MAX_LINE) {
      printf("line %d: FAIL: longer than %ld bytes\n", lineno, VERIFY_MAX_LINE);
      status = 2;
      break;
    }
    json_error_t je;
    json_t *o = json_loadb(line, (size_t)len, 0, &je);
    json_t *doc = o ? json_object_get(o, "receipt") : NULL, *req = o ? json_object_get(o, "request") : NULL;
    if (!json_is_object(doc) || !json_is_object(req)) {
      printf("line %d: FAIL: expected {\"receipt\": ..., \"request\": {...}}\n", lineno);
      json_decref(o);
      status = 2;
      break;
    }
    json_t *rc = receipt_of(doc);
    char hex[65], label[48];
    snprintf(label, sizeof label, "line %d: ", lineno);
    const char *given = json_string_value(json_object_get(doc, "receipt_sha256"));
    if (ev_receipt_digest(rc, hex, err) || (given && strcmp(given, hex))) {
      printf("%sFAIL: receipt_sha256: the receipt does not hash to its digest\n", label);
      n_bad++;
      json_decref(o);
      continue;
    }
    int mode = engine_spec_parse(jstr(rc, "runtime.speculation.mode") ? jstr(rc, "runtime.speculation.mode") : "off");
    if (mode < 0 || mode == ENGINE_SPEC_DRAFT) mode = ENGINE_SPEC_OFF;
    if (!open_[mode]) {
      if (replayer_open(&rps[mode], model, threads, engine_spec_name(mode), err)) {
        fprintf(stderr, "power verify: %s: %s\n", model, err);
        replayer_close(&rps[mode]);
        json_decref(o);
        status = 2;
        break;
      }
      open_[mode] = true;
    }
    /* The request as the server received it: its canonical form hashes the
     * same as the original bytes. */
    char *body = NULL;
    size_t blen = 0;
    if (jcs_encode(req, &body, &blen, err)) {
      printf("%sFAIL: request: %s\n", label, err);
      n_bad++;
    } else {
      int r = replay_one(&rps[mode], rc, body, blen, json_object_get(o, "output_ids"), label);
      if (r == 0) n_ok++;
      else n_bad++;
    }
    free(body);
    json_decref(o);
  }
  free(line);
  fclose(f);
  for (int m = 0; m < 4; m++)
    if (open_[m]) replayer_close(&rps[m]);
  printf("replayed %d: %d identical, %d different\n", n_ok + n_bad, n_ok, n_bad);
  if (status) return status;
  return n_bad ? 1 : 0;
}

static int verify_ab(const char *path) {
  char err[PW_ERRMAX];
  json_t *rep = load_json(path, err);
  if (!rep) {
    fprintf(stderr, "power verify: %s\n", err);
    return 2;
  }
  char *lines = NULL;
  int rc = abstat_verify(rep, &lines, err);
  json_decref(rep);
  if (rc) {
    printf("FAIL: %s\n", err);
    return 1;
  }
  fputs(lines ? lines : "", stdout);
  free(lines);
  return 0;
}

/* Prints each line's canonical JSON, so other implementations can be
 * compared with this one. 0, or 1 at the first line that does not parse or
 * canonicalize (named). */
static int canonical_lines(const char *path) {
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "power verify: cannot open %s\n", path);
    return 2;
  }
  char *line = NULL, err[PW_ERRMAX];
  size_t cap = 0;
  ssize_t len;
  int lineno = 0, status = 0;
  while (status == 0 && (len = getline(&line, &cap, f)) > 0 && lineno < VERIFY_MAX_PAIRS) {
    lineno++;
    json_error_t je;
    json_t *v = json_loadb(line, (size_t)len, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &je);
    char *txt = NULL;
    if (!v) {
      fprintf(stderr, "power verify: %s line %d: %s\n", path, lineno, je.text);
      status = 1;
    } else if (jcs_encode(v, &txt, NULL, err)) {
      fprintf(stderr, "power verify: %s line %d: %s\n", path, lineno, err);
      status = 1;
    } else {
      printf("%s\n", txt);
    }
    free(txt);
    json_decref(v);
  }
  free(line);
  fclose(f);
  return status;
}

int cmd_verify(int argc, char **argv) {
  const char *receipt = NULL, *req = NULL, *out = NULL, *model = NULL, *pub = NULL, *ab = NULL, *all = NULL;
  bool replay = false;
  long threads = 2;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
      verify_usage(stdout);
      return 0;
    }
    if (a[0] != '-') {
      if (receipt) {
        fprintf(stderr, "power verify: one receipt at a time (got %s and %s)\n", receipt, a);
        return 2;
      }
      receipt = a;
      continue;
    }
    if (!strcmp(a, "--replay")) {
      replay = true;
      continue;
    }
    if (cli_weights_is_flag(a)) {
      cli_weights_parse("verify", &g_weights, a, NULL);
      continue;
    }
    if (i + 1 >= argc) {
      fprintf(stderr, "power verify: option %s needs a value (see power verify --help)\n", a);
      return 2;
    }
    const char *v = argv[++i];
    int wc = cli_weights_parse("verify", &g_weights, a, v);
    if (wc < 0) return 2;
    if (wc > 0) continue;
    if (!strcmp(a, "--request")) req = v;
    else if (!strcmp(a, "--output")) out = v;
    else if (!strcmp(a, "--model") || !strcmp(a, "-m")) model = v;
    else if (!strcmp(a, "--public-key")) pub = v;
    else if (!strcmp(a, "--ab")) ab = v;
    else if (!strcmp(a, "--replay-all")) all = v;
    else if (!strcmp(a, "--canonical")) return canonical_lines(v);
    else if (!strcmp(a, "--threads") || !strcmp(a, "-t")) {
      if (cli_parse_long("verify", a, v, 1, 256, &threads)) return 2;
    } else {
      fprintf(stderr, "power verify: unknown option %s (see power verify --help)\n", a);
      return 2;
    }
  }
  if (cli_weights_finish("verify", &g_weights)) return 2;
  if (ab) {
    if (receipt || replay || all || req || out || model || pub) {
      fprintf(stderr, "power verify: --ab takes only the report\n");
      return 2;
    }
    return verify_ab(ab);
  }
  if (all) {
    if (!model || receipt || replay) {
      fprintf(stderr, "power verify: --replay-all PAIRS.jsonl needs --model and nothing else\n");
      return 2;
    }
    return replay_all(all, model, threads);
  }
  if (!receipt) {
    fprintf(stderr, "power verify: no receipt given (see power verify --help)\n");
    return 2;
  }
  if (replay) {
    if (!req || !model) {
      fprintf(stderr, "power verify: --replay needs --request and --model\n");
      return 2;
    }
    return replay_file(receipt, req, model, threads);
  }
  return check_receipt(receipt, req, out, model, pub);
}

int cmd_keygen(int argc, char **argv) {
  if (argc < 2 || argc > 3 || argv[1][0] == '-') {
    fprintf(stderr, "usage: power keygen KEY.pem [PUB.pem]   (an Ed25519 key pair for --receipt-key; KEY.pem mode 0600)\n");
    return argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) ? 0 : 2;
  }
  char pub[4096], err[PW_ERRMAX];
  if (argc == 3) snprintf(pub, sizeof pub, "%s", argv[2]);
  else if (snprintf(pub, sizeof pub, "%s.pub", argv[1]) >= (int)sizeof pub) {
    fprintf(stderr, "power keygen: path too long\n");
    return 2;
  }
  if (ev_key_generate(argv[1], pub, err)) {
    fprintf(stderr, "power keygen: %s\n", err);
    return 1;
  }
  ev_key *k = NULL;
  char fp[65] = "";
  if (!ev_key_load_private(argv[1], &k, err)) ev_key_fingerprint(k, fp, err);
  ev_key_destroy(k);
  printf("private key: %s (mode 0600)\npublic key:  %s\nkey_sha256:  %s\n", argv[1], pub, fp);
  return 0;
}
