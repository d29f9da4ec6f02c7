/* test_text_parity.c - text in, tokens out, through the whole stack: for
 * every reference in ../shared/parity, the prompt text tokenizes to exactly
 * llama.cpp's prompt tokens, and greedy generation through the engine
 * reproduces llama.cpp's continuation up to the first position whose
 * reference margin (top-1 minus top-2 logit) is below 0.25. */
#include "base/error.h"
#include "engine/engine.h"
#include "test.h"
#include "tok/tok.h"

#include <dirent.h>
#include <jansson.h>

static void run_case(const char *path) {
  json_error_t jerr;
  json_t *root = json_load_file(path, 0, &jerr);
  CHECK_MSG(root != NULL, "%s: %s", path, jerr.text);
  if (!root) return;
  const char *mname = json_string_value(json_object_get(root, "model"));
  const char *prompt = json_string_value(json_object_get(root, "prompt"));
  int n_prompt = (int)json_integer_value(json_object_get(root, "n_prompt"));
  json_t *jtok = json_object_get(root, "tokens"), *jtop = json_object_get(root, "top");
  int n_tok = (int)json_array_size(jtok);
  char mpath[2048], err[PW_ERRMAX];
  snprintf(mpath, sizeof mpath, "%s/models/%s", POWER_SHARED_DIR, mname);
  engine_opts eo = {0};
  eo.model_path = mpath;
  eo.max_active = 1;
  eo.max_queue = 1;
  eo.n_ctx = 256;
  engine *e;
  int rc = engine_create(&eo, &e, err);
  CHECK_MSG(rc == 0, "%s: %s", mpath, err);
  if (rc) {
    json_decref(root);
    return;
  }
  int32_t ids[512];
  size_t n_ids = 0;
  rc = tok_encode(engine_vocab(e), prompt, strlen(prompt), true, false, ids, 512, &n_ids, err);
  CHECK_MSG(rc == 0, "%s", err);
  int same = (int)n_ids == n_prompt;
  for (int i = 0; same && i < n_prompt; i++) same = ids[i] == (int32_t)json_integer_value(json_array_get(jtok, (size_t)i));
  CHECK_MSG(same, "%s: prompt tokens differ from llama.cpp's", path);
  /* How many generated tokens are determined by wide margins. */
  int n_check = 0;
  for (int i = n_prompt; i < n_tok; i++) {
    json_t *row = json_array_get(jtop, (size_t)(i - 1));
    double margin = json_number_value(json_array_get(json_array_get(row, 0), 1)) -
                    json_number_value(json_array_get(json_array_get(row, 1), 1));
    if (margin < 0.25) break;
    n_check++;
  }
  engine_params p;
  memset(&p, 0, sizeof p);
  p.prompt = ids;
  p.n_prompt = (int)n_ids;
  p.max_tokens = n_tok - n_prompt;
  pw_sampler_params_default(&p.sampling);
  p.sampling.temperature = 0;
  p.ignore_eos = true;
  engine_req *r;
  rc = engine_submit(e, &p, &r, err);
  CHECK_MSG(rc == 0, "%s", err);
  int got = 0, matched = 0;
  bool diverged = false;
  engine_event ev;
  while (rc == 0 && engine_next(r, &ev, 60000) == 0) {
    if (ev.type != ENGINE_EV_TOKEN) {
      CHECK_MSG(ev.type == ENGINE_EV_DONE, "%s: %s", path, ev.message);
      break;
    }
    int32_t want = (int32_t)json_integer_value(json_array_get(jtok, (size_t)(n_prompt + got)));
    if (got < n_check && !diverged) {
      CHECK_MSG(ev.token == want, "%s: generated token %d is %d, llama.cpp %d", path, got, ev.token, want);
      if (ev.token == want) matched++;
      else diverged = true;
    }
    got++;
  }
  CHECK_EQ_INT(got, n_tok - n_prompt);
  fprintf(stderr, "%-28s prompt %d tokens identical; greedy %d/%d determined tokens identical\n", mname, n_prompt,
          matched, n_check);
  if (rc == 0) engine_release(r);
  engine_destroy(e);
  json_decref(root);
}

int main(void) {
  char dir[1024];
  snprintf(dir, sizeof dir, "%s/parity", POWER_SHARED_DIR);
  DIR *d = opendir(dir);
  CHECK_MSG(d != NULL, "missing test assets: %s", dir);
  if (!d) TEST_DONE();
  struct dirent *de;
  int n = 0;
  while ((de = readdir(d))) {
    if (!strstr(de->d_name, ".json")) continue;
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    run_case(path);
    n++;
  }
  closedir(d);
  CHECK_MSG(n >= 10, "expected the shared parity files, found %d", n);
  TEST_DONE();
}
