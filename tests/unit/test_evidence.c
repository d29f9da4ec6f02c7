/* test_evidence.c - canonical JSON against RFC 8785's examples, digests,
 * receipts (digest, signature, tampering), and the A/B report's
 * model-free recomputation. */
#include "evidence/abstat.h"
#include "evidence/digest.h"
#include "evidence/jcs.h"
#include "evidence/receipt.h"
#include "evidence/sign.h"
#include "test.h"

#include "base/sha256.h"
#include "power.h"

#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

static void check_num(uint64_t bits, const char *want) {
  double x;
  memcpy(&x, &bits, 8);
  char buf[48];
  CHECK(jcs_number(x, buf, sizeof buf) == 0);
  CHECK_STR(buf, want);
}

static void check_canon(const char *in, const char *want) {
  json_error_t je;
  json_t *v = json_loads(in, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL, &je);
  CHECK_MSG(v != NULL, "%s", je.text);
  char *out = NULL, err[256];
  CHECK(v && jcs_encode(v, &out, NULL, err) == 0);
  if (out) CHECK_STR(out, want);
  free(out);
  json_decref(v);
}

static void test_rfc8785(void) {
  /* Appendix B: IEEE 754 bit patterns and their ECMAScript forms. */
  check_num(0x0000000000000000ull, "0");
  check_num(0x8000000000000000ull, "0");
  check_num(0x0000000000000001ull, "5e-324");
  check_num(0x8000000000000001ull, "-5e-324");
  check_num(0x7fefffffffffffffull, "1.7976931348623157e+308");
  check_num(0xffefffffffffffffull, "-1.7976931348623157e+308");
  check_num(0x4340000000000000ull, "9007199254740992");
  check_num(0xc340000000000000ull, "-9007199254740992");
  check_num(0x4430000000000000ull, "295147905179352830000");
  check_num(0x44b52d02c7e14af5ull, "9.999999999999997e+22");
  check_num(0x44b52d02c7e14af6ull, "1e+23");
  check_num(0x44b52d02c7e14af7ull, "1.0000000000000001e+23");
  check_num(0x444b1ae4d6e2ef4eull, "999999999999999700000");
  check_num(0x444b1ae4d6e2ef4full, "999999999999999900000");
  check_num(0x444b1ae4d6e2ef50ull, "1e+21");
  check_num(0x3eb0c6f7a0b5ed8cull, "9.999999999999997e-7");
  check_num(0x3eb0c6f7a0b5ed8dull, "0.000001");
  check_num(0x41b3de4355555553ull, "333333333.3333332");
  check_num(0x41b3de4355555554ull, "333333333.33333325");
  check_num(0x41b3de4355555555ull, "333333333.3333333");
  check_num(0x41b3de4355555556ull, "333333333.3333334");
  check_num(0x41b3de4355555557ull, "333333333.33333343");
  check_num(0xbecbf647612f3696ull, "-0.0000033333333333333333");
  check_num(0x43143ff3c1cb0959ull, "1424953923781206.2");
  char buf[48];
  CHECK(jcs_number(NAN, buf, sizeof buf) == PW_EINVAL);
  CHECK(jcs_number(INFINITY, buf, sizeof buf) == PW_EINVAL);
  /* 3.2.2: the sample input and its canonical form. */
  check_canon("{\n  \"numbers\": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],\n"
              "  \"string\": \"\\u20ac$\\u000F\\u000aA'\\u0042\\u0022\\u005c\\\\\\\"\\/\",\n"
              "  \"literals\": [null, true, false]\n}",
              "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],"
              "\"string\":\"\xe2\x82\xac$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}");
  /* 3.2.3: member order by UTF-16 code units (the emoji's surrogates sort
   * before U+FB33 though its code point is higher). */
  check_canon("{\"\\u20ac\":\"Euro Sign\",\"\\r\":\"Carriage Return\",\"\\ufb33\":\"Hebrew Letter Dalet With Dagesh\","
              "\"1\":\"One\",\"\\ud83d\\ude00\":\"Emoji: Grinning Face\",\"\\u0080\":\"Control\","
              "\"\\u00f6\":\"Latin Small Letter O With Diaeresis\"}",
              "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\xc2\x80\":\"Control\",\"\xc3\xb6\":\"Latin Small Letter O "
              "With Diaeresis\",\"\xe2\x82\xac\":\"Euro Sign\",\"\xf0\x9f\x98\x80\":\"Emoji: Grinning Face\","
              "\"\xef\xac\xb3\":\"Hebrew Letter Dalet With Dagesh\"}");
  check_canon("[1, 2.0, -0.0, 1e21, 1e-7, \"\\u001f\\u007f\"]", "[1,2,0,1e+21,1e-7,\"\\u001f\x7f\"]");
  check_canon("{}", "{}");
  /* too deep is an error, not a crash */
  json_t *deep = json_array(), *cur = deep;
  for (int i = 0; i < JCS_MAX_DEPTH + 5; i++) {
    json_t *n = json_array();
    json_array_append_new(cur, n);
    cur = n;
  }
  char *out = NULL, err[256];
  CHECK(jcs_encode(deep, &out, NULL, err) == PW_EINVAL);
  json_decref(deep);
}

static void test_digests(void) {
  int32_t ids[3] = {1, 256, 70000};
  uint8_t d[32], e[32];
  CHECK(ev_token_ids_sha256(ids, 3, d) == 0);
  unsigned char raw[19 + 12] = "power.token-ids.v1";
  unsigned char le[12] = {1, 0, 0, 0, 0, 1, 0, 0, 0x70, 0x11, 1, 0};
  memcpy(raw + 19, le, 12);
  pw_sha256(raw, sizeof raw, e);
  CHECK(memcmp(d, e, 32) == 0);
  char a[65], b[65], err[256];
  /* the request digest hides the prompt_cache_key and ignores formatting */
  const char *body = "{\"b\":1, \"prompt_cache_key\":\"k\"}";
  CHECK(ev_request_sha256(body, strlen(body), a, err) == 0);
  const char *alt = "{\"prompt_cache_key\":\"8254c329a92850f6d539dd376f4816ee2764517da5e0235514af433164480d7a\",\"b\":1.0}";
  json_t *altj = json_loads(alt, JSON_DECODE_INT_AS_REAL, NULL);
  CHECK(altj && jcs_sha256_hex(altj, b, err) == 0);
  json_decref(altj);
  CHECK_STR(a, b);
  CHECK(ev_request_sha256("{", 1, a, err) == PW_EINVAL);
}

static int make_receipt(const ev_key *key, ev_receipt *r) {
  ev_model_info m;
  char err[256];
  if (ev_model_info_init(&m, "m", "868c9be690cb81c06060be1649dfc61f2b0848b0f497135b9876193a9e9a9bd0", 100, "{{x}}",
                         "spm", "default", 4096, err))
    return -1;
  ev_gen g;
  if (ev_gen_init(&g, "completions", &m)) return -1;
  pw_sampler_params sp;
  pw_sampler_params_default(&sp);
  sp.seed = 18446744073709551615ull;
  const char *stop[1] = {"\n"};
  ev_gen_decoding(&g, &sp, stop, 1, err);
  strcpy(g.request_sha256, "00");
  int32_t ids[2] = {5, 6};
  ev_gen_prompt(&g, "hello", 5, ids, 2);
  ev_gen_token(&g, 7, "he", 2);
  ev_gen_text(&g, "llo", 3);
  int rc = ev_gen_receipt(&g, key, r, err);
  ev_gen_free(&g);
  return rc;
}

static void test_receipts(void) {
  char dir[] = "/tmp/power-evidence-XXXXXX", priv[128], pub[128], err[256];
  CHECK(mkdtemp(dir) != NULL);
  snprintf(priv, sizeof priv, "%s/k.pem", dir);
  snprintf(pub, sizeof pub, "%s/k.pub", dir);
  CHECK(ev_key_generate(priv, pub, err) == 0);
  CHECK(ev_key_generate(priv, pub, err) == PW_EIO); /* never overwrites */
  struct stat st;
  CHECK(stat(priv, &st) == 0 && (st.st_mode & 0777) == 0600);
  ev_key *k = NULL, *p = NULL;
  CHECK(ev_key_load_private(priv, &k, err) == 0);
  CHECK(ev_key_load_public(pub, &p, err) == 0);
  ev_receipt r;
  CHECK(make_receipt(k, &r) == 0);
  char hex[65];
  CHECK(ev_receipt_digest(r.obj, hex, err) == 0);
  CHECK_STR(hex, r.sha256);
  const char *sig = json_string_value(json_object_get(json_object_get(r.obj, "signature"), "value"));
  CHECK(sig && ev_verify_sig(p, r.sha256, 64, sig, err) == 0);
  /* the seed keeps all 64 bits; the text stays out */
  CHECK(strstr(r.json, "\"seed\":\"18446744073709551615\"") != NULL);
  CHECK(strstr(r.json, "hello") == NULL && strstr(r.json, "llo\"") == NULL);
  uint8_t td[32];
  pw_sha256("hello", 5, td);
  char th[65];
  pw_hex(td, 32, th);
  CHECK(strstr(r.json, th) != NULL);
  /* tampering any member changes the digest and breaks the signature */
  json_object_set_new(json_object_get(r.obj, "decoding"), "temperature", json_real(0.5));
  CHECK(ev_receipt_digest(r.obj, hex, err) == 0);
  CHECK(strcmp(hex, r.sha256) != 0);
  CHECK(ev_verify_sig(p, hex, 64, sig, err) == PW_EINVAL);
  /* a wrong key fails */
  char priv2[160], pub2[160];
  snprintf(priv2, sizeof priv2, "%s/k2.pem", dir);
  snprintf(pub2, sizeof pub2, "%s/k2.pub", dir);
  ev_key *p2 = NULL;
  CHECK(ev_key_generate(priv2, pub2, err) == 0 && ev_key_load_public(pub2, &p2, err) == 0);
  CHECK(p2 && ev_verify_sig(p2, r.sha256, 64, sig, err) == PW_EINVAL);
  ev_receipt_free(&r);
  ev_key_destroy(k);
  ev_key_destroy(p);
  ev_key_destroy(p2);
  unlink(priv);
  unlink(pub);
  unlink(priv2);
  unlink(pub2);
  rmdir(dir);
}

static void test_abstat(void) {
  double v[5] = {3, NAN, 1, 2, 10};
  CHECK_NEAR(abstat_median(v, 5), 2.5, 1e-12);
  double w[4] = {4, 1, 3, 2};
  CHECK_NEAR(abstat_percentile(w, 4, 99), 4, 0);
  /* 2 rounds x 4 runs, 2 requests each; the candidate decodes twice as fast */
  ab_req_sample req[8][2];
  ab_run_sample runs[8];
  memset(req, 0, sizeof req);
  int32_t ids[2] = {1, 2};
  for (int i = 0; i < 8; i++) {
    int ord = (i / 2) % 2, pos = i % 2;
    runs[i] = (ab_run_sample){.cfg = ord == 0 ? pos : 1 - pos, .round = i / 4, .order = ord, .wall_s = 1.0,
                              .req = req[i]};
    for (int j = 0; j < 2; j++) {
      ab_req_sample *q = &req[i][j];
      q->t_submit = j;
      q->t_first = j + 0.1;
      q->t_done = j + 0.1 + (runs[i].cfg ? 0.5 : 1.0) * (1 + 0.01 * i);
      q->completion_tokens = 11;
      q->prompt_tokens = 3;
      q->finish = AB_FINISH_LENGTH;
      ev_token_ids_sha256(ids, 2, q->output_sha256);
    }
  }
  int seq[2] = {0, 0};
  for (int i = 0; i < 8; i++) runs[i].seq = seq[runs[i].cfg]++;
  const char *names[2] = {"a", "b"};
  ab_report_head h = {"m.gguf", "00", "w.jsonl", "11", 2, 2, "spec=off", "spec=ngram", names, 2};
  char err[256];
  json_t *rep = abstat_report(&h, runs, 8, NULL, err);
  CHECK(rep != NULL);
  double gain = json_real_value(json_object_get(rep, "gain"));
  CHECK(gain > 1.8 && gain < 2.2);
  CHECK(json_is_true(json_object_get(rep, "parity")));
  /* through text, as `power verify --ab` reads it */
  char *txt = json_dumps(rep, JSON_COMPACT);
  json_t *back = json_loads(txt, 0, NULL);
  char *lines = NULL;
  CHECK_MSG(abstat_verify(back, &lines, err) == 0, "%s", err);
  free(lines);
  /* a changed figure is named */
  json_object_set_new(back, "gain", json_real(gain * 1.1));
  CHECK(abstat_verify(back, NULL, err) == PW_EINVAL && strstr(err, "gain") != NULL);
  json_decref(back);
  /* a changed raw timing changes the figures */
  back = json_loads(txt, 0, NULL);
  json_t *s0 = json_array_get(json_object_get(json_array_get(json_object_get(back, "samples"), 0), "per_request"), 0);
  json_object_set_new(s0, "t_done_s", json_real(50));
  CHECK(abstat_verify(back, NULL, err) == PW_EINVAL);
  json_decref(back);
  /* a changed output digest breaks parity and is found */
  back = json_loads(txt, 0, NULL);
  s0 = json_array_get(json_object_get(json_array_get(json_object_get(back, "samples"), 3), "per_request"), 1);
  json_object_set_new(s0, "output_sha256", json_string("0000000000000000000000000000000000000000000000000000000000000000"));
  CHECK(abstat_verify(back, NULL, err) == PW_EINVAL && strstr(err, "parity") != NULL);
  json_decref(back);
  /* only the digest changed */
  back = json_loads(txt, 0, NULL);
  json_object_set_new(back, "report_sha256", json_string("ab"));
  CHECK(abstat_verify(back, NULL, err) == PW_EINVAL && strstr(err, "report_sha256") != NULL);
  json_decref(back);
  free(txt);
  json_decref(rep);
}

int main(void) {
  test_rfc8785();
  test_digests();
  test_receipts();
  test_abstat();
  printf("test_evidence: %d checks, %d failures\n", t_checks, t_failures);
  return t_failures ? 1 : 0;
}
