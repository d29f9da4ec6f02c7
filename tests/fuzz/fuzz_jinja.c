/* fuzz_jinja.c - fuzz harness for the Jinja interpreter: the input is a
 * template, parsed and (when it parses) rendered against a fixed chat-like
 * set of variables with small limits, so that the bounds are reached often.
 * The bytes after a first NUL, when there are any, are JSON variables
 * instead, so the fuzzer can vary the data as well as the code. */
#include "fuzz.h"

#include "chat/jinja.h"
#include "power.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

static json_t *g_vars;

static const char k_vars[] =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"be brief\"},"
    " {\"role\": \"user\", \"content\": \"hi <|im_end|> \\u00e9\"},"
    " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"type\": \"function\", \"function\":"
    " {\"name\": \"f\", \"arguments\": {\"a\": 1.5, \"b\": [true, null]}}}]},"
    " {\"role\": \"tool\", \"content\": \"{\\\"x\\\": 9223372036854775807}\"}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\"}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\","
    " \"n\": 1e300, \"i\": -9223372036854775808}";

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  g_vars = json_loads(k_vars, 0, NULL);
  if (!g_vars) abort();
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 1 << 16) return 0;
  const char *src = (const char *)data;
  size_t tlen = size;
  json_t *vars = NULL;
  const uint8_t *nul = memchr(data, 0, size);
  if (nul) {
    tlen = (size_t)(nul - data);
    vars = json_loadb((const char *)nul + 1, size - tlen - 1, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
    if (vars && !json_is_object(vars)) {
      json_decref(vars);
      vars = NULL;
    }
  }
  char err[PW_ERRMAX];
  jinja_template *t = NULL;
  if (jinja_parse(src, tlen, 64, &t, err) == 0) {
    jinja_limits lim = {.max_output = 1 << 16, .max_iterations = 20000, .max_depth = 64,
                        .max_memory = 8 << 20, .now = 1783166400};
    char *out = NULL;
    size_t n = 0;
    if (jinja_render(t, vars ? vars : g_vars, &lim, &out, &n, err) == 0) free(out);
    jinja_destroy(t);
  }
  json_decref(vars);
  return 0;
}
