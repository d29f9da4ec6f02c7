/* crypt.c - the .pwe container (see crypt.h for the bytes): key files,
 * header checks, record sealing and opening with OpenSSL's EVP AES-256-GCM
 * (AES-NI / VAES where the CPU has them), and whole-file encrypt/decrypt
 * for `power encrypt` / `power decrypt`. Not here: loading a model from a
 * container (weights.c). */

#include "weights/crypt.h"

#include "base/error.h"
#include "base/log.h"
#include "base/sha256.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- keys ---------------------------------------------------------------- */

struct weights_key {
  uint8_t k[32];
  int locked;
};

void weights_key_destroy(weights_key *k) {
  if (!k) return;
  const int locked = k->locked;
  OPENSSL_cleanse(k, 4096); /* the key's page (weights_key_load) */
  if (locked) munlock(k, 4096);
  munmap(k, 4096);
}

static int hexval(int c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

int weights_key_load(const char *path, weights_key **out, char *err) {
  *out = NULL;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return pw_seterr(err, PW_EIO, "key file %s: %s", path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
    close(fd);
    return pw_seterr(err, PW_EIO, "key file %s: not a regular file", path);
  }
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    pw_log(PW_LOG_WARN, "key file %s is accessible by group or others (mode %03o); chmod 600 it", path,
           (unsigned)(st.st_mode & 0777));
  /* One page of its own, locked and kept out of core dumps, for the file's
   * bytes and then the key: neither may reach swap or a dump. */
  uint8_t *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) {
    close(fd);
    return pw_seterr(err, PW_ENOMEM, "key file %s: out of memory", path);
  }
  int locked = mlock(page, 4096) == 0;
#ifdef MADV_DONTDUMP
  madvise(page, 4096, MADV_DONTDUMP);
#endif
  size_t n = 0;
  int rc = 0;
  /* at most 66 bytes are a key ("hex\r\n"); read one more to see excess */
  while (n < 67) {
    ssize_t r = read(fd, page + 64 + n, 67 - n);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      rc = pw_seterr(err, PW_EIO, "key file %s: %s", path, strerror(errno));
      break;
    }
    if (r == 0) break;
    n += (size_t)r;
  }
  close(fd);
  const uint8_t *b = page + 64;
  uint8_t key[32];
  if (!rc) {
    size_t hl = n;
    if (hl >= 1 && b[hl - 1] == '\n') hl--;
    if (hl >= 1 && hl == 65 && b[hl - 1] == '\r') hl--;
    if (n == 32) {
      memcpy(key, b, 32);
    } else if (hl == 64) {
      for (int i = 0; i < 32 && !rc; i++) {
        int hi = hexval(b[2 * i]), lo = hexval(b[2 * i + 1]);
        if (hi < 0 || lo < 0) rc = pw_seterr(err, PW_EFORMAT, "key file %s: not 64 hex digits", path);
        else key[i] = (uint8_t)(hi << 4 | lo);
      }
    } else {
      rc = pw_seterr(err, PW_EFORMAT,
                     "key file %s: %s bytes; a key file holds 32 raw bytes or 64 hex digits (and an optional "
                     "newline)",
                     path, n >= 67 ? "more than 66" : "a wrong number of");
    }
  }
  weights_key *k = (weights_key *)(void *)page;
  if (!rc) memcpy(k->k, key, 32);
  OPENSSL_cleanse(key, sizeof key);
  OPENSSL_cleanse(page + 64, 128);
  if (rc) {
    OPENSSL_cleanse(page, 4096);
    if (locked) munlock(page, 4096);
    munmap(page, 4096);
    return rc;
  }
  k->locked = locked;
  *out = k;
  return 0;
}

/* ---- header -------------------------------------------------------------- */

static uint32_t rd32(const uint8_t *p) { return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24; }
static uint64_t rd64(const uint8_t *p) { return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32; }
static void wr32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static void wr64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}

bool weights_pwe_is(const void *first, size_t len) {
  return len >= 8 && !memcmp(first, WEIGHTS_PWE_MAGIC, 8);
}

uint64_t weights_pwe_rec_off(const weights_pwe_hdr *h, uint64_t i) {
  return WEIGHTS_PWE_HEADER + i * (WEIGHTS_PWE_NONCE + h->chunk + WEIGHTS_PWE_TAG);
}

uint64_t weights_pwe_rec_len(const weights_pwe_hdr *h, uint64_t i) {
  return i + 1 < h->n_chunks ? h->chunk : h->size - (h->n_chunks - 1) * h->chunk;
}

int weights_pwe_parse(const uint8_t *raw, uint64_t file_size, weights_pwe_hdr *h, char *err) {
  memset(h, 0, sizeof *h);
  if (file_size < WEIGHTS_PWE_HEADER)
    return pw_seterr(err, PW_EFORMAT, "truncated container: %llu bytes, the header alone is %u",
                     (unsigned long long)file_size, WEIGHTS_PWE_HEADER);
  if (!weights_pwe_is(raw, 8)) return pw_seterr(err, PW_EFORMAT, "not an encrypted weights container (bad magic)");
  memcpy(h->raw, raw, WEIGHTS_PWE_HEADER);
  uint32_t ver = rd32(raw + 8);
  if (ver != WEIGHTS_PWE_VERSION)
    return pw_seterr(err, PW_EUNSUPPORTED, "encrypted container version %u (this build reads %u)", ver,
                     WEIGHTS_PWE_VERSION);
  h->chunk_shift = rd32(raw + 12);
  if (h->chunk_shift < WEIGHTS_PWE_MIN_SHIFT || h->chunk_shift > WEIGHTS_PWE_MAX_SHIFT)
    return pw_seterr(err, PW_EFORMAT, "encrypted container: chunk size 2^%u is outside 2^%u..2^%u", h->chunk_shift,
                     WEIGHTS_PWE_MIN_SHIFT, WEIGHTS_PWE_MAX_SHIFT);
  h->chunk = 1ull << h->chunk_shift;
  h->size = rd64(raw + 16);
  if (h->size == 0 || h->size > WEIGHTS_PWE_MAX_SIZE)
    return pw_seterr(err, PW_EFORMAT, "encrypted container: plaintext size %llu is out of range",
                     (unsigned long long)h->size);
  memcpy(h->sha256, raw + 24, 32);
  if (rd64(raw + 56) != 0) return pw_seterr(err, PW_EFORMAT, "encrypted container: reserved header bytes are not 0");
  h->n_chunks = (h->size + h->chunk - 1) / h->chunk;
  h->file_size = WEIGHTS_PWE_HEADER + h->n_chunks * (WEIGHTS_PWE_NONCE + WEIGHTS_PWE_TAG) + h->size;
  if (file_size < h->file_size) {
    /* the first record that does not end inside the file */
    uint64_t i = (file_size - WEIGHTS_PWE_HEADER) / (WEIGHTS_PWE_NONCE + h->chunk + WEIGHTS_PWE_TAG);
    return pw_seterr(err, PW_EFORMAT,
                     "truncated container: chunk %llu of %llu is %s (the file has %llu bytes, the header says %llu)",
                     (unsigned long long)i, (unsigned long long)h->n_chunks,
                     weights_pwe_rec_off(h, i) >= file_size ? "missing" : "cut short", (unsigned long long)file_size,
                     (unsigned long long)h->file_size);
  }
  if (file_size > h->file_size)
    return pw_seterr(err, PW_EFORMAT, "encrypted container: %llu bytes after the last chunk (%llu of %llu)",
                     (unsigned long long)(file_size - h->file_size), (unsigned long long)(h->n_chunks - 1),
                     (unsigned long long)h->n_chunks);
  return 0;
}

static void make_header(uint8_t raw[WEIGHTS_PWE_HEADER], uint32_t shift, uint64_t size, const uint8_t sha[32]) {
  memset(raw, 0, WEIGHTS_PWE_HEADER);
  memcpy(raw, WEIGHTS_PWE_MAGIC, 8);
  wr32(raw + 8, WEIGHTS_PWE_VERSION);
  wr32(raw + 12, shift);
  wr64(raw + 16, size);
  memcpy(raw + 24, sha, 32);
}

/* ---- records ------------------------------------------------------------- */

struct weights_dec {
  EVP_CIPHER_CTX *ctx;
};

static EVP_CIPHER_CTX *keyed_ctx(const weights_key *k, int enc) {
  EVP_CIPHER_CTX *c = EVP_CIPHER_CTX_new();
  if (!c) return NULL;
  int ok = enc ? EVP_EncryptInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL)
               : EVP_DecryptInit_ex(c, EVP_aes_256_gcm(), NULL, NULL, NULL);
  ok = ok && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_SET_IVLEN, WEIGHTS_PWE_NONCE, NULL) == 1;
  ok = ok && (enc ? EVP_EncryptInit_ex(c, NULL, NULL, k->k, NULL) : EVP_DecryptInit_ex(c, NULL, NULL, k->k, NULL));
  if (!ok) {
    EVP_CIPHER_CTX_free(c);
    return NULL;
  }
  return c;
}

int weights_dec_create(const weights_key *k, weights_dec **out, char *err) {
  *out = NULL;
  weights_dec *d = calloc(1, sizeof *d);
  if (!d || !(d->ctx = keyed_ctx(k, 0))) {
    free(d);
    return pw_seterr(err, PW_ENOMEM, "cannot set up AES-256-GCM");
  }
  *out = d;
  return 0;
}

void weights_dec_destroy(weights_dec *d) {
  if (!d) return;
  EVP_CIPHER_CTX_free(d->ctx); /* cleanses the key schedule */
  free(d);
}

static void make_aad(const weights_pwe_hdr *h, uint64_t i, uint8_t aad[WEIGHTS_PWE_HEADER + 8]) {
  memcpy(aad, h->raw, WEIGHTS_PWE_HEADER);
  wr64(aad + WEIGHTS_PWE_HEADER, i);
}

int weights_dec_record(weights_dec *d, const weights_pwe_hdr *h, uint64_t i, const uint8_t *nonce,
                       const uint8_t *ct, const uint8_t *tag, uint8_t *out, char *err) {
  const uint64_t len = weights_pwe_rec_len(h, i);
  uint8_t aad[WEIGHTS_PWE_HEADER + 8];
  make_aad(h, i, aad);
  int n = 0, ok = EVP_DecryptInit_ex(d->ctx, NULL, NULL, NULL, nonce) == 1;
  ok = ok && EVP_DecryptUpdate(d->ctx, NULL, &n, aad, (int)sizeof aad) == 1;
  ok = ok && EVP_DecryptUpdate(d->ctx, out, &n, ct, (int)len) == 1;
  ok = ok && EVP_CIPHER_CTX_ctrl(d->ctx, EVP_CTRL_GCM_SET_TAG, WEIGHTS_PWE_TAG, (void *)tag) == 1;
  ok = ok && EVP_DecryptFinal_ex(d->ctx, out + len, &n) == 1;
  if (ok) return 0;
  OPENSSL_cleanse(out, (size_t)len);
  const uint64_t off = weights_pwe_rec_off(h, i);
  return pw_seterr(err, PW_EFORMAT,
                   "chunk %llu of %llu (bytes %llu..%llu of the container) failed authentication: wrong key, or "
                   "the chunk was modified, moved or swapped",
                   (unsigned long long)i, (unsigned long long)h->n_chunks, (unsigned long long)off,
                   (unsigned long long)(off + WEIGHTS_PWE_NONCE + len + WEIGHTS_PWE_TAG));
}

/* ---- whole files ----------------------------------------------------------- */

/* "OUT.tmp.PID": written, then renamed over OUT. */
static FILE *open_tmp(const char *out, char *tmp, size_t cap, char *err) {
  if ((size_t)snprintf(tmp, cap, "%s.tmp.%ld", out, (long)getpid()) >= cap) {
    pw_seterr(err, PW_EINVAL, "%s: path too long", out);
    return NULL;
  }
  FILE *f = fopen(tmp, "wbx");
  if (!f) pw_seterr(err, PW_EIO, "%s: %s", tmp, strerror(errno));
  return f;
}

static int finish_tmp(FILE *f, const char *tmp, const char *out, int rc, char *err) {
  if (f) {
    if (!rc && (fflush(f) || fsync(fileno(f)))) rc = pw_seterr(err, PW_EIO, "%s: %s", tmp, strerror(errno));
    if (fclose(f) && !rc) rc = pw_seterr(err, PW_EIO, "%s: %s", tmp, strerror(errno));
  }
  if (!rc && rename(tmp, out)) rc = pw_seterr(err, PW_EIO, "%s: %s", out, strerror(errno));
  if (rc) unlink(tmp);
  return rc;
}

static int read_full(FILE *f, uint8_t *buf, size_t n) { return fread(buf, 1, n, f) == n ? 0 : -1; }

int weights_encrypt_file(const char *in, const char *out, const weights_key *k, uint32_t shift, char *err) {
  if (!shift) shift = WEIGHTS_PWE_DEFAULT_SHIFT;
  if (shift < WEIGHTS_PWE_MIN_SHIFT || shift > WEIGHTS_PWE_MAX_SHIFT)
    return pw_seterr(err, PW_EINVAL, "chunk size 2^%u is outside 2^%u..2^%u", shift, WEIGHTS_PWE_MIN_SHIFT,
                     WEIGHTS_PWE_MAX_SHIFT);
  struct stat st;
  if (stat(in, &st) || !S_ISREG(st.st_mode))
    return pw_seterr(err, PW_EIO, "%s: %s", in, errno ? strerror(errno) : "not a regular file");
  if (st.st_size <= 0 || (uint64_t)st.st_size > WEIGHTS_PWE_MAX_SIZE)
    return pw_seterr(err, PW_EINVAL, "%s: size %lld is out of range", in, (long long)st.st_size);
  uint8_t sha[32], sha2[32];
  int rc = pw_sha256_file(in, sha, err);
  if (rc) return rc;
  weights_pwe_hdr h;
  uint8_t raw[WEIGHTS_PWE_HEADER];
  make_header(raw, shift, (uint64_t)st.st_size, sha);
  if ((rc = weights_pwe_parse(raw, WEIGHTS_PWE_HEADER + ((uint64_t)st.st_size + (1ull << shift) - 1) / (1ull << shift) *
                                                          (WEIGHTS_PWE_NONCE + WEIGHTS_PWE_TAG) + (uint64_t)st.st_size,
                              &h, err)))
    return rc;
  FILE *fi = fopen(in, "rb");
  if (!fi) return pw_seterr(err, PW_EIO, "%s: %s", in, strerror(errno));
  char tmp[4096];
  FILE *fo = open_tmp(out, tmp, sizeof tmp, err);
  uint8_t *pt = malloc(h.chunk), *rec = malloc(WEIGHTS_PWE_NONCE + h.chunk + WEIGHTS_PWE_TAG);
  EVP_CIPHER_CTX *c = keyed_ctx(k, 1);
  pw_sha256_ctx *hc = pw_sha256_begin();
  if (!fo) {
    rc = PW_EIO;
    goto done;
  }
  if (!pt || !rec || !c || !hc) {
    rc = pw_seterr(err, PW_ENOMEM, "out of memory");
    goto done;
  }
  if (fwrite(raw, 1, sizeof raw, fo) != sizeof raw) {
    rc = pw_seterr(err, PW_EIO, "%s: %s", tmp, strerror(errno));
    goto done;
  }
  for (uint64_t i = 0; i < h.n_chunks; i++) {
    const uint64_t len = weights_pwe_rec_len(&h, i);
    if (read_full(fi, pt, (size_t)len)) {
      rc = pw_seterr(err, PW_EIO, "%s: changed while it was read (short read in chunk %llu)", in,
                     (unsigned long long)i);
      goto done;
    }
    pw_sha256_update(hc, pt, (size_t)len);
    uint8_t aad[WEIGHTS_PWE_HEADER + 8];
    make_aad(&h, i, aad);
    int n = 0;
    if (RAND_bytes(rec, WEIGHTS_PWE_NONCE) != 1) {
      rc = pw_seterr(err, PW_EINTERNAL, "no random bytes for a nonce");
      goto done;
    }
    int ok = EVP_EncryptInit_ex(c, NULL, NULL, NULL, rec) == 1;
    ok = ok && EVP_EncryptUpdate(c, NULL, &n, aad, (int)sizeof aad) == 1;
    ok = ok && EVP_EncryptUpdate(c, rec + WEIGHTS_PWE_NONCE, &n, pt, (int)len) == 1;
    ok = ok && EVP_EncryptFinal_ex(c, rec + WEIGHTS_PWE_NONCE + len, &n) == 1;
    ok = ok && EVP_CIPHER_CTX_ctrl(c, EVP_CTRL_GCM_GET_TAG, WEIGHTS_PWE_TAG, rec + WEIGHTS_PWE_NONCE + len) == 1;
    if (!ok) {
      rc = pw_seterr(err, PW_EINTERNAL, "AES-256-GCM failed on chunk %llu", (unsigned long long)i);
      goto done;
    }
    const size_t rl = WEIGHTS_PWE_NONCE + (size_t)len + WEIGHTS_PWE_TAG;
    if (fwrite(rec, 1, rl, fo) != rl) {
      rc = pw_seterr(err, PW_EIO, "%s: %s", tmp, strerror(errno));
      goto done;
    }
  }
  if (fgetc(fi) != EOF) {
    rc = pw_seterr(err, PW_EIO, "%s: grew while it was read", in);
    goto done;
  }
  pw_sha256_end(hc, sha2);
  hc = NULL;
  if (memcmp(sha, sha2, 32)) rc = pw_seterr(err, PW_EIO, "%s: changed while it was read (digest differs)", in);
done:
  if (pt) OPENSSL_cleanse(pt, (size_t)h.chunk);
  free(pt);
  free(rec);
  EVP_CIPHER_CTX_free(c);
  pw_sha256_free(hc);
  fclose(fi);
  return fo ? finish_tmp(fo, tmp, out, rc, err) : rc;
}

int weights_decrypt_file(const char *in, const char *out, const weights_key *k, char *err) {
  FILE *fi = fopen(in, "rb");
  if (!fi) return pw_seterr(err, PW_EIO, "%s: %s", in, strerror(errno));
  struct stat st;
  uint8_t raw[WEIGHTS_PWE_HEADER] = {0};
  weights_pwe_hdr h;
  char e2[PW_ERRMAX];
  int rc = 0;
  if (fstat(fileno(fi), &st)) rc = pw_seterr(err, PW_EIO, "%s: %s", in, strerror(errno));
  else if (fread(raw, 1, sizeof raw, fi) != sizeof raw && st.st_size >= (off_t)sizeof raw)
    rc = pw_seterr(err, PW_EIO, "%s: read error", in);
  else if ((rc = weights_pwe_parse(raw, (uint64_t)st.st_size, &h, e2)))
    pw_seterr(err, rc, "%s: %s", in, e2);
  if (rc) {
    fclose(fi);
    return rc;
  }
  char tmp[4096];
  FILE *fo = open_tmp(out, tmp, sizeof tmp, err);
  uint8_t *pt = malloc(h.chunk), *rec = malloc(WEIGHTS_PWE_NONCE + h.chunk + WEIGHTS_PWE_TAG);
  weights_dec *d = NULL;
  pw_sha256_ctx *hc = pw_sha256_begin();
  if (!fo) {
    rc = PW_EIO;
    goto done;
  }
  if (!pt || !rec || !hc || (rc = weights_dec_create(k, &d, err))) {
    rc = rc ? rc : pw_seterr(err, PW_ENOMEM, "out of memory");
    goto done;
  }
  for (uint64_t i = 0; i < h.n_chunks; i++) {
    const uint64_t len = weights_pwe_rec_len(&h, i);
    const size_t rl = WEIGHTS_PWE_NONCE + (size_t)len + WEIGHTS_PWE_TAG;
    if (read_full(fi, rec, rl)) {
      rc = pw_seterr(err, PW_EIO, "%s: truncated while it was read (chunk %llu)", in, (unsigned long long)i);
      goto done;
    }
    if ((rc = weights_dec_record(d, &h, i, rec, rec + WEIGHTS_PWE_NONCE, rec + WEIGHTS_PWE_NONCE + len, pt, e2))) {
      pw_seterr(err, rc, "%s: %s", in, e2);
      goto done;
    }
    pw_sha256_update(hc, pt, (size_t)len);
    if (fwrite(pt, 1, (size_t)len, fo) != len) {
      rc = pw_seterr(err, PW_EIO, "%s: %s", tmp, strerror(errno));
      goto done;
    }
  }
  uint8_t sha[32];
  pw_sha256_end(hc, sha);
  hc = NULL;
  if (memcmp(sha, h.sha256, 32))
    rc = pw_seterr(err, PW_EFORMAT, "%s: the decrypted bytes do not have the header's SHA-256", in);
done:
  if (pt) OPENSSL_cleanse(pt, (size_t)h.chunk);
  free(pt);
  free(rec);
  weights_dec_destroy(d);
  pw_sha256_free(hc);
  fclose(fi);
  return fo ? finish_tmp(fo, tmp, out, rc, err) : rc;
}
