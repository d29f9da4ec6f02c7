/* test_grammar.c - the grammar layer: GBNF parse errors, strings accepted
 * and refused, JSON Schema compilation (keywords, narrowings, unsupported
 * keywords named), token masks against a brute-force check over a small
 * vocabulary, hostile grammars (bounded), and a property test: random JSON
 * schemas x constrained generation on random-weight models, every complete
 * output validated by an independent validator (Python's jsonschema), with
 * speculation on and off giving the same bytes. */
#include "base/rng.h"
#include "grammar/grammar.h"
#include "test.h"

#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WAIT_MS 120000
#define MAX_TOK 400
#include "engine_util.h"

/* A vocabulary of the 256 single bytes: matching whole strings. */
static grammar_vocab *byte_vocab(void) {
  static char b[256];
  const char *p[256];
  size_t l[256];
  for (int i = 0; i < 256; i++) {
    b[i] = (char)i;
    p[i] = b + i;
    l[i] = 1;
  }
  grammar_vocab *gv = NULL;
  char err[PW_ERRMAX];
  CHECK(grammar_vocab_create(256, p, l, NULL, &gv, err) == 0);
  return gv;
}

static grammar_vocab *g_bytes;

/* 1 = the whole string matches, 0 = refused, -1 = the grammar failed to parse. */
static int matches(const char *gbnf, const char *s) {
  grammar *g;
  char err[PW_ERRMAX];
  if (grammar_parse(gbnf, strlen(gbnf), &g, err) < 0) {
    fprintf(stderr, "parse failed: %s\n", err);
    return -1;
  }
  grammar_matcher *m;
  int ok = 0;
  if (grammar_matcher_create(g, g_bytes, &m, err) == 0) {
    ok = grammar_matcher_accept_bytes(m, s, strlen(s)) == 0 && grammar_matcher_can_end(m);
    grammar_matcher_destroy(m);
  }
  grammar_destroy(g);
  return ok;
}

static void test_parse_errors(void) {
  static const struct {
    const char *text, *msg;
  } bad[] = {
      {"", "no rule named 'root'"},
      {"root ::= foo", "'foo' is used but not defined"},
      {"root ::= \"a\"\nroot ::= \"b\"", "defined twice"},
      {"root ::= \"abc", "unterminated string"},
      {"root ::= [a-", "unterminated character class"},
      {"root ::= [z-a]", "out of order"},
      {"root ::= (\"a\"", "expected ')'"},
      {"root ::= \"a\")", "unmatched ')'"},
      {"root ::= * \"a\"", "follows no element"},
      {"root ::= \"a\"{3,1}", "maximum below minimum"},
      {"root ::= \"a\"{2", "expected '}'"},
      {"root ::= \"\\q\"", "unknown escape"},
      {"root ::= \"\\x4\"", "hex digits"},
      {"root := \"a\"", "expected '::='"},
      {"root ::= a\na ::= a \"x\" | \"y\"", "left recursion"},
      {"root ::= a\na ::= b? a \"x\"\nb ::= \"b\"", "left recursion"},
      {"root ::= \"a\"{99999}", "repetition count"},
      {"root ::= \"a\" @", "unexpected '@'"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    grammar *g = NULL;
    char err[PW_ERRMAX] = "";
    int rc = grammar_parse(bad[i].text, strlen(bad[i].text), &g, err);
    CHECK_MSG(rc < 0 && g == NULL, "accepted: %s", bad[i].text);
    CHECK_MSG(strstr(err, bad[i].msg) != NULL, "%s: message '%s', want '%s'", bad[i].text, err, bad[i].msg);
  }
  /* positions are reported */
  char err[PW_ERRMAX];
  grammar *g;
  CHECK(grammar_parse("root ::= \"a\"\nx ::= [", 21, &g, err) < 0 && strstr(err, "line 2") != NULL);
}

static void test_accept(void) {
  static const struct {
    const char *g, *s;
    int want;
  } cases[] = {
      {"root ::= \"ab\" [c-e]* \"x\"{2,3}", "abcdexx", 1},
      {"root ::= \"ab\" [c-e]* \"x\"{2,3}", "abxxxx", 0},
      {"root ::= \"ab\" [c-e]* \"x\"{2,3}", "abx", 0},
      {"root ::= [^a]+", "b\xc3\xa9\xe4\xb8\xad\xf0\x9f\x98\x80", 1},
      {"root ::= [^a]+", "ba", 0},
      {"root ::= [^a]+", "\xc3", 0},           /* an incomplete character */
      {"root ::= [^a]+", "\xed\xa0\x80", 0},   /* a surrogate is not a character */
      /* empty classes: [] matches nothing, [^] any character (UBSan once
       * caught the sort of the empty one) */
      {"root ::= [] | \"a\"", "a", 1},
      {"root ::= [] | \"a\"", "", 0},
      {"root ::= [^]", "\xc3\xa9", 1},
      {"root ::= .", "\xe2\x82\xac", 1},
      {"root ::= . .", "\xe2\x82\xac", 0},
      {"root ::= [\\u00e0-\\u00ff]", "\xc3\xa9", 1},
      {"root ::= [\\u00e0-\\u00ff]", "\xc3\x80", 0},
      {"root ::= \"\\x41\\u00e9\\n\\t\\\\\\\"\"", "A\xc3\xa9\n\t\\\"", 1},
      {"root ::= a | b\na ::= \"1\" a | \"\"\nb ::= ( \"x\" | \"y\" )+ # comment", "111", 1},
      {"root ::= a | b\na ::= \"1\" a | \"\"\nb ::= ( \"x\" | \"y\" )+", "xyyx", 1},
      {"root ::= a | b\na ::= \"1\" a | \"\"\nb ::= ( \"x\" | \"y\" )+", "", 1},
      {"root ::= a | b\na ::= \"1\" a | \"\"\nb ::= ( \"x\" | \"y\" )+", "1x", 0},
      {"root ::= (\"a\" | \"b\"\n   | \"c\")? \"d\"\n\n", "cd", 1},
      {"root ::= \"a\"{0} \"b\"{1,} \"c\"{,2}", "bbbcc", 1},
      {"root ::= \"a\"{0} \"b\"{1,} \"c\"{,2}", "bccc", 0},
      {"root ::= \"[\" (e (\",\" e)*)? \"]\"\ne ::= [0-9]+ | root", "[1,[2,[]],33]", 1},
      {"root ::= \"[\" (e (\",\" e)*)? \"]\"\ne ::= [0-9]+ | root", "[1,[2,[],33]", 0},
      /* an arithmetic grammar in the style of llama.cpp's examples */
      {"root ::= expr\nexpr ::= term ([-+*/] term)*\nterm ::= num | \"(\" ws expr \")\" ws\nnum ::= [0-9]+ ws\nws ::= [ ]*",
       "(1 +2)*3-(4/(5 ))", 1},
      {"root ::= expr\nexpr ::= term ([-+*/] term)*\nterm ::= num | \"(\" ws expr \")\" ws\nnum ::= [0-9]+ ws\nws ::= [ ]*",
       "(1 + 2", 0},
      /* a list grammar: lines starting with "- " */
      {"root ::= item+\nitem ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"", "- one\n- two 2\n", 1},
      {"root ::= item+\nitem ::= \"- \" [^\\r\\n\\x0b\\x0c\\x85\\u2028\\u2029]+ \"\\n\"", "- one\ntwo\n", 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    CHECK_MSG(matches(cases[i].g, cases[i].s) == cases[i].want, "grammar %s on \"%s\": want %d", cases[i].g,
              cases[i].s, cases[i].want);
}

/* ---- JSON Schema -------------------------------------------------------- */

static int schema_match(const char *schema, const char *doc) {
  char *gbnf;
  char err[PW_ERRMAX], bad[64];
  if (grammar_schema_to_gbnf(schema, strlen(schema), &gbnf, bad, err) < 0) {
    fprintf(stderr, "schema failed: %s\n", err);
    return -1;
  }
  int r = matches(gbnf, doc);
  free(gbnf);
  return r;
}

static void test_schema(void) {
  static const struct {
    const char *schema, *doc;
    int want;
  } cases[] = {
      {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":120},"
       "\"b\":{\"type\":\"string\",\"pattern\":\"^x[0-9]+$\"}},\"required\":[\"a\"]}",
       "{\"a\": 5}", 1},
      {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":120}},\"required\":[\"a\"]}",
       "{\"a\":121}", 0},
      {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\",\"minimum\":-5,\"maximum\":120}},\"required\":[\"a\"]}",
       "{\"a\":-6}", 0},
      {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\",\"pattern\":\"^x[0-9]+$\"}},"
       "\"required\":[\"a\"]}",
       "{\"a\":-5,\"b\":\"x12\"}", 1},
      {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]}", "{}", 0},
      {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"boolean\"}}}", "{\"b\":true}", 1},
      {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"boolean\"}}}", "{\"b\":true,\"a\":1}", 0},
      {"{\"type\":[\"string\",\"null\"],\"maxLength\":3}", "null", 1},
      {"{\"type\":[\"string\",\"null\"],\"maxLength\":3}", "\"ab\\u00e9\"", 1},
      {"{\"type\":[\"string\",\"null\"],\"maxLength\":3}", "\"abcd\"", 0},
      {"{\"type\":\"string\",\"minLength\":2}", "\"\xe4\xb8\xad\"", 0},
      {"{\"type\":\"string\",\"nullable\":true}", "null", 1},
      {"{\"enum\":[\"red\",1,null,{\"k\":[true]}]}", "{\"k\":[true]}", 1},
      {"{\"enum\":[\"red\",1,null]}", "\"blue\"", 0},
      {"{\"const\":\"x\\\"y\"}", "\"x\\\"y\"", 1},
      {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}", "[1, 2,3]", 1},
      {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}", "[1]", 0},
      {"{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":2,\"maxItems\":3}", "[1,2,3,4]", 0},
      {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"boolean\"}],\"items\":false}", "[\"a\",false]", 1},
      {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},{\"type\":\"boolean\"}],\"items\":false}", "[\"a\",false,1]", 0},
      {"{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"}],\"items\":{\"type\":\"null\"}}", "[\"a\",null,null]", 1},
      {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"format\":\"date\"}]}", "\"2024-02-29\"", 0},
      {"{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"format\":\"date\"}]}", "\"2024-02-28\"", 1},
      {"{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"null\"}]}", "7", 1},
      {"{\"type\":\"string\",\"format\":\"uuid\"}", "\"123e4567-e89b-12d3-a456-426614174000\"", 1},
      {"{\"type\":\"string\",\"format\":\"date-time\"}", "\"2024-01-31T23:59:60Z\"", 0},
      {"{\"type\":\"string\",\"format\":\"date-time\"}", "\"2024-01-31T23:59:59.5+02:00\"", 1},
      {"{\"type\":\"string\",\"format\":\"email\"}", "\"a.b@example.org\"", 1},
      {"{\"type\":\"string\",\"pattern\":\"ab+c\"}", "\"xxabbbcyy\"", 1},
      {"{\"type\":\"string\",\"pattern\":\"^(?:ab|cd){2}$\"}", "\"abcd\"", 1},
      {"{\"type\":\"string\",\"pattern\":\"^(?:ab|cd){2}$\"}", "\"abc\"", 0},
      {"{\"type\":\"string\",\"pattern\":\"^[^a-z\\\\d]\\\\.\\\\w?$\"}", "\"Q.\"", 1},
      {"{\"type\":\"string\",\"pattern\":\"^\\\"$\"}", "\"\\\"\"", 1},
      {"{\"type\":\"number\",\"minimum\":-1.5,\"maximum\":2.5}", "1.99", 1},
      {"{\"type\":\"number\",\"minimum\":-1.5,\"maximum\":2.5}", "2.5", 0}, /* a narrowing: 2.x is not produced */
      {"{\"type\":\"number\",\"minimum\":-1.5,\"maximum\":2.5}", "3", 0},
      {"{\"type\":\"number\",\"minimum\":-1.5,\"maximum\":2.5}", "-0.5", 1},
      {"{\"type\":\"integer\",\"minimum\":1000}", "999", 0},
      {"{\"type\":\"integer\",\"minimum\":1000}", "123456", 1},
      {"{\"type\":\"integer\",\"maximum\":-10}", "-9", 0},
      {"{\"type\":\"integer\",\"maximum\":-10}", "-4567", 1},
      {"{\"$defs\":{\"n\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},\"k\":{\"type\":\"array\","
       "\"items\":{\"$ref\":\"#/$defs/n\"}}},\"required\":[\"v\"]}},\"$ref\":\"#/$defs/n\"}",
       "{\"v\":1,\"k\":[{\"v\":2},{\"v\":3,\"k\":[]}]}", 1},
      {"{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
       "{\"properties\":{\"b\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}]}",
       "{\"a\":1,\"b\":false}", 1},
      {"{\"allOf\":[{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},\"required\":[\"a\"]},"
       "{\"properties\":{\"b\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}]}",
       "{\"a\":1}", 0},
      {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", "{\"x\":1,\"y\":2}", 1},
      {"{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", "{\"x\":\"1\"}", 0},
      {"{\"type\":\"object\",\"additionalProperties\":false}", "{}", 1},
      {"{}", "[1,{\"a\":null},\"x\",-2.5e3]", 1},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    CHECK_MSG(schema_match(cases[i].schema, cases[i].doc) == cases[i].want, "schema %s on %s: want %d",
              cases[i].schema, cases[i].doc, cases[i].want);

  static const struct {
    const char *schema, *kw;
  } unsup[] = {
      {"{\"type\":\"object\",\"patternProperties\":{}}", "patternProperties"},
      {"{\"type\":\"string\",\"contentMediaType\":\"x\"}", "contentMediaType"},
      {"{\"type\":\"integer\",\"multipleOf\":3}", "multipleOf"},
      {"{\"type\":\"string\",\"format\":\"ipv4\"}", "format"},
      {"{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "pattern"},
      {"{\"type\":\"string\",\"pattern\":\"a(?=b)\"}", "pattern"},
      {"{\"properties\":{\"a\":{\"not\":{}}}}", "not"},
      {"{\"$ref\":\"http://example.com/s.json\"}", "$ref"},
  };
  for (size_t i = 0; i < sizeof unsup / sizeof unsup[0]; i++) {
    char *g = NULL, err[PW_ERRMAX] = "", bad[64] = "";
    int rc = grammar_schema_to_gbnf(unsup[i].schema, strlen(unsup[i].schema), &g, bad, err);
    CHECK_MSG(rc == PW_EUNSUPPORTED && strcmp(bad, unsup[i].kw) == 0 && strstr(err, unsup[i].kw),
              "%s: rc %d keyword '%s' message '%s'", unsup[i].schema, rc, bad, err);
    free(g);
  }
  static const char *const invalid[] = {"{\"type\":\"strin\"}", "{\"$ref\":\"#/$defs/missing\"}", "[1",
                                        "{\"type\":\"integer\",\"minimum\":5,\"maximum\":4}"};
  for (size_t i = 0; i < sizeof invalid / sizeof invalid[0]; i++) {
    char *g = NULL, err[PW_ERRMAX] = "";
    CHECK_MSG(grammar_schema_to_gbnf(invalid[i], strlen(invalid[i]), &g, NULL, err) < 0, "accepted %s", invalid[i]);
    free(g);
  }
  /* json_object mode */
  const char *jo = grammar_json_object_gbnf();
  CHECK(matches(jo, "{\"a\": [1, 2.5, {\"b\": null}], \"c\": \"\\u00e9\\n\"}") == 1);
  CHECK(matches(jo, "[1]") == 0);
  CHECK(matches(jo, "{\"a\":}") == 0);
  CHECK(matches(jo, "{\"a\":\"\\ud800\"}") == 0); /* no lone surrogates */
}

/* ---- masks against brute force ------------------------------------------ */

static void test_mask_brute(void) {
  /* a vocabulary of short strings over JSON-ish bytes, a few multi-byte and
   * partial UTF-8 pieces, and two EOG tokens */
  static const char *const alpha[] = {"{", "}", "\"", ":", ",", "1", "a", " ", "[", "]", "-", ".", "e", "\xc3", "\xa9",
                                      "\xc3\xa9", "\xe4\xb8\xad", "\\", "n", "u", "0"};
  enum { NA = sizeof alpha / sizeof alpha[0], NV = 600 };
  static char store[NV][16];
  const char *p[NV];
  size_t l[NV];
  bool eog[NV];
  pw_rng rng;
  pw_rng_seed(&rng, 7);
  for (int i = 0; i < NV; i++) {
    eog[i] = i == 3 || i == 400;
    store[i][0] = 0;
    if (i < NA) {
      strcpy(store[i], alpha[i]);
    } else if (!eog[i] && i != 17) { /* token 17 has no bytes */
      int n = 1 + (int)(pw_rng_next(&rng) % 3);
      for (int k = 0; k < n; k++) strcat(store[i], alpha[pw_rng_next(&rng) % NA]);
    }
    p[i] = store[i];
    l[i] = eog[i] ? 0 : strlen(store[i]);
  }
  grammar_vocab *gv;
  char err[PW_ERRMAX];
  CHECK(grammar_vocab_create(NV, p, l, eog, &gv, err) == 0);
  const char *schemas[] = {"{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"string\",\"maxLength\":4},"
                           "\"n\":{\"type\":\"array\",\"items\":{\"type\":\"number\"}}},\"required\":[\"n\"]}",
                           "{}"};
  for (int si = 0; si < 2; si++) {
    grammar *g;
    char bad[64];
    CHECK(grammar_from_schema(schemas[si], strlen(schemas[si]), &g, bad, err) == 0);
    grammar_matcher *m, *bm;
    CHECK(grammar_matcher_create(g, gv, &m, err) == 0);
    CHECK(grammar_matcher_create(g, gv, &bm, err) == 0);
    for (int walk = 0; walk < 12; walk++) {
      grammar_matcher_reset(m);
      char text[512];
      size_t tl = 0;
      for (int step = 0; step < 40; step++) {
        const uint64_t *mask;
        CHECK(grammar_matcher_mask(m, &mask) == 0);
        int allowed[NV], na = 0, mismatches = 0;
        for (int t = 0; t < NV; t++) {
          bool want;
          if (eog[t]) {
            want = grammar_matcher_can_end(m);
          } else {
            grammar_matcher_reset(bm);
            want = l[t] > 0 && grammar_matcher_accept_bytes(bm, text, tl) == 0 &&
                   grammar_matcher_accept_bytes(bm, p[t], l[t]) == 0;
          }
          bool got = (mask[t >> 6] >> (t & 63)) & 1;
          if (got != want) mismatches++;
          if (got && !eog[t]) allowed[na++] = t;
        }
        CHECK_MSG(mismatches == 0, "schema %d walk %d step %d: %d tokens differ after \"%.*s\"", si, walk, step,
                  mismatches, (int)tl, text);
        if (na == 0 || mismatches) break;
        int t = allowed[pw_rng_next(&rng) % (uint64_t)na];
        CHECK(grammar_matcher_accept_token(m, t) == 0);
        if (tl + l[t] >= sizeof text) break;
        memcpy(text + tl, p[t], l[t]);
        tl += l[t];
      }
    }
    grammar_matcher_destroy(m);
    grammar_matcher_destroy(bm);
    grammar_destroy(g);
  }
  grammar_vocab_destroy(gv);
}

/* ---- hostile input ---------------------------------------------------- */

static void test_hostile(void) {
  char err[PW_ERRMAX];
  grammar *g;
  /* nesting, expansion and text limits are errors */
  char deep[2048];
  size_t n = 0;
  n += (size_t)snprintf(deep, sizeof deep, "root ::= ");
  for (int i = 0; i < 300; i++) deep[n++] = '(';
  deep[n++] = '"';
  deep[n++] = 'a';
  deep[n++] = '"';
  for (int i = 0; i < 300; i++) deep[n++] = ')';
  CHECK(grammar_parse(deep, n, &g, err) == PW_ELIMIT);
  char big[512];
  n = 0;
  n += (size_t)snprintf(big + n, sizeof big - n, "root ::=");
  for (int i = 0; i < 6; i++) n += (size_t)snprintf(big + n, sizeof big - n, " \"0123456789012345678901234567890123456789\"{10000}");
  CHECK(grammar_parse(big, strlen(big), &g, err) == PW_ELIMIT);
  /* ambiguous grammars run within their limits: each byte is bounded work */
  static const char *const amb[] = {
      "root ::= (\"a\" | \"a\" | [a-z])* \"b\"?",
      "root ::= a* a* a* a* a* a* a* a* a* a* a* a*\na ::= \"x\" | \"xx\"",
      "root ::= s\ns ::= \"x\" s \"y\" | \"x\" s \"z\" | \"x\" s | \"\"",
      "root ::= (x | y)*\nx ::= \"x\" (\"x\" | \"\")\ny ::= \"x\"*  \"x\"",
  };
  char input[4001];
  memset(input, 'x', 4000);
  input[4000] = 0;
  for (size_t i = 0; i < sizeof amb / sizeof amb[0]; i++) {
    CHECK_MSG(grammar_parse(amb[i], strlen(amb[i]), &g, err) == 0, "%s: %s", amb[i], err);
    grammar_matcher *m;
    CHECK(grammar_matcher_create(g, g_bytes, &m, err) == 0);
    /* accepted or refused, it returns (a limit may refuse) */
    int rc = grammar_matcher_accept_bytes(m, input, 4000);
    CHECK(rc == 0 || rc == PW_EINVAL);
    const uint64_t *mask;
    CHECK(grammar_matcher_mask(m, &mask) == 0);
    grammar_matcher_destroy(m);
    grammar_destroy(g);
  }
  /* recursion as deep as the input: nested arrays 20000 deep */
  const char *jo = grammar_json_object_gbnf();
  CHECK(grammar_parse(jo, strlen(jo), &g, err) == 0);
  grammar_matcher *m;
  CHECK(grammar_matcher_create(g, g_bytes, &m, err) == 0);
  CHECK(grammar_matcher_accept_bytes(m, "{\"a\":", 5) == 0);
  int ok = 0;
  for (int i = 0; i < 20000; i++) ok += grammar_matcher_accept_bytes(m, "[", 1) == 0;
  CHECK(ok > 1000);
  grammar_matcher_stats st;
  grammar_matcher_get_stats(m, &st);
  CHECK(st.stacks <= GRAMMAR_MAX_STACKS && st.states <= GRAMMAR_MAX_STATES);
  grammar_matcher_destroy(m);
  grammar_destroy(g);
  /* a schema that is not JSON, and deep schemas */
  char *txt;
  CHECK(grammar_schema_to_gbnf("{\"type\":", 8, &txt, NULL, err) == PW_EINVAL);
  char ds[8192];
  n = 0;
  for (int i = 0; i < 200; i++) n += (size_t)snprintf(ds + n, sizeof ds - n, "{\"items\":");
  n += (size_t)snprintf(ds + n, sizeof ds - n, "{}");
  for (int i = 0; i < 200; i++) ds[n++] = '}';
  CHECK(grammar_schema_to_gbnf(ds, n, &txt, NULL, err) == PW_ELIMIT);
}

/* ---- property test: random schemas x random-weight models ---------------- */

static pw_rng g_rng;
static unsigned rnd(unsigned n) { return (unsigned)(pw_rng_next(&g_rng) % n); }

static json_t *rand_schema(int depth);

static json_t *rand_scalar(void) {
  static const char *const patterns[] = {"^[a-c]{1,3}$", "^x(y|z)?\\d$", "^[A-Z][a-z]{0,4}$", "q", "^\\w{2}-\\d{1,2}$"};
  static const char *const formats[] = {"date", "time", "date-time", "uuid", "email"};
  switch (rnd(12)) {
  case 0: return json_pack("{s:s, s:i}", "type", "string", "maxLength", (int)rnd(6));
  case 1: return json_pack("{s:s, s:i, s:i}", "type", "string", "minLength", 1, "maxLength", 2 + (int)rnd(4));
  case 2: return json_pack("{s:s, s:s}", "type", "string", "format", formats[rnd(5)]);
  case 3: return json_pack("{s:s, s:s}", "type", "string", "pattern", patterns[rnd(5)]);
  case 4: return json_pack("{s:s, s:i, s:i}", "type", "integer", "minimum", -(int)rnd(50), "maximum", (int)rnd(300));
  case 5: return rnd(2) ? json_pack("{s:s, s:i}", "type", "integer", "minimum", (int)rnd(1000))
                        : json_pack("{s:s}", "type", "integer");
  case 6: return json_pack("{s:s, s:f, s:f}", "type", "number", "minimum", -2.5, "maximum", 7.0 + rnd(3));
  case 7: return json_pack("{s:s}", "type", "boolean");
  case 8: return json_pack("{s:[s,s], s:i}", "type", "string", "null", "maxLength", 3);
  case 9: return json_pack("{s:[s,i,n,b]}", "enum", "red", 42, 1);
  case 10: return json_pack("{s:[s,s]}", "type", "integer", "null");
  default: return json_pack("{s:{s:[i,s]}}", "const", "k", 1, "v");
  }
}

static json_t *rand_object(int depth, bool closed_ok) {
  json_t *props = json_object(), *req = json_array();
  int n = 1 + (int)rnd(4);
  for (int i = 0; i < n; i++) {
    char k[16];
    snprintf(k, sizeof k, "%c%d", 'a' + i, (int)rnd(10));
    json_object_set_new(props, k, rand_schema(depth + 1));
    if (rnd(2)) json_array_append_new(req, json_string(k));
  }
  json_t *o = json_pack("{s:s, s:o, s:o}", "type", "object", "properties", props, "required", req);
  if (closed_ok && rnd(2)) json_object_set_new(o, "additionalProperties", json_false());
  return o;
}

static json_t *rand_schema(int depth) {
  if (depth >= 3) return rand_scalar();
  switch (rnd(10)) {
  case 0: case 1: return rand_object(depth, true);
  case 2: {
    json_t *a = json_pack("{s:s, s:o}", "type", "array", "items", rand_schema(depth + 1));
    json_object_set_new(a, "minItems", json_integer(rnd(2)));
    json_object_set_new(a, "maxItems", json_integer(1 + rnd(3)));
    return a;
  }
  case 3:
    return json_pack("{s:s, s:[o,o], s:o, s:i}", "type", "array", "prefixItems", rand_scalar(), rand_scalar(), "items",
                     rnd(2) ? json_false() : rand_scalar(), "maxItems", 3);
  case 4: return json_pack("{s:[{s:s},{s:s,s:i}]}", "anyOf", "type", "integer", "type", "string", "maxLength", 4);
  case 5: return json_pack("{s:[{s:s},{s:s}]}", "oneOf", "type", "null", "type", "boolean");
  case 6:
    return json_pack("{s:[o,{s:{s:{s:s}},s:[s]}]}", "allOf", rand_object(depth + 1, false), "properties", "zz", "type",
                     "boolean", "required", "zz");
  case 7: return json_pack("{s:s}", "$ref", "#/$defs/node"); /* recursive, defined at the root */
  default: return rand_scalar();
  }
}

typedef struct prop_model {
  const char *file;
  int n_schemas;
} prop_model;

static void test_property(void) {
  static const char *const validator =
      "import json, sys\n"
      "from jsonschema import Draft202012Validator\n"
      "bad = n = 0\n"
      "for line in open(sys.argv[1], encoding='utf-8'):\n"
      "    o = json.loads(line); n += 1\n"
      "    try:\n"
      "        d = json.loads(o['doc'])\n"
      "    except Exception as e:\n"
      "        bad += 1; print('NOT JSON', json.dumps(o['schema'])[:400], repr(o['doc'])[:300], e); continue\n"
      "    errs = list(Draft202012Validator(o['schema'], format_checker=Draft202012Validator.FORMAT_CHECKER).iter_errors(d))\n"
      "    if errs:\n"
      "        bad += 1; print('INVALID', json.dumps(o['schema'])[:400], o['doc'][:300], errs[0].message[:200])\n"
      "print('validated', n, 'invalid', bad)\n"
      "sys.exit(1 if bad else 0)\n";
  if (system("python3 -c 'import jsonschema' 2>/dev/null") != 0) {
    fprintf(stderr, "SKIP property test: python3-jsonschema is not installed (scripts/install-deps.sh)\n");
    return;
  }
  char dir[] = "/tmp/pw_grammar_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  char docs[128], script[128];
  snprintf(docs, sizeof docs, "%s/docs.jsonl", dir);
  snprintf(script, sizeof script, "%s/validate.py", dir);
  FILE *f = fopen(script, "w");
  CHECK(f != NULL);
  if (!f) return;
  fputs(validator, f);
  fclose(f);
  FILE *out = fopen(docs, "w");
  CHECK(out != NULL);
  if (!out) return;
#if defined(__SANITIZE_ADDRESS__) /* the same paths, a third of the schemas */
  static const prop_model models[] = {
      {POWER_SHARED_DIR "/models/llama2-tiny-random.gguf", 80},
      {POWER_SHARED_DIR "/models/syn-qwen2-Q4_K_M.gguf", 20},
  };
#else
  static const prop_model models[] = {
      {POWER_SHARED_DIR "/models/llama2-tiny-random.gguf", 240},
      {POWER_SHARED_DIR "/models/syn-qwen2-Q4_K_M.gguf", 60},
  };
#endif
  pw_rng_seed(&g_rng, 20240601);
  int complete = 0, length = 0, total = 0, spec_same = 0, spec_runs = 0;
  for (size_t mi = 0; mi < sizeof models / sizeof models[0]; mi++) {
    if (!have_model(models[mi].file)) continue;
    engine_opts o = {.model_path = models[mi].file, .n_threads = 2, .max_active = 4, .max_queue = 16, .n_ctx = 512};
    engine *e = create_engine(&o);
    engine_opts os = o;
    os.spec_mode = ENGINE_SPEC_NGRAM;
    engine *es = create_engine(&os);
    if (!e || !es) {
      engine_destroy(e);
      engine_destroy(es);
      continue;
    }
    int32_t prompt[64];
    int np = encode(e, "Answer in JSON: {\"", prompt, 64);
    for (int b = 0; b < models[mi].n_schemas; b += 4) {
      json_t *sch[4] = {0};
      grammar *g[4] = {0};
      engine_req *rq[4] = {0};
      for (int k = 0; k < 4 && b + k < models[mi].n_schemas; k++) {
        sch[k] = rand_schema(0);
        json_object_set_new(sch[k], "$defs",
                            json_pack("{s:{s:s,s:{s:{s:s,s:i,s:i},s:{s:s,s:{s:s},s:i}},s:[s]}}", "node", "type", "object",
                                      "properties", "v", "type", "integer", "minimum", 0, "maximum", 9, "kids", "type",
                                      "array", "items", "$ref", "#/$defs/node", "maxItems", 2, "required", "v"));
        char *txt = json_dumps(sch[k], JSON_COMPACT);
        char err[PW_ERRMAX], bad[64];
        int rc = grammar_from_schema(txt, strlen(txt), &g[k], bad, err);
        CHECK_MSG(rc == 0, "%s: %s", txt, err);
        free(txt);
        if (rc) continue;
        engine_params p = base_params(prompt, np, 120);
        p.sampling.temperature = 1.0f;
        p.sampling.seed = pw_rng_next(&g_rng);
        p.grammar = g[k];
        rq[k] = submit(e, &p);
      }
      for (int k = 0; k < 4; k++) {
        if (!rq[k]) {
          json_decref(sch[k]);
          grammar_destroy(g[k]);
          continue;
        }
        static result res;
        collect(rq[k], &res);
        engine_release(rq[k]);
        total++;
        CHECK_MSG(res.end == ENGINE_EV_DONE, "request ended with %d: %s", res.end, res.message);
        if (res.end == ENGINE_EV_DONE && res.finish == ENGINE_FINISH_STOP) {
          complete++;
          json_t *line = json_pack("{s:O, s:s%}", "schema", sch[k], "doc", res.text, (size_t)res.text_len);
          CHECK(line != NULL);
          if (line) {
            json_dumpf(line, out, JSON_COMPACT);
            fputc('\n', out);
            json_decref(line);
          }
        } else if (res.finish == ENGINE_FINISH_LENGTH) {
          length++;
        }
        /* speculation under the grammar: the same bytes (a few per batch) */
        if (k == 0) {
          engine_params p = base_params(prompt, np, 60);
          p.sampling.temperature = 0;
          p.grammar = g[k];
          static result a, s2;
          run1(e, &p, &a);
          run1(es, &p, &s2);
          spec_runs++;
          spec_same += same_exact(&a, &s2);
          CHECK_MSG(same_exact(&a, &s2), "speculation changed the output under a grammar: \"%s\" vs \"%s\"", a.text,
                    s2.text);
        }
        json_decref(sch[k]);
        grammar_destroy(g[k]); /* the engine held its own reference */
      }
    }
    engine_destroy(e);
    engine_destroy(es);
  }
  fclose(out);
  fprintf(stderr, "property: %d requests, %d complete documents, %d cut by max_tokens; speculation same %d/%d\n", total,
          complete, length, spec_same, spec_runs);
  CHECK(total > 0);
  CHECK(complete >= total / 4); /* enough complete documents to mean something */
  char cmd[384];
  snprintf(cmd, sizeof cmd, "python3 %s %s 1>&2", script, docs);
  CHECK_MSG(system(cmd) == 0, "the validator refused some outputs (see above)");
  unlink(docs);
  unlink(script);
  rmdir(dir);
}

int main(void) {
  g_bytes = byte_vocab();
  test_parse_errors();
  test_accept();
  test_schema();
  test_mask_brute();
  test_hostile();
  test_property();
  grammar_vocab_destroy(g_bytes);
  TEST_DONE();
}
