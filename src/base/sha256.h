/* sha256.h - SHA-256 (OpenSSL libcrypto) of memory and of files, streamed. */
#ifndef PW_BASE_SHA256_H
#define PW_BASE_SHA256_H
#include <stddef.h>
#include <stdint.h>

/* out: 32 bytes. */
void pw_sha256(const void *data, size_t len, uint8_t out[32]);
/* Streams the file in fixed-size chunks; 0 or PW_EIO with a message. */
int pw_sha256_file(const char *path, uint8_t out[32], char *err);
/* Incremental hashing for data that arrives in pieces (downloads).
 * begin returns NULL when out of memory; end writes the digest and frees the
 * context; free releases it without a digest (NULL is a no-op). */
typedef struct pw_sha256_ctx pw_sha256_ctx;
pw_sha256_ctx *pw_sha256_begin(void);
void pw_sha256_update(pw_sha256_ctx *c, const void *data, size_t len);
void pw_sha256_end(pw_sha256_ctx *c, uint8_t out[32]);
void pw_sha256_free(pw_sha256_ctx *c);
/* A file's identity for the digest cache: a file with the same device,
 * inode, size and modification time (ns) is taken to have the same bytes. */
typedef struct pw_file_id {
  uint64_t dev, ino, size;
  int64_t mtime_ns;
} pw_file_id;
/* stat(2) of path into id; 0 or PW_EIO with a message. */
int pw_file_id_of(const char *path, pw_file_id *id, char *err);
/* Process-wide digest cache keyed by pw_file_id (thread-safe, bounded: the
 * oldest entries are dropped past 64 files). get returns 1 on a hit. */
int pw_sha256_cache_get(const pw_file_id *id, uint8_t out[32]);
void pw_sha256_cache_put(const pw_file_id *id, const uint8_t d[32]);
/* pw_sha256_file through the cache: one streamed read per file identity;
 * the digest is cached only when the identity did not change while it was
 * read. */
int pw_sha256_file_cached(const char *path, uint8_t out[32], char *err);
/* hex: 65 bytes (64 hex digits + NUL). */
void pw_hex(const uint8_t *bytes, size_t n, char *hex);
#endif
