/* digest.c - domain-separated digests over OpenSSL's EVP. See digest.h. */
#include "evidence/digest.h"

#include "base/error.h"

#include <openssl/evp.h>
#include <string.h>

int ev_hasher_init(ev_hasher *h) {
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  h->ctx = c;
  if (!c || !EVP_DigestInit_ex(c, EVP_sha256(), NULL)) {
    ev_hasher_free(h);
    return PW_ENOMEM;
  }
  return 0;
}

int ev_hasher_init_ids(ev_hasher *h) {
  int rc = ev_hasher_init(h);
  if (!rc) ev_hasher_update(h, EV_TOKEN_IDS_DOMAIN, sizeof EV_TOKEN_IDS_DOMAIN); /* with the NUL */
  return rc;
}

void ev_hasher_update(ev_hasher *h, const void *data, size_t n) {
  if (h->ctx && n) EVP_DigestUpdate(h->ctx, data, n);
}

void ev_hasher_ids(ev_hasher *h, const int32_t *ids, size_t n) {
  unsigned char b[256];
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t u = (uint32_t)ids[i];
    b[k++] = (unsigned char)u;
    b[k++] = (unsigned char)(u >> 8);
    b[k++] = (unsigned char)(u >> 16);
    b[k++] = (unsigned char)(u >> 24);
    if (k == sizeof b) {
      ev_hasher_update(h, b, k);
      k = 0;
    }
  }
  ev_hasher_update(h, b, k);
}

void ev_hasher_floats(ev_hasher *h, const float *v, size_t n) {
  unsigned char b[256];
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    uint32_t u;
    memcpy(&u, &v[i], 4);
    b[k++] = (unsigned char)u;
    b[k++] = (unsigned char)(u >> 8);
    b[k++] = (unsigned char)(u >> 16);
    b[k++] = (unsigned char)(u >> 24);
    if (k == sizeof b) {
      ev_hasher_update(h, b, k);
      k = 0;
    }
  }
  ev_hasher_update(h, b, k);
}

void ev_hasher_final(ev_hasher *h, uint8_t out[32]) {
  unsigned int n = 32;
  if (h->ctx) EVP_DigestFinal_ex(h->ctx, out, &n);
  else memset(out, 0, 32);
  ev_hasher_free(h);
}

void ev_hasher_free(ev_hasher *h) {
  if (!h) return;
  EVP_MD_CTX_free(h->ctx);
  h->ctx = NULL;
}

int ev_token_ids_sha256(const int32_t *ids, size_t n, uint8_t out[32]) {
  ev_hasher h;
  int rc = ev_hasher_init_ids(&h);
  if (rc) return rc;
  ev_hasher_ids(&h, ids, n);
  ev_hasher_final(&h, out);
  return 0;
}

int ev_floats_sha256(const float *v, size_t n, uint8_t out[32]) {
  ev_hasher h;
  int rc = ev_hasher_init(&h);
  if (rc) return rc;
  ev_hasher_floats(&h, v, n);
  ev_hasher_final(&h, out);
  return 0;
}

static int hexval(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

int ev_unhex32(const char *hex, uint8_t out[32]) {
  if (!hex || strlen(hex) != 64) return PW_EINVAL;
  for (int i = 0; i < 32; i++) {
    int a = hexval(hex[2 * i]), b = hexval(hex[2 * i + 1]);
    if (a < 0 || b < 0) return PW_EINVAL;
    out[i] = (uint8_t)(a << 4 | b);
  }
  return 0;
}
