/* test_toolcall.c - tool-call formats: detection from the shared chat
 * templates, the parser per format on real-looking answers (whole, split at
 * every byte boundary, byte by byte: all the same), malformed calls kept as
 * text, the grammars (canonical calls accepted, wrong ones refused) and lazy
 * grammars. */
#include "chat/toolcall.h"
#include "grammar/grammar.h"
#include "test.h"

#include "power.h"

#include <jansson.h>
#include <stdbool.h>

#define TDIR POWER_SHARED_DIR "/chat-templates"

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *b = malloc((size_t)n + 1);
  if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
    free(b);
    b = NULL;
  }
  fclose(f);
  if (b) b[n] = 0;
  return b;
}

static void test_detect(void) {
  static const struct {
    const char *file;
    tc_format f;
    bool think;
  } k[] = {
      {"NousResearch-Hermes-3-Llama-3.1-8B-tool_use", TC_HERMES, false},
      {"Qwen-Qwen2.5-7B-Instruct", TC_HERMES, false},
      {"Qwen-Qwen3-0.6B", TC_HERMES, true},
      {"Qwen3-Coder", TC_QWEN3_CODER, false},
      {"meta-llama-Llama-3.1-8B-Instruct", TC_LLAMA3, false},
      {"meta-llama-Llama-3.2-3B-Instruct", TC_LLAMA3, false},
      {"mistralai-Mistral-Nemo-Instruct-2407", TC_MISTRAL, false},
      {"unsloth-mistral-Devstral-Small-2507", TC_DEVSTRAL, false},
      {"ibm-granite-granite-3.3-2B-Instruct", TC_GRANITE, true},
      {"openai-gpt-oss-120b", TC_HARMONY, false},
      {"HuggingFaceTB-SmolLM3-3B", TC_NONE, true}, /* this edition of the template has no tools */
      {"deepseek-ai-DeepSeek-R1-Distill-Qwen-32B", TC_NONE, true},
      {"google-gemma-2-2b-it", TC_NONE, false},
      {"microsoft-Phi-3.5-mini-instruct", TC_NONE, false},
  };
  for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s.jinja", TDIR, k[i].file);
    char *t = slurp(path);
    CHECK_MSG(t != NULL, "missing %s", path);
    if (!t) continue;
    tc_syntax sx;
    tc_detect(t, NULL, &sx);
    CHECK_MSG(sx.format == k[i].f, "%s: format %s, want %s", k[i].file, tc_format_name(sx.format),
              tc_format_name(k[i].f));
    CHECK_MSG(sx.think == k[i].think, "%s: think %d", k[i].file, sx.think);
    CHECK_MSG(sx.reasoning_effort == (k[i].f == TC_HARMONY), "%s: reasoning_effort %d", k[i].file,
              sx.reasoning_effort);
    free(t);
  }
  tc_syntax sx;
  tc_detect(NULL, NULL, &sx);
  CHECK(sx.format == TC_NONE && !sx.think);
}

/* ---- parser ---------------------------------------------------------------- */

typedef struct result {
  char content[8192], reasoning[8192], calls[8192];
  size_t nc, nr, nk;
  int n_calls;
  int bad_index;
  bool open;
} result;

static void add(char *b, size_t *n, const char *s, size_t len) {
  if (*n + len >= 8192) len = 8191 - *n;
  memcpy(b + *n, s, len);
  *n += len;
  b[*n] = 0;
}

static void on_ev(void *ctx, const tc_event *ev) {
  result *r = ctx;
  if (ev->type == TC_EV_CONTENT) add(r->content, &r->nc, ev->text, ev->len);
  else if (ev->type == TC_EV_REASONING) add(r->reasoning, &r->nr, ev->text, ev->len);
  else if (ev->type == TC_EV_CALL_START) {
    if (ev->index != r->n_calls || !ev->name) r->bad_index = 1;
    if (r->open) add(r->calls, &r->nk, ");", 2);
    r->n_calls++;
    r->open = true;
    add(r->calls, &r->nk, ev->name, strlen(ev->name));
    add(r->calls, &r->nk, "(", 1);
  } else {
    if (ev->index != r->n_calls - 1 || !r->open) r->bad_index = 1;
    add(r->calls, &r->nk, ev->text, ev->len);
  }
}

static json_t *tools_json(void) {
  return json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
                    "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"}},"
                    "\"required\":[\"city\"]}}},"
                    "{\"type\":\"function\",\"function\":{\"name\":\"search\",\"parameters\":{\"type\":\"object\","
                    "\"properties\":{\"q\":{\"type\":\"string\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":"
                    "\"string\"}}},\"required\":[\"q\"]}}}]",
                    0, NULL);
}

/* Parses text in pieces split at the given offsets (cuts[0..n_cuts)). */
static bool g_constrained; /* the parser is told a grammar kept the calls well formed */

static void run(const tc_syntax *sx, const json_t *tools, bool in_reasoning, bool bare, const char *text,
                const size_t *cuts, int n_cuts, result *r) {
  memset(r, 0, sizeof *r);
  tc_parser *p = NULL;
  char err[PW_ERRMAX];
  CHECK(tc_parser_create(sx, tools, in_reasoning, bare, g_constrained, &p, err) == 0);
  if (!p) return;
  size_t at = 0, n = strlen(text);
  for (int i = 0; i < n_cuts; i++) {
    CHECK(tc_parser_feed(p, text + at, cuts[i] - at, false, on_ev, r) == 0);
    at = cuts[i];
  }
  CHECK(tc_parser_feed(p, text + at, n - at, true, on_ev, r) == 0);
  if (r->open) add(r->calls, &r->nk, ");", 2);
  CHECK(tc_parser_calls(p) == r->n_calls);
  tc_parser_destroy(p);
}

static bool same(const result *a, const result *b) {
  return !strcmp(a->content, b->content) && !strcmp(a->reasoning, b->reasoning) && !strcmp(a->calls, b->calls) &&
         a->n_calls == b->n_calls && !a->bad_index && !b->bad_index;
}

/* The text parsed whole must give content/reasoning/calls; split at every
 * byte boundary and byte by byte it must give the same. */
static void expect(tc_format f, bool think, bool in_reasoning, bool bare, const char *text, const char *content,
                   const char *reasoning, const char *calls) {
  tc_syntax sx = {.format = f, .think = think, .open_token = -1, .open_is_text = true};
  json_t *tools = tools_json();
  result whole, part;
  run(&sx, tools, in_reasoning, bare, text, NULL, 0, &whole);
  CHECK_MSG(!strcmp(whole.content, content), "%s: content [%s], want [%s]", text, whole.content, content);
  CHECK_MSG(!strcmp(whole.reasoning, reasoning), "%s: reasoning [%s], want [%s]", text, whole.reasoning, reasoning);
  CHECK_MSG(!strcmp(whole.calls, calls), "%s: calls [%s], want [%s]", text, whole.calls, calls);
  size_t n = strlen(text);
  int bad = 0;
  for (size_t k = 1; k < n && bad < 3; k++) {
    run(&sx, tools, in_reasoning, bare, text, &k, 1, &part);
    if (!same(&whole, &part)) {
      bad++;
      CHECK_MSG(0, "split at %zu of [%s]: content [%s] reasoning [%s] calls [%s]", k, text, part.content,
                part.reasoning, part.calls);
    }
  }
  size_t *cuts = malloc(n * sizeof *cuts);
  for (size_t k = 0; k + 1 < n; k++) cuts[k] = k + 1;
  run(&sx, tools, in_reasoning, bare, text, cuts, n ? (int)n - 1 : 0, &part);
  CHECK_MSG(same(&whole, &part), "byte by byte [%s]: content [%s] reasoning [%s] calls [%s]", text, part.content,
            part.reasoning, part.calls);
  free(cuts);
  json_decref(tools);
}

static void test_parse_formats(void) {
  /* Hermes / Qwen2.5 / Qwen3 */
  expect(TC_HERMES, false, false, false,
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>", "", "",
         "get_weather({\"city\": \"Paris\"});");
  expect(TC_HERMES, false, false, false,
         "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n"
         "</tool_call>\n<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"a </tool_call> b\", \"tags\": "
         "[\"x\"]}}\n</tool_call>",
         "Let me check.\n", "",
         "get_weather({\"city\": \"Paris\", \"days\": 3});search({\"q\": \"a </tool_call> b\", \"tags\": [\"x\"]});");
  expect(TC_HERMES, true, false, false,
         "<think>\nThe user wants weather.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
         "{\"city\": \"Oslo\"}}\n</tool_call>",
         "", "The user wants weather.\n", "get_weather({\"city\": \"Oslo\"});");
  /* the prompt opened <think> (DeepSeek R1, Qwen3 with thinking forced) */
  expect(TC_HERMES, true, true, false, "pondering < and >\n</think>\n\nIt is 21 C.", "It is 21 C.",
         "pondering < and >\n", "");
  /* arguments as a JSON string, and "parameters" */
  expect(TC_HERMES, false, false, false,
         "<tool_call>{\"name\": \"search\", \"arguments\": \"{\\\"q\\\": \\\"x\\\"}\"}</tool_call>", "", "",
         "search({\"q\":\"x\"});");
  /* Qwen3-Coder */
  expect(TC_QWEN3_CODER, false, false, false,
         "I'll look.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nNew York\n</parameter>\n"
         "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>",
         "I'll look.\n", "", "get_weather({\"city\":\"New York\",\"days\":2});");
  expect(TC_QWEN3_CODER, false, false, false,
         "<tool_call>\n<function=search>\n<parameter=q>\na <b> c\n</parameter>\n<parameter=tags>\n[\"t\"]\n"
         "</parameter>\n</function>\n</tool_call>",
         "", "", "search({\"q\":\"a <b> c\",\"tags\":[\"t\"]});");
  /* Llama 3.x: the whole answer, with or without <|python_tag|> */
  expect(TC_LLAMA3, false, false, false, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Rome\"}}", "", "",
         "get_weather({\"city\": \"Rome\"});");
  expect(TC_LLAMA3, false, false, false,
         "<|python_tag|>{\"name\": \"search\", \"parameters\": {\"q\": \"llamas\"}}", "", "",
         "search({\"q\": \"llamas\"});");
  expect(TC_LLAMA3, false, false, false, "The weather is {\"name\": x} fine.", "The weather is {\"name\": x} fine.", "",
         "");
  expect(TC_LLAMA3, false, false, false, "{\"answer\": 42}", "{\"answer\": 42}", "", "");
  /* Mistral Nemo */
  expect(TC_MISTRAL, false, false, false,
         "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Lyon\"}, \"id\": \"abcDEF123\"}, "
         "{\"name\": \"search\", \"arguments\": {\"q\": \"wine\"}, \"id\": \"zzzzzzzzz\"}]",
         "", "", "get_weather({\"city\":\"Lyon\"});search({\"q\":\"wine\"});");
  /* Devstral */
  expect(TC_DEVSTRAL, false, false, false,
         "Sure.[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Nice\"}[TOOL_CALLS]search[ARGS]{\"q\": \"[ARGS]\"}",
         "Sure.", "", "get_weather({\"city\": \"Nice\"});search({\"q\": \"[ARGS]\"});");
  /* Granite */
  expect(TC_GRANITE, true, false, false,
         "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Bern\"}}]", "", "",
         "get_weather({\"city\":\"Bern\"});");
  /* gpt-oss harmony */
  expect(TC_HARMONY, false, false, false,
         "<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant<|channel|>commentary "
         "to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Tokyo\"}<|call|>",
         "", "Need weather.", "get_weather({\"city\": \"Tokyo\"});");
  expect(TC_HARMONY, false, false, false,
         "<|channel|>analysis<|message|>Simple.<|end|><|start|>assistant<|channel|>final<|message|>Hello!", "Hello!",
         "Simple.", "");
  /* bare calls: the opener was a control token the grammar could not write */
  expect(TC_MISTRAL, false, false, true, "[{\"name\": \"search\", \"arguments\": {\"q\": \"b\"}, \"id\": \"123456789\"}]",
         "", "", "search({\"q\":\"b\"});");
  expect(TC_HERMES, false, false, true, "\n{\"name\": \"search\", \"arguments\": {\"q\": \"b\"}}\n</tool_call>", "",
         "", "search({\"q\": \"b\"});");
}

static void test_malformed(void) {
  /* cut off, bad JSON, unknown tool, arguments not an object: text */
  const char *bad[] = {
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": Paris}}\n</tool_call>",
      "<tool_call>\n{\"name\": \"rm_rf\", \"arguments\": {}}\n</tool_call>",
      "<tool_call>\n{\"name\": \"search\", \"arguments\": 5}\n</tool_call>",
      "<tool_call>\n{\"name\": \"search\", \"arguments\": {}} trailing </tool_call>",
      "<tool_call><tool_call></tool_call>",
      "<tool_call>",
      "<tool_c",
      "]]]}}}<tool_call>}",
      "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"\\\"}\"}",
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) expect(TC_HERMES, false, false, false, bad[i], bad[i], "", "");
  expect(TC_QWEN3_CODER, false, false, false, "<tool_call>\n<function=get_weather>\n<parameter=city>\nX",
         "<tool_call>\n<function=get_weather>\n<parameter=city>\nX", "", "");
  expect(TC_QWEN3_CODER, false, false, false, "<tool_call>\n<function=nope>\n</function>\n</tool_call>",
         "<tool_call>\n<function=nope>\n</function>\n</tool_call>", "", "");
  expect(TC_MISTRAL, false, false, false, "[TOOL_CALLS][{\"name\": \"search\"}]", "[TOOL_CALLS][{\"name\": \"search\"}]",
         "", "");
  expect(TC_DEVSTRAL, false, false, false, "[TOOL_CALLS]bad name[ARGS]{}", "[TOOL_CALLS]bad name[ARGS]{}", "", "");
  expect(TC_HARMONY, false, false, false, "<|channel|>commentary to=functions.search<|message|>{oops<|call|>", "{oops",
         "", "");
  /* an unclosed think block: all reasoning */
  expect(TC_HERMES, true, false, false, "<think>still thinking", "", "still thinking", "");
  /* a valid call after a broken one */
  expect(TC_HERMES, false, false, false,
         "<tool_call>{bad}</tool_call><tool_call>{\"name\": \"search\", \"arguments\": {\"q\": \"ok\"}}</tool_call>",
         "<tool_call>{bad}</tool_call>", "", "search({\"q\": \"ok\"});");
  /* random bytes never crash and lose nothing */
  uint64_t x = 88172645463325252ull;
  const char *alpha[] = {"<tool_call>", "</tool_call>", "{", "}", "\"", "name", "arguments", ":", ",", "<think>",
                         "</think>", "\\", "[", "]", "search", " ", "\n", "<|channel|>", "<|message|>", "<|end|>"};
  for (int it = 0; it < 300; it++) {
    char t[512] = "";
    size_t n = 0;
    for (int k = 0; k < 24; k++) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      const char *a = alpha[x % (sizeof alpha / sizeof *alpha)];
      size_t l = strlen(a);
      if (n + l < sizeof t) memcpy(t + n, a, l), n += l;
    }
    t[n] = 0;
    for (int f = TC_HERMES; f <= TC_HARMONY; f++) {
      tc_syntax sx = {.format = (tc_format)f, .think = true, .open_token = -1, .open_is_text = true};
      json_t *tools = tools_json();
      result whole, bytes;
      run(&sx, tools, false, false, t, NULL, 0, &whole);
      size_t cuts[511];
      for (size_t k = 0; k + 1 < n; k++) cuts[k] = k + 1;
      run(&sx, tools, false, false, t, cuts, n ? (int)n - 1 : 0, &bytes);
      CHECK_MSG(same(&whole, &bytes), "format %d, [%s]", f, t);
      /* as if a grammar had been on: text no grammar allows must not crash
       * or lose the count of calls (run checks it) */
      g_constrained = true;
      run(&sx, tools, false, false, t, cuts, n ? (int)n - 1 : 0, &bytes);
      run(&sx, tools, false, false, t, NULL, 0, &bytes);
      g_constrained = false;
      json_decref(tools);
    }
  }
}

/* Under a grammar: arguments stream as they come, and a call cut off by
 * the end of the answer stays a call with the arguments it got. */
static void test_constrained(void) {
  g_constrained = true;
  expect(TC_HERMES, false, false, false,
         "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"a}b\", \"tags\": [\"{\"]}}\n</tool_call>\n"
         "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"X\"}}\n</tool_call>",
         "", "", "search({\"q\": \"a}b\", \"tags\": [\"{\"]});get_weather({\"city\": \"X\"});");
  expect(TC_HERMES, false, false, false, "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"ab", "", "",
         "search({\"q\": \"ab);");
  expect(TC_HERMES, false, false, false, "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}}\n</tool_c",
         "", "", "search({\"q\": \"x\"});");
  expect(TC_LLAMA3, false, false, false, "{\"name\": \"search\", \"parameters\": {\"q\": \"ll", "", "",
         "search({\"q\": \"ll);");
  expect(TC_DEVSTRAL, false, false, false, "[TOOL_CALLS]search[ARGS]{\"q\": \"zz\"}", "", "", "search({\"q\": \"zz\"});");
  /* the fragments come before the call ends */
  tc_syntax sx = {.format = TC_HERMES, .open_token = -1, .open_is_text = true};
  json_t *tools = tools_json();
  tc_parser *p = NULL;
  char err[PW_ERRMAX];
  result r;
  memset(&r, 0, sizeof r);
  CHECK(tc_parser_create(&sx, tools, false, false, true, &p, err) == 0);
  const char *head = "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"stre";
  CHECK(p && tc_parser_feed(p, head, strlen(head), false, on_ev, &r) == 0);
  CHECK_MSG(r.n_calls == 1 && !strcmp(r.calls, "search({\"q\": \"stre"), "streamed so far: [%s]", r.calls);
  CHECK(p && tc_parser_feed(p, "am\"}}\n</tool_call>", 18, true, on_ev, &r) == 0);
  CHECK_MSG(!strcmp(r.calls, "search({\"q\": \"stream\"}"), "[%s]", r.calls);
  tc_parser_destroy(p);
  json_decref(tools);
  g_constrained = false;
}

/* ---- grammars ---------------------------------------------------------------- */

/* A vocabulary of the 256 single bytes plus a few multi-byte pieces;
 * token 256 is end-of-generation. */
static grammar_vocab *byte_vocab(void) {
  static const char *extra[] = {"<tool_call>", "\n{\"", "name", "\": \"", "Hello <tool", "_call>\n{"};
  enum { NX = sizeof extra / sizeof *extra, NV = 257 + NX };
  static char bytes[256];
  const char *p[NV];
  size_t l[NV];
  bool eog[NV];
  for (int i = 0; i < 256; i++) bytes[i] = (char)i, p[i] = &bytes[i], l[i] = 1, eog[i] = false;
  p[256] = "", l[256] = 0, eog[256] = true;
  for (int i = 0; i < NX; i++) p[257 + i] = extra[i], l[257 + i] = strlen(extra[i]), eog[257 + i] = false;
  grammar_vocab *gv = NULL;
  char err[PW_ERRMAX];
  CHECK(grammar_vocab_create(NV, p, l, eog, &gv, err) == 0);
  return gv;
}

static bool accepts(grammar *g, grammar_vocab *gv, const char *text) {
  grammar_matcher *m = NULL;
  char err[PW_ERRMAX];
  if (grammar_matcher_create(g, gv, &m, err)) return false;
  bool ok = grammar_matcher_accept_bytes(m, text, strlen(text)) == 0 && grammar_matcher_can_end(m);
  grammar_matcher_destroy(m);
  return ok;
}

static void test_grammars(void) {
  grammar_vocab *gv = byte_vocab();
  json_t *tools = tools_json();
  char err[PW_ERRMAX], bad[64];
  static const struct {
    tc_format f;
    const char *good, *wrong;
  } k[] = {
      {TC_HERMES, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>",
       "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"town\": \"Paris\"}}\n</tool_call>"},
      {TC_QWEN3_CODER,
       "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
       "</function>\n</tool_call>",
       "<tool_call>\n<function=get_weather>\n<parameter=days>\nthree\n</parameter>\n</function>\n</tool_call>"},
      {TC_LLAMA3, "{\"name\": \"search\", \"parameters\": {\"q\": \"x\", \"tags\": [\"a\"]}}",
       "{\"name\": \"search\", \"parameters\": {\"tags\": [\"a\"]}}"},
      {TC_MISTRAL, "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}, \"id\": \"abcdefghi\"}]",
       "[TOOL_CALLS][{\"name\": \"search\", \"arguments\": {\"q\": \"x\"}, \"id\": \"abc\"}]"},
      {TC_DEVSTRAL, "[TOOL_CALLS]search[ARGS]{\"q\": \"x\"}", "[TOOL_CALLS]nope[ARGS]{\"q\": \"x\"}"},
      {TC_GRANITE, "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Bern\", \"days\": 1}}]",
       "<|tool_call|>[{\"name\": \"get_weather\", \"arguments\": {\"city\": 5}}]"},
  };
  for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
    tc_syntax sx = {.format = k[i].f, .open_token = -1, .open_is_text = true};
    grammar *g = NULL;
    int rc = tc_grammar(&sx, tools, NULL, true, false, &g, bad, err);
    CHECK_MSG(rc == 0, "%s: %s", tc_format_name(k[i].f), err);
    if (rc) continue;
    CHECK_MSG(accepts(g, gv, k[i].good), "%s refuses %s", tc_format_name(k[i].f), k[i].good);
    CHECK_MSG(!accepts(g, gv, k[i].wrong), "%s accepts %s", tc_format_name(k[i].f), k[i].wrong);
    /* what the grammar accepts, the parser reads as calls */
    result r;
    run(&sx, tools, false, false, k[i].good, NULL, 0, &r);
    CHECK_MSG(r.n_calls >= 1 && r.content[0] == 0, "%s: parser gave content [%s]", tc_format_name(k[i].f), r.content);
    grammar_destroy(g);
  }
  /* a named function: only that one */
  tc_syntax hs = {.format = TC_HERMES, .open_token = -1, .open_is_text = true};
  grammar *g = NULL;
  CHECK(tc_grammar(&hs, tools, "search", false, false, &g, bad, err) == 0);
  CHECK(g && !accepts(g, gv, k[0].good));
  CHECK(g && accepts(g, gv, "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"\"}}\n</tool_call>"));
  /* not parallel: one call only */
  CHECK(g && !accepts(g, gv,
                      "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"\"}}\n</tool_call>\n<tool_call>\n"
                      "{\"name\": \"search\", \"arguments\": {\"q\": \"\"}}\n</tool_call>"));
  grammar_destroy(g);
  CHECK(tc_grammar(&hs, tools, "absent", false, false, &g, bad, err) != 0 && !g);
  /* harmony and control-token [ARGS] cannot be constrained */
  tc_syntax ho = {.format = TC_HARMONY, .open_token = -1};
  CHECK(tc_grammar(&ho, tools, NULL, true, false, &g, bad, err) == PW_EUNSUPPORTED);
  json_decref(tools);
  grammar_vocab_destroy(gv);
}

/* Agents' tool schemas carry keywords the grammar cannot enforce
 * (exclusiveMinimum, format "uri", uniqueItems, ...): the calls still
 * follow the schema's structure and the rest is left to the client, unless
 * the tool is strict; a schema whose structure cannot be produced takes
 * any object, unless strict. */
static void test_lenient_schemas(void) {
  grammar_vocab *gv = byte_vocab();
  char err[PW_ERRMAX], bad[64];
  static const char *const lax =
      "{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\",\"exclusiveMinimum\":0},"
      "\"url\":{\"type\":\"string\",\"format\":\"uri\"},\"tags\":{\"type\":\"array\",\"uniqueItems\":true,"
      "\"items\":{\"type\":\"string\"}}},\"required\":[\"n\",\"url\"],\"additionalProperties\":false}";
  static const char *const odd = "{\"allOf\":[{\"type\":\"string\"}]}"; /* no object grammar for it */
  tc_syntax hs = {.format = TC_HERMES, .open_token = -1, .open_is_text = true};
  for (int strict = 0; strict < 2; strict++) {
    char buf[1024];
    snprintf(buf, sizeof buf, "[{\"type\":\"function\",\"function\":{\"name\":\"fetch\",\"strict\":%s,\"parameters\":%s}}]",
             strict ? "true" : "false", lax);
    json_t *tools = json_loads(buf, 0, NULL);
    grammar *g = NULL;
    int rc = tc_grammar(&hs, tools, NULL, true, false, &g, bad, err);
    if (strict) {
      CHECK_MSG(rc == PW_EUNSUPPORTED && !g, "strict: rc %d", rc);
      CHECK_MSG(!strcmp(bad, "exclusiveMinimum") || !strcmp(bad, "format") || !strcmp(bad, "uniqueItems"),
                "strict: bad keyword '%s'", bad);
    } else {
      CHECK_MSG(rc == 0 && g, "lenient: %s", err);
      if (g) {
        CHECK(accepts(g, gv, "<tool_call>\n{\"name\": \"fetch\", \"arguments\": {\"n\": 3, \"url\": \"x\"}}\n</tool_call>"));
        /* the structure holds: types, required and no other keys */
        CHECK(!accepts(g, gv, "<tool_call>\n{\"name\": \"fetch\", \"arguments\": {\"n\": \"3\", \"url\": \"x\"}}\n</tool_call>"));
        CHECK(!accepts(g, gv, "<tool_call>\n{\"name\": \"fetch\", \"arguments\": {\"url\": \"x\"}}\n</tool_call>"));
        CHECK(!accepts(g, gv,
                       "<tool_call>\n{\"name\": \"fetch\", \"arguments\": {\"n\": 3, \"url\": \"x\", \"z\": 1}}\n</tool_call>"));
      }
    }
    grammar_destroy(g);
    json_decref(tools);
    /* a schema the compiler cannot produce beside one it can */
    snprintf(buf, sizeof buf,
             "[{\"type\":\"function\",\"function\":{\"name\":\"odd\",\"strict\":%s,\"parameters\":%s}},"
             "{\"type\":\"function\",\"function\":{\"name\":\"fetch\",\"parameters\":%s}}]",
             strict ? "true" : "false", odd, lax);
    tools = json_loads(buf, 0, NULL);
    g = NULL;
    rc = tc_grammar(&hs, tools, NULL, true, false, &g, bad, err);
    if (strict) {
      CHECK_MSG(rc == PW_EUNSUPPORTED && !g && !strcmp(bad, "allOf"), "strict odd: rc %d bad '%s'", rc, bad);
    } else {
      CHECK_MSG(rc == 0 && g, "lenient odd: %s", err);
      if (g) {
        CHECK(accepts(g, gv, "<tool_call>\n{\"name\": \"odd\", \"arguments\": {\"anything\": [1]}}\n</tool_call>"));
        CHECK(!accepts(g, gv, "<tool_call>\n{\"name\": \"odd\", \"arguments\": 5}\n</tool_call>"));
        /* the other tool keeps its structure */
        CHECK(!accepts(g, gv, "<tool_call>\n{\"name\": \"fetch\", \"arguments\": {\"url\": \"x\"}}\n</tool_call>"));
      }
    }
    grammar_destroy(g);
    json_decref(tools);
  }
  grammar_vocab_destroy(gv);
}

static void test_lazy(void) {
  grammar_vocab *gv = byte_vocab();
  json_t *tools = tools_json();
  char err[PW_ERRMAX], bad[64];
  tc_syntax sx = {.format = TC_HERMES, .open_token = -1, .open_is_text = true};
  grammar *g = NULL;
  CHECK(tc_grammar(&sx, tools, NULL, true, true, &g, bad, err) == 0);
  if (!g) {
    json_decref(tools);
    grammar_vocab_destroy(gv);
    return;
  }
  CHECK(grammar_is_lazy(g));
  char again[PW_ERRMAX];
  const char *w = "x";
  CHECK(grammar_set_lazy(g, &w, 1, NULL, 0, again) == PW_EINVAL); /* once only */
  grammar_matcher *m = NULL;
  CHECK(grammar_matcher_create(g, gv, &m, err) == 0);
  /* free text: every token, end allowed */
  const uint64_t *mask;
  CHECK(grammar_matcher_mask(m, &mask) == 0);
  int n = 0;
  for (int t = 0; t < grammar_vocab_size(gv); t++) n += (int)((mask[t >> 6] >> (t & 63)) & 1);
  CHECK(n == grammar_vocab_size(gv));
  CHECK(!grammar_matcher_triggered(m) && grammar_matcher_can_end(m) && !grammar_matcher_done(m));
  const char *free_text = "Sure, <tool_ca and {} \"name\" ";
  for (const char *c = free_text; *c; c++) CHECK(grammar_matcher_accept_token(m, (unsigned char)*c) == 0);
  CHECK(!grammar_matcher_triggered(m));
  /* the trigger across two tokens ("Hello <tool" + "_call>\n{") */
  grammar_matcher_reset(m);
  CHECK(grammar_matcher_accept_token(m, 257 + 4) == 0);
  CHECK(!grammar_matcher_triggered(m));
  int32_t after[] = {'"', 'x'};
  CHECK(grammar_matcher_prefix(m, after, 2) == 2);
  int32_t trig[] = {257 + 5, '"', 'n'};
  CHECK(grammar_matcher_prefix(m, trig, 3) == 0); /* proposals stop before the trigger */
  int32_t broken[] = {'a', 257 + 5, '"'};          /* 'a' breaks the word: no trigger */
  CHECK(grammar_matcher_prefix(m, broken, 3) == 3);
  CHECK(grammar_matcher_accept_token(m, 257 + 5) == 0);
  CHECK(grammar_matcher_triggered(m));
  /* "\n{" was taken by the grammar: now only '"' */
  CHECK(grammar_matcher_allows(m, '"') && !grammar_matcher_allows(m, 'x') && !grammar_matcher_allows(m, 256));
  const char *rest = "\"name\": \"search\", \"arguments\": {\"q\": \"z\"}}\n</tool_call>";
  CHECK(grammar_matcher_accept_bytes(m, rest, strlen(rest)) == 0);
  CHECK(grammar_matcher_can_end(m));
  grammar_matcher_destroy(m);
  /* a trigger token (control-token opener) */
  grammar *g2 = NULL;
  tc_syntax cx = {.format = TC_HERMES, .open_token = 257, .open_is_text = false, .special_markers = true};
  CHECK(tc_grammar(&cx, tools, NULL, true, true, &g2, bad, err) == 0);
  CHECK(g2 && grammar_matcher_create(g2, gv, &m, err) == 0);
  if (m) {
    CHECK(grammar_matcher_accept_token(m, 'h') == 0 && !grammar_matcher_triggered(m));
    CHECK(grammar_matcher_accept_token(m, 257) == 0 && grammar_matcher_triggered(m));
    CHECK(grammar_matcher_allows(m, '\n') && !grammar_matcher_allows(m, 'h'));
    grammar_matcher_destroy(m);
  }
  grammar_destroy(g2);
  grammar_destroy(g);
  json_decref(tools);
  grammar_vocab_destroy(gv);
}

int main(void) {
  test_lenient_schemas();
  test_detect();
  test_parse_formats();
  test_malformed();
  test_constrained();
  test_grammars();
  test_lazy();
  TEST_DONE();
}
