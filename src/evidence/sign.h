/* sign.h - Ed25519 keys for signing receipts (OpenSSL).
 *
 * A receipt's signature is Ed25519 over the 64 ASCII bytes of its
 * receipt_sha256 (lowercase hex), so anyone can check it with stock tools
 * (`openssl pkeyutl -verify -rawin`). A key's fingerprint is the SHA-256 of
 * its 32 raw public-key bytes, in hex.
 * What it is not: key storage policy beyond writing the private key 0600. */
#ifndef PW_EVIDENCE_SIGN_H
#define PW_EVIDENCE_SIGN_H

#include <stddef.h>

typedef struct ev_key ev_key; /* a private (signing) or public (verifying) key */

/* Reads a PEM private key (PKCS#8 Ed25519) or public key (SPKI). 0, or
 * PW_EIO (unreadable) / PW_EINVAL (not an Ed25519 key of that kind) with
 * err set. *out owned by the caller (ev_key_destroy). */
int ev_key_load_private(const char *path, ev_key **out, char *err);
int ev_key_load_public(const char *path, ev_key **out, char *err);
void ev_key_destroy(ev_key *k);
/* Makes a new key pair: the private key written to priv_path with mode
 * 0600 and the public key to pub_path; neither file may exist yet. */
int ev_key_generate(const char *priv_path, const char *pub_path, char *err);
/* The public key as PEM (SPKI), malloc'ed, NUL-terminated. */
int ev_key_public_pem(const ev_key *k, char **pem, char *err);
/* hex: 65 bytes. */
int ev_key_fingerprint(const ev_key *k, char hex[65], char *err);
/* Signs msg with a private key; sig_b64 gets standard base64 (89 bytes
 * suffice). */
int ev_sign(const ev_key *k, const void *msg, size_t n, char *sig_b64, size_t cap, char *err);
/* 0 when sig_b64 is a valid signature of msg under k, else PW_EINVAL. */
int ev_verify_sig(const ev_key *k, const void *msg, size_t n, const char *sig_b64, char *err);

#endif
