/* ui.c - serves the chat page: GET / is index.html, GET /ui/<name> the
 * page's other files, all built into the binary (ui.h). The page talks to
 * the server's own OpenAI endpoints with the visitor's API key, so it is
 * public itself; a Content-Security-Policy keeps it to this origin (no
 * CDN, no inline script). See api.h. */
#include "server/api.h"
#include "server/ui.h"

#include <string.h>

static const ui_file *find(const char *name) {
  for (int i = 0; i < ui_n_files; i++)
    if (!strcmp(ui_files[i].name, name)) return &ui_files[i];
  return NULL;
}

static enum MHD_Result serve(conn *k, struct MHD_Connection *c, const char *name) {
  const ui_file *f = find(name);
  oai_error e;
  if (!f) {
    oai_seterr(&e, 404, "unknown_url", NULL, "Unknown request URL: GET /ui/%.200s", name);
    return srv_reply_error(k, c, &e);
  }
  struct MHD_Response *r =
      MHD_create_response_from_buffer(f->size, (void *)f->data, MHD_RESPMEM_PERSISTENT);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, f->ctype);
  MHD_add_response_header(r, "Content-Security-Policy",
                          "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
                          "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'");
  MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
  MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
  MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
  return srv_reply_raw(k, c, 200, r);
}

enum MHD_Result ui_page(conn *k, struct MHD_Connection *c) { return serve(k, c, "index.html"); }
enum MHD_Result ui_asset(conn *k, struct MHD_Connection *c) { return serve(k, c, srv_arg(k)); }
