/* auth.c - API key digests and constant-time checks. See auth.h. */
#include "server/auth.h"

#include "base/error.h"
#include "base/sha256.h"

#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct auth_keys {
  uint8_t (*digest)[32]; /* owned: n SHA-256 digests */
  int n, cap;
};

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

int auth_keys_add(auth_keys *k, const char *key, size_t len, char *err) {
  if (len == 0 || len > AUTH_MAX_KEY)
    return pw_seterr(err, PW_EINVAL, "API keys must be 1..%d bytes", AUTH_MAX_KEY);
  if (k->n == k->cap) {
    int cap = k->cap ? k->cap * 2 : 4;
    void *d = realloc(k->digest, (size_t)cap * sizeof *k->digest);
    if (!d) return pw_seterr(err, PW_ENOMEM, "out of memory");
    k->digest = d;
    k->cap = cap;
  }
  pw_sha256(key, len, k->digest[k->n++]);
  return 0;
}

/* Adds s[0..n) after trimming; empty pieces are skipped. */
static int add_trimmed(auth_keys *k, const char *s, size_t n, char *err) {
  while (n && is_space(*s)) s++, n--;
  while (n && is_space(s[n - 1])) n--;
  if (!n) return 0;
  return auth_keys_add(k, s, n, err);
}

static int load_file(auth_keys *k, const char *path, char *err) {
  FILE *f = fopen(path, "r");
  if (!f) return pw_seterr(err, PW_EIO, "cannot open API key file %s", path);
  char line[AUTH_MAX_KEY + 64];
  int before = k->n, lineno = 0, rc = 0;
  while (fgets(line, sizeof line, f)) {
    lineno++;
    size_t n = strlen(line);
    if (n == sizeof line - 1 && line[n - 1] != '\n' && !feof(f)) {
      rc = pw_seterr(err, PW_EINVAL, "%s:%d: line too long for an API key", path, lineno);
      break;
    }
    const char *s = line;
    while (*s && is_space(*s)) s++;
    if (*s == '#' || !*s) continue;
    if ((rc = add_trimmed(k, s, strlen(s), err))) break;
  }
  if (!rc && ferror(f)) rc = pw_seterr(err, PW_EIO, "cannot read API key file %s", path);
  fclose(f);
  if (!rc && k->n == before) rc = pw_seterr(err, PW_EINVAL, "API key file %s holds no key", path);
  /* Wipe the plaintext copy on the stack. */
  OPENSSL_cleanse(line, sizeof line);
  return rc;
}

int auth_keys_create(const char *file, const char *list, auth_keys **out, char *err) {
  *out = NULL;
  auth_keys *k = calloc(1, sizeof *k);
  if (!k) return pw_seterr(err, PW_ENOMEM, "out of memory");
  int rc = 0;
  if (file && (rc = load_file(k, file, err))) goto fail;
  if (list) {
    int before = k->n;
    const char *s = list;
    while (*s) {
      const char *c = strchr(s, ',');
      size_t n = c ? (size_t)(c - s) : strlen(s);
      if ((rc = add_trimmed(k, s, n, err))) goto fail;
      s += n;
      if (*s == ',') s++;
    }
    /* A key list that is set but holds no key (blank, commas, white space)
     * is a mistake, not a request for an open server. */
    if (k->n == before) {
      rc = pw_seterr(err, PW_EINVAL, "the API key list is set but holds no key (unset it to serve without keys)");
      goto fail;
    }
  }
  *out = k;
  return 0;
fail:
  auth_keys_destroy(k);
  return rc;
}

void auth_keys_destroy(auth_keys *k) {
  if (!k) return;
  free(k->digest);
  free(k);
}

int auth_keys_count(const auth_keys *k) { return k ? k->n : 0; }

auth_result auth_identify(const auth_keys *k, const char *header, uint8_t who[32]) {
  if (!k || k->n == 0) return AUTH_OPEN;
  if (!header) return AUTH_DENIED;
  while (*header == ' ') header++;
  if (strncasecmp(header, "Bearer", 6) || (header[6] != ' ' && header[6] != '\t')) return AUTH_DENIED;
  return auth_identify_key(k, header + 7, who);
}

auth_result auth_identify_key(const auth_keys *k, const char *key, uint8_t who[32]) {
  if (!k || k->n == 0) return AUTH_OPEN;
  if (!key) return AUTH_DENIED;
  const char *tok = key;
  while (*tok == ' ' || *tok == '\t') tok++;
  size_t n = strlen(tok);
  while (n && is_space(tok[n - 1])) n--;
  if (n == 0 || n > AUTH_MAX_KEY) return AUTH_DENIED;
  uint8_t d[32];
  pw_sha256(tok, n, d);
  /* Every digest is compared, whatever matched before. */
  int match = 0;
  for (int i = 0; i < k->n; i++) match |= CRYPTO_memcmp(d, k->digest[i], sizeof d) == 0;
  if (!match) return AUTH_DENIED;
  /* The presented key's digest equals the stored one it matched. */
  memcpy(who, d, sizeof d);
  OPENSSL_cleanse(d, sizeof d);
  return AUTH_KEY;
}

bool auth_check(const auth_keys *k, const char *header) {
  uint8_t who[32];
  return auth_identify(k, header, who) != AUTH_DENIED;
}
