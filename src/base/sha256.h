/* sha256.h - SHA-256 (OpenSSL libcrypto) of memory and of files, streamed. */
#ifndef PW_BASE_SHA256_H
#define PW_BASE_SHA256_H
#include <stddef.h>
#include <stdint.h>

/* out: 32 bytes. */
void pw_sha256(const void *data, size_t len, uint8_t out[32]);
/* Streams the file in fixed-size chunks; 0 or PW_EIO with a message. */
int pw_sha256_file(const char *path, uint8_t out[32], char *err);
/* hex: 65 bytes (64 hex digits + NUL). */
void pw_hex(const uint8_t *bytes, size_t n, char *hex);
#endif
