/* auth.h - API keys of the server: loading, and checking an Authorization
 * header against them.
 *
 * Only SHA-256 digests of the keys are kept in memory, and a presented key
 * is hashed and compared with every stored digest in constant time
 * (CRYPTO_memcmp, no early exit), so timing reveals neither which key
 * matched nor how much of one did.
 * Not here: rate limiting, per-key quotas, routing (server.c decides which
 * paths are public). */
#ifndef PW_SERVER_AUTH_H
#define PW_SERVER_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AUTH_MAX_KEY 1024 /* bytes of one key */

typedef struct auth_keys auth_keys;

/* Builds a key set from a file (one key per line; blank lines and lines
 * starting with '#' ignored; surrounding whitespace trimmed) and/or a
 * comma-separated list (e.g. $POWER_API_KEYS). Either may be NULL. A file
 * that holds no key is an error (PW_EINVAL), as is an unreadable one
 * (PW_EIO), and so is a list that is given (non-NULL) but holds no key
 * (empty, blank, only commas): that is a misconfiguration, not "open". With neither source the set is empty: every request passes.
 * *out is owned by the caller (auth_keys_destroy). */
int auth_keys_create(const char *file, const char *list, auth_keys **out, char *err);
void auth_keys_destroy(auth_keys *k);
/* Adds one key (len bytes, 1..AUTH_MAX_KEY). 0, PW_EINVAL or PW_ENOMEM. */
int auth_keys_add(auth_keys *k, const char *key, size_t len, char *err);
int auth_keys_count(const auth_keys *k);
/* True when k is NULL or empty, or header is "Bearer <key>" (scheme
 * case-insensitive) for a stored key. header may be NULL. */
bool auth_check(const auth_keys *k, const char *header);

/* The caller's identity, for scoping per-tenant state (prefix-cache keys):
 * AUTH_OPEN when no keys are configured (every caller is the same
 * "anonymous" tenant; *who untouched), AUTH_KEY with *who = the stored
 * SHA-256 digest of the matching key, AUTH_DENIED when the header names no
 * stored key. Same constant-time comparison as auth_check. */
typedef enum auth_result { AUTH_DENIED = 0, AUTH_OPEN = 1, AUTH_KEY = 2 } auth_result;
auth_result auth_identify(const auth_keys *k, const char *header, uint8_t who[32]);
/* The same for a bare key (the x-api-key header of Anthropic's clients):
 * surrounding white space trimmed, no scheme. key may be NULL. */
auth_result auth_identify_key(const auth_keys *k, const char *key, uint8_t who[32]);

#endif
