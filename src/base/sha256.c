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

void pw_hex(const uint8_t *bytes, size_t n, char *hex) {
  static const char d[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    hex[2 * i] = d[bytes[i] >> 4];
    hex[2 * i + 1] = d[bytes[i] & 15];
  }
  hex[2 * n] = 0;
}
