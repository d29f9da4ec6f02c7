/* test_server_oai.c - OpenAI request validation, error objects, response
 * and SSE rendering of the server layer, without a model. */
#include "server/oai.h"
#include "server/sbuf.h"
#include "base/sha256.h"
#include "test.h"

#include <jansson.h>

static int parse(oai_kind kind, const char *body, oai_request *r, oai_error *e) {
  return oai_parse(kind, body, strlen(body), r, e);
}

/* The body must fail with status 400, the code, and the param. */
static void expect_err(oai_kind kind, const char *body, const char *code, const char *param) {
  oai_request r;
  oai_error e;
  memset(&e, 0, sizeof e);
  int rc = parse(kind, body, &r, &e);
  CHECK_MSG(rc != 0, "accepted: %s", body);
  if (!rc) {
    oai_request_free(&r);
    return;
  }
  CHECK_MSG(e.status == 400, "%s: status %d", body, e.status);
  CHECK_MSG(!strcmp(e.code, code), "%s: code '%s', want '%s' (%s)", body, e.code, code, e.message);
  if (param) CHECK_MSG(!strcmp(e.param, param), "%s: param '%s', want '%s'", body, e.param, param);
  CHECK_MSG(e.message[0] != 0, "%s: empty message", body);
}

static void test_chat_ok(void) {
  oai_request r;
  oai_error e;
  const char *body =
      "{\"model\":\"m\",\"messages\":[{\"role\":\"developer\",\"content\":\"be brief\"},"
      "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\"},{\"type\":\"text\",\"text\":\"b\"}]},"
      "{\"role\":\"assistant\",\"content\":null},{\"role\":\"user\",\"content\":\"hi\",\"name\":\"x\"}],"
      "\"max_tokens\":5,\"max_completion_tokens\":7,\"temperature\":0.5,\"top_p\":0.9,\"top_k\":40,\"min_p\":0.1,"
      "\"presence_penalty\":0.5,\"frequency_penalty\":-0.5,\"repeat_penalty\":1.1,\"seed\":42,"
      "\"stop\":[\"\\n\\n\",\"END\"],\"stream\":true,\"stream_options\":{\"include_usage\":true},"
      "\"logprobs\":true,\"top_logprobs\":3,\"logit_bias\":{\"10\":-100,\"20\":5.5},\"user\":\"u\","
      "\"tools\":[],\"tool_choice\":\"none\",\"response_format\":{\"type\":\"text\"},\"n\":1}";
  int rc = parse(OAI_CHAT, body, &r, &e);
  CHECK_MSG(rc == 0, "%s", e.message);
  if (rc) return;
  CHECK_STR(r.model, "m");
  CHECK_EQ_INT(json_array_size(r.messages), 4);
  CHECK_STR(json_string_value(json_object_get(json_array_get(r.messages, 0), "role")), "system");
  CHECK_STR(json_string_value(json_object_get(json_array_get(r.messages, 1), "content")), "a\nb");
  CHECK_STR(json_string_value(json_object_get(json_array_get(r.messages, 2), "content")), "");
  CHECK_EQ_INT(r.max_tokens, 7);
  CHECK_NEAR(r.sampling.temperature, 0.5, 1e-6);
  CHECK_NEAR(r.sampling.top_p, 0.9, 1e-6);
  CHECK_EQ_INT(r.sampling.top_k, 40);
  CHECK_NEAR(r.sampling.min_p, 0.1, 1e-6);
  CHECK_NEAR(r.sampling.presence_penalty, 0.5, 1e-6);
  CHECK_NEAR(r.sampling.frequency_penalty, -0.5, 1e-6);
  CHECK_NEAR(r.sampling.repeat_penalty, 1.1, 1e-6);
  CHECK(r.seed_given);
  CHECK_EQ_INT(r.sampling.seed, 42);
  CHECK_EQ_INT(r.n_stop, 2);
  CHECK_STR(r.stop[0], "\n\n");
  CHECK_STR(r.stop[1], "END");
  CHECK(r.stream && r.include_usage && r.logprobs);
  CHECK_EQ_INT(r.top_logprobs, 3);
  CHECK_EQ_INT(r.sampling.n_logit_bias, 2);
  CHECK(r.sampling.logit_bias == r.logit_bias);
  engine_params p;
  int32_t prompt[3] = {1, 2, 3};
  oai_engine_params(&r, prompt, 3, &p);
  CHECK(p.prompt == prompt && p.n_prompt == 3 && p.max_tokens == 7 && p.n_stop == 2);
  CHECK(p.want_logprobs && p.n_logprobs == 3 && !p.embedding && p.deadline_ns == 0);
  CHECK(pw_sampler_params_validate(&p.sampling, NULL) == 0);
  oai_request_free(&r);

  /* Defaults: neutral sampling, random seed, no limits. */
  rc = parse(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"model\":null,\"stop\":\"s\"}", &r, &e);
  CHECK_MSG(rc == 0, "%s", e.message);
  if (!rc) {
    CHECK(r.model == NULL && !r.stream && !r.logprobs && !r.seed_given && r.max_tokens == 0);
    CHECK_NEAR(r.sampling.temperature, 1.0, 1e-6);
    CHECK_EQ_INT(r.n_stop, 1);
    CHECK(r.grammar == NULL);
    oai_request_free(&r);
  }

  /* Constrained output compiles into a grammar the engine parameters carry;
   * an unsupported schema keyword is named in the message. */
  static const char *const ok_bodies[] = {
      "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_object\"}}",
      "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"response_format\":{\"type\":\"json_schema\","
      "\"json_schema\":{\"name\":\"p\",\"strict\":true,\"schema\":{\"type\":\"object\",\"properties\":{\"a\":{\"type\":"
      "\"integer\"}},\"required\":[\"a\"],\"additionalProperties\":false}}}}",
      "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"grammar\":\"root ::= [a-z]+\"}",
  };
  for (int i = 0; i < 3; i++) {
    rc = parse(OAI_CHAT, ok_bodies[i], &r, &e);
    CHECK_MSG(rc == 0, "%s", e.message);
    if (rc) continue;
    CHECK(r.grammar != NULL);
    oai_engine_params(&r, prompt, 3, &p);
    CHECK(p.grammar == r.grammar);
    oai_request_free(&r);
  }
  rc = parse(OAI_COMPLETION, "{\"prompt\":\"x\",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":"
             "{\"type\":\"string\",\"contentEncoding\":\"base64\"}}}}", &r, &e);
  CHECK(rc != 0 && strstr(e.message, "contentEncoding") != NULL);
  rc = parse(OAI_COMPLETION, "{\"prompt\":\"x\",\"grammar\":\"root ::= \\\"yes\\\" | \\\"no\\\"\"}", &r, &e);
  CHECK_MSG(rc == 0, "%s", e.message);
  if (!rc) {
    CHECK(r.grammar != NULL);
    oai_request_free(&r);
  }
}

static void test_chat_errors(void) {
  const char *u = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
  char b[512];
#define E(extra, code, param)                                 \
  do {                                                        \
    snprintf(b, sizeof b, "{%s,%s}", u, extra);               \
    expect_err(OAI_CHAT, b, code, param);                     \
  } while (0)
  /* unsupported fields: each its own code */
  E("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f g\"}}]", "invalid_value", "tools[0]");
  E("\"tools\":{}", "invalid_type", "tools");
  E("\"tool_choice\":\"required\"", "invalid_value", "tool_choice");
  E("\"tool_choice\":\"sometimes\"", "invalid_value", "tool_choice");
  E("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}],\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":\"g\"}}",
    "invalid_value", "tool_choice");
  E("\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}},{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]",
    "invalid_value", "tools[1]");
  E("\"reasoning_effort\":\"max\"", "invalid_value", "reasoning_effort");
  E("\"chat_template_kwargs\":{\"messages\":[]}", "invalid_value", "chat_template_kwargs");
  E("\"chat_template_kwargs\":[1]", "invalid_type", "chat_template_kwargs");
  E("\"parallel_tool_calls\":1", "invalid_type", "parallel_tool_calls");
  E("\"functions\":[{\"name\":\"f\"}]", "unsupported_functions", "functions");
  E("\"function_call\":{\"name\":\"f\"}", "unsupported_function_call", "function_call");
  /* constrained output: bad formats, schemas and grammars */
  E("\"response_format\":{\"type\":\"xml\"}", "invalid_value", "response_format.type");
  E("\"response_format\":{\"type\":\"json_schema\"}", "missing_field", "response_format.json_schema");
  E("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"x\",\"schema\":{\"type\":\"object\","
    "\"patternProperties\":{}}}}", "unsupported_schema_keyword", "response_format.json_schema.schema");
  E("\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"schema\":{\"type\":\"strin\"}}}", "invalid_schema",
    "response_format.json_schema.schema");
  E("\"grammar\":\"root ::= foo\"", "invalid_grammar", "grammar");
  E("\"grammar\":7", "invalid_type", "grammar");
  E("\"grammar\":\"root ::= \\\"a\\\"\",\"response_format\":{\"type\":\"json_object\"}", "invalid_value", "grammar");
  E("\"n\":65", "invalid_value", "n");
  /* bad types and values */
  E("\"temperature\":\"hot\"", "invalid_type", "temperature");
  E("\"temperature\":3", "invalid_value", "temperature");
  E("\"top_p\":1.5", "invalid_value", "top_p");
  E("\"top_k\":1.5", "invalid_type", "top_k");
  E("\"max_tokens\":0", "invalid_value", "max_tokens");
  E("\"max_tokens\":\"5\"", "invalid_type", "max_tokens");
  E("\"max_completion_tokens\":-1", "invalid_value", "max_completion_tokens");
  E("\"presence_penalty\":2.5", "invalid_value", "presence_penalty");
  E("\"frequency_penalty\":true", "invalid_type", "frequency_penalty");
  E("\"repeat_penalty\":0", "invalid_value", "repeat_penalty");
  E("\"seed\":1.5", "invalid_type", "seed");
  /* 2^63 and -2^63-2^11 as reals: no long long holds them; refused before
   * any conversion (clang's UBSan aborted on the cast) */
  E("\"seed\":9223372036854775808.0", "invalid_value", "seed");
  E("\"seed\":1e300", "invalid_value", "seed");
  E("\"seed\":-9223372036854777856.0", "invalid_value", "seed");
  E("\"max_tokens\":9223372036854775808.0", "invalid_value", "max_tokens");
  E("\"stream\":1", "invalid_type", "stream");
  E("\"stream_options\":{\"include_usage\":1}", "invalid_type", "stream_options.include_usage");
  E("\"stop\":5", "invalid_type", "stop");
  E("\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\",\"f\",\"g\",\"h\",\"i\"]", "invalid_value", "stop");
  E("\"logprobs\":1", "invalid_type", "logprobs");
  E("\"top_logprobs\":2", "invalid_value", "top_logprobs");
  E("\"logprobs\":true,\"top_logprobs\":21", "invalid_value", "top_logprobs");
  E("\"logit_bias\":{\"x\":1}", "invalid_value", "logit_bias");
  E("\"logit_bias\":{\"5\":101}", "invalid_value", "logit_bias");
  E("\"logit_bias\":[1]", "invalid_type", "logit_bias");
  E("\"model\":5", "invalid_type", "model");
  E("\"user\":5", "invalid_type", "user");
#undef E
  expect_err(OAI_CHAT, "{}", "missing_field", "messages");
  expect_err(OAI_CHAT, "{\"messages\":\"hi\"}", "invalid_type", "messages");
  expect_err(OAI_CHAT, "{\"messages\":[]}", "invalid_value", "messages");
  expect_err(OAI_CHAT, "{\"messages\":[5]}", "invalid_type", "messages[0]");
  expect_err(OAI_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", "missing_field", "messages[0].role");
  expect_err(OAI_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", "missing_field", "messages[0].content");
  expect_err(OAI_CHAT, "{\"messages\":[{\"role\":\"wizard\",\"content\":\"x\"}]}", "invalid_value", "messages[0].role");
  expect_err(OAI_CHAT, "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "missing_field", "messages[0].tool_call_id");
  expect_err(OAI_CHAT, "{\"messages\":[{\"role\":\"function\",\"content\":\"x\"}]}", "unsupported_function_role", "messages[0].role");
  expect_err(OAI_CHAT,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"tool_calls\":[{\"id\":\"1\",\"type\":\"function\",\"function\":{\"name\":\"f\",\"arguments\":\"{}\"}}]}]}",
             "invalid_value", "messages[0].tool_calls");
  expect_err(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":5}]}", "invalid_type", "messages[0].content");
  expect_err(OAI_CHAT,
             "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}",
             "unsupported_content_part", "messages[0].content[0]");
  expect_err(OAI_CHAT,
             "{\"messages\":[{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"1\"}]}]}",
             "invalid_value", "messages[0].tool_calls");
  /* malformed JSON, hostile input */
  expect_err(OAI_CHAT, "", "invalid_json", NULL);
  expect_err(OAI_CHAT, "{\"messages\":", "invalid_json", NULL);
  expect_err(OAI_CHAT, "[1,2]", "invalid_json", NULL);
  expect_err(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"\xff\xfe\"}]}", "invalid_json", NULL);
  expect_err(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"\\ud800\"}]}", "invalid_json", NULL);
  expect_err(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\\u0000b\"}]}", "invalid_json", NULL);
  expect_err(OAI_CHAT, "{\"max_tokens\":99999999999999999999999999999}", "invalid_json", NULL);
  expect_err(OAI_CHAT, "{\"temperature\":1e999}", "invalid_json", NULL);
  /* Deep nesting: rejected cleanly, no stack overflow. */
  size_t depth = 200000;
  char *deep = malloc(depth * 2 + 16);
  size_t n = 0;
  deep[n++] = '{';
  memcpy(deep + n, "\"a\":", 4);
  n += 4;
  for (size_t i = 0; i < depth; i++) deep[n++] = '[';
  for (size_t i = 0; i < depth; i++) deep[n++] = ']';
  deep[n++] = '}';
  deep[n] = 0;
  expect_err(OAI_CHAT, deep, "invalid_json", NULL);
  free(deep);
}

static void test_completion(void) {
  oai_request r;
  oai_error e;
  int rc = parse(OAI_COMPLETION, "{\"prompt\":\"def f(\",\"logprobs\":2,\"echo\":false,\"best_of\":1,\"suffix\":null}", &r, &e);
  CHECK_MSG(rc == 0, "%s", e.message);
  if (!rc) {
    CHECK_STR(r.text, "def f(");
    CHECK(r.logprobs && r.top_logprobs == 2 && !r.tokens);
    oai_request_free(&r);
  }
  rc = parse(OAI_COMPLETION, "{\"prompt\":[1,2,3]}", &r, &e);
  CHECK(rc == 0 && r.n_tokens == 3 && r.tokens[2] == 3 && !r.text);
  if (!rc) oai_request_free(&r);
  rc = parse(OAI_COMPLETION, "{\"prompt\":[[4,5]]}", &r, &e);
  CHECK(rc == 0 && r.n_tokens == 2 && r.tokens[0] == 4);
  if (!rc) oai_request_free(&r);
  rc = parse(OAI_COMPLETION, "{\"prompt\":[\"one\"],\"logprobs\":0}", &r, &e);
  CHECK(rc == 0 && r.text && !strcmp(r.text, "one") && r.logprobs && r.top_logprobs == 0);
  if (!rc) oai_request_free(&r);
  expect_err(OAI_COMPLETION, "{}", "missing_field", "prompt");
  expect_err(OAI_COMPLETION, "{\"prompt\":5}", "invalid_type", "prompt");
  expect_err(OAI_COMPLETION, "{\"prompt\":[]}", "invalid_value", "prompt");
  /* Several prompts, each a choice (or n). */
  rc = parse(OAI_COMPLETION, "{\"prompt\":[\"a\",[1,2],\"b\"],\"n\":2}", &r, &e);
  CHECK(rc == 0 && r.prompts && json_array_size(r.prompts) == 3 && r.n_choices == 2);
  if (!rc) oai_request_free(&r);
  rc = parse(OAI_COMPLETION, "{\"prompt\":[\"a\",\"b\"],\"stream\":true,\"n\":2}", &r, &e);
  CHECK(rc == 0 && r.stream && r.n_choices == 2); /* streamed one choice after the other */
  if (!rc) oai_request_free(&r);
  expect_err(OAI_COMPLETION, "{\"prompt\":[\"a\",\"b\"],\"n\":33}", "invalid_value", "n");
  expect_err(OAI_COMPLETION, "{\"prompt\":[\"a\",\"\"]}", "invalid_type", "prompt");
  expect_err(OAI_COMPLETION, "{\"prompt\":[\"a\",[1,-2]]}", "invalid_type", "prompt");
  expect_err(OAI_COMPLETION, "{\"prompt\":[\"a\",5]}", "invalid_type", "prompt");
  expect_err(OAI_COMPLETION, "{\"prompt\":[1,-2]}", "invalid_type", "prompt");
  expect_err(OAI_COMPLETION, "{\"prompt\":\"x\",\"suffix\":\"y\"}", "unsupported_suffix", "suffix");
  expect_err(OAI_COMPLETION, "{\"prompt\":\"x\",\"echo\":true}", "unsupported_echo", "echo");
  expect_err(OAI_COMPLETION, "{\"prompt\":\"x\",\"best_of\":3}", "unsupported_best_of", "best_of");
  rc = parse(OAI_COMPLETION, "{\"prompt\":\"x\",\"n\":4}", &r, &e);
  CHECK(rc == 0 && r.n_choices == 4);
  if (!rc) oai_request_free(&r);
  expect_err(OAI_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":30}", "invalid_value", "logprobs");
  expect_err(OAI_COMPLETION, "{\"prompt\":\"x\",\"logprobs\":\"2\"}", "invalid_type", "logprobs");
}

static void test_other_kinds(void) {
  oai_request r;
  oai_error e;
  int rc = parse(OAI_EMBEDDING, "{\"input\":[\"a\",\"b\"],\"encoding_format\":\"base64\",\"dimensions\":8}", &r, &e);
  CHECK(rc == 0 && json_array_size(r.inputs) == 2 && r.base64 && r.dimensions == 8);
  if (!rc) oai_request_free(&r);
  rc = parse(OAI_EMBEDDING, "{\"input\":\"a\"}", &r, &e);
  CHECK(rc == 0 && json_array_size(r.inputs) == 1 && !r.base64);
  if (!rc) oai_request_free(&r);
  rc = parse(OAI_EMBEDDING, "{\"input\":[7,8]}", &r, &e);
  CHECK(rc == 0 && json_array_size(r.inputs) == 1 && json_is_array(json_array_get(r.inputs, 0)));
  if (!rc) oai_request_free(&r);
  expect_err(OAI_EMBEDDING, "{}", "missing_field", "input");
  expect_err(OAI_EMBEDDING, "{\"input\":\"\"}", "invalid_value", "input");
  expect_err(OAI_EMBEDDING, "{\"input\":[\"a\",5]}", "invalid_type", "input");
  expect_err(OAI_EMBEDDING, "{\"input\":{}}", "invalid_type", "input");
  expect_err(OAI_EMBEDDING, "{\"input\":\"a\",\"encoding_format\":\"hex\"}", "invalid_value", "encoding_format");

  rc = parse(OAI_TOKENIZE, "{\"content\":\"hello\",\"add_special\":true,\"with_pieces\":true}", &r, &e);
  CHECK(rc == 0 && r.text_len == 5 && r.add_special && r.with_pieces && r.parse_special);
  if (!rc) oai_request_free(&r);
  expect_err(OAI_TOKENIZE, "{}", "missing_field", "content");
  expect_err(OAI_TOKENIZE, "{\"content\":1}", "invalid_type", "content");
  rc = parse(OAI_DETOKENIZE, "{\"tokens\":[1,2]}", &r, &e);
  CHECK(rc == 0 && r.n_tokens == 2);
  if (!rc) oai_request_free(&r);
  expect_err(OAI_DETOKENIZE, "{\"tokens\":\"1\"}", "invalid_type", "tokens");
  expect_err(OAI_DETOKENIZE, "{}", "missing_field", "tokens");

  double s;
  CHECK(oai_parse_timeout("2.5", &s) == 0 && s == 2.5);
  CHECK(oai_parse_timeout("0", &s) != 0);
  CHECK(oai_parse_timeout("-1", &s) != 0);
  CHECK(oai_parse_timeout("abc", &s) != 0);
  CHECK(oai_parse_timeout("1e9", &s) != 0);
  CHECK(oai_parse_timeout("", &s) != 0);
}

static void test_errors(void) {
  struct {
    int status;
    int http;
    const char *code;
  } m[] = {{PW_EBUSY, 503, "overloaded"},
           {PW_ETIMEOUT, 408, "timeout"},
           {PW_ECONTEXT, 400, "context_length_exceeded"},
           {PW_EINVAL, 400, "invalid_value"},
           {PW_EIO, 500, "internal_error"}};
  for (size_t i = 0; i < sizeof m / sizeof m[0]; i++) {
    oai_error e;
    oai_error_from_status(&e, m[i].status, "prompt has 300 tokens, the context is 256");
    CHECK_EQ_INT(e.status, m[i].http);
    CHECK_STR(e.code, m[i].code);
    CHECK(strstr(e.message, "300") != NULL);
  }
  oai_error e;
  oai_seterr(&e, 401, "invalid_api_key", NULL, "bad \"key\"\n");
  sbuf b = {0};
  oai_render_error(&e, &b);
  json_error_t je;
  json_t *j = json_loads(b.data, 0, &je);
  CHECK_MSG(j != NULL, "%s", b.data);
  json_t *err = json_object_get(j, "error");
  CHECK(json_is_object(err));
  CHECK_STR(json_string_value(json_object_get(err, "message")), "bad \"key\"\n");
  CHECK_STR(json_string_value(json_object_get(err, "type")), "authentication_error");
  CHECK_STR(json_string_value(json_object_get(err, "code")), "invalid_api_key");
  CHECK(json_is_null(json_object_get(err, "param")));
  json_decref(j);
  sbuf_free(&b);
}

static int fake_piece(void *ctx, int32_t token, char *buf, int cap) {
  (void)ctx;
  return snprintf(buf, (size_t)cap, "t%d", token);
}

/* Splits SSE text into data payloads; checks the framing. */
static int sse_events(const char *s, char out[][4096], int max) {
  int n = 0;
  while (*s && n < max) {
    const char *end = strstr(s, "\n\n");
    if (!end) return -1;
    if (!strncmp(s, "data: ", 6)) {
      size_t len = (size_t)(end - s - 6);
      if (len >= 4096) return -1;
      memcpy(out[n], s + 6, len);
      out[n][len] = 0;
      n++;
    } else if (s[0] != ':') {
      return -1;
    }
    s = end + 2;
  }
  return n;
}

static void test_sse(void) {
  oai_resp o;
  oai_resp_init(&o, OAI_CHAT, "syn-model", "0123456789abcdef");
  CHECK(!strncmp(o.id, "chatcmpl-", 9) && strlen(o.id) == 9 + 24);
  CHECK_STR(o.fingerprint, "fp_0123456789");
  oai_resp o2;
  oai_resp_init(&o2, OAI_CHAT, "syn-model", NULL);
  CHECK(strcmp(o.id, o2.id) != 0);
  CHECK_STR(o2.fingerprint, "fp_unknown");

  sbuf b = {0};
  oai_logprobs lp = {0};
  oai_logprobs_reset(&lp, OAI_CHAT);
  pw_logprob top[2] = {{5, -0.1f}, {6, -2.5f}};
  oai_logprobs_add(&lp, fake_piece, NULL, 5, -0.1f, top, 2, 3);
  oai_sse_role(&o, &b);
  oai_sse_delta(&o, "He\"llo\n", 7, NULL, &b);
  oai_sse_delta(&o, "\xe4\xb8\x96", 3, &lp, &b);
  oai_sse_keepalive(&b);
  oai_sse_finish(&o, ENGINE_FINISH_LENGTH, &b);
  engine_usage u = {.prompt_tokens = 10, .completion_tokens = 3, .cached_tokens = 4};
  oai_sse_usage(&o, &u, &b);
  oai_sse_done(&b);
  static char ev[8][4096];
  int n = sse_events(b.data, ev, 8);
  CHECK_EQ_INT(n, 6);
  CHECK(strstr(b.data, "\n\n: keep-alive\n\n") != NULL);
  for (int i = 0; i < n - 1; i++) {
    json_error_t je;
    json_t *j = json_loads(ev[i], 0, &je);
    CHECK_MSG(j != NULL, "chunk %d not JSON: %s", i, ev[i]);
    if (!j) continue;
    CHECK_STR(json_string_value(json_object_get(j, "object")), "chat.completion.chunk");
    CHECK_STR(json_string_value(json_object_get(j, "id")), o.id);
    CHECK_STR(json_string_value(json_object_get(j, "model")), "syn-model");
    CHECK_STR(json_string_value(json_object_get(j, "system_fingerprint")), "fp_0123456789");
    json_t *ch = json_object_get(j, "choices");
    json_t *c0 = json_array_get(ch, 0);
    json_t *delta = json_object_get(c0, "delta");
    if (i == 0) {
      CHECK_STR(json_string_value(json_object_get(delta, "role")), "assistant");
      CHECK(json_is_null(json_object_get(c0, "finish_reason")));
    } else if (i == 1) {
      CHECK_STR(json_string_value(json_object_get(delta, "content")), "He\"llo\n");
      CHECK(json_is_null(json_object_get(c0, "logprobs")));
    } else if (i == 2) {
      CHECK_STR(json_string_value(json_object_get(delta, "content")), "\xe4\xb8\x96");
      json_t *c = json_array_get(json_object_get(json_object_get(c0, "logprobs"), "content"), 0);
      CHECK_STR(json_string_value(json_object_get(c, "token")), "t5");
      CHECK_NEAR(json_number_value(json_object_get(c, "logprob")), -0.1, 1e-6);
      CHECK_EQ_INT(json_array_size(json_object_get(c, "bytes")), 2);
      json_t *tl = json_object_get(c, "top_logprobs");
      CHECK_EQ_INT(json_array_size(tl), 2);
      CHECK_STR(json_string_value(json_object_get(json_array_get(tl, 1), "token")), "t6");
    } else if (i == 3) {
      CHECK(json_object_size(delta) == 0);
      CHECK_STR(json_string_value(json_object_get(c0, "finish_reason")), "length");
    } else if (i == 4) {
      CHECK_EQ_INT(json_array_size(ch), 0);
      json_t *us = json_object_get(j, "usage");
      CHECK_EQ_INT(json_integer_value(json_object_get(us, "prompt_tokens")), 10);
      CHECK_EQ_INT(json_integer_value(json_object_get(us, "completion_tokens")), 3);
      CHECK_EQ_INT(json_integer_value(json_object_get(us, "total_tokens")), 13);
      CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(us, "prompt_tokens_details"), "cached_tokens")), 4);
    }
    json_decref(j);
  }
  CHECK_STR(ev[5], "[DONE]");
  sbuf_free(&b);
  oai_logprobs_free(&lp);

  /* Completions: text chunks and the non-streamed object with logprobs. */
  oai_resp_init(&o, OAI_COMPLETION, "m", "ffffffffffffffff");
  CHECK(!strncmp(o.id, "cmpl-", 5));
  oai_logprobs_reset(&lp, OAI_COMPLETION);
  oai_logprobs_add(&lp, fake_piece, NULL, 1, -1.0f, top, 2, 2);
  oai_logprobs_add(&lp, fake_piece, NULL, 2, -INFINITY, NULL, 0, 3);
  oai_render_completion(&o, "ab\x01", 3, &lp, ENGINE_FINISH_STOP, &u, &b);
  json_error_t je;
  json_t *j = json_loads(b.data, 0, &je);
  CHECK_MSG(j != NULL, "%s", b.data);
  if (j) {
    CHECK_STR(json_string_value(json_object_get(j, "object")), "text_completion");
    json_t *c0 = json_array_get(json_object_get(j, "choices"), 0);
    CHECK_STR(json_string_value(json_object_get(c0, "text")), "ab\x01");
    CHECK_STR(json_string_value(json_object_get(c0, "finish_reason")), "stop");
    json_t *l = json_object_get(c0, "logprobs");
    CHECK_EQ_INT(json_array_size(json_object_get(l, "tokens")), 2);
    CHECK_EQ_INT(json_integer_value(json_array_get(json_object_get(l, "text_offset"), 1)), 2);
    CHECK(json_is_number(json_array_get(json_object_get(l, "token_logprobs"), 1)));
    CHECK_NEAR(json_number_value(json_object_get(json_array_get(json_object_get(l, "top_logprobs"), 0), "t6")), -2.5, 1e-6);
    json_decref(j);
  }
  sbuf_clear(&b);
  oai_resp_init(&o, OAI_CHAT, "m", NULL);
  oai_render_completion(&o, "hi", 2, NULL, ENGINE_FINISH_STOP, &u, &b);
  j = json_loads(b.data, 0, &je);
  CHECK(j != NULL);
  if (j) {
    CHECK_STR(json_string_value(json_object_get(j, "object")), "chat.completion");
    json_t *msg = json_object_get(json_array_get(json_object_get(j, "choices"), 0), "message");
    CHECK_STR(json_string_value(json_object_get(msg, "role")), "assistant");
    CHECK_STR(json_string_value(json_object_get(msg, "content")), "hi");
    json_decref(j);
  }
  sbuf_free(&b);
  oai_logprobs_free(&lp);
}

static void test_sbuf(void) {
  sbuf b = {0};
  /* invalid UTF-8 never reaches the output */
  sbuf_json_str(&b, "a\xff\xc3(\xed\xa0\x80z", 8);
  json_error_t je;
  json_t *j = json_loadb(b.data, b.len, JSON_DECODE_ANY, &je);
  CHECK_MSG(j != NULL, "%s", b.data);
  if (j) CHECK_STR(json_string_value(j), "a\xef\xbf\xbd\xef\xbf\xbd(\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbdz");
  json_decref(j);
  sbuf_clear(&b);
  for (int i = 0; i < 10000; i++) sbuf_printf(&b, "%d,", i);
  CHECK(!b.oom && b.len > 40000 && b.data[b.len] == 0);
  sbuf_free(&b);
}

/* prompt_cache_key: accepted forms are kept as views; every bad form is 400
 * invalid_prompt_cache_key with param prompt_cache_key, on both endpoints. */
static void test_cache_key(void) {
  static const char *kinds_body[2] = {"\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]", "\"prompt\":\"x\""};
  static const oai_kind kinds[2] = {OAI_CHAT, OAI_COMPLETION};
  char b[2048];
  for (int k = 0; k < 2; k++) {
    oai_request r;
    oai_error e;
    /* good: ASCII, inner spaces, non-ASCII letters, exactly 256 bytes, null = omitted */
    const char *good[] = {"\"user-42/session:7\"", "\"a b\"", "\"\xc3\xa9t\xc3\xa9\"", "null"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
      snprintf(b, sizeof b, "{%s,\"prompt_cache_key\":%s}", kinds_body[k], good[i]);
      int rc = parse(kinds[k], b, &r, &e);
      CHECK_MSG(rc == 0, "%s: %s", b, e.message);
      if (rc) continue;
      if (!strcmp(good[i], "null")) CHECK(r.cache_key == NULL);
      else CHECK(r.cache_key && r.cache_key_len == strlen(good[i]) - 2 && !memcmp(r.cache_key, good[i] + 1, r.cache_key_len));
      oai_request_free(&r);
    }
    char k256[300], k257[300];
    memset(k256, 'k', 256);
    k256[256] = 0;
    memset(k257, 'k', 257);
    k257[257] = 0;
    snprintf(b, sizeof b, "{%s,\"prompt_cache_key\":\"%s\"}", kinds_body[k], k256);
    CHECK(parse(kinds[k], b, &r, &e) == 0 && r.cache_key_len == 256);
    oai_request_free(&r);
    /* 255 bytes then a 2-byte character: 257 bytes, too long */
    char k2[300];
    memset(k2, 'k', 255);
    memcpy(k2 + 255, "\xc3\xa9", 3);
    const char *bad[] = {
        "5", "true", "[\"a\"]", "{\"a\":1}",  /* wrong type */
        "\"\"",                               /* empty */
        NULL, NULL,                           /* too long (filled below) */
        "\"a\\nb\"", "\"a\\tb\"", "\"\\u007f\"", "\"x\\u0085y\"", "\"\\u001b[0m\"", /* controls */
        "\" a\"", "\"a \"", "\"\\u00a0a\"", "\"a\\u3000\"", "\"\\u2003\"", " \" \"", /* white space */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
      char v[400];
      if (i == 5) snprintf(v, sizeof v, "\"%s\"", k257);
      else if (i == 6) snprintf(v, sizeof v, "\"%s\"", k2);
      else snprintf(v, sizeof v, "%s", bad[i]);
      snprintf(b, sizeof b, "{%s,\"prompt_cache_key\":%s}", kinds_body[k], v);
      expect_err(kinds[k], b, "invalid_prompt_cache_key", "prompt_cache_key");
      /* the error message never echoes the key */
      memset(&e, 0, sizeof e);
      if (parse(kinds[k], b, &r, &e) == 0) oai_request_free(&r);
      else CHECK_MSG(strstr(e.message, "kkkkkkkk") == NULL && strstr(e.message, "[0m") == NULL, "%s", e.message);
    }
  }
  /* Not a field of the other endpoints: refused there as unknown. */
  expect_err(OAI_EMBEDDING, "{\"input\":\"x\",\"prompt_cache_key\":\"k\"}", "unknown_field", "prompt_cache_key");
}

/* The scope digest: exactly SHA-256 over (u64 LE length, bytes) of tenant,
 * endpoint, model, key; every part matters; no concatenation ambiguity. */
static void test_cache_scope(void) {
  uint8_t a[32], b2[32], ref[32];
  uint8_t tenant[32];
  pw_sha256("sk-alpha", 8, tenant);
  CHECK(oai_cache_scope(tenant, 32, OAI_CHAT, "m", "key", 3, a) == 0);
  CHECK(oai_cache_scope(tenant, 32, OAI_CHAT, "m", "key", 3, b2) == 0);
  CHECK(!memcmp(a, b2, 32));
  /* reference construction */
  unsigned char buf[256];
  size_t n = 0;
  const void *parts[4] = {tenant, "chat", "m", "key"};
  size_t lens[4] = {32, 4, 1, 3};
  for (int i = 0; i < 4; i++) {
    for (int k = 0; k < 8; k++) buf[n++] = (unsigned char)((uint64_t)lens[i] >> (8 * k));
    memcpy(buf + n, parts[i], lens[i]);
    n += lens[i];
  }
  pw_sha256(buf, n, ref);
  CHECK(!memcmp(a, ref, 32));
  /* any part differing gives another digest */
  uint8_t other[32];
  pw_sha256("sk-beta", 7, other);
  CHECK(oai_cache_scope(other, 32, OAI_CHAT, "m", "key", 3, b2) == 0 && memcmp(a, b2, 32));
  CHECK(oai_cache_scope(OAI_TENANT_ANONYMOUS, 9, OAI_CHAT, "m", "key", 3, b2) == 0 && memcmp(a, b2, 32));
  CHECK(oai_cache_scope(tenant, 32, OAI_COMPLETION, "m", "key", 3, b2) == 0 && memcmp(a, b2, 32));
  CHECK(oai_cache_scope(tenant, 32, OAI_CHAT, "m2", "key", 3, b2) == 0 && memcmp(a, b2, 32));
  CHECK(oai_cache_scope(tenant, 32, OAI_CHAT, "m", "kez", 3, b2) == 0 && memcmp(a, b2, 32));
  CHECK(oai_cache_scope(tenant, 32, OAI_CHAT, "m", "key", 2, b2) == 0 && memcmp(a, b2, 32));
  /* length prefixes: ("ab","c") and ("a","bc") differ, as do moved boundaries
   * between model and key */
  oai_part p1[2] = {{"ab", 2}, {"c", 1}}, p2[2] = {{"a", 1}, {"bc", 2}}, p3[1] = {{"abc", 3}};
  uint8_t d1[32], d2[32], d3[32];
  CHECK(oai_digest_parts(p1, 2, d1) == 0 && oai_digest_parts(p2, 2, d2) == 0 && oai_digest_parts(p3, 1, d3) == 0);
  CHECK(memcmp(d1, d2, 32) && memcmp(d1, d3, 32) && memcmp(d2, d3, 32));
  CHECK(oai_cache_scope(tenant, 32, OAI_CHAT, "mk", "ey", 2, b2) == 0 && memcmp(a, b2, 32));
  /* empty parts still count */
  oai_part e1[2] = {{"", 0}, {"x", 1}}, e2[1] = {{"x", 1}};
  CHECK(oai_digest_parts(e1, 2, d1) == 0 && oai_digest_parts(e2, 1, d2) == 0 && memcmp(d1, d2, 32));
}

/* The speculation extension: present next to usage only when a mode is set,
 * in non-streamed responses and in the usage chunk. */
static void test_speculation_render(void) {
  engine_usage u = {.prompt_tokens = 20, .completion_tokens = 9, .cached_tokens = 16, .spec_drafted = 12,
                    .spec_accepted = 7, .spec_emitted = 9, .target_passes = 3};
  sbuf b = {0};
  oai_render_speculation("prompt-lookup", &u, &b);
  CHECK_STR(b.data, "{\"mode\":\"prompt-lookup\",\"drafted\":12,\"accepted\":7,\"emitted\":9,\"target_passes\":3}");
  for (int kind = OAI_CHAT; kind <= OAI_COMPLETION; kind++)
    for (int on = 0; on < 2; on++)
      for (int streamed = 0; streamed < 2; streamed++) {
        oai_resp o;
        oai_resp_init(&o, (oai_kind)kind, "m", NULL);
        if (on) o.spec_mode = "ngram";
        sbuf_clear(&b);
        const char *text = b.data;
        if (streamed) {
          oai_sse_usage(&o, &u, &b);
          text = b.data + 6; /* "data: " */
        } else {
          oai_render_completion(&o, "x", 1, NULL, ENGINE_FINISH_STOP, &u, &b);
          text = b.data;
        }
        json_error_t je;
        json_t *j = json_loads(text, JSON_DISABLE_EOF_CHECK, &je);
        CHECK_MSG(j != NULL, "%s", b.data);
        if (!j) continue;
        json_t *us = json_object_get(j, "usage");
        CHECK_EQ_INT(json_integer_value(json_object_get(json_object_get(us, "prompt_tokens_details"), "cached_tokens")), 16);
        json_t *sp = json_object_get(j, "speculation");
        if (!on) {
          CHECK(sp == NULL);
        } else {
          CHECK_STR(json_string_value(json_object_get(sp, "mode")) ? json_string_value(json_object_get(sp, "mode")) : "", "ngram");
          CHECK_EQ_INT(json_integer_value(json_object_get(sp, "drafted")), 12);
          CHECK_EQ_INT(json_integer_value(json_object_get(sp, "accepted")), 7);
          CHECK_EQ_INT(json_integer_value(json_object_get(sp, "emitted")), 9);
          CHECK_EQ_INT(json_integer_value(json_object_get(sp, "target_passes")), 3);
        }
        json_decref(j);
      }
  sbuf_free(&b);
  char id[48];
  oai_new_id("req-", id, sizeof id);
  CHECK(!strncmp(id, "req-", 4) && strlen(id) == 28);
  oai_new_id("req-", id, 10);
  CHECK_EQ_INT(strlen(id), 9);
}

static const char *k_tools =
    "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":\"d\","
    "\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}}]";

/* prepare with a template's syntax: 0 or the error code. */
static int prepare(const char *body, const char *tmpl, oai_request *r, oai_error *e) {
  int rc = parse(OAI_CHAT, body, r, e);
  CHECK_MSG(rc == 0, "parse %s: %s", body, e->message);
  if (rc) return rc;
  tc_syntax sx;
  tc_detect(tmpl, NULL, &sx);
  return oai_chat_prepare(r, &sx, e);
}

static void test_tools(void) {
  char b[2048];
  oai_request r;
  oai_error e;
  /* tool messages reach the template: arguments parsed, the tool's name found */
  snprintf(b, sizeof b,
           "{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"},{\"role\":\"assistant\",\"content\":null,"
           "\"tool_calls\":[{\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
           "\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]},{\"role\":\"tool\",\"tool_call_id\":\"call_1\","
           "\"content\":\"21\"}],%s,\"tool_choice\":\"auto\"}",
           k_tools);
  CHECK(prepare(b, "{{ '<tool_call>' }}", &r, &e) == 0);
  json_t *m1 = json_array_get(r.messages, 1), *m2 = json_array_get(r.messages, 2);
  json_t *args = json_object_get(json_object_get(json_array_get(json_object_get(m1, "tool_calls"), 0), "function"),
                                 "arguments");
  CHECK(json_is_object(args) && !strcmp(json_string_value(json_object_get(args, "city")), "Paris"));
  CHECK(!strcmp(json_string_value(json_object_get(m2, "name")), "get_weather"));
  CHECK(!strcmp(json_string_value(json_object_get(m2, "tool_call_id")), "call_1"));
  CHECK(json_is_array(json_object_get(r.tpl_vars, "tools")));
  CHECK(r.grammar && grammar_is_lazy(r.grammar) && r.tools_active);
  oai_request_free(&r);
  /* required: a grammar from the first token */
  snprintf(b, sizeof b, "{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"}],%s,\"tool_choice\":\"required\"}", k_tools);
  CHECK(prepare(b, "{{ '<tool_call>' }}", &r, &e) == 0);
  CHECK(r.grammar && !grammar_is_lazy(r.grammar));
  oai_request_free(&r);
  /* none: no tools for the template, no grammar */
  snprintf(b, sizeof b, "{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"}],%s,\"tool_choice\":\"none\"}", k_tools);
  CHECK(prepare(b, "{{ '<tool_call>' }}", &r, &e) == 0);
  CHECK(!r.grammar && !r.tools_active && !json_object_get(r.tpl_vars, "tools"));
  oai_request_free(&r);
  /* a template without a known format */
  snprintf(b, sizeof b, "{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"}],%s}", k_tools);
  CHECK(prepare(b, "{{ messages[0].content }}", &r, &e) != 0);
  CHECK(e.status == 400 && !strcmp(e.code, "unsupported_tools") && !strcmp(e.param, "tools"));
  oai_request_free(&r);
  /* an unsupported schema keyword in a strict tool's parameters is named;
   * without strict it is left unenforced */
  for (int strict = 1; strict >= 0; strict--) {
    snprintf(b, sizeof b,
             "{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"}],\"tools\":[{\"type\":\"function\",\"function\":"
             "{\"name\":\"f\",\"strict\":%s,\"parameters\":{\"type\":\"object\",\"patternProperties\":{}}}}],"
             "\"tool_choice\":\"required\"}",
             strict ? "true" : "false");
    const int rc = prepare(b, "{{ '<tool_call>' }}", &r, &e);
    if (strict) CHECK(rc != 0 && !strcmp(e.code, "unsupported_schema_keyword") && strstr(e.message, "patternProperties"));
    else CHECK_MSG(rc == 0 && r.grammar, "non-strict: %s", rc ? e.message : "no grammar");
    oai_request_free(&r);
  }
  /* reasoning_effort: only where the template reads it */
  CHECK(prepare("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":\"low\"}", "{{ 'x' }}", &r,
                &e) != 0);
  CHECK(!strcmp(e.code, "unsupported_reasoning_effort") && !strcmp(e.param, "reasoning_effort"));
  oai_request_free(&r);
  CHECK(prepare("{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"reasoning_effort\":\"low\","
                "\"chat_template_kwargs\":{\"enable_thinking\":false}}",
                "{{ reasoning_effort }}", &r, &e) == 0);
  CHECK(!strcmp(json_string_value(json_object_get(r.tpl_vars, "reasoning_effort")), "low"));
  CHECK(json_is_false(json_object_get(r.tpl_vars, "enable_thinking")));
  oai_request_free(&r);
  /* tools with response_format */
  snprintf(b, sizeof b,
           "{\"messages\":[{\"role\":\"user\",\"content\":\"w?\"}],%s,\"response_format\":{\"type\":\"json_object\"}}", k_tools);
  CHECK(prepare(b, "{{ '<tool_call>' }}", &r, &e) != 0 && !strcmp(e.param, "response_format"));
  oai_request_free(&r);
}

/* Numbers at the edges of their range: 2^63 as a real used to pass the
 * range check and reach an undefined float-to-integer conversion. */
static void test_numeric_ranges(void) {
  static const char *m = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
  char body[512];
  static const char *bad[] = {"9223372036854775808.0", "9.3e18", "-9.3e18", "1e300", "-1e300"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    snprintf(body, sizeof body, "{%s,\"seed\":%s}", m, bad[i]);
    expect_err(OAI_CHAT, body, "invalid_value", "seed");
  }
  /* The largest reals below 2^63 and the integer extremes are seeds. */
  static const char *good[] = {"9223372036854774784.0", "-9223372036854775808.0", "9223372036854775807",
                               "-9223372036854775808"};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
    snprintf(body, sizeof body, "{%s,\"seed\":%s}", m, good[i]);
    oai_request r;
    oai_error e;
    CHECK_MSG(parse(OAI_CHAT, body, &r, &e) == 0, "%s: %s", body, e.message);
    oai_request_free(&r);
  }
  snprintf(body, sizeof body, "{%s,\"max_tokens\":1073741825.0}", m);
  expect_err(OAI_CHAT, body, "invalid_value", "max_tokens");
  snprintf(body, sizeof body, "{%s,\"top_logprobs\":1e20,\"logprobs\":true}", m);
  expect_err(OAI_CHAT, body, "invalid_value", "top_logprobs");
}

/* llama.cpp server fields: refused by name unless neutral; n_predict and
 * cache_prompt honoured. */
static void test_foreign_fields(void) {
  static const char *m = "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]";
  /* chat_template_kwargs and reasoning_effort are honoured (test_tools) */
  static const char *refused[][2] = {{"reasoning_format", "\"deepseek\""},
                                     {"mirostat", "2"},
                                     {"typical_p", "0.9"},
                                     {"samplers", "[\"top_k\"]"},
                                     {"n_probs", "3"},
                                     {"dry_multiplier", "0.8"},
                                     {"json_schema", "{\"type\":\"object\"}"}};
  char body[512];
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    char code[64];
    snprintf(body, sizeof body, "{%s,\"%s\":%s}", m, refused[i][0], refused[i][1]);
    snprintf(code, sizeof code, "unsupported_%s", refused[i][0]);
    expect_err(OAI_CHAT, body, code, refused[i][0]);
  }
  snprintf(body, sizeof body, "{\"prompt\":\"x\",\"mirostat\":1}");
  expect_err(OAI_COMPLETION, body, "unsupported_mirostat", "mirostat");
  /* chat-only fields are not refused on completions' behalf, and neutral values pass. */
  oai_request r;
  oai_error e;
  snprintf(body, sizeof body,
           "{%s,\"typical_p\":1,\"mirostat\":0,\"ignore_eos\":false,\"add_generation_prompt\":true,"
           "\"cache_prompt\":true,\"n_predict\":7}",
           m);
  CHECK_MSG(parse(OAI_CHAT, body, &r, &e) == 0, "%s", e.message);
  CHECK_EQ_INT(r.max_tokens, 7);
  CHECK(!r.ignore_eos);
  oai_request_free(&r);
  /* ignore_eos is honoured: it reaches the engine's parameters */
  engine_params ep;
  for (int kind = 0; kind < 2; kind++) {
    snprintf(body, sizeof body, kind ? "{\"prompt\":\"x\",\"ignore_eos\":true}" : "{%s,\"ignore_eos\":true}", m);
    CHECK_MSG(parse(kind ? OAI_COMPLETION : OAI_CHAT, body, &r, &e) == 0, "%s", e.message);
    CHECK(r.ignore_eos);
    oai_engine_params(&r, NULL, 0, &ep);
    CHECK(ep.ignore_eos);
    oai_request_free(&r);
  }
  snprintf(body, sizeof body, "{%s,\"ignore_eos\":1}", m);
  expect_err(OAI_CHAT, body, "invalid_type", "ignore_eos");
  snprintf(body, sizeof body, "{%s,\"n_predict\":-1,\"max_tokens\":3}", m);
  CHECK_MSG(parse(OAI_CHAT, body, &r, &e) == 0, "%s", e.message);
  CHECK_EQ_INT(r.max_tokens, 3);
  oai_request_free(&r);
  snprintf(body, sizeof body, "{%s,\"cache_prompt\":1}", m);
  expect_err(OAI_CHAT, body, "invalid_type", "cache_prompt");
}

/* ---- top-level members: known, or refused naming the field ------------- */

typedef struct member_case {
  const char *name;
  const char *value; /* JSON */
  const char *code;  /* NULL: accepted; else the 400's code */
} member_case;

#define MSGS "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"

/* Every member each endpoint knows, with a value, and the outcome. The
 * accepted values also parse all together (one request carrying every one
 * of them). */
static const member_case k_chat_cases[] = {
    {"model", "\"m\"", NULL}, {"keep_alive", "\"5m\"", NULL},
    {"messages", "[{\"role\":\"user\",\"content\":\"y\"}]", NULL}, {"temperature", "0.5", NULL},
    {"top_p", "0.9", NULL}, {"top_k", "40", NULL}, {"min_p", "0.05", NULL}, {"presence_penalty", "0.1", NULL},
    {"frequency_penalty", "0.1", NULL}, {"repeat_penalty", "1.1", NULL}, {"seed", "7", NULL},
    {"ignore_eos", "false", NULL}, {"max_tokens", "5", NULL}, {"max_completion_tokens", "5", NULL},
    {"n_predict", "5", NULL}, {"n", "2", NULL}, {"stream", "true", NULL},
    {"stream_options", "{\"include_usage\":true}", NULL}, {"logprobs", "true", NULL}, {"top_logprobs", "0", NULL},
    {"user", "\"u\"", NULL}, {"stop", "\"s\"", NULL}, {"logit_bias", "{\"1\":1}", NULL},
    {"prompt_cache_key", "\"k\"", NULL}, {"response_format", "{\"type\":\"text\"}", NULL},
    {"grammar", "\"\"", NULL}, {"tools", "[]", NULL}, {"tool_choice", "\"auto\"", NULL},
    {"parallel_tool_calls", "false", NULL}, {"reasoning_effort", "\"low\"", NULL},
    {"chat_template_kwargs", "{\"enable_thinking\":false}", NULL}, {"cache_prompt", "true", NULL},
    {"functions", "[]", NULL}, {"function_call", "\"none\"", NULL}, {"store", "false", NULL},
    {"metadata", "{\"a\":\"b\"}", NULL}, {"safety_identifier", "\"s\"", NULL}, {"service_tier", "\"auto\"", NULL},
    {"prompt_cache_retention", "\"in_memory\"", NULL}, {"moderation", "{}", NULL},
    {"prompt_cache_options", "{}", NULL}, {"verbosity", "\"low\"", "unsupported_verbosity"},
    /* llama.cpp's (the README's list): neutral values pass, others are refused by name */
    {"chat_template", "\"x\"", "unsupported_chat_template"},
    {"reasoning_format", "\"none\"", "unsupported_reasoning_format"},
    {"enable_thinking", "false", "unsupported_enable_thinking"}, {"continue_final_message", "false", NULL},
    {"add_generation_prompt", "true", NULL}, {"parse_tool_calls", "false", NULL},
    {"modalities", "[\"text\"]", "unsupported_modalities"}, {"audio", "{}", "unsupported_audio"},
    {"prediction", "{}", "unsupported_prediction"}, {"web_search_options", "{}", "unsupported_web_search_options"},
    {"mirostat", "0", NULL}, {"mirostat_tau", "5", "unsupported_mirostat_tau"},
    {"mirostat_eta", "0.1", "unsupported_mirostat_eta"}, {"typical_p", "1", NULL}, {"tfs_z", "1", NULL},
    {"top_n_sigma", "-1", NULL}, {"dynatemp_range", "0", NULL},
    {"dynatemp_exponent", "1", "unsupported_dynatemp_exponent"}, {"xtc_probability", "0", NULL},
    {"xtc_threshold", "0.1", "unsupported_xtc_threshold"}, {"dry_multiplier", "0", NULL},
    {"dry_base", "1.75", "unsupported_dry_base"}, {"dry_allowed_length", "2", "unsupported_dry_allowed_length"},
    {"dry_penalty_last_n", "-1", "unsupported_dry_penalty_last_n"},
    {"dry_sequence_breakers", "[]", "unsupported_dry_sequence_breakers"},
    {"repeat_last_n", "64", "unsupported_repeat_last_n"}, {"penalty_last_n", "64", "unsupported_penalty_last_n"},
    {"penalize_nl", "false", NULL}, {"n_probs", "0", NULL}, {"n_keep", "0", "unsupported_n_keep"},
    {"min_keep", "0", "unsupported_min_keep"}, {"n_indent", "0", "unsupported_n_indent"}, {"id_slot", "-1", NULL},
    {"slot_id", "-1", NULL}, {"samplers", "[]", "unsupported_samplers"},
    {"t_max_predict_ms", "0", "unsupported_t_max_predict_ms"}, {"image_data", "[]", "unsupported_image_data"},
    {"lora", "[]", "unsupported_lora"}, {"return_tokens", "false", NULL}, {"post_sampling_probs", "false", NULL},
    {"timings_per_token", "false", NULL}, {"response_fields", "[]", "unsupported_response_fields"},
    {"json_schema", "{}", "unsupported_json_schema"},
    /* known but refused at these values */
    {"store", "true", "unsupported_store"}, {"service_tier", "\"flex\"", "unsupported_service_tier"},
    {"prompt_cache_retention", "\"24h\"", "unsupported_prompt_cache_retention"},
    {"moderation", "{\"model\":\"m\"}", "unsupported_moderation"},
    {"prompt_cache_options", "{\"mode\":\"explicit\"}", "unsupported_prompt_cache_options"},
    {"metadata", "[]", "invalid_type"}, {"safety_identifier", "5", "invalid_type"},
    {"functions", "[{\"name\":\"f\"}]", "unsupported_functions"},
    {"function_call", "{\"name\":\"f\"}", "unsupported_function_call"},
    /* not fields of a chat request */
    {"prompt", "\"x\"", "unknown_field"}, {"suffix", "\"\"", "unknown_field"}, {"input", "\"x\"", "unknown_field"},
    {"bogus_field", "1", "unknown_field"}, {"Temperature", "0.5", "unknown_field"},
};

static const member_case k_completion_cases[] = {
    {"model", "\"m\"", NULL}, {"keep_alive", "-1", NULL}, {"prompt", "\"y\"", NULL}, {"temperature", "0.5", NULL},
    {"top_p", "0.9", NULL}, {"top_k", "40", NULL}, {"min_p", "0.05", NULL}, {"presence_penalty", "0.1", NULL},
    {"frequency_penalty", "0.1", NULL}, {"repeat_penalty", "1.1", NULL}, {"seed", "7", NULL},
    {"ignore_eos", "false", NULL}, {"max_tokens", "5", NULL}, {"max_completion_tokens", "5", NULL},
    {"n_predict", "5", NULL}, {"n", "2", NULL}, {"stream", "true", NULL},
    {"stream_options", "{\"include_usage\":true}", NULL}, {"logprobs", "2", NULL}, {"user", "\"u\"", NULL},
    {"stop", "[\"s\"]", NULL}, {"logit_bias", "{\"1\":1}", NULL}, {"prompt_cache_key", "\"k\"", NULL},
    {"response_format", "{\"type\":\"text\"}", NULL}, {"grammar", "\"\"", NULL}, {"cache_prompt", "false", NULL},
    {"suffix", "\"\"", NULL}, {"echo", "false", NULL}, {"best_of", "1", NULL},
    {"suffix", "\"z\"", "unsupported_suffix"}, {"echo", "true", "unsupported_echo"},
    {"best_of", "2", "unsupported_best_of"},
    /* llama.cpp's sampling fields are refused here too; its chat fields are not fields here */
    {"mirostat", "0", NULL}, {"mirostat", "2", "unsupported_mirostat"}, {"samplers", "[]", "unsupported_samplers"},
    {"chat_template", "\"x\"", "unknown_field"}, {"add_generation_prompt", "true", "unknown_field"},
    /* chat-only OpenAI fields */
    {"messages", "[]", "unknown_field"}, {"top_logprobs", "2", "unknown_field"}, {"tools", "[]", "unknown_field"},
    {"tool_choice", "\"none\"", "unknown_field"}, {"metadata", "{}", "unknown_field"},
    {"store", "false", "unknown_field"}, {"bogus_field", "1", "unknown_field"},
};

static const member_case k_embedding_cases[] = {
    {"model", "\"m\"", NULL}, {"keep_alive", "\"1h\"", NULL}, {"input", "\"y\"", NULL},
    {"encoding_format", "\"float\"", NULL}, {"dimensions", "8", NULL}, {"user", "\"u\"", NULL},
    {"prompt", "\"x\"", "unknown_field"}, {"content", "\"x\"", "unknown_field"}, {"truncate", "true", "unknown_field"},
    {"prompt_cache_key", "\"k\"", "unknown_field"}, {"bogus_field", "1", "unknown_field"},
};

static const member_case k_tokenize_cases[] = {
    {"model", "\"m\"", NULL}, {"content", "\"y\"", NULL}, {"add_special", "true", NULL},
    {"parse_special", "false", NULL}, {"with_pieces", "true", NULL}, {"model", "5", "invalid_type"},
    {"tokens", "[1]", "unknown_field"}, {"prompt", "\"x\"", "unknown_field"}, {"bogus_field", "1", "unknown_field"},
};

static const member_case k_detokenize_cases[] = {
    {"model", "\"m\"", NULL}, {"tokens", "[3]", NULL}, {"content", "\"x\"", "unknown_field"},
    {"with_pieces", "true", "unknown_field"}, {"bogus_field", "1", "unknown_field"},
};

static void check_member_cases(oai_kind kind, const char *base, const member_case *cases, size_t n) {
  char body[1024];
  oai_request r;
  oai_error e;
  /* each case on its own */
  for (size_t i = 0; i < n; i++) {
    snprintf(body, sizeof body, "{%s,\"%s\":%s}", base, cases[i].name, cases[i].value);
    if (!cases[i].code) {
      memset(&e, 0, sizeof e);
      int rc = parse(kind, body, &r, &e);
      CHECK_MSG(rc == 0, "%s: %s", body, e.message);
      if (!rc) oai_request_free(&r);
    } else {
      expect_err(kind, body, cases[i].code, cases[i].name);
      if (!strcmp(cases[i].code, "unknown_field")) {
        memset(&e, 0, sizeof e);
        if (parse(kind, body, &r, &e) == 0) oai_request_free(&r);
        else CHECK_MSG(strstr(e.message, cases[i].name) != NULL, "%s: message '%s' does not name it", body, e.message);
      }
    }
  }
  /* all the accepted ones in one request */
  sbuf b = {0};
  sbuf_printf(&b, "{%s", base);
  for (size_t i = 0; i < n; i++)
    if (!cases[i].code) sbuf_printf(&b, ",\"%s\":%s", cases[i].name, cases[i].value);
  sbuf_puts(&b, "}");
  memset(&e, 0, sizeof e);
  int rc = oai_parse(kind, b.data, b.len, &r, &e);
  CHECK_MSG(rc == 0, "every accepted member at once: %s (%s)", e.message, b.data);
  if (!rc) oai_request_free(&r);
  sbuf_free(&b);
  /* the endpoint's list holds no name the cases above do not try */
  const char *const *names = oai_fields(kind);
  CHECK(names != NULL);
  for (int i = 0; names && names[i]; i++) {
    bool tried = false;
    for (size_t j = 0; j < n && !tried; j++) tried = !strcmp(cases[j].name, names[i]);
    CHECK_MSG(tried, "kind %d: '%s' is known but not tested", (int)kind, names[i]);
  }
}

static void test_members(void) {
  check_member_cases(OAI_CHAT, MSGS, k_chat_cases, sizeof k_chat_cases / sizeof k_chat_cases[0]);
  check_member_cases(OAI_COMPLETION, "\"prompt\":\"x\"", k_completion_cases,
                     sizeof k_completion_cases / sizeof k_completion_cases[0]);
  check_member_cases(OAI_EMBEDDING, "\"input\":\"x\"", k_embedding_cases,
                     sizeof k_embedding_cases / sizeof k_embedding_cases[0]);
  check_member_cases(OAI_TOKENIZE, "\"content\":\"x\"", k_tokenize_cases,
                     sizeof k_tokenize_cases / sizeof k_tokenize_cases[0]);
  check_member_cases(OAI_DETOKENIZE, "\"tokens\":[1]", k_detokenize_cases,
                     sizeof k_detokenize_cases / sizeof k_detokenize_cases[0]);

  /* The error object: 400 invalid_request_error, param and message name the field. */
  oai_request r;
  oai_error e;
  CHECK(parse(OAI_CHAT, "{" MSGS ",\"bogus_field\":{\"deep\":[1]}}", &r, &e) != 0);
  sbuf out = {0};
  oai_render_error(&e, &out);
  json_t *j = json_loadb(out.data, out.len, 0, NULL);
  json_t *eo = json_object_get(j, "error");
  CHECK_STR(json_string_value(json_object_get(eo, "type")), "invalid_request_error");
  CHECK_STR(json_string_value(json_object_get(eo, "code")), "unknown_field");
  CHECK_STR(json_string_value(json_object_get(eo, "param")), "bogus_field");
  CHECK(strstr(json_string_value(json_object_get(eo, "message")), "'bogus_field' is not a field") != NULL);
  json_decref(j);
  sbuf_free(&out);
  /* The first unknown member in the body's order is named; the check runs
   * before any other (a bad type elsewhere comes second). */
  expect_err(OAI_COMPLETION, "{\"prompt\":5,\"zz\":1,\"aa\":2}", "unknown_field", "zz");
  /* null asks for nothing: an unknown member set to null passes, as a known one does */
  CHECK_MSG(parse(OAI_CHAT, "{" MSGS ",\"bogus_field\":null}", &r, &e) == 0, "%s", e.message);
  oai_request_free(&r);
  /* members of nested objects are the parsers' own business (not checked here) */
  CHECK_MSG(parse(OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"name\":\"bob\"}]}", &r, &e) == 0,
            "%s", e.message);
  oai_request_free(&r);
  /* tokenize now reads its model */
  CHECK(parse(OAI_TOKENIZE, "{\"content\":\"x\",\"model\":\"m\"}", &r, &e) == 0);
  CHECK_STR(r.model, "m");
  oai_request_free(&r);

  /* The adapters' helpers. */
  static const char *const known[] = {"a", "b", NULL};
  json_t *o = json_loads("{\"a\":1,\"n\":null,\"b\":2,\"c\":3,\"d\":4}", 0, NULL);
  CHECK_STR(oai_unknown_member(o, known), "c");
  memset(&e, 0, sizeof e);
  CHECK(oai_check_fields(o, known, &e) == PW_EINVAL && e.status == 400);
  CHECK_STR(e.code, "unknown_field");
  CHECK_STR(e.param, "c");
  json_object_del(o, "c");
  json_object_del(o, "d");
  CHECK(oai_unknown_member(o, known) == NULL);
  CHECK(oai_check_fields(o, known, &e) == 0);
  json_decref(o);
}

int main(void) {
  test_members();
  test_numeric_ranges();
  test_foreign_fields();
  test_chat_ok();
  test_chat_errors();
  test_tools();
  test_completion();
  test_other_kinds();
  test_errors();
  test_sse();
  test_sbuf();
  test_cache_key();
  test_cache_scope();
  test_speculation_render();
  TEST_DONE();
}
