/* api_tools.c - answer-side helpers the API adapters share (api_ollama.c,
 * api_anthropic.c, api_responses.c) around their tool-call rendering.
 * See api.h.
 *
 * What it is not: a renderer of any API's shapes (each adapter keeps its
 * own), or the parser that splits an answer (chat/toolcall.c, through
 * chatout.h). */
#include "server/api.h"

#include <string.h>

bool api_all_ws(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] != ' ' && s[i] != '\n' && s[i] != '\r' && s[i] != '\t') return false;
  return true;
}

void api_render_text(const gen_api *api, void *ctx, const oai_request *r, const oai_resp *o, const char *text,
                     size_t n, size_t piece, engine_finish finish, sbuf *out) {
  gen_view v;
  memset(&v, 0, sizeof v);
  v.r = r;
  v.o = o;
  v.finish = finish;
  v.stop_index = -1;
  v.ctx = ctx;
  if (!piece) {
    v.text = text;
    v.text_len = n;
    api->complete(&v, out);
  } else {
    api->begin(&v, out);
    for (size_t off = 0; off < n; off += piece) api->delta(&v, text + off, n - off < piece ? n - off : piece, NULL, out);
    api->end(&v, out);
  }
}
