/* test_server_responses.c - the Responses API's store of finished
 * responses: bounds by entries and bytes with least-recently-used
 * eviction, tenancy (a key never sees another key's responses), and
 * lookups that refresh an entry's place. And its rendering of answers with
 * function calls (resp_render_text), on fixed texts under the shared
 * Qwen2.5 template's <tool_call> format: text then calls, calls then
 * text, white space, an empty answer, a call cut off; the whole object and
 * the events of a stream fed in pieces of every size give the same items,
 * and each item's deltas add up to its final text or arguments. */
#include "server/api.h"
#include "test.h"

#include "power.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>


/* One line per output item: type, status, name, and text or arguments
 * (ids are random, so left out). */
static void summarize(json_t *output, sbuf *out) {
  size_t i;
  json_t *it;
  json_array_foreach(output, i, it) {
    const char *type = json_string_value(json_object_get(it, "type"));
    sbuf_printf(out, "%s|%s|", type ? type : "?", json_string_value(json_object_get(it, "status")));
    if (type && !strcmp(type, "function_call")) {
      sbuf_printf(out, "%s|%s", json_string_value(json_object_get(it, "name")),
                  json_string_value(json_object_get(it, "arguments")));
    } else {
      json_t *c = json_object_get(it, "content");
      sbuf_printf(out, "%zu|%s", json_array_size(c), json_string_value(json_object_get(json_array_get(c, 0), "text")));
    }
    sbuf_puts(out, "\n");
  }
}

/* The events of a stream: numbered in order; each item's deltas add up
 * to what its done events say; a call is added with arguments "". Appends
 * the final response's summary and returns its status (static). */
static const char *check_stream(const char *body, sbuf *sum) {
  static char status[32];
  sbuf acc[16];
  memset(acc, 0, sizeof acc);
  int seq = 0;
  json_t *last = NULL;
  for (const char *p = strstr(body, "data: "); p; p = strstr(p, "data: ")) {
    p += 6;
    const char *end = strstr(p, "\n\n");
    CHECK(end != NULL);
    if (!end) break;
    json_t *ev = json_loadb(p, (size_t)(end - p), 0, NULL);
    CHECK(ev != NULL);
    if (!ev) break;
    CHECK_EQ_INT(json_integer_value(json_object_get(ev, "sequence_number")), seq);
    seq++;
    const char *type = json_string_value(json_object_get(ev, "type"));
    int idx = (int)json_integer_value(json_object_get(ev, "output_index"));
    CHECK(idx >= 0 && idx < 16);
    if (idx < 0 || idx >= 16) idx = 0;
    json_t *item = json_object_get(ev, "item");
    if (!strcmp(type, "response.output_item.added") &&
        !strcmp(json_string_value(json_object_get(item, "type")), "function_call"))
      CHECK_STR(json_string_value(json_object_get(item, "arguments")), "");
    if (!strcmp(type, "response.output_text.delta") || !strcmp(type, "response.function_call_arguments.delta"))
      sbuf_puts(&acc[idx], json_string_value(json_object_get(ev, "delta")));
    if (!strcmp(type, "response.output_text.done"))
      CHECK_STR(json_string_value(json_object_get(ev, "text")), acc[idx].data ? acc[idx].data : "");
    if (!strcmp(type, "response.function_call_arguments.done"))
      CHECK_STR(json_string_value(json_object_get(ev, "arguments")), acc[idx].data ? acc[idx].data : "");
    if (!strcmp(type, "response.completed") || !strcmp(type, "response.incomplete")) {
      json_decref(last);
      last = json_incref(json_object_get(ev, "response"));
    }
    json_decref(ev);
    p = end;
  }
  CHECK(last != NULL);
  summarize(json_object_get(last, "output"), sum);
  snprintf(status, sizeof status, "%s", json_string_value(json_object_get(last, "status")));
  json_decref(last);
  for (int i = 0; i < 16; i++) sbuf_free(&acc[i]);
  return status;
}

/* Renders text whole and streamed in pieces of several sizes; all must
 * give the same items. Returns the whole object's output (owned). */
static json_t *render_all(const tc_syntax *sx, const oai_request *r, const char *text, engine_finish fin,
                          const char *want_status) {
  sbuf whole = {0}, ws = {0};
  CHECK(resp_render_text(sx, r, text, strlen(text), 0, fin, &whole) == 0);
  json_t *obj = json_loadb(whole.data, whole.len, 0, NULL);
  CHECK(obj != NULL);
  CHECK_STR(json_string_value(json_object_get(obj, "status")), want_status);
  json_t *output = json_incref(json_object_get(obj, "output"));
  summarize(output, &ws);
  static const size_t pieces[] = {1, 2, 3, 5, 17, 4096};
  for (size_t k = 0; k < sizeof pieces / sizeof pieces[0]; k++) {
    sbuf st = {0}, ss = {0};
    CHECK(resp_render_text(sx, r, text, strlen(text), pieces[k], fin, &st) == 0);
    CHECK_STR(check_stream(st.data, &ss), want_status);
    CHECK_MSG(ss.len == ws.len && !memcmp(ss.data, ws.data, ws.len), "piece %zu:\n%s\nvs whole:\n%s", pieces[k],
              ss.data, ws.data);
    sbuf_free(&st);
    sbuf_free(&ss);
  }
  json_decref(obj);
  sbuf_free(&whole);
  sbuf_free(&ws);
  return output;
}

static const char *item_field(json_t *output, size_t i, const char *key) {
  return json_string_value(json_object_get(json_array_get(output, i), key));
}

static void check_render(void) {
  char *tpl = t_read_file(POWER_SHARED_DIR "/chat-templates/Qwen-Qwen2.5-7B-Instruct.jinja");
  CHECK(tpl != NULL);
  if (!tpl) return;
  tc_syntax sx;
  tc_detect(tpl, NULL, &sx);
  free(tpl);
  CHECK(sx.format == TC_HERMES);
  oai_request r;
  memset(&r, 0, sizeof r);
  r.kind = OAI_CHAT;
  r.parallel_tool_calls = true;
  r.tool_choice = OAI_TOOLS_AUTO;
  r.tools = json_loads("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"
                       "\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}},{\"type\":\"function\","
                       "\"function\":{\"name\":\"search\",\"parameters\":{\"type\":\"object\"}}}]",
                       0, NULL);
  oai_error e;
  CHECK(oai_chat_prepare(&r, &sx, &e) == 0);
  CHECK(r.tools_active);

  /* Text, then a call: a message item, then a function_call item. */
  json_t *o = render_all(&sx, &r,
                         "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
                         "\"Paris\"}}\n</tool_call>",
                         ENGINE_FINISH_STOP, "completed");
  CHECK_EQ_INT(json_array_size(o), 2);
  CHECK_STR(item_field(o, 0, "type"), "message");
  CHECK(!strncmp(json_string_value(json_object_get(json_array_get(json_object_get(json_array_get(o, 0), "content"), 0),
                                                   "text")),
                 "Let me check.", 13));
  CHECK_STR(item_field(o, 1, "type"), "function_call");
  CHECK_STR(item_field(o, 1, "name"), "get_weather");
  CHECK_STR(item_field(o, 1, "arguments"), "{\"city\": \"Paris\"}");
  CHECK(!strncmp(item_field(o, 1, "id"), "fc_", 3));
  CHECK(!strncmp(item_field(o, 1, "call_id"), "call_", 5));
  CHECK_STR(item_field(o, 1, "status"), "completed");
  json_decref(o);

  /* White space, two calls, text after them: the white space only
   * separated; the text is a message item of its own, after the calls. */
  o = render_all(&sx, &r,
                 "\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n"
                 "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"cats\"}}\n</tool_call>\nDone.",
                 ENGINE_FINISH_STOP, "completed");
  CHECK_EQ_INT(json_array_size(o), 3);
  CHECK_STR(item_field(o, 0, "name"), "get_weather");
  CHECK_STR(item_field(o, 1, "name"), "search");
  CHECK_STR(item_field(o, 1, "arguments"), "{\"q\": \"cats\"}");
  CHECK(strcmp(item_field(o, 0, "call_id"), item_field(o, 1, "call_id")));
  CHECK_STR(item_field(o, 2, "type"), "message");
  const char *t = json_string_value(json_object_get(json_array_get(json_object_get(json_array_get(o, 2), "content"), 0), "text"));
  CHECK(t && strstr(t, "Done.") != NULL);
  json_decref(o);

  /* Plain text, white space only, nothing: one message item each. */
  o = render_all(&sx, &r, "Hello there.", ENGINE_FINISH_STOP, "completed");
  CHECK_EQ_INT(json_array_size(o), 1);
  CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(json_array_get(o, 0), "content"), 0), "text")),
            "Hello there.");
  json_decref(o);
  o = render_all(&sx, &r, " \n ", ENGINE_FINISH_STOP, "completed");
  CHECK_EQ_INT(json_array_size(o), 1);
  CHECK_STR(json_string_value(json_object_get(json_array_get(json_object_get(json_array_get(o, 0), "content"), 0), "text")),
            " \n ");
  json_decref(o);
  o = render_all(&sx, &r, "", ENGINE_FINISH_STOP, "completed");
  CHECK_EQ_INT(json_array_size(o), 1);
  CHECK_STR(item_field(o, 0, "type"), "message");
  json_decref(o);

  /* A call cut off by max_output_tokens under the grammar: a call with
   * the arguments it got, incomplete, as is the response. */
  o = render_all(&sx, &r, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Par",
                 ENGINE_FINISH_LENGTH, "incomplete");
  CHECK_EQ_INT(json_array_size(o), 1);
  CHECK_STR(item_field(o, 0, "type"), "function_call");
  CHECK_STR(item_field(o, 0, "status"), "incomplete");
  json_decref(o);
  oai_request_free(&r);
}

static bool has(resp_store *st, const char *id, const srv_caller *who) {
  char *json = NULL;
  int rc = resp_store_get(st, id, who, &json, NULL, NULL);
  free(json);
  return rc == 0;
}

int main(void) {
  char err[PW_ERRMAX];
  resp_store *st = NULL;
  uint8_t ka[32], kb[32];
  memset(ka, 0xAA, sizeof ka);
  memset(kb, 0xBB, sizeof kb);
  srv_caller a = {false, ka}, b = {false, kb}, anon = {true, NULL};

  CHECK(resp_store_create(0, 100, &st, err) == PW_EINVAL);
  CHECK(resp_store_create(3, 1 << 20, &st, err) == 0);

  /* Round trip, with the chain and the conversation. */
  CHECK(resp_store_add(st, "resp_1", "resp_1", &a, "{\"id\":\"resp_1\"}", "[{\"role\":\"user\",\"content\":\"hi\"}]") == 0);
  char *json = NULL, *msgs = NULL, chain[48] = "";
  CHECK(resp_store_get(st, "resp_1", &a, &json, &msgs, chain) == 0);
  CHECK_STR(json, "{\"id\":\"resp_1\"}");
  CHECK_STR(msgs, "[{\"role\":\"user\",\"content\":\"hi\"}]");
  CHECK_STR(chain, "resp_1");
  free(json);
  free(msgs);

  /* Tenancy: another key, or no key, finds nothing. */
  CHECK(resp_store_get(st, "resp_1", &b, &json, NULL, NULL) == PW_ENOTFOUND);
  CHECK(resp_store_get(st, "resp_1", &anon, &json, NULL, NULL) == PW_ENOTFOUND);
  CHECK(resp_store_add(st, "resp_x", "resp_x", &anon, "{}", "[]") == 0);
  CHECK(has(st, "resp_x", &anon));
  CHECK(!has(st, "resp_x", &a));
  CHECK(!has(st, "nope", &a));

  /* Entry bound (3): reading resp_1 leaves resp_x the least recently
   * used; resp_2 fills the store and resp_3 evicts resp_x. */
  CHECK(has(st, "resp_1", &a));
  CHECK(resp_store_add(st, "resp_2", "resp_1", &a, "{}", "[]") == 0);
  int n;
  size_t bytes;
  resp_store_usage(st, &n, &bytes);
  CHECK_EQ_INT(n, 3);
  CHECK(resp_store_add(st, "resp_3", "resp_1", &a, "{}", "[]") == 0);
  resp_store_usage(st, &n, &bytes);
  CHECK_EQ_INT(n, 3);
  CHECK(!has(st, "resp_x", &anon));
  CHECK(has(st, "resp_1", &a));
  CHECK(has(st, "resp_2", &a));
  CHECK(has(st, "resp_3", &a));
  resp_store_destroy(st);
  resp_store_destroy(NULL);

  /* Byte bound: entries of ~1 KiB in a store of 4 KiB keep the newest
   * few; one larger than the bound is not kept and evicts nothing. */
  CHECK(resp_store_create(1000, 4096, &st, err) == 0);
  char big[1025];
  memset(big, 'x', 1024);
  big[1024] = 0;
  for (int i = 0; i < 20; i++) {
    char id[32];
    snprintf(id, sizeof id, "resp_%d", i);
    CHECK(resp_store_add(st, id, id, &a, big, "[]") == 0);
    resp_store_usage(st, &n, &bytes);
    CHECK(bytes <= 4096);
  }
  CHECK(n >= 2 && n <= 4);
  CHECK(has(st, "resp_19", &a));
  CHECK(!has(st, "resp_0", &a));
  char *huge = malloc(8192);
  CHECK(huge != NULL);
  memset(huge, 'y', 8191);
  huge[8191] = 0;
  int before = n;
  CHECK(resp_store_add(st, "resp_huge", "resp_huge", &a, huge, "[]") == 0);
  free(huge);
  CHECK(!has(st, "resp_huge", &a));
  resp_store_usage(st, &n, &bytes);
  CHECK_EQ_INT(n, before);
  resp_store_destroy(st);
  check_render();
  TEST_DONE();
}
