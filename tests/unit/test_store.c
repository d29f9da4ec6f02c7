/* test_store.c - the store's pure functions: names, sources, Hugging Face
 * file matching, split-part names, quantization labels. The store on disk
 * and pulls are exercised by tests/cli/store.sh and store_pull.sh. */
#include "test.h"

#include "base/error.h"
#include "store/pull.h"
#include "store/store.h"

static int name_ok(const char *n) {
  char out[STORE_NAME_MAX + 1], err[PW_ERRMAX];
  return store_name_check(n, out, err) == 0;
}

int main(void) {
  char out[STORE_NAME_MAX + 1], err[PW_ERRMAX];
  CHECK(store_name_check("Qwen2.5-0.5B-Instruct:Q4_K_M", out, err) == 0);
  CHECK_STR(out, "qwen2.5-0.5b-instruct:q4_k_m");
  CHECK(name_ok("a"));
  CHECK(name_ok("a_b.c-d:latest"));
  CHECK(!name_ok(""));
  CHECK(!name_ok("../x"));
  CHECK(!name_ok("a/b"));
  CHECK(!name_ok("a..b"));
  CHECK(!name_ok(".a"));
  CHECK(!name_ok("-a"));
  CHECK(!name_ok("a:"));
  CHECK(!name_ok("a:.x"));
  CHECK(!name_ok("a:b:c"));
  CHECK(!name_ok("a b"));
  CHECK(!name_ok("a\\b"));
  CHECK(!name_ok("a\nb"));
  char longname[STORE_NAME_MAX + 2];
  memset(longname, 'a', sizeof longname - 1);
  longname[sizeof longname - 1] = 0;
  CHECK(!name_ok(longname));
  longname[STORE_NAME_MAX] = 0;
  CHECK(name_ok(longname));

  store_source s;
  CHECK(store_parse_source("https://example.org/m-Q4_0.gguf", &s, err) == 0);
  CHECK_EQ_INT(s.kind, 0);
  CHECK_STR(s.url, "https://example.org/m-Q4_0.gguf");
  CHECK_STR(s.pin, "");
  const char *hex = "ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789";
  char src[256];
  snprintf(src, sizeof src, "hf.co/Org/Repo-GGUF:Q4_K_M@sha256:%s", hex);
  CHECK(store_parse_source(src, &s, err) == 0);
  CHECK_EQ_INT(s.kind, 1);
  CHECK_STR(s.org, "Org");
  CHECK_STR(s.repo, "Repo-GGUF");
  CHECK_STR(s.quant, "Q4_K_M");
  CHECK_STR(s.pin, "abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789");
  CHECK(store_parse_source("huggingface.co/a/b", &s, err) == 0 && s.kind == 1 && !s.quant[0]);
  CHECK(store_parse_source("hf.co/a", &s, err) == PW_EINVAL);
  CHECK(store_parse_source("hf.co/../b", &s, err) == PW_EINVAL);
  CHECK(store_parse_source("hf.co/a/b/c", &s, err) == PW_EINVAL);
  CHECK(store_parse_source("hf.co/a/b:", &s, err) == PW_EINVAL);
  CHECK(store_parse_source("hf.co/a/b:Q4 K", &s, err) == PW_EINVAL);
  CHECK(store_parse_source("https://x/m.gguf@sha256:12", &s, err) == PW_EINVAL);
  CHECK(store_parse_source("https://x/a b.gguf", &s, err) == PW_EINVAL);
  CHECK(store_parse_source("ftp://x/m.gguf", &s, err) == PW_EINVAL);
  CHECK(store_parse_source("/local/file.gguf", &s, err) == PW_EINVAL);
  CHECK(store_parse_source("", &s, err) == PW_EINVAL);

  CHECK(store_hf_match("qwen2.5-0.5b-instruct-q4_k_m.gguf", "Q4_K_M"));
  CHECK(store_hf_match("Model.Q8_0.gguf", "q8_0"));
  CHECK(store_hf_match("Q4_K_M/model-Q4_K_M-00001-of-00002.gguf", "Q4_K_M"));
  CHECK(!store_hf_match("model-Q4_K_M.gguf", "Q4_K"));
  CHECK(!store_hf_match("model-IQ4_XS.gguf", "Q4_XS"));
  CHECK(!store_hf_match("model-Q4_K_M.bin", "Q4_K_M"));
  CHECK(!store_hf_match("model-Q4_K_M.gguf", ""));

  int part = 0, count = 0;
  CHECK(store_split_part("m-00002-of-00003.gguf", &part, &count) && part == 2 && count == 3);
  CHECK(!store_split_part("m-00004-of-00003.gguf", &part, &count));
  CHECK(!store_split_part("m-00000-of-00003.gguf", &part, &count));
  CHECK(!store_split_part("m-0001-of-00003.gguf", &part, &count));
  CHECK(!store_split_part("m.gguf", &part, &count));

  CHECK_STR(store_ftype_label(15), "Q4_K_M");
  CHECK_STR(store_ftype_label(7), "Q8_0");
  CHECK(store_ftype_label(4) == NULL); /* retired Q4_1_F16 */

  printf("%d checks, %d failures\n", t_checks, t_failures);
  return t_failures ? 1 : 0;
}
