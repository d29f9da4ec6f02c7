/* crypt.h - encrypted weight containers (.pwe): AES-256-GCM in seekable
 * chunks, the key file, and whole-file encrypt/decrypt.
 *
 * Byte format (all integers little-endian), version 1:
 *
 *   header, 64 bytes:
 *     0   u8[8]   magic "PWENCWT1"
 *     8   u32     version = 1
 *     12  u32     chunk_shift: chunk size = 1 << chunk_shift bytes,
 *                 12..26 (4 KiB .. 64 MiB; default 20 = 1 MiB)
 *     16  u64     plaintext size in bytes (> 0, at most 2^50)
 *     24  u8[32]  SHA-256 of the plaintext
 *     56  u64     reserved, 0
 *   then n = ceil(size / chunk) chunk records, record i at byte
 *   64 + i * (12 + chunk + 16):
 *     u8[12]  nonce (random, fresh for every chunk of every file)
 *     u8[len] ciphertext, len = chunk for every record but the last, which
 *             holds the remaining size - (n - 1) * chunk bytes
 *     u8[16]  GCM tag
 *   and nothing after the last record: the file is exactly
 *   64 + n * 28 + size bytes.
 *
 * Each record's associated data is the 64 header bytes followed by the u64
 * record index. So a record moved, swapped or copied to another index or
 * another container fails its tag, a changed header fails every tag, and a
 * dropped or cut record shows as a file shorter than the header says. The
 * plaintext SHA-256 is checked by weights_decrypt_file; loading relies on
 * the tags (which cover every byte and every position) and does not hash.
 *
 * Nonces are random (RAND_bytes): one key may seal about 2^32 records
 * before a nonce collision becomes a concern (NIST SP 800-38D, 8.3).
 *
 * Key file: exactly 32 raw bytes, or 64 hex digits optionally followed by
 * one newline ("\n" or "\r\n"); anything else is refused. A key is never
 * written to logs or error messages; keys live in locked memory (where the
 * limit allows) and are wiped when released.
 *
 * Not here: where the encrypted bytes are read from and where the
 * plaintext goes when a model loads (weights.c). */
#ifndef PW_WEIGHTS_CRYPT_H
#define PW_WEIGHTS_CRYPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define WEIGHTS_PWE_MAGIC "PWENCWT1"
#define WEIGHTS_PWE_VERSION 1u
#define WEIGHTS_PWE_HEADER 64u
#define WEIGHTS_PWE_NONCE 12u
#define WEIGHTS_PWE_TAG 16u
#define WEIGHTS_PWE_MIN_SHIFT 12u
#define WEIGHTS_PWE_MAX_SHIFT 26u
#define WEIGHTS_PWE_DEFAULT_SHIFT 20u
#define WEIGHTS_PWE_MAX_SIZE (1ull << 50)

/* A 256-bit key in its own locked page; wiped and unlocked by
 * weights_key_destroy. */
typedef struct weights_key weights_key;

/* Reads a key file (format above). Errors name the file, never its bytes.
 * Warns (log) when the file is readable by group or others. */
int weights_key_load(const char *path, weights_key **out, char *err);
void weights_key_destroy(weights_key *k);

/* The parsed header of a container. */
typedef struct weights_pwe_hdr {
  uint8_t raw[WEIGHTS_PWE_HEADER]; /* the header bytes (associated data) */
  uint32_t chunk_shift;
  uint64_t chunk;        /* bytes of plaintext per record */
  uint64_t size;         /* plaintext bytes */
  uint8_t sha256[32];    /* of the plaintext */
  uint64_t n_chunks;
  uint64_t file_size;    /* the exact container size the header implies */
} weights_pwe_hdr;

/* True when the first bytes (len >= 8) carry the container magic. */
bool weights_pwe_is(const void *first, size_t len);
/* Parses and checks a header; file_size is the container's size on disk:
 * a shorter file is an error naming the first incomplete record, a longer
 * one names the trailing bytes. */
int weights_pwe_parse(const uint8_t *raw, uint64_t file_size, weights_pwe_hdr *h, char *err);
/* Record i: file offset, plaintext offset and plaintext length. */
uint64_t weights_pwe_rec_off(const weights_pwe_hdr *h, uint64_t i);
uint64_t weights_pwe_rec_len(const weights_pwe_hdr *h, uint64_t i);

/* Per-thread decryption state (an OpenSSL cipher context keyed once). */
typedef struct weights_dec weights_dec;
int weights_dec_create(const weights_key *k, weights_dec **out, char *err);
void weights_dec_destroy(weights_dec *d);
/* Opens record i: its nonce (12 bytes), ciphertext (weights_pwe_rec_len
 * bytes) and tag (16); plaintext to out, which may be ct itself (in place).
 * 0, or PW_EFORMAT naming the record when its tag does not verify (out is
 * then zeroed). */
int weights_dec_record(weights_dec *d, const weights_pwe_hdr *h, uint64_t i, const uint8_t *nonce,
                       const uint8_t *ct, const uint8_t *tag, uint8_t *out, char *err);

/* Writes OUT as a container of IN (to a temporary name, renamed at the
 * end; nothing is left behind on failure). chunk_shift 0 = the default.
 * Reads IN twice (hash, then seal) and fails if it changed in between. */
int weights_encrypt_file(const char *in, const char *out, const weights_key *k, uint32_t chunk_shift, char *err);
/* Writes OUT as the plaintext of container IN after every record and the
 * plaintext SHA-256 verified (temporary name, renamed at the end). */
int weights_decrypt_file(const char *in, const char *out, const weights_key *k, char *err);

#endif
