/* pull.h - downloads a GGUF model into the store (libcurl): a plain
 * http(s) URL, or a Hugging Face repository `hf.co/ORG/REPO[:QUANT]`
 * whose file list is read through its API ($POWER_HF_ENDPOINT overrides
 * https://huggingface.co). Either may end in `@sha256:HEX` to pin the digest.
 *
 * Each file is written to blobs/partial-<key> (key: the pinned or
 * advertised digest, else the SHA-256 of the URL) under an flock on
 * blobs/partial-<key>.lock, so a second pull of the same file waits for the
 * first instead of downloading it again. An interrupted download (Ctrl-C,
 * crash, dropped connection) leaves the partial file; the next attempt,
 * in this process (retries with backoff) or a later one, resumes it with a
 * Range request. The SHA-256 is computed while streaming and compared with
 * the pin, the Hugging Face LFS digest, or an X-Linked-Etag / ETag that is a
 * SHA-256; a mismatch removes the partial. The first bytes must be GGUF
 * magic; free disk space is checked against the announced length first.
 * The bearer token goes only to the host of the first request (libcurl
 * drops it on redirects to another host).
 *
 * Split GGUFs (NAME-00001-of-0000N.gguf) are pulled part by part into one
 * manifest. Not here: loading models, the progress display (a callback). */
#ifndef PW_STORE_PULL_H
#define PW_STORE_PULL_H

#include "store/store.h"

#include <signal.h>
#include <stdint.h>

typedef struct store_progress {
  const char *file; /* file being fetched (borrowed, valid during the call) */
  int part, n_parts;  /* 1-based part number and count */
  uint64_t done;      /* bytes of this file on disk */
  uint64_t total;     /* its size, 0 when unknown */
  double rate;        /* bytes/s, recent average; 0 when unknown */
  int waiting;        /* 1: another process is downloading it; done is its progress */
  int finished;       /* 1: this file is complete (last call for it) */
  const char *digest; /* hex SHA-256 the file must have (pin, Hugging Face
                       * LFS id), NULL when not known before the end */
} store_progress;

typedef struct store_pull_opts {
  const char *source;       /* URL or hf.co/ORG/REPO[:QUANT], optional @sha256:HEX */
  const char *name;         /* NULL: derived from the source */
  const char *token;        /* NULL: $HF_TOKEN for Hugging Face sources, else none */
  int retries;              /* attempts after the first on transient errors; <0 = 5 */
  long connect_timeout_s;   /* 0 = 30 */
  long stall_timeout_s;     /* abort an attempt after this long without a byte; 0 = 60 */
  void (*progress)(void *ud, const store_progress *p); /* may be NULL; at most ~10 calls/s */
  void *progress_ud;
  volatile sig_atomic_t *cancel; /* when it becomes nonzero the pull stops (PW_ECANCELED) */
} store_pull_opts;

/* Pulls the source into the store and writes its manifest into *out.
 * Errors: PW_ENOTFOUND (HTTP 404, no GGUF of that quantization),
 * PW_EFORMAT (not a GGUF), PW_EIO (network after retries, digest mismatch,
 * disk full, store not writable), PW_ECANCELED, PW_EINVAL (bad source or
 * name). The message names the cause. */
int store_pull(store *s, const store_pull_opts *o, store_manifest *out, char *err);

/* ---- exposed for tests ---- */

/* Splits a source into its parts. kind: 0 URL, 1 Hugging Face. */
typedef struct store_source {
  int kind;
  char url[2048];     /* kind 0 */
  char org[128];      /* kind 1 */
  char repo[128];
  char quant[32];     /* "" when not given */
  char pin[65];       /* "" when not pinned */
} store_source;
int store_parse_source(const char *source, store_source *out, char *err);
/* True when path (a repository file) is a GGUF of quantization quant
 * (case-insensitive, delimited by . - _ / or the end of the stem). */
int store_hf_match(const char *path, const char *quant);
/* Parses "-00001-of-00003.gguf" at the end of name: part and count, or 0. */
int store_split_part(const char *name, int *part, int *count);

#endif
