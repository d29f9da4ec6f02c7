/* chatout.c - chat answers with reasoning and tool calls. See chatout.h. */
#include "server/chatout.h"

#include <string.h>

int chatout_init(chatout *c, const tc_syntax *sx, const oai_request *r) {
  memset(c, 0, sizeof *c);
  c->short_ids = sx->format == TC_MISTRAL;
  if (!r->tools_active && !sx->think && sx->format != TC_HARMONY) return 0;
  char err[PW_ERRMAX];
  return tc_parser_create(sx, r->tools_active ? r->tools : NULL, r->in_reasoning, r->bare_call,
                          r->tools_active && r->grammar, &c->p, err);
}

void chatout_free(chatout *c) {
  if (!c) return;
  tc_parser_destroy(c->p);
  sbuf_free(&c->content);
  sbuf_free(&c->reasoning);
  sbuf_free(&c->calls);
  sbuf_free(&c->args);
  memset(c, 0, sizeof *c);
}

static void put_lp(chatout *c) {
  sbuf_puts(c->out, "},\"logprobs\":");
  if (c->lp) oai_logprobs_render(c->lp, c->out);
  else sbuf_puts(c->out, "null");
  c->lp = NULL;
  sbuf_puts(c->out, ",\"finish_reason\":null}]}\n\n");
}

static void delta_open(chatout *c) {
  sbuf_puts(c->out, "data: ");
  oai_put_head(c->o, true, c->out);
  sbuf_printf(c->out, ",\"choices\":[{\"index\":%d,\"delta\":{", c->o->index);
}

static void put_call_id(const chatout *c, sbuf *out) {
  char id[40];
  if (c->short_ids) oai_new_id("", id, 10);
  else oai_new_id("call_", id, sizeof id);
  sbuf_json_str(out, id, strlen(id));
}

/* Whole answers: closes the open call's object. */
static void close_call(chatout *c) {
  if (!c->n_calls) return;
  sbuf_json_str(&c->calls, c->args.data ? c->args.data : "", c->args.len);
  sbuf_puts(&c->calls, "}}");
  sbuf_clear(&c->args);
}

static void on_event(void *ctx, const tc_event *ev) {
  chatout *c = ctx;
  if (!c->stream) {
    if (ev->type == TC_EV_CONTENT) sbuf_put(&c->content, ev->text, ev->len);
    else if (ev->type == TC_EV_REASONING) sbuf_put(&c->reasoning, ev->text, ev->len);
    else if (ev->type == TC_EV_CALL_ARGS) sbuf_put(&c->args, ev->text, ev->len);
    else {
      close_call(c);
      if (c->n_calls++) sbuf_puts(&c->calls, ",");
      sbuf_puts(&c->calls, "{\"id\":");
      put_call_id(c, &c->calls);
      sbuf_puts(&c->calls, ",\"type\":\"function\",\"function\":{\"name\":");
      sbuf_json_str(&c->calls, ev->name, strlen(ev->name));
      sbuf_puts(&c->calls, ",\"arguments\":");
    }
    return;
  }
  if (ev->type == TC_EV_CONTENT || ev->type == TC_EV_REASONING) {
    delta_open(c);
    sbuf_puts(c->out, ev->type == TC_EV_CONTENT ? "\"content\":" : "\"reasoning_content\":");
    sbuf_json_str(c->out, ev->text, ev->len);
    put_lp(c);
    return;
  }
  delta_open(c);
  if (ev->type == TC_EV_CALL_START) {
    c->n_calls++;
    sbuf_printf(c->out, "\"tool_calls\":[{\"index\":%d,\"id\":", ev->index);
    put_call_id(c, c->out);
    sbuf_puts(c->out, ",\"type\":\"function\",\"function\":{\"name\":");
    sbuf_json_str(c->out, ev->name, strlen(ev->name));
    sbuf_puts(c->out, ",\"arguments\":\"\"}}]");
  } else {
    sbuf_printf(c->out, "\"tool_calls\":[{\"index\":%d,\"function\":{\"arguments\":", ev->index);
    sbuf_json_str(c->out, ev->text, ev->len);
    sbuf_puts(c->out, "}}]");
  }
  put_lp(c);
}

void chatout_stream(chatout *c, const oai_resp *o, const char *text, size_t n, bool final, const oai_logprobs *lp,
                    sbuf *out) {
  if (!c->p) {
    if (n > 0 || lp) oai_sse_delta(o, text, n, lp, out);
    return;
  }
  c->o = o;
  c->out = out;
  c->stream = true;
  c->lp = lp;
  if (tc_parser_feed(c->p, text, n, final, on_event, c) < 0) out->oom = true;
  if (c->lp) oai_sse_delta(o, "", 0, c->lp, out); /* logprobs of held-back text */
  c->lp = NULL;
}

const char *chatout_finish(const chatout *c, engine_finish f) {
  if (c->n_calls > 0 && f != ENGINE_FINISH_LENGTH) return "tool_calls";
  return oai_finish_str(f);
}

/* One choice object of a whole answer: {"index":i,"message":{...},...}. */
static void put_choice(chatout *c, int index, const char *text, size_t n, const oai_logprobs *lp, engine_finish f,
                      sbuf *out) {
  c->stream = false;
  if (c->p && tc_parser_feed(c->p, text, n, true, on_event, c) < 0) out->oom = true;
  if (!c->p) sbuf_put(&c->content, text, n);
  close_call(c);
  sbuf_printf(out, "{\"index\":%d,\"message\":{\"role\":\"assistant\",\"content\":", index);
  if (c->n_calls && c->content.len == 0) sbuf_puts(out, "null");
  else sbuf_json_str(out, c->content.data ? c->content.data : "", c->content.len);
  if (c->reasoning.len) {
    sbuf_puts(out, ",\"reasoning_content\":");
    sbuf_json_str(out, c->reasoning.data, c->reasoning.len);
  }
  if (c->n_calls) {
    sbuf_puts(out, ",\"tool_calls\":[");
    sbuf_put(out, c->calls.data, c->calls.len);
    sbuf_puts(out, "]");
  }
  sbuf_puts(out, "},\"logprobs\":");
  if (lp) oai_logprobs_render(lp, out);
  else sbuf_puts(out, "null");
  sbuf_printf(out, ",\"finish_reason\":\"%s\"}", chatout_finish(c, f));
}

static void put_tail(const oai_resp *o, const engine_usage *u, sbuf *out) {
  sbuf_puts(out, "],\"usage\":");
  oai_render_usage(u, out);
  if (o->spec_mode) {
    sbuf_puts(out, ",\"speculation\":");
    oai_render_speculation(o->spec_mode, u, out);
  }
  oai_put_receipt(o, out);
  sbuf_puts(out, "}");
}

void chatout_render(chatout *c, const oai_resp *o, const char *text, size_t n, const oai_logprobs *lp, engine_finish f,
                    const engine_usage *u, sbuf *out) {
  if (!c->p) {
    oai_render_completion(o, text, n, lp, f, u, out);
    return;
  }
  oai_put_head(o, false, out);
  sbuf_puts(out, ",\"choices\":[");
  put_choice(c, o->index, text, n, lp, f, out);
  put_tail(o, u, out);
}

int chatout_render_choices(const tc_syntax *sx, const oai_request *r, const oai_resp *o, const oai_choice *cs, int n,
                           const engine_usage *u, sbuf *out) {
  oai_put_head(o, false, out);
  sbuf_puts(out, ",\"choices\":[");
  for (int i = 0; i < n; i++) {
    chatout c;
    if (chatout_init(&c, sx, r)) return PW_ENOMEM;
    if (i) sbuf_puts(out, ",");
    put_choice(&c, i, cs[i].text ? cs[i].text : "", cs[i].len, cs[i].lp, cs[i].finish, out);
    chatout_free(&c);
  }
  put_tail(o, u, out);
  return 0;
}
