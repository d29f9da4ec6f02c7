/* fuzz_oai.c - fuzz harness for the mapping of OpenAI-style request bodies
 * (JSON) to validated requests, without sockets: the first byte picks the
 * endpoint kind, the rest is the body. A parsed request is also turned into
 * engine parameters, as the server does next. */
#include "fuzz.h"

#include "server/oai.h"

#include <stdlib.h>

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  (void)argc;
  (void)argv;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1 || size > 1 << 20) return 0;
  static const oai_kind kinds[] = {OAI_CHAT, OAI_COMPLETION, OAI_EMBEDDING, OAI_TOKENIZE, OAI_DETOKENIZE};
  oai_kind kind = kinds[data[0] % 5];
  oai_request r;
  oai_error e;
  if (oai_parse(kind, (const char *)data + 1, size - 1, &r, &e) == 0) {
    if (kind == OAI_CHAT || kind == OAI_COMPLETION) {
      int32_t prompt[4] = {1, 2, 3, 4};
      engine_params p;
      oai_engine_params(&r, prompt, 4, &p);
    }
    oai_request_free(&r);
  } else {
    /* a bad body is the client's error (or, in theory, out of memory) */
    if (e.status != 400 && e.status != 413 && e.status != 500) abort();
  }
  return 0;
}
