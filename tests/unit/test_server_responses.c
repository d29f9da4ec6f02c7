/* test_server_responses.c - the Responses API's store of finished
 * responses: bounds by entries and bytes with least-recently-used
 * eviction, tenancy (a key never sees another key's responses), and
 * lookups that refresh an entry's place. */
#include "server/api.h"
#include "test.h"

#include "power.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
  TEST_DONE();
}
