/* api_anthropic.c - Anthropic's Messages API: POST /v1/messages (streamed
 * as Anthropic's server-sent events, or one message object) and POST
 * /v1/messages/count_tokens. The request becomes an oai_request that runs
 * through the one generation core (api.h); this file reads Anthropic's
 * fields and writes Anthropic's bodies and errors
 * ({"type":"error","error":{"type":...,"message":...}}).
 *
 * Honoured: model, messages (user/assistant turns whose content is a
 * string or blocks: text; tool_use in assistant turns; tool_result in user
 * turns), system (a string or text blocks), max_tokens (required),
 * stop_sequences, temperature, top_p, top_k, stream, metadata (accepted;
 * nothing in it changes the answer), cache_control on blocks and tools (a
 * hint; accepted), and the top-level cache_control (the same hint),
 * service_tier auto/standard_only, speed "standard", tools and
 * tool_choice.
 * Tool use goes the way of OpenAI's chat (oai.c, chatout.c,
 * chat/toolcall.h): custom tools {name, description, input_schema} become
 * OpenAI function tools, tool_choice auto/any/tool/none becomes
 * auto/required/named/none (disable_parallel_tool_use: one call), so the
 * template, the grammar and the parser are the ones OpenAI requests get.
 * An assistant turn's tool_use blocks are its tool_calls (arguments: the
 * input object, as templates take them); a user turn's tool_result blocks
 * are tool messages in order (is_error: the text reads "Error: ..."), then
 * its text blocks one user message. Each tool_use must be answered by a
 * tool_result in the next turn, as Anthropic requires. Answers: a text
 * block (when there is text), then one tool_use block per call, in the
 * order written; stop_reason "tool_use" when an answer holding a call
 * ended at a stop. Reasoning a template splits off (<think>, gpt-oss'
 * analysis) is dropped: thinking is not offered.
 * Refused with a 400 naming the field: server tools (a tool whose type is
 * not custom: web_search_*, bash_*, ...), tool fields that need them
 * (defer_loading, allowed_callers other than direct) or that no template
 * shows (input_examples), thinking, container, diagnostics, inference_geo,
 * output_config, speed "fast", blocks other than text / tool_use /
 * tool_result (image, document, thinking, server_tool_use, ...), and any
 * top-level field not listed in k_message_fields / k_count_fields ("x:
 * Extra inputs are not permitted", as Anthropic answers).
 * stop_reason is "stop_sequence" (with stop_sequence set) when one of the
 * stop sequences ended the text, "end_turn" at the model's end of turn,
 * "max_tokens" at the limit.
 * What it is not: a second tool-call implementation; the template's format,
 * the grammar and the parsing are shared with /v1/chat/completions. */
#include "server/api.h"
#include "server/chatout.h"

#include "base/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *err_type(int status) {
  switch (status) {
  case 400: return "invalid_request_error";
  case 401: return "authentication_error";
  case 403: return "permission_error";
  case 404: return "not_found_error";
  case 413: return "request_too_large";
  case 429: return "rate_limit_error";
  case 503: return "overloaded_error";
  case 408: return "timeout_error";
  default: return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

void anth_render_error(const oai_error *e, sbuf *out) {
  sbuf_printf(out, "{\"type\":\"error\",\"error\":{\"type\":\"%s\",\"message\":", err_type(e->status));
  sbuf_json_str(out, e->message, strlen(e->message));
  sbuf_puts(out, "}}");
}

static const char *const k_text_blocks[] = {"text", NULL};

/* The top-level members of a Messages request and of a count_tokens one:
 * every name parse_request, parse_turns and check_options read (honoured,
 * accepted as a hint, or refused by name). Anything else is refused as
 * Anthropic refuses it, naming the field. */
static const char *const k_message_fields[] = {
    "model", "max_tokens", "messages", "system", "stop_sequences", "temperature", "top_p", "top_k", "stream",
    "metadata", "service_tier", "thinking", "tools", "tool_choice", "cache_control", "container", "diagnostics",
    "inference_geo", "output_config", "speed", NULL};
static const char *const k_count_fields[] = {"model", "messages", "system", "thinking", "tools", "tool_choice",
                                             "cache_control", "output_config", "speed", NULL};

/* Present and asking for something: not null, {} or []. */
static bool nonempty(json_t *root, const char *key) {
  json_t *v = json_object_get(root, key);
  return v && !json_is_null(v) &&
         !((json_is_object(v) && !json_object_size(v)) || (json_is_array(v) && !json_array_size(v)));
}

static int check_known(json_t *root, const char *const *known, oai_error *e) {
  const char *key = oai_unknown_member(root, known);
  if (!key) return 0;
  oai_unknown_field(e, key);
  snprintf(e->message, sizeof e->message,
           "%.64s: Extra inputs are not permitted (this server refuses the fields it does not know rather than ignore "
           "them)",
           key);
  return PW_EINVAL;
}

/* Members both endpoints share beyond the turns: the top-level
 * cache_control (a hint, as on blocks: reuse here is automatic), speed
 * (one speed), and what this server does not do. */
static int check_options(json_t *root, oai_error *e) {
  json_t *cc = json_object_get(root, "cache_control");
  if (cc && !json_is_null(cc) && !json_is_object(cc))
    return oai_seterr(e, 400, "invalid_type", "cache_control", "cache_control: must be an object");
  const char *speed;
  if (api_str(root, "speed", "speed", &speed, e)) return PW_EINVAL;
  if (speed && strcmp(speed, "standard"))
    return oai_seterr(e, 400, "unsupported_speed", "speed", "speed: only 'standard' is supported by this server");
  static const char *const refused[] = {"container", "diagnostics", "inference_geo", "output_config", NULL};
  for (int i = 0; refused[i]; i++)
    if (nonempty(root, refused[i]))
      return oai_seterr(e, 400, "unsupported_field", refused[i], "%s: not supported by this server", refused[i]);
  return 0;
}

/* ---- tools ---------------------------------------------------------------- */

/* Anthropic's server tools (web_search_*, bash_*, text_editor_*,
 * code_execution_*, computer_*, memory_*, tool_search_*, ...) run on
 * Anthropic's side; here only custom tools exist, whose calls the client
 * runs. */
static bool custom_tool_type(json_t *type) {
  return !type || json_is_null(type) || (json_is_string(type) && !strcmp(json_string_value(type), "custom"));
}

static const char *const k_tool_fields[] = {"name",   "description", "input_schema",   "type",
                                            "strict", "cache_control", "eager_input_streaming",
                                            "allowed_callers", "defer_loading", "input_examples", NULL};

/* tools[i] checked and written in the OpenAI form the template path takes:
 * {"type":"function","function":{"name","description","parameters"}}. */
static int tool_to_oai(json_t *tool, size_t i, json_t *out_arr, oai_error *e) {
  char p[64];
  snprintf(p, sizeof p, "tools.%zu", i);
  if (!json_is_object(tool)) return oai_seterr(e, 400, "invalid_type", "tools", "%s: must be an object", p);
  json_t *type = json_object_get(tool, "type"), *name = json_object_get(tool, "name");
  if (!custom_tool_type(type))
    return oai_seterr(e, 400, "unsupported_tool_type", "tools",
                      "%s: '%.64s' tools (Anthropic's server tools) are not supported by this server; only custom "
                      "tools {name, description, input_schema}, whose calls the client runs",
                      p, json_is_string(type) ? json_string_value(type) : "?");
  const char *bad = oai_unknown_member(tool, k_tool_fields);
  if (bad) return oai_seterr(e, 400, "unknown_field", "tools", "%s.%.64s: Extra inputs are not permitted", p, bad);
  if (!json_is_string(name) || !oai_valid_tool_name(json_string_value(name), json_string_length(name)))
    return oai_seterr(e, 400, "invalid_value", "tools",
                      "%s.name: must be 1..%d characters of a-z, A-Z, 0-9, '_', '-' and '.'", p, TC_MAX_NAME);
  json_t *desc = json_object_get(tool, "description"), *schema = json_object_get(tool, "input_schema");
  if (desc && !json_is_null(desc) && !json_is_string(desc))
    return oai_seterr(e, 400, "invalid_type", "tools", "%s.description: must be a string", p);
  if (!schema || json_is_null(schema)) return oai_seterr(e, 400, "missing_field", "tools", "%s.input_schema: Field required", p);
  json_t *st = json_object_get(schema, "type");
  if (!json_is_object(schema) || !json_is_string(st) || strcmp(json_string_value(st), "object"))
    return oai_seterr(e, 400, "invalid_schema", "tools",
                      "%s.input_schema: must be a JSON Schema object with \"type\": \"object\"", p);
  static const char *const flags[] = {"strict", "eager_input_streaming", "defer_loading", NULL};
  for (int j = 0; flags[j]; j++) {
    json_t *f = json_object_get(tool, flags[j]);
    if (f && !json_is_null(f) && !json_is_boolean(f))
      return oai_seterr(e, 400, "invalid_type", "tools", "%s.%s: must be a boolean", p, flags[j]);
  }
  json_t *cc = json_object_get(tool, "cache_control");
  if (cc && !json_is_null(cc) && !json_is_object(cc))
    return oai_seterr(e, 400, "invalid_type", "tools", "%s.cache_control: must be an object", p);
  /* What needs Anthropic's tool search or code execution, or examples no
   * chat template has a place for, is refused rather than dropped. */
  if (json_is_true(json_object_get(tool, "defer_loading")))
    return oai_seterr(e, 400, "unsupported_field", "tools", "%s.defer_loading: needs tool search, which this server does not have", p);
  json_t *ac = json_object_get(tool, "allowed_callers");
  if (ac && !json_is_null(ac)) {
    size_t j;
    json_t *c;
    if (!json_is_array(ac)) return oai_seterr(e, 400, "invalid_type", "tools", "%s.allowed_callers: must be an array", p);
    json_array_foreach(ac, j, c) {
      if (!json_is_string(c) || strcmp(json_string_value(c), "direct"))
        return oai_seterr(e, 400, "unsupported_field", "tools",
                          "%s.allowed_callers: only 'direct' is supported by this server (there is no code execution)", p);
    }
  }
  json_t *ex = json_object_get(tool, "input_examples");
  if (ex && !json_is_null(ex) && !(json_is_array(ex) && !json_array_size(ex)))
    return oai_seterr(e, 400, "unsupported_field", "tools", "%s.input_examples: not supported by this server", p);
  if (oai_find_tool(out_arr, SIZE_MAX, json_string_value(name)))
    return oai_seterr(e, 400, "invalid_value", "tools", "%s.name: tool name '%s' is given twice", p,
                      json_string_value(name));
  json_t *fn = json_pack("{s:O,s:O}", "name", name, "parameters", schema);
  if (fn && json_is_string(desc)) json_object_set(fn, "description", desc);
  /* strict: the schema must hold where the grammar cannot enforce it
   * (else such keywords are left to the client, as for OpenAI's tools) */
  if (fn && json_is_true(json_object_get(tool, "strict"))) json_object_set(fn, "strict", json_true());
  json_t *one = fn ? json_pack("{s:s,s:o}", "type", "function", "function", fn) : NULL;
  if (!one || json_array_append_new(out_arr, one)) return oai_seterr(e, 500, "internal_error", NULL, "out of memory");
  return 0;
}

static const char *const k_choice_fields[] = {"type", "name", "disable_parallel_tool_use", NULL};

/* tools and tool_choice into r->tools (OpenAI form), r->tool_choice,
 * r->tool_name and r->parallel_tool_calls. What the template makes of them
 * (a tool-call format, the grammar) is oai_chat_prepare's, in srv_generate
 * as for OpenAI's chat. */
static int parse_tools(oai_request *r, oai_error *e) {
  json_t *root = r->root;
  r->tool_choice = OAI_TOOLS_AUTO;
  r->parallel_tool_calls = true;
  json_t *t = json_object_get(root, "tools");
  if (t && !json_is_null(t)) {
    if (!json_is_array(t)) return oai_seterr(e, 400, "invalid_type", "tools", "tools: must be an array");
    if (json_array_size(t) > TC_MAX_TOOLS)
      return oai_seterr(e, 400, "invalid_value", "tools", "tools: at most %d tools", TC_MAX_TOOLS);
    if (oai_convert_tools(t, tool_to_oai, &r->tools, e)) return PW_EINVAL;
  }
  json_t *tc = json_object_get(root, "tool_choice");
  if (!tc || json_is_null(tc)) return 0;
  json_t *type = json_is_object(tc) ? json_object_get(tc, "type") : NULL;
  if (!json_is_string(type))
    return oai_seterr(e, 400, "invalid_type", "tool_choice",
                      "tool_choice: must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}");
  const char *bad = oai_unknown_member(tc, k_choice_fields);
  if (bad) return oai_seterr(e, 400, "unknown_field", "tool_choice", "tool_choice.%.64s: Extra inputs are not permitted", bad);
  const char *ty = json_string_value(type);
  if (!strcmp(ty, "auto")) r->tool_choice = OAI_TOOLS_AUTO;
  else if (!strcmp(ty, "any")) r->tool_choice = OAI_TOOLS_REQUIRED;
  else if (!strcmp(ty, "tool")) r->tool_choice = OAI_TOOLS_NAMED;
  else if (!strcmp(ty, "none")) r->tool_choice = OAI_TOOLS_NONE;
  else
    return oai_seterr(e, 400, "invalid_value", "tool_choice",
                      "tool_choice.type: must be 'auto', 'any', 'tool' or 'none' (got '%.40s')", ty);
  bool one = false;
  if (api_bool(tc, "disable_parallel_tool_use", "tool_choice.disable_parallel_tool_use", &one, e)) return PW_EINVAL;
  r->parallel_tool_calls = !one;
  json_t *name = json_object_get(tc, "name");
  if (r->tool_choice == OAI_TOOLS_NAMED) {
    if (!json_is_string(name))
      return oai_seterr(e, 400, "missing_field", "tool_choice", "tool_choice.name: Field required (a string) for type 'tool'");
    r->tool_name = json_string_value(name);
    if (!oai_find_tool(r->tools, SIZE_MAX, r->tool_name))
      return oai_seterr(e, 400, "invalid_value", "tool_choice", "tool_choice.name: '%.64s' is not among the tools",
                        r->tool_name);
  } else if (name && !json_is_null(name)) {
    return oai_seterr(e, 400, "invalid_value", "tool_choice", "tool_choice.name: only for type 'tool'");
  }
  if (!r->tools && (r->tool_choice == OAI_TOOLS_REQUIRED || r->tool_choice == OAI_TOOLS_NAMED))
    return oai_seterr(e, 400, "invalid_value", "tool_choice", "tool_choice: type '%s' needs tools", ty);
  return 0;
}

/* ---- turns ---------------------------------------------------------------- */

/* The conversation's tool_use ids: every id given (unique in a request),
 * and those of the last assistant turn still waiting for their results. */
typedef struct turn_state {
  json_t *ids;     /* id -> name, all tool_use blocks so far */
  json_t *waiting; /* id -> name, the previous assistant turn's calls without a result yet */
  size_t waiting_at; /* the message that made them */
} turn_state;

static int oom(oai_error *e) { return oai_seterr(e, 500, "internal_error", NULL, "out of memory"); }

/* Appends a message object (taken) to r->messages. */
static int add_msg(oai_request *r, json_t *m, oai_error *e) {
  if (!m) return oom(e);
  if ((!r->messages && !(r->messages = json_array())) || json_array_append_new(r->messages, m)) return oom(e);
  return 0;
}

/* The head of a block of a turn's content (p names it), as both turns
 * read it: its type into *type, and a text block's text appended to text.
 * 0 or the 400. */
static int block_head(json_t *b, const char *p, const char **type, sbuf *text, oai_error *e) {
  json_t *t = json_is_object(b) ? json_object_get(b, "type") : NULL;
  *type = json_is_string(t) ? json_string_value(t) : NULL;
  if (!*type) return oai_seterr(e, 400, "invalid_type", "messages", "%s: must be an object with a string 'type'", p);
  if (strcmp(*type, "text")) return 0;
  json_t *tx = json_object_get(b, "text");
  if (!json_is_string(tx)) return oai_seterr(e, 400, "invalid_type", "messages", "%s.text: must be a string", p);
  sbuf_put(text, json_string_value(tx), json_string_length(tx));
  return 0;
}

/* An assistant turn of blocks: text blocks are its content (joined),
 * tool_use blocks its calls, as templates take them: {"id", "type":
 * "function", "function": {"name", "arguments": the input object}} (the
 * form oai.c gives the template for OpenAI's tool_calls, whose arguments
 * it parses into the object). */
static int assistant_blocks(oai_request *r, json_t *content, const char *param, turn_state *ts, oai_error *e) {
  sbuf text = {0};
  json_t *calls = json_array();
  if (!calls) return oom(e);
  size_t j;
  json_t *b;
  int rc = 0;
  json_array_foreach(content, j, b) {
    char p[112];
    snprintf(p, sizeof p, "%s.%zu", param, j);
    const char *ty;
    if ((rc = block_head(b, p, &ty, &text, e))) break;
    if (!strcmp(ty, "text")) continue;
    if (strcmp(ty, "tool_use")) {
      rc = oai_seterr(e, 400, "unsupported_content", "messages",
                      "%s: '%.40s' blocks are not supported by this server (assistant turns take text and tool_use)", p,
                      ty);
      break;
    }
    json_t *id = json_object_get(b, "id"), *name = json_object_get(b, "name"), *input = json_object_get(b, "input");
    if (!json_is_string(id) || !json_string_length(id) || json_string_length(id) > 256) {
      rc = oai_seterr(e, 400, "invalid_value", "messages", "%s.id: must be a string of 1..256 bytes", p);
      break;
    }
    if (!json_is_string(name) || !oai_valid_tool_name(json_string_value(name), json_string_length(name))) {
      rc = oai_seterr(e, 400, "invalid_value", "messages",
                      "%s.name: must be 1..%d characters of a-z, A-Z, 0-9, '_', '-' and '.'", p, TC_MAX_NAME);
      break;
    }
    if (!json_is_object(input)) {
      rc = oai_seterr(e, 400, "invalid_type", "messages", "%s.input: must be an object", p);
      break;
    }
    if (json_object_get(ts->ids, json_string_value(id))) {
      rc = oai_seterr(e, 400, "invalid_value", "messages", "%s.id: tool_use id '%.64s' is used twice", p,
                      json_string_value(id));
      break;
    }
    if (json_array_size(calls) >= TC_MAX_CALLS) {
      rc = oai_seterr(e, 400, "invalid_value", "messages", "%s: at most %d tool_use blocks in one turn", param, TC_MAX_CALLS);
      break;
    }
    json_t *call = json_pack("{s:O,s:s,s:{s:O,s:O}}", "id", id, "type", "function", "function", "name", name,
                             "arguments", input);
    if (!call || json_array_append_new(calls, call) || json_object_set(ts->ids, json_string_value(id), name) ||
        json_object_set(ts->waiting, json_string_value(id), name)) {
      rc = oom(e);
      break;
    }
  }
  json_t *m = NULL;
  if (!rc && text.oom) rc = oom(e);
  if (!rc) {
    m = json_pack("{s:s,s:o}", "role", "assistant", "content", json_stringn_nocheck(text.data ? text.data : "", text.len));
    if (m && json_array_size(calls)) json_object_set(m, "tool_calls", calls);
    rc = add_msg(r, m, e);
  }
  sbuf_free(&text);
  json_decref(calls);
  return rc;
}

/* A user turn of blocks: each tool_result becomes a tool message (in
 * order), then the text blocks after them one user message. */
static int user_blocks(oai_request *r, json_t *content, const char *param, turn_state *ts, oai_error *e) {
  sbuf text = {0};
  bool any_text = false, any_result = false;
  size_t j;
  json_t *b;
  int rc = 0;
  json_array_foreach(content, j, b) {
    char p[112];
    snprintf(p, sizeof p, "%s.%zu", param, j);
    const char *ty;
    if ((rc = block_head(b, p, &ty, &text, e))) break;
    if (!strcmp(ty, "text")) {
      any_text = true;
      continue;
    }
    if (strcmp(ty, "tool_result")) {
      rc = oai_seterr(e, 400, "unsupported_content", "messages",
                      "%s: '%.40s' blocks are not supported by this server (user turns take text and tool_result; "
                      "images and documents are not supported)",
                      p, ty);
      break;
    }
    /* As Anthropic requires: results first, then any text. */
    if (any_text) {
      rc = oai_seterr(e, 400, "invalid_value", "messages",
                      "%s: tool_result blocks must come before any text in a user turn", p);
      break;
    }
    json_t *id = json_object_get(b, "tool_use_id");
    if (!json_is_string(id)) {
      rc = oai_seterr(e, 400, "invalid_type", "messages", "%s.tool_use_id: Field required (a string)", p);
      break;
    }
    const char *ids = json_string_value(id);
    json_t *name = json_object_get(ts->waiting, ids);
    if (!name) {
      if (json_object_get(ts->ids, ids))
        rc = oai_seterr(e, 400, "invalid_value", "messages",
                        "%s.tool_use_id: '%.64s' has a tool_result already, or is not a tool_use of the previous "
                        "assistant turn",
                        p, ids);
      else if (!json_object_size(ts->waiting) && !any_result)
        rc = oai_seterr(e, 400, "invalid_value", "messages",
                        "%s: a tool_result block must follow an assistant turn with tool_use blocks", p);
      else
        rc = oai_seterr(e, 400, "invalid_value", "messages",
                        "%s.tool_use_id: unknown tool_use id '%.64s' (not a tool_use of the previous assistant turn)",
                        p, ids);
      break;
    }
    json_t *err = json_object_get(b, "is_error");
    if (err && !json_is_null(err) && !json_is_boolean(err)) {
      rc = oai_seterr(e, 400, "invalid_type", "messages", "%s.is_error: must be a boolean", p);
      break;
    }
    char cp[128];
    snprintf(cp, sizeof cp, "%s.content", p);
    json_t *c = json_object_get(b, "content"), *ct = NULL;
    if (c && !json_is_null(c) && api_content_text(c, cp, k_text_blocks, &ct, e)) {
      rc = PW_EINVAL;
      break;
    }
    /* Chat templates have no place for is_error: the model reads it in the
     * result's text, "Error: " before it. */
    sbuf rt = {0};
    if (json_is_true(err)) sbuf_puts(&rt, ct && json_string_length(ct) ? "Error: " : "Error");
    if (ct) sbuf_put(&rt, json_string_value(ct), json_string_length(ct));
    json_decref(ct);
    ct = rt.oom ? NULL : json_stringn_nocheck(rt.data ? rt.data : "", rt.len);
    sbuf_free(&rt);
    json_t *m = ct ? json_pack("{s:s,s:O,s:O,s:o}", "role", "tool", "tool_call_id", id, "name", name, "content", ct) : NULL;
    if ((rc = add_msg(r, m, e))) break;
    json_object_del(ts->waiting, ids);
    any_result = true;
  }
  if (!rc && text.oom) rc = oom(e);
  /* Without results the turn is one user message, even empty (as before). */
  if (!rc && (any_text || !any_result))
    rc = add_msg(r, json_pack("{s:s,s:o}", "role", "user", "content", json_stringn_nocheck(text.data ? text.data : "", text.len)), e);
  sbuf_free(&text);
  return rc;
}

/* 400 when the previous assistant turn's calls are not all answered. */
static int check_answered(turn_state *ts, oai_error *e) {
  if (!json_object_size(ts->waiting)) return 0;
  const char *id = json_object_iter_key(json_object_iter(ts->waiting));
  return oai_seterr(e, 400, "invalid_value", "messages",
                    "messages.%zu: tool_use ids were found without tool_result blocks immediately after: %.64s (each "
                    "tool_use needs a tool_result in the next user turn)",
                    ts->waiting_at, id);
}

/* system + messages into r->messages. */
static int parse_turns(oai_request *r, oai_error *e) {
  json_t *root = r->root;
  json_t *sys = json_object_get(root, "system");
  if (sys && !json_is_null(sys)) {
    json_t *text;
    if (api_content_text(sys, "system", k_text_blocks, &text, e)) return PW_EINVAL;
    if (json_string_length(text) && api_add_message(r, "system", text, e)) return PW_EINVAL;
    if (!json_string_length(text)) json_decref(text);
  }
  json_t *msgs = json_object_get(root, "messages");
  if (!msgs) return oai_seterr(e, 400, "missing_field", "messages", "messages: Field required");
  if (!json_is_array(msgs)) return oai_seterr(e, 400, "invalid_type", "messages", "messages: must be an array");
  if (!json_array_size(msgs)) return oai_seterr(e, 400, "invalid_value", "messages", "messages: at least one message is required");
  turn_state ts = {json_object(), json_object(), 0};
  int rc = ts.ids && ts.waiting ? 0 : oom(e);
  size_t i;
  json_t *m;
  json_array_foreach(msgs, i, m) {
    if (rc) break;
    char param[64];
    snprintf(param, sizeof param, "messages.%zu", i);
    if (!json_is_object(m)) {
      rc = oai_seterr(e, 400, "invalid_type", param, "%s: must be an object", param);
      break;
    }
    const char *role;
    char p2[80];
    snprintf(p2, sizeof p2, "%s.role", param);
    if ((rc = api_str(m, "role", p2, &role, e))) break;
    if (!role || (strcmp(role, "user") && strcmp(role, "assistant"))) {
      rc = oai_seterr(e, 400, "invalid_value", p2, "%s: must be 'user' or 'assistant'", p2);
      break;
    }
    bool user = !strcmp(role, "user");
    snprintf(p2, sizeof p2, "%s.content", param);
    json_t *content = json_object_get(m, "content");
    if (!content) {
      rc = oai_seterr(e, 400, "missing_field", p2, "%s: Field required", p2);
      break;
    }
    /* An assistant turn's calls are answered by the next turn: not by
     * another assistant turn, nor by nothing (the end). */
    if (!user && (rc = check_answered(&ts, e))) break;
    if (json_is_array(content)) {
      rc = user ? user_blocks(r, content, p2, &ts, e) : assistant_blocks(r, content, p2, &ts, e);
    } else {
      json_t *text;
      if (!(rc = api_content_text(content, p2, k_text_blocks, &text, e))) rc = api_add_message(r, role, text, e);
    }
    if (rc) break;
    if (user) rc = check_answered(&ts, e);
    else ts.waiting_at = i;
  }
  if (!rc) rc = check_answered(&ts, e);
  json_decref(ts.ids);
  json_decref(ts.waiting);
  if (rc) return PW_EINVAL;
  if (parse_tools(r, e)) return PW_EINVAL;
  json_t *th = json_object_get(root, "thinking");
  if (th && !json_is_null(th)) {
    json_t *t = json_is_object(th) ? json_object_get(th, "type") : NULL;
    if (!json_is_string(t) || strcmp(json_string_value(t), "disabled"))
      return oai_seterr(e, 400, "unsupported_thinking", "thinking", "thinking: extended thinking is not supported by this server");
  }
  return 0;
}

static int parse_request(conn *k, struct MHD_Connection *c, oai_request *r, char *model, size_t model_cap,
                         oai_error *e) {
  json_t *root = r->root;
  const char *m;
  if (check_known(root, k_message_fields, e) || check_options(root, e)) return PW_EINVAL;
  if (api_str(root, "model", "model", &m, e) || srv_use_model(k, c, m, false, e)) return PW_EINVAL;
  snprintf(model, model_cap, "%s", m);
  long long mt;
  bool given;
  if (api_int(root, "max_tokens", "max_tokens", 1, 1 << 30, &mt, &given, e)) return PW_EINVAL;
  if (!given) return oai_seterr(e, 400, "missing_field", "max_tokens", "max_tokens: Field required");
  r->max_tokens = (int)mt;
  if (parse_turns(r, e)) return PW_EINVAL;
  pw_sampler_params *sp = &r->sampling;
  sp->repeat_penalty = 1.0f;
  double d;
  long long x;
  if (api_num(root, "temperature", "temperature", 0, 1, &d, &given, e)) return PW_EINVAL;
  if (given) sp->temperature = (float)d;
  if (api_num(root, "top_p", "top_p", 0, 1, &d, &given, e)) return PW_EINVAL;
  if (given) sp->top_p = d > 0 ? (float)d : 1e-9f;
  if (api_int(root, "top_k", "top_k", 0, 1 << 30, &x, &given, e)) return PW_EINVAL;
  if (given) sp->top_k = (int32_t)x;
  sp->seed = api_random_seed();
  if (api_bool(root, "stream", "stream", &r->stream, e)) return PW_EINVAL;
  json_t *ss = json_object_get(root, "stop_sequences");
  if (ss && !json_is_null(ss) && !json_is_array(ss))
    return oai_seterr(e, 400, "invalid_type", "stop_sequences", "stop_sequences: must be an array of strings");
  if (api_stops(ss, "stop_sequences", r, e)) return PW_EINVAL;
  json_t *md = json_object_get(root, "metadata");
  if (md && !json_is_null(md) && !json_is_object(md))
    return oai_seterr(e, 400, "invalid_type", "metadata", "metadata: must be an object");
  const char *tier;
  if (api_str(root, "service_tier", "service_tier", &tier, e)) return PW_EINVAL;
  if (tier && strcmp(tier, "auto") && strcmp(tier, "standard_only"))
    return oai_seterr(e, 400, "invalid_value", "service_tier", "service_tier: must be 'auto' or 'standard_only'");
  return 0;
}

/* ---- rendering ---------------------------------------------------------- */

/* The answer as content blocks, streamed and whole alike: the model's text
 * goes through the template's tool-call parser (chatout's, chat/toolcall.h)
 * and each event opens, fills or closes a block. Reasoning is dropped
 * (thinking is not offered). White space outside a block is held until
 * text follows: dropped before a call and after one, kept in an answer
 * without calls. */
enum { BLK_NONE, BLK_TEXT, BLK_TOOL };

typedef struct an_ctx {
  char model[256];  /* echoed as asked */
  tc_syntax sx;     /* the model's tool-call syntax (read when the request was) */
  chatout co;       /* co.p: the parser; NULL = plain text */
  bool co_ready;
  bool stream;
  sbuf *out;        /* during a feed */
  int n_blocks;     /* blocks opened */
  int open;         /* BLK_* */
  int n_calls;
  bool pinged;
  sbuf ws;          /* white space held before a block */
  sbuf text;        /* whole answers: the open text block's text */
  sbuf args;        /* whole answers: the open call's input */
} an_ctx;

static void an_ctx_free(void *p) {
  an_ctx *x = p;
  if (!x) return;
  chatout_free(&x->co);
  sbuf_free(&x->ws);
  sbuf_free(&x->text);
  sbuf_free(&x->args);
  free(x);
}

static void event(const char *name, sbuf *out) { sbuf_printf(out, "event: %s\ndata: ", name); }

static void close_block(an_ctx *x) {
  if (x->open == BLK_NONE) return;
  if (x->stream) {
    event("content_block_stop", x->out);
    sbuf_printf(x->out, "{\"type\":\"content_block_stop\",\"index\":%d}\n\n", x->n_blocks - 1);
  } else if (x->open == BLK_TEXT) {
    sbuf_puts(x->out, "{\"type\":\"text\",\"text\":");
    sbuf_json_str(x->out, x->text.data ? x->text.data : "", x->text.len);
    sbuf_puts(x->out, "}");
    sbuf_clear(&x->text);
  } else {
    /* The arguments as the model wrote them when they are a JSON object;
     * a call cut off by max_tokens has {} (its stream sent what it got). */
    json_t *in = json_loadb(x->args.data ? x->args.data : "", x->args.len, JSON_DECODE_INT_AS_REAL, NULL);
    sbuf_puts(x->out, ",\"input\":");
    if (json_is_object(in)) sbuf_put(x->out, x->args.data, x->args.len);
    else sbuf_puts(x->out, "{}");
    sbuf_puts(x->out, "}");
    json_decref(in);
    sbuf_clear(&x->args);
  }
  x->open = BLK_NONE;
}

/* A new block: its start event (streamed) or its opening (whole). */
static void start_block(an_ctx *x, int kind) {
  close_block(x);
  if (x->stream) {
    event("content_block_start", x->out);
    sbuf_printf(x->out, "{\"type\":\"content_block_start\",\"index\":%d,\"content_block\":", x->n_blocks);
  } else if (x->n_blocks) {
    sbuf_puts(x->out, ",");
  }
  x->n_blocks++;
  x->open = kind;
}

static void put_text(an_ctx *x, const char *s, size_t n) {
  if (!n) return;
  if (!x->stream) {
    sbuf_put(&x->text, s, n);
    return;
  }
  event("content_block_delta", x->out);
  sbuf_printf(x->out, "{\"type\":\"content_block_delta\",\"index\":%d,\"delta\":{\"type\":\"text_delta\",\"text\":",
              x->n_blocks - 1);
  sbuf_json_str(x->out, s, n);
  sbuf_puts(x->out, "}}\n\n");
}

static void open_text(an_ctx *x) {
  if (x->open == BLK_TEXT) return;
  start_block(x, BLK_TEXT);
  if (!x->stream) return;
  sbuf_puts(x->out, "{\"type\":\"text\",\"text\":\"\"}}\n\n");
  if (!x->pinged) { /* Anthropic's order: the first block, then a ping */
    event("ping", x->out);
    sbuf_puts(x->out, "{\"type\":\"ping\"}\n\n");
    x->pinged = true;
  }
}

static void put_content(an_ctx *x, const char *s, size_t n) {
  if (x->open != BLK_TEXT && api_all_ws(s, n)) {
    sbuf_put(&x->ws, s, n);
    return;
  }
  open_text(x);
  put_text(x, x->ws.data, x->ws.len);
  sbuf_clear(&x->ws);
  put_text(x, s, n);
}

static void start_call(an_ctx *x, const char *name) {
  sbuf_clear(&x->ws);
  start_block(x, BLK_TOOL);
  char id[40];
  if (x->co.short_ids) oai_new_id("", id, 10); /* Mistral's templates take 9 characters */
  else oai_new_id("toolu_", id, sizeof id);
  sbuf_puts(x->out, "{\"type\":\"tool_use\",\"id\":");
  sbuf_json_str(x->out, id, strlen(id));
  sbuf_puts(x->out, ",\"name\":");
  sbuf_json_str(x->out, name, strlen(name));
  if (x->stream) sbuf_puts(x->out, ",\"input\":{}}}\n\n");
  x->n_calls++;
}

static void call_args(an_ctx *x, const char *s, size_t n) {
  if (x->open != BLK_TOOL || !n) return;
  if (!x->stream) {
    sbuf_put(&x->args, s, n);
    return;
  }
  event("content_block_delta", x->out);
  sbuf_printf(x->out,
              "{\"type\":\"content_block_delta\",\"index\":%d,\"delta\":{\"type\":\"input_json_delta\","
              "\"partial_json\":",
              x->n_blocks - 1);
  sbuf_json_str(x->out, s, n);
  sbuf_puts(x->out, "}}\n\n");
}

static void on_event(void *ctx, const tc_event *ev) {
  an_ctx *x = ctx;
  switch (ev->type) {
  case TC_EV_CONTENT: put_content(x, ev->text, ev->len); break;
  case TC_EV_REASONING: break;
  case TC_EV_CALL_START: start_call(x, ev->name); break;
  case TC_EV_CALL_ARGS: call_args(x, ev->text, ev->len); break;
  }
}

/* More of the answer (final: all of it) into x->out. */
static void feed(an_ctx *x, const gen_view *v, const char *text, size_t n, bool final, sbuf *out) {
  x->out = out;
  if (!x->co_ready) {
    x->co_ready = true;
    if (chatout_init(&x->co, &x->sx, v->r)) out->oom = true;
  }
  if (x->co.p) {
    if (tc_parser_feed(x->co.p, text, n, final, on_event, x) < 0) out->oom = true;
  } else {
    put_content(x, text, n);
  }
  if (!final) return;
  if (x->ws.len && !x->n_calls) { /* an answer of white space only */
    open_text(x);
    put_text(x, x->ws.data, x->ws.len);
  }
  sbuf_clear(&x->ws);
  if (!x->n_blocks) open_text(x); /* an empty answer is one empty text block */
  close_block(x);
}

/* "stop_reason":...,"stop_sequence":... ; a call that ended at a stop
 * makes "tool_use" (as chatout_finish's "tool_calls"). */
static void put_stop(const gen_view *v, const an_ctx *x, sbuf *out) {
  bool tool = x->n_calls > 0 && v->finish != ENGINE_FINISH_LENGTH;
  bool seq = !tool && v->finish == ENGINE_FINISH_STOP && v->stop_index >= 0 && v->stop_index < v->r->n_stop;
  const char *reason = "end_turn";
  if (tool) reason = "tool_use";
  else if (v->finish == ENGINE_FINISH_LENGTH) reason = "max_tokens";
  else if (seq) reason = "stop_sequence";
  sbuf_printf(out, "\"stop_reason\":\"%s\",\"stop_sequence\":", reason);
  if (seq) sbuf_json_str(out, v->r->stop[v->stop_index], strlen(v->r->stop[v->stop_index]));
  else sbuf_puts(out, "null");
}

static void put_message_head(const gen_view *v, sbuf *out) {
  const an_ctx *x = v->ctx;
  sbuf_puts(out, "{\"id\":");
  sbuf_json_str(out, v->o->id, strlen(v->o->id));
  sbuf_puts(out, ",\"type\":\"message\",\"role\":\"assistant\",\"model\":");
  sbuf_json_str(out, x->model, strlen(x->model));
}

static void put_usage(const gen_view *v, int input, int output, sbuf *out) {
  sbuf_printf(out,
              "{\"input_tokens\":%d,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":%d,"
              "\"output_tokens\":%d}",
              input, v->usage.cached_tokens, output);
}

static void an_begin(const gen_view *v, sbuf *out) {
  an_ctx *x = v->ctx;
  x->stream = true;
  event("message_start", out);
  sbuf_puts(out, "{\"type\":\"message_start\",\"message\":");
  put_message_head(v, out);
  sbuf_puts(out, ",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,\"usage\":");
  sbuf_printf(out, "{\"input_tokens\":%d,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":0,\"output_tokens\":0}",
              v->n_prompt);
  sbuf_puts(out, "}}\n\n");
}

static void an_delta(const gen_view *v, const char *text, size_t n, const oai_logprobs *lp, sbuf *out) {
  (void)lp;
  if (n) feed(v->ctx, v, text, n, false, out);
}

static void an_end(const gen_view *v, sbuf *out) {
  an_ctx *x = v->ctx;
  feed(x, v, "", 0, true, out);
  event("message_delta", out);
  sbuf_puts(out, "{\"type\":\"message_delta\",\"delta\":{");
  put_stop(v, x, out);
  sbuf_puts(out, "},\"usage\":");
  put_usage(v, v->usage.prompt_tokens, v->usage.completion_tokens, out);
  oai_put_receipt(v->o, out);
  sbuf_puts(out, "}\n\n");
  event("message_stop", out);
  sbuf_puts(out, "{\"type\":\"message_stop\"}\n\n");
}

static void an_error(const gen_view *v, const oai_error *e, sbuf *out) {
  (void)v;
  event("error", out);
  anth_render_error(e, out);
  sbuf_puts(out, "\n\n");
}

static void an_keepalive(const gen_view *v, sbuf *out) {
  (void)v;
  event("ping", out);
  sbuf_puts(out, "{\"type\":\"ping\"}\n\n");
}

static void an_complete(const gen_view *v, sbuf *out) {
  an_ctx *x = v->ctx;
  sbuf blocks = {0};
  x->stream = false;
  feed(x, v, v->text ? v->text : "", v->text_len, true, &blocks);
  put_message_head(v, out);
  sbuf_puts(out, ",\"content\":[");
  sbuf_put(out, blocks.data ? blocks.data : "", blocks.len);
  if (blocks.oom) out->oom = true;
  sbuf_free(&blocks);
  sbuf_puts(out, "],");
  put_stop(v, x, out);
  sbuf_puts(out, ",\"usage\":");
  put_usage(v, v->usage.prompt_tokens, v->usage.completion_tokens, out);
  oai_put_receipt(v->o, out);
  sbuf_puts(out, "}");
}

static const gen_api an_api = {
    .stream_ctype = "text/event-stream",
    .begin = an_begin,
    .delta = an_delta,
    .end = an_end,
    .error = an_error,
    .keepalive = an_keepalive,
    .complete = an_complete,
    .ctx_free = an_ctx_free,
    .receipt_endpoint = "messages",
};

enum MHD_Result anth_messages(conn *k, struct MHD_Connection *c) {
  oai_request r;
  oai_error e;
  size_t len;
  const char *body = srv_body(k, &len);
  an_ctx *x = calloc(1, sizeof *x);
  if (!x) {
    oai_seterr(&e, 500, "internal_error", NULL, "out of memory");
    return srv_reply_error(k, c, &e);
  }
  oai_resp o;
  oai_resp_init(&o, OAI_CHAT, NULL, NULL); /* the model's identity: srv_generate, once bound */
  oai_new_id("msg_", o.id, sizeof o.id);
  srv_set_id(k, o.id);
  if (api_parse_body(body, len, OAI_CHAT, &r, &e) || parse_request(k, c, &r, x->model, sizeof x->model, &e)) {
    an_ctx_free(x);
    oai_request_free(&r);
    return srv_reply_error(k, c, &e);
  }
  x->sx = *srv_tool_syntax(k); /* the request is bound to its model now */
  return srv_generate(k, c, &r, &o, &an_api, x);
}

enum MHD_Result anth_count_tokens(conn *k, struct MHD_Connection *c) {
  oai_request r;
  oai_error e;
  size_t len;
  const char *body = srv_body(k, &len);
  const char *m;
  int n = 0;
  /* The prompt as srv_generate renders it: with the tools when the
   * template writes them (an error where a Messages request has one). */
  if (api_parse_body(body, len, OAI_CHAT, &r, &e) || check_known(r.root, k_count_fields, &e) ||
      check_options(r.root, &e) || api_str(r.root, "model", "model", &m, &e) || srv_use_model(k, c, m, false, &e) ||
      parse_turns(&r, &e) || srv_count_chat_request(k, &r, &n, &e)) {
    oai_request_free(&r);
    return srv_reply_error(k, c, &e);
  }
  oai_request_free(&r);
  sbuf out = {0};
  sbuf_printf(&out, "{\"input_tokens\":%d}", n);
  return srv_reply_json(k, c, 200, &out);
}
