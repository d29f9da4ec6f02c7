/* sha256.c - SHA-256 over OpenSSL's EVP interface (uses SHA-NI when the CPU
 * has it). Files are read in 1 MiB chunks, so memory use is bounded. File
 * digests are cached in memory by file identity, so a model hashed by one
 * engine is not read again by the next one in the same process. */
#include "base/sha256.h"
#include "base/error.h"

#include <errno.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

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

int pw_file_id_of(const char *path, pw_file_id *id, char *err) {
  struct stat st;
  if (stat(path, &st)) return pw_seterr(err, PW_EIO, "%s: %s", path, strerror(errno));
  memset(id, 0, sizeof *id);
  id->dev = (uint64_t)st.st_dev;
  id->ino = (uint64_t)st.st_ino;
  id->size = (uint64_t)st.st_size;
  id->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
  return 0;
}

#define SHA_CACHE_MAX 64
static struct {
  pw_file_id id;
  uint8_t d[32];
} g_cache[SHA_CACHE_MAX];
static int g_cache_n, g_cache_next;
static pthread_mutex_t g_cache_mu = PTHREAD_MUTEX_INITIALIZER;

static int same_id(const pw_file_id *a, const pw_file_id *b) {
  return a->dev == b->dev && a->ino == b->ino && a->size == b->size && a->mtime_ns == b->mtime_ns;
}

int pw_sha256_cache_get(const pw_file_id *id, uint8_t out[32]) {
  int hit = 0;
  pthread_mutex_lock(&g_cache_mu);
  for (int i = 0; i < g_cache_n && !hit; i++)
    if (same_id(&g_cache[i].id, id)) {
      memcpy(out, g_cache[i].d, 32);
      hit = 1;
    }
  pthread_mutex_unlock(&g_cache_mu);
  return hit;
}

void pw_sha256_cache_put(const pw_file_id *id, const uint8_t d[32]) {
  pthread_mutex_lock(&g_cache_mu);
  int slot = -1;
  for (int i = 0; i < g_cache_n; i++)
    if (same_id(&g_cache[i].id, id)) slot = i;
  if (slot < 0) {
    if (g_cache_n < SHA_CACHE_MAX) slot = g_cache_n++;
    else {
      slot = g_cache_next; /* the oldest entry: slots fill and are reused in order */
      g_cache_next = (g_cache_next + 1) % SHA_CACHE_MAX;
    }
  }
  g_cache[slot].id = *id;
  memcpy(g_cache[slot].d, d, 32);
  pthread_mutex_unlock(&g_cache_mu);
}

int pw_sha256_file_cached(const char *path, uint8_t out[32], char *err) {
  pw_file_id before, after;
  int rc = pw_file_id_of(path, &before, err);
  if (rc) return rc;
  if (pw_sha256_cache_get(&before, out)) return 0;
  if ((rc = pw_sha256_file(path, out, err))) return rc;
  if (!pw_file_id_of(path, &after, NULL) && same_id(&before, &after)) pw_sha256_cache_put(&before, out);
  return 0;
}
