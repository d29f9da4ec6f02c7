/* test_chat_templates.c - conformance of the chat-template renderer with
 * Python's Jinja2 as Hugging Face configures it: every case of cases.json
 * rendered with every template must equal, byte for byte, what Jinja2
 * produced (<name>.expected.json), or fail where Jinja2 raised. Two sets:
 * the shared assets' and the repository's own (tests/data/chat-templates). */
#include "chat/chat.h"
#include "test.h"

#include "power.h"

#include <dirent.h>
#include <stdbool.h>
#include <time.h>

#ifndef POWER_TEST_DATA
#define POWER_TEST_DATA "tests/data"
#endif

static char *read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *buf = malloc((size_t)n + 1);
  if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
    free(buf);
    buf = NULL;
  }
  fclose(f);
  if (buf) buf[n] = 0;
  *len = (size_t)n;
  return buf;
}

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void show_diff(const char *want, size_t wn, const char *got, size_t gn) {
  size_t i = 0;
  while (i < wn && i < gn && want[i] == got[i]) i++;
  size_t from = i > 40 ? i - 40 : 0;
  fprintf(stderr, "    first difference at byte %zu (expected %zu bytes, got %zu)\n", i, wn, gn);
  fprintf(stderr, "    expected: ...%.*s|%.*s\n", (int)(i - from), want + from, (int)(wn - i < 60 ? wn - i : 60), want + i);
  fprintf(stderr, "    got:      ...%.*s|%.*s\n", (int)(i - from), got + from, (int)(gn - i < 60 ? gn - i : 60), got + i);
}

/* Runs one directory's templates over its cases; returns the cases that
 * passed and adds the cases seen to *total. */
static int run_dir(const char *DIR_, int *total_cases) {
  char path[1024];
  snprintf(path, sizeof path, "%s/cases.json", DIR_);
  json_error_t je;
  json_t *cases_doc = json_load_file(path, 0, &je);
  CHECK_MSG(cases_doc != NULL, "missing or bad test asset %s: %s", path, je.text);
  if (!cases_doc) return 0;
  json_t *cases = json_object_get(cases_doc, "cases");
  json_t *special = json_object_get(cases_doc, "special");
  const char *date = json_string_value(json_object_get(cases_doc, "date_for_strftime_now"));
  CHECK(json_is_array(cases) && json_array_size(cases) > 0 && special && date);
  struct tm tm = {0};
  CHECK(date && strptime(date, "%Y-%m-%dT%H:%M:%S", &tm) != NULL);
  chat_render_opts opts = {.now = timegm(&tm)};

  DIR *d = opendir(DIR_);
  CHECK_MSG(d != NULL, "missing test asset directory %s", DIR_);
  char *names[256];
  int nt = 0;
  if (d) {
    struct dirent *de;
    while ((de = readdir(d)) && nt < 256) {
      size_t n = strlen(de->d_name);
      if (n > 6 && strcmp(de->d_name + n - 6, ".jinja") == 0) names[nt++] = strdup(de->d_name);
    }
    closedir(d);
  }
  CHECK_MSG(nt > 0, "no *.jinja templates in %s", DIR_);
  qsort(names, (size_t)nt, sizeof names[0], cmp_names);

  int total = 0, total_ok = 0;
  for (int t = 0; t < nt; t++) {
    size_t tl = 0;
    snprintf(path, sizeof path, "%s/%s", DIR_, names[t]);
    char *tmpl = read_file(path, &tl);
    CHECK_MSG(tmpl != NULL, "cannot read %s", path);
    names[t][strlen(names[t]) - 6] = 0;
    snprintf(path, sizeof path, "%s/%s.expected.json", DIR_, names[t]);
    json_t *exp = json_load_file(path, 0, &je);
    CHECK_MSG(json_is_array(exp), "missing or bad %s", path);
    int ok = 0, n = 0;
    size_t ci;
    json_t *c;
    json_array_foreach(cases, ci, c) {
      if (!tmpl || !exp) break;
      const char *cname = json_string_value(json_object_get(c, "name"));
      json_t *want = NULL, *e;
      size_t ei;
      json_array_foreach(exp, ei, e) {
        if (cname && json_is_string(json_object_get(e, "case")) &&
            strcmp(json_string_value(json_object_get(e, "case")), cname) == 0)
          want = e;
      }
      n++;
      CHECK_MSG(want != NULL, "%s: no expected entry for case %s", names[t], cname);
      if (!want) continue;
      json_t *vars = json_object();
      json_object_set(vars, "messages", json_object_get(c, "messages"));
      json_object_set(vars, "add_generation_prompt", json_object_get(c, "add_generation_prompt"));
      json_object_set(vars, "bos_token", json_object_get(special, "bos_token"));
      json_object_set(vars, "eos_token", json_object_get(special, "eos_token"));
      if (json_object_get(c, "tools")) json_object_set(vars, "tools", json_object_get(c, "tools"));
      char err[PW_ERRMAX] = "", *out = NULL;
      size_t out_len = 0;
      int rc = chat_render(tmpl, tl, vars, &opts, &out, &out_len, err);
      json_decref(vars);
      json_t *wo = json_object_get(want, "output"), *we = json_object_get(want, "error");
      bool pass = false;
      if (wo) {
        const char *ws = json_string_value(wo);
        size_t wn = json_string_length(wo);
        pass = rc == 0 && out_len == wn && memcmp(out, ws, wn) == 0;
        if (!pass) {
          fprintf(stderr, "  %s / %s: ", names[t], cname);
          if (rc)
            fprintf(stderr, "render failed: %s\n", err);
          else {
            fprintf(stderr, "output differs\n");
            show_diff(ws, wn, out, out_len);
          }
        }
      } else if (we) {
        /* Jinja2 writes "TemplateError: <message>"; the message is the
         * template's raise_exception text. */
        const char *ws = json_string_value(we);
        const char *msg = ws ? strstr(ws, ": ") : NULL;
        msg = msg ? msg + 2 : ws;
        pass = rc == PW_ETEMPLATE && msg && strstr(err, msg) != NULL;
        if (!pass)
          fprintf(stderr, "  %s / %s: expected error '%s', got rc=%d err='%s'\n", names[t], cname, ws ? ws : "?", rc,
                  err);
      }
      free(out);
      CHECK_MSG(pass, "%s / %s", names[t], cname);
      ok += pass;
    }
    fprintf(stderr, "%-50s %d/%d\n", names[t], ok, n);
    total += n;
    total_ok += ok;
    json_decref(exp);
    free(tmpl);
    free(names[t]);
  }
  fprintf(stderr, "%s: %d/%d cases pass over %d templates\n", DIR_, total_ok, total, nt);
  json_decref(cases_doc);
  *total_cases += total;
  return total_ok;
}

int main(void) {
  int total = 0, ok = 0;
  ok += run_dir(POWER_SHARED_DIR "/chat-templates", &total);
  ok += run_dir(POWER_TEST_DATA "/chat-templates", &total);
  fprintf(stderr, "chat templates: %d/%d cases pass\n", ok, total);
  TEST_DONE();
}
