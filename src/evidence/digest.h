/* digest.h - the domain-separated SHA-256 digests that receipts and
 * reports bind outputs with.
 *
 * Token ids: SHA-256 over the 19 bytes "power.token-ids.v1\0" then each id
 * as a little-endian unsigned 32-bit integer. Embeddings: SHA-256 over the
 * vectors' float32 values, little-endian, one vector after the other, no
 * separator (every vector of a response has the model's size). The domain
 * prefix keeps a token-id digest from ever equalling the digest of some
 * text or file.
 * What it is not: file hashing (base/sha256.h), canonical JSON (jcs.h). */
#ifndef PW_EVIDENCE_DIGEST_H
#define PW_EVIDENCE_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#define EV_TOKEN_IDS_DOMAIN "power.token-ids.v1" /* hashed with its NUL */

/* An incremental SHA-256. ctx is owned (EVP_MD_CTX); ev_hasher_free(NULL
 * ctx) is a no-op. */
typedef struct ev_hasher {
  void *ctx;
} ev_hasher;

/* Starts a digest; 0 or PW_ENOMEM. */
int ev_hasher_init(ev_hasher *h);
/* Starts a token-id digest (the domain prefix hashed). */
int ev_hasher_init_ids(ev_hasher *h);
void ev_hasher_update(ev_hasher *h, const void *data, size_t n);
void ev_hasher_ids(ev_hasher *h, const int32_t *ids, size_t n);
void ev_hasher_floats(ev_hasher *h, const float *v, size_t n);
/* Writes the digest and frees the context. */
void ev_hasher_final(ev_hasher *h, uint8_t out[32]);
void ev_hasher_free(ev_hasher *h);

/* One-shot forms. 0 or PW_ENOMEM. */
int ev_token_ids_sha256(const int32_t *ids, size_t n, uint8_t out[32]);
int ev_floats_sha256(const float *v, size_t n, uint8_t out[32]);
/* Parses 64 hex digits (either case) into 32 bytes; 0 or PW_EINVAL. */
int ev_unhex32(const char *hex, uint8_t out[32]);

#endif
