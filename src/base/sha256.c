/* sha256.c - SHA-256 over OpenSSL's EVP interface (uses SHA-NI when the CPU
 * has it). Files are read in 1 MiB chunks, so memory use is bounded. */
#include "base/sha256.h"
#include "base/error.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void pw_sha256(const void *data, size_t len, uint8_t out[32]) {
  unsigned int n = 32;
  EVP_Digest(data, len, out, &n, EVP_sha256(), NULL);
}

int pw_sha256_file(const char *path, uint8_t out[32], char *err) {
  FILE *f = fopen(path, "rb");
  if (!f) return pw_seterr(err, PW_EIO, "%s: %s", path, strerror(errno));
  int rc = PW_OK;
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  unsigned char *buf = malloc(1 << 20);
  if (!ctx || !buf) {
    rc = pw_seterr(err, PW_ENOMEM, "sha256: out of memory");
    goto fail;
  }
  EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
  size_t n;
  while ((n = fread(buf, 1, 1 << 20, f)) > 0) EVP_DigestUpdate(ctx, buf, n);
  if (ferror(f)) {
    rc = pw_seterr(err, PW_EIO, "%s: read error", path);
    goto fail;
  }
  unsigned int olen = 32;
  EVP_DigestFinal_ex(ctx, out, &olen);
fail:
  free(buf);
  EVP_MD_CTX_free(ctx);
  fclose(f);
  return rc;
}

/* The context is OpenSSL's EVP_MD_CTX itself, behind our own type name. */
pw_sha256_ctx *pw_sha256_begin(void) {
  EVP_MD_CTX *ctx = EVP_MD_CTX_new();
  if (ctx && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) != 1) {
    EVP_MD_CTX_free(ctx);
    ctx = NULL;
  }
  return (pw_sha256_ctx *)ctx;
}

void pw_sha256_update(pw_sha256_ctx *c, const void *data, size_t len) {
  if (len) EVP_DigestUpdate((EVP_MD_CTX *)c, data, len);
}

void pw_sha256_end(pw_sha256_ctx *c, uint8_t out[32]) {
  unsigned int olen = 32;
  EVP_DigestFinal_ex((EVP_MD_CTX *)c, out, &olen);
  EVP_MD_CTX_free((EVP_MD_CTX *)c);
}

void pw_sha256_free(pw_sha256_ctx *c) { EVP_MD_CTX_free((EVP_MD_CTX *)c); }

void pw_hex(const uint8_t *bytes, size_t n, char *hex) {
  static const char d[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    hex[2 * i] = d[bytes[i] >> 4];
    hex[2 * i + 1] = d[bytes[i] & 15];
  }
  hex[2 * n] = 0;
}
