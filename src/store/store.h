/* store.h - the model store: content-addressed blobs and named manifests
 * under one directory ($POWER_HOME, default ~/.power). Knows GGUF only to
 * check magic and to read the architecture and quantization of a blob; it
 * does not load models. Downloads live in pull.h.
 *
 * On-disk layout (all paths relative to the home):
 *   blobs/sha256-<64 hex>   a file whose SHA-256 is that digest; written
 *                           under another name and renamed into place only
 *                           after the digest was verified. Read-only.
 *   blobs/partial-<key>     a download in progress (kept across Ctrl-C,
 *                           crashes and dropped connections; resumed).
 *   blobs/partial-<key>.lock  flock'ed by the process downloading <key>.
 *   manifests/<name>.json   one file per name, replaced atomically:
 *     { "schema": 1, "name": "qwen2.5-0.5b-instruct:q4_k_m",
 *       "source": "https://... or import:/path", "architecture": "qwen2",
 *       "quantization": "Q4_K_M", "size": <total bytes>,
 *       "added": "2025-01-31T12:00:00Z",
 *       "blobs": [ { "digest": "sha256:<hex>", "size": <bytes>,
 *                    "url": "<where it was downloaded from, when it was>" },
 *                  ... ] }
 *     "blobs" has one entry, or the parts of a split GGUF in order.
 *   splits/<key>/           links naming a split model's blobs as its parts
 *                           (store_resolve)
 *   .lock                   flock'ed (exclusive) around every change of
 *                           manifests or blobs, so rm of the last name and
 *                           a pull committing the same blob cannot race.
 *
 * Names: lower case, [a-z0-9] then [a-z0-9._-], optionally ':' and a tag of
 * [a-z0-9._-]; at most STORE_NAME_MAX bytes. No '/', so a name can never
 * reach outside manifests/. Several names may share one blob; removing the
 * last name that refers to a blob removes the blob. */
#ifndef PW_STORE_STORE_H
#define PW_STORE_STORE_H

#include <stddef.h>
#include <stdint.h>

#define STORE_NAME_MAX 100
#define STORE_MAX_PARTS 64 /* parts of a split GGUF */
#define STORE_PATH_MAX 4096

typedef struct store store;

typedef struct store_blob {
  char digest[65]; /* lower-case hex SHA-256 */
  uint64_t size;   /* bytes */
} store_blob;

typedef struct store_manifest {
  char name[STORE_NAME_MAX + 1];
  char source[2048];      /* URL or "import:<path>" */
  char architecture[64];  /* general.architecture, "" when unknown */
  char quantization[32];  /* label such as "Q4_K_M", "" when unknown */
  char added[32];         /* ISO 8601 UTC */
  uint64_t size;          /* sum of the blobs' sizes */
  int n_blobs;            /* 1..STORE_MAX_PARTS */
  store_blob blobs[STORE_MAX_PARTS];
} store_manifest;

/* Opens the store at home, or at $POWER_HOME, or at ~/.power when home is
 * NULL. create: make the directories when missing (PW_EIO with the path
 * when that fails); else PW_ENOTFOUND when there is no store there. */
int store_open(const char *home, int create, store **out, char *err);
void store_destroy(store *s);
const char *store_home(const store *s); /* borrowed */

/* Checks and normalizes a name (upper case folded to lower case) into out
 * (STORE_NAME_MAX + 1 bytes). PW_EINVAL with the reason otherwise. */
int store_name_check(const char *name, char *out, char *err);

/* Path of a blob by hex digest into out (STORE_PATH_MAX bytes). */
void store_blob_path(const store *s, const char *digest, char *out);
int store_blob_exists(const store *s, const char *digest);

/* Reads a manifest by (normalized) name. PW_ENOTFOUND when absent,
 * PW_EFORMAT when the file is malformed. */
int store_get(store *s, const char *name, store_manifest *m, char *err);
/* All manifests, sorted by name: *out is malloc'ed (caller frees), *n its
 * count. Malformed manifests are skipped with a warning on the log. */
int store_list(store *s, store_manifest **out, size_t *n, char *err);
/* Removes a name; blobs no other name refers to are removed too. */
int store_rm(store *s, const char *name, char *err);
/* A second name for the same blobs. PW_EINVAL when dst exists. */
int store_cp(store *s, const char *src, const char *dst, char *err);
/* Hashes a GGUF file and puts it in the store under name (the first part
 * of a split model brings all its parts, one blob each): a hard link when
 * the file system allows it (then the blob shares the file's inode: do not
 * edit the original in place), else a copy hashed as it is written. */
int store_import(store *s, const char *path, const char *name, store_manifest *m, char *err);

/* Resolves a name to the path of its blob (out: STORE_PATH_MAX); for a
 * split model, the first of links splits/<key>/model-0000i-of-0000N.gguf
 * to its blobs (made here when missing), the names the loaders find the
 * other parts by. PW_ENOTFOUND when the name is unknown or a blob is
 * missing. */
int store_resolve(store *s, const char *name, char *out, char *err);

/* ---- used by pull.c ---- */

/* Fills architecture and quantization of m from the GGUF at path (the first
 * part). PW_EFORMAT when it is not a valid GGUF. */
int store_describe_gguf(const char *path, store_manifest *m, char *err);
/* Moves each verified file paths[i] (NULL: already a blob) to
 * blobs/sha256-<m->blobs[i].digest> (or drops it when that blob already
 * exists) and writes the manifest, all under the store lock; urls (may be
 * NULL) are recorded per blob. Blobs only the replaced manifest of the same
 * name referred to are removed. Sets m->added and m->size. */
int store_commit(store *s, store_manifest *m, char *const *paths, const char *const *urls, char *err);
/* Finds a blob a manifest records as downloaded from url and that is
 * present: 1 with its digest (65 bytes) and size, else 0. */
int store_find_url(store *s, const char *url, char *digest, uint64_t *size);
/* Takes / releases the store-wide lock (blocking). */
int store_lock(store *s, char *err);
void store_unlock(store *s);
/* The quantization label of a llama.cpp general.file_type, or NULL. */
const char *store_ftype_label(uint32_t ftype);

#endif
