/* sign.c - Ed25519 over OpenSSL's EVP interface. See sign.h. */
#include "evidence/sign.h"

#include "base/error.h"
#include "base/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct ev_key {
  EVP_PKEY *pk;
  int is_private;
};

static int load(const char *path, int priv, ev_key **out, char *err) {
  *out = NULL;
  FILE *f = fopen(path, "r");
  if (!f) return pw_seterr(err, PW_EIO, "%s: %s", path, strerror(errno));
  EVP_PKEY *pk = priv ? PEM_read_PrivateKey(f, NULL, NULL, NULL) : PEM_read_PUBKEY(f, NULL, NULL, NULL);
  fclose(f);
  if (!pk || EVP_PKEY_id(pk) != EVP_PKEY_ED25519) {
    EVP_PKEY_free(pk);
    return pw_seterr(err, PW_EINVAL, "%s: not an Ed25519 %s key in PEM", path, priv ? "private" : "public");
  }
  ev_key *k = calloc(1, sizeof *k);
  if (!k) {
    EVP_PKEY_free(pk);
    return pw_seterr(err, PW_ENOMEM, "out of memory");
  }
  k->pk = pk;
  k->is_private = priv;
  *out = k;
  return 0;
}

int ev_key_load_private(const char *path, ev_key **out, char *err) { return load(path, 1, out, err); }
int ev_key_load_public(const char *path, ev_key **out, char *err) { return load(path, 0, out, err); }

void ev_key_destroy(ev_key *k) {
  if (!k) return;
  EVP_PKEY_free(k->pk);
  free(k);
}

/* Creates path exclusively with mode and writes the PEM. */
static int write_pem(const char *path, mode_t mode, EVP_PKEY *pk, int priv, char *err) {
  int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, mode);
  if (fd < 0) return pw_seterr(err, PW_EIO, "%s: %s", path, strerror(errno));
  fchmod(fd, mode); /* whatever the umask says */
  FILE *f = fdopen(fd, "w");
  if (!f) {
    close(fd);
    return pw_seterr(err, PW_EIO, "%s: %s", path, strerror(errno));
  }
  int ok = priv ? PEM_write_PrivateKey(f, pk, NULL, NULL, 0, NULL, NULL) : PEM_write_PUBKEY(f, pk);
  if (fclose(f) || !ok) return pw_seterr(err, PW_EIO, "%s: cannot write the key", path);
  return 0;
}

int ev_key_generate(const char *priv_path, const char *pub_path, char *err) {
  EVP_PKEY *pk = NULL;
  EVP_PKEY_CTX *c = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, NULL);
  if (!c || EVP_PKEY_keygen_init(c) <= 0 || EVP_PKEY_keygen(c, &pk) <= 0) {
    EVP_PKEY_CTX_free(c);
    return pw_seterr(err, PW_EINTERNAL, "cannot generate an Ed25519 key");
  }
  EVP_PKEY_CTX_free(c);
  int rc = write_pem(priv_path, 0600, pk, 1, err);
  if (!rc) {
    rc = write_pem(pub_path, 0644, pk, 0, err);
    if (rc) unlink(priv_path);
  }
  EVP_PKEY_free(pk);
  return rc;
}

int ev_key_public_pem(const ev_key *k, char **pem, char *err) {
  *pem = NULL;
  BIO *b = BIO_new(BIO_s_mem());
  if (!b || !PEM_write_bio_PUBKEY(b, k->pk)) {
    BIO_free(b);
    return pw_seterr(err, PW_EINTERNAL, "cannot write the public key");
  }
  char *data;
  long n = BIO_get_mem_data(b, &data);
  *pem = malloc((size_t)n + 1);
  if (*pem) {
    memcpy(*pem, data, (size_t)n);
    (*pem)[n] = 0;
  }
  BIO_free(b);
  return *pem ? 0 : pw_seterr(err, PW_ENOMEM, "out of memory");
}

int ev_key_fingerprint(const ev_key *k, char hex[65], char *err) {
  unsigned char raw[32];
  size_t n = sizeof raw;
  if (EVP_PKEY_get_raw_public_key(k->pk, raw, &n) <= 0 || n != 32)
    return pw_seterr(err, PW_EINTERNAL, "cannot read the raw public key");
  uint8_t d[32];
  pw_sha256(raw, 32, d);
  pw_hex(d, 32, hex);
  return 0;
}

int ev_sign(const ev_key *k, const void *msg, size_t n, char *sig_b64, size_t cap, char *err) {
  if (!k->is_private) return pw_seterr(err, PW_EINVAL, "signing needs a private key");
  if (cap < 89) return pw_seterr(err, PW_EINVAL, "signature buffer too small");
  unsigned char sig[64];
  size_t sl = sizeof sig;
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  int ok = c && EVP_DigestSignInit(c, NULL, NULL, NULL, k->pk) > 0 &&
           EVP_DigestSign(c, sig, &sl, msg, n) > 0 && sl == 64;
  EVP_MD_CTX_free(c);
  if (!ok) return pw_seterr(err, PW_EINTERNAL, "Ed25519 signing failed");
  EVP_EncodeBlock((unsigned char *)sig_b64, sig, 64);
  return 0;
}

int ev_verify_sig(const ev_key *k, const void *msg, size_t n, const char *sig_b64, char *err) {
  size_t bl = strlen(sig_b64);
  if (bl != 88) return pw_seterr(err, PW_EINVAL, "the signature is not 64 bytes of base64");
  unsigned char sig[66];
  if (EVP_DecodeBlock(sig, (const unsigned char *)sig_b64, (int)bl) != 66)
    return pw_seterr(err, PW_EINVAL, "the signature is not valid base64");
  EVP_MD_CTX *c = EVP_MD_CTX_new();
  int ok = c && EVP_DigestVerifyInit(c, NULL, NULL, NULL, k->pk) > 0 && EVP_DigestVerify(c, sig, 64, msg, n) == 1;
  EVP_MD_CTX_free(c);
  return ok ? 0 : pw_seterr(err, PW_EINVAL, "the signature does not verify under this public key");
}
