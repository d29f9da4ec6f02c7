/* test_server_auth.c - API key loading and Authorization checks. */
#include "base/sha256.h"
#include "server/auth.h"
#include "test.h"

#include "power.h"

#include <fcntl.h>
#include <unistd.h>

int main(void) {
  char err[PW_ERRMAX];
  auth_keys *k = NULL;

  /* No source: open. */
  CHECK(auth_keys_create(NULL, NULL, &k, err) == 0);
  CHECK_EQ_INT(auth_keys_count(k), 0);
  CHECK(auth_check(k, NULL));
  CHECK(auth_check(NULL, "Bearer x"));
  auth_keys_destroy(k);
  auth_keys_destroy(NULL);

  /* File: comments, blank lines, whitespace. */
  char path[] = "/tmp/power-test-keys-XXXXXX";
  int fd = mkstemp(path);
  CHECK(fd >= 0);
  const char *text = "# keys\n\n  sk-one  \n\t# indented comment\nsk-two\r\nsk-three";
  CHECK(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
  close(fd);
  CHECK(auth_keys_create(path, " sk-env , ,sk-env2", &k, err) == 0);
  CHECK_EQ_INT(auth_keys_count(k), 5);
  CHECK(auth_check(k, "Bearer sk-one"));
  CHECK(auth_check(k, "bearer   sk-two "));
  CHECK(auth_check(k, "Bearer sk-three"));
  CHECK(auth_check(k, "Bearer sk-env"));
  CHECK(auth_check(k, "Bearer sk-env2"));
  CHECK(!auth_check(k, NULL));
  CHECK(!auth_check(k, ""));
  CHECK(!auth_check(k, "Bearer "));
  CHECK(!auth_check(k, "Bearer sk-on"));
  CHECK(!auth_check(k, "Bearer sk-one2"));
  CHECK(!auth_check(k, "Bearer # keys"));
  CHECK(!auth_check(k, "Basic sk-one"));
  CHECK(!auth_check(k, "Bearersk-one"));
  CHECK(!auth_check(k, "sk-one"));
  /* Identity: the matching key's digest, distinct per key. */
  uint8_t who[32], who2[32], want[32];
  memset(who, 0xAA, sizeof who);
  CHECK_EQ_INT(auth_identify(k, "Bearer sk-two", who), AUTH_KEY);
  pw_sha256("sk-two", 6, want);
  CHECK(!memcmp(who, want, 32));
  CHECK_EQ_INT(auth_identify(k, "bearer  sk-two  ", who2), AUTH_KEY);
  CHECK(!memcmp(who, who2, 32));
  CHECK_EQ_INT(auth_identify(k, "Bearer sk-env", who2), AUTH_KEY);
  CHECK(memcmp(who, who2, 32) != 0);
  CHECK_EQ_INT(auth_identify(k, "Bearer sk-nope", who2), AUTH_DENIED);
  CHECK_EQ_INT(auth_identify(k, NULL, who2), AUTH_DENIED);
  auth_keys_destroy(k);
  CHECK_EQ_INT(auth_identify(NULL, "Bearer x", who2), AUTH_OPEN);

  /* A file with no key is an error, not an open server. */
  fd = open(path, O_WRONLY | O_TRUNC);
  CHECK(write(fd, "# none\n\n", 8) == 8);
  close(fd);
  err[0] = 0;
  CHECK(auth_keys_create(path, NULL, &k, err) == PW_EINVAL);
  CHECK(k == NULL && strstr(err, "no key") != NULL);
  unlink(path);
  CHECK(auth_keys_create(path, NULL, &k, err) == PW_EIO);
  CHECK(k == NULL);

  /* Key length bounds. */
  CHECK(auth_keys_create(NULL, "a", &k, err) == 0);
  char big[AUTH_MAX_KEY + 2];
  memset(big, 'x', sizeof big);
  big[sizeof big - 1] = 0;
  CHECK(auth_keys_add(k, big, strlen(big), err) == PW_EINVAL);
  CHECK(auth_keys_add(k, big, AUTH_MAX_KEY, err) == 0);
  char hdr[AUTH_MAX_KEY + 16];
  snprintf(hdr, sizeof hdr, "Bearer %.*s", AUTH_MAX_KEY, big);
  CHECK(auth_check(k, hdr));
  snprintf(hdr, sizeof hdr, "Bearer %s", big);
  CHECK(!auth_check(k, hdr));
  CHECK(auth_check(k, "Bearer a"));
  auth_keys_destroy(k);
  /* A bare key (x-api-key): trimmed, no scheme; open without keys. */
  {
    auth_keys *kk = NULL;
    uint8_t bare[32];
    CHECK(auth_keys_create(NULL, "sk-bare", &kk, err) == 0);
    CHECK(auth_identify_key(kk, "sk-bare", bare) == AUTH_KEY);
    CHECK(auth_identify_key(kk, "  sk-bare \t", bare) == AUTH_KEY);
    CHECK(auth_identify_key(kk, "Bearer sk-bare", bare) == AUTH_DENIED);
    CHECK(auth_identify_key(kk, "sk-bar", bare) == AUTH_DENIED);
    CHECK(auth_identify_key(kk, "", bare) == AUTH_DENIED);
    CHECK(auth_identify_key(kk, NULL, bare) == AUTH_DENIED);
    auth_keys_destroy(kk);
    CHECK(auth_identify_key(NULL, NULL, bare) == AUTH_OPEN);
  }
  TEST_DONE();
}
