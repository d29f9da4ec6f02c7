/* store.c - the model store on disk: names, manifests, blobs and the
 * store lock (layout in store.h). Not the downloader (pull.c). */
#include "store/store.h"

#include "base/error.h"
#include "base/log.h"
#include "base/sha256.h"
#include "gguf/gguf.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MANIFEST_MAX_BYTES (1 << 20) /* a manifest is a few hundred bytes */

#define STORE_HOME_MAX 3072 /* leaves room for the longest path below it */

struct store {
  char home[STORE_HOME_MAX];
  int lock_fd;    /* open on .lock while locked, else -1 */
  int lock_depth; /* store_lock nests (commit inside import, ...) */
};

static int mkdir_p(const char *path, char *err) {
  char tmp[STORE_PATH_MAX];
  if (snprintf(tmp, sizeof tmp, "%s", path) >= (int)sizeof tmp)
    return pw_seterr(err, PW_EINVAL, "store path too long");
  for (char *p = tmp + 1; *p; p++) {
    if (*p != '/') continue;
    *p = 0;
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
      return pw_seterr(err, PW_EIO, "cannot create %s: %s", tmp, strerror(errno));
    *p = '/';
  }
  if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
    return pw_seterr(err, PW_EIO, "cannot create %s: %s", tmp, strerror(errno));
  struct stat st;
  if (stat(tmp, &st) != 0 || !S_ISDIR(st.st_mode)) return pw_seterr(err, PW_EIO, "%s is not a directory", tmp);
  return PW_OK;
}

int store_open(const char *home, int create, store **out, char *err) {
  *out = NULL;
  char buf[STORE_PATH_MAX];
  if (!home || !*home) home = getenv("POWER_HOME");
  if (!home || !*home) {
    const char *h = getenv("HOME");
    if (!h || !*h) return pw_seterr(err, PW_EINVAL, "neither POWER_HOME nor HOME is set");
    if (snprintf(buf, sizeof buf, "%s/.power", h) >= (int)sizeof buf)
      return pw_seterr(err, PW_EINVAL, "HOME is too long");
    home = buf;
  }
  if (strlen(home) >= STORE_HOME_MAX) return pw_seterr(err, PW_EINVAL, "POWER_HOME is too long");
  store *s = calloc(1, sizeof *s);
  if (!s) return pw_seterr(err, PW_ENOMEM, "out of memory");
  memcpy(s->home, home, strlen(home) + 1); /* length checked above */
  s->lock_fd = -1;
  char dir[STORE_PATH_MAX];
  struct stat st;
  snprintf(dir, sizeof dir, "%s/manifests", s->home);
  if (!create && stat(dir, &st) != 0) {
    free(s);
    return pw_seterr(err, PW_ENOTFOUND, "no model store at %s", home);
  }
  int rc = mkdir_p(s->home, err);
  if (!rc) {
    snprintf(dir, sizeof dir, "%s/blobs", s->home);
    rc = mkdir_p(dir, err);
  }
  if (!rc) {
    snprintf(dir, sizeof dir, "%s/manifests", s->home);
    rc = mkdir_p(dir, err);
  }
  if (rc) {
    free(s);
    return rc;
  }
  *out = s;
  return PW_OK;
}

void store_destroy(store *s) {
  if (!s) return;
  if (s->lock_fd >= 0) close(s->lock_fd);
  free(s);
}

const char *store_home(const store *s) { return s->home; }

int store_lock(store *s, char *err) {
  if (s->lock_depth++ > 0) return PW_OK;
  char path[STORE_PATH_MAX];
  snprintf(path, sizeof path, "%s/.lock", s->home);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) {
    s->lock_depth = 0;
    return pw_seterr(err, PW_EIO, "store %s is not writable: %s", s->home, strerror(errno));
  }
  while (flock(fd, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    close(fd);
    s->lock_depth = 0;
    return pw_seterr(err, PW_EIO, "cannot lock %s: %s", path, strerror(errno));
  }
  s->lock_fd = fd;
  return PW_OK;
}

void store_unlock(store *s) {
  if (s->lock_depth <= 0 || --s->lock_depth > 0) return;
  if (s->lock_fd >= 0) close(s->lock_fd); /* closing drops the flock */
  s->lock_fd = -1;
}

static int name_char(int c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-'; }

int store_name_check(const char *name, char *out, char *err) {
  if (!name || !*name) return pw_seterr(err, PW_EINVAL, "empty model name");
  size_t n = strlen(name);
  if (n > STORE_NAME_MAX)
    return pw_seterr(err, PW_EINVAL, "model name longer than %d bytes", STORE_NAME_MAX);
  int colon = -1;
  for (size_t i = 0; i < n; i++) {
    int c = (unsigned char)name[i];
    if (c >= 'A' && c <= 'Z') c += 'a' - 'A';
    if (c == ':') {
      if (colon >= 0) return pw_seterr(err, PW_EINVAL, "model name '%s' has more than one ':'", name);
      colon = (int)i;
    } else if (!name_char(c)) {
      return pw_seterr(err, PW_EINVAL,
                       "invalid model name '%s': only letters, digits, '.', '_', '-' and one ':' before a tag", name);
    }
    out[i] = (char)c;
  }
  out[n] = 0;
  if (!((out[0] >= 'a' && out[0] <= 'z') || (out[0] >= '0' && out[0] <= '9')))
    return pw_seterr(err, PW_EINVAL, "invalid model name '%s': must start with a letter or digit", name);
  if (colon >= 0 && (colon + 1 == (int)n || out[colon + 1] == '.'))
    return pw_seterr(err, PW_EINVAL, "invalid model name '%s': bad tag after ':'", name);
  if (strstr(out, "..")) return pw_seterr(err, PW_EINVAL, "invalid model name '%s': '..'", name);
  return PW_OK;
}

void store_blob_path(const store *s, const char *digest, char *out) {
  snprintf(out, STORE_PATH_MAX, "%s/blobs/sha256-%s", s->home, digest);
}

int store_blob_exists(const store *s, const char *digest) {
  char p[STORE_PATH_MAX];
  store_blob_path(s, digest, p);
  struct stat st;
  return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

static void manifest_path(const store *s, const char *name, char *out) {
  snprintf(out, STORE_PATH_MAX, "%s/manifests/%s.json", s->home, name);
}

static int is_hex64(const char *h) {
  if (strlen(h) != 64) return 0;
  for (int i = 0; i < 64; i++)
    if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f'))) return 0;
  return 1;
}

static void copy_str(json_t *o, const char *key, char *dst, size_t cap) {
  const char *v = json_string_value(json_object_get(o, key));
  snprintf(dst, cap, "%s", v ? v : "");
}

int store_get(store *s, const char *name, store_manifest *m, char *err) {
  char norm[STORE_NAME_MAX + 1], path[STORE_PATH_MAX];
  int rc = store_name_check(name, norm, err);
  if (rc) return rc;
  manifest_path(s, norm, path);
  struct stat st;
  if (stat(path, &st) != 0) return pw_seterr(err, PW_ENOTFOUND, "model '%s' not found in %s", norm, s->home);
  if (st.st_size > MANIFEST_MAX_BYTES) return pw_seterr(err, PW_EFORMAT, "manifest %s is too large", path);
  json_error_t je;
  json_t *root = json_load_file(path, 0, &je);
  if (!root) return pw_seterr(err, PW_EFORMAT, "manifest %s: %s", path, je.text);
  memset(m, 0, sizeof *m);
  rc = PW_EFORMAT;
  json_t *blobs = json_object_get(root, "blobs");
  if (!json_is_object(root) || json_integer_value(json_object_get(root, "schema")) != 1 || !json_is_array(blobs) ||
      json_array_size(blobs) == 0 || json_array_size(blobs) > STORE_MAX_PARTS) {
    pw_seterr(err, rc, "manifest %s: not a schema 1 manifest", path);
    goto fail;
  }
  snprintf(m->name, sizeof m->name, "%s", norm);
  copy_str(root, "source", m->source, sizeof m->source);
  copy_str(root, "architecture", m->architecture, sizeof m->architecture);
  copy_str(root, "quantization", m->quantization, sizeof m->quantization);
  copy_str(root, "added", m->added, sizeof m->added);
  m->n_blobs = (int)json_array_size(blobs);
  m->size = 0;
  for (int i = 0; i < m->n_blobs; i++) {
    json_t *b = json_array_get(blobs, (size_t)i);
    const char *d = json_string_value(json_object_get(b, "digest"));
    json_t *sz = json_object_get(b, "size");
    if (!d || strncmp(d, "sha256:", 7) || !is_hex64(d + 7) || !json_is_integer(sz) || json_integer_value(sz) < 0) {
      pw_seterr(err, rc, "manifest %s: blob %d is malformed", path, i);
      goto fail;
    }
    memcpy(m->blobs[i].digest, d + 7, 65);
    m->blobs[i].size = (uint64_t)json_integer_value(sz);
    m->size += m->blobs[i].size;
  }
  rc = PW_OK;
fail:
  json_decref(root);
  return rc;
}

/* Writes the manifest atomically (temporary file, fsync, rename). The
 * caller holds the store lock. */
static int manifest_write(store *s, const store_manifest *m, const char *const *urls, char *err) {
  char path[STORE_PATH_MAX], tmp[STORE_PATH_MAX + 32];
  manifest_path(s, m->name, path);
  snprintf(tmp, sizeof tmp, "%s/manifests/.tmp-%ld", s->home, (long)getpid());
  json_t *blobs = json_array();
  for (int i = 0; i < m->n_blobs; i++) {
    char d[80];
    snprintf(d, sizeof d, "sha256:%s", m->blobs[i].digest);
    json_t *b = json_pack("{s:s,s:I}", "digest", d, "size", (json_int_t)m->blobs[i].size);
    if (b && urls && urls[i]) json_object_set_new(b, "url", json_string(urls[i]));
    json_array_append_new(blobs, b);
  }
  json_t *root = json_pack("{s:i,s:s,s:s,s:s,s:s,s:I,s:s,s:o}", "schema", 1, "name", m->name, "source", m->source,
                           "architecture", m->architecture, "quantization", m->quantization, "size",
                           (json_int_t)m->size, "added", m->added, "blobs", blobs);
  if (!root) return pw_seterr(err, PW_ENOMEM, "out of memory");
  char *text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  json_decref(root);
  if (!text) return pw_seterr(err, PW_ENOMEM, "out of memory");
  int rc = PW_OK;
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  size_t len = strlen(text);
  if (fd < 0 || write(fd, text, len) != (ssize_t)len || write(fd, "\n", 1) != 1 || fsync(fd) != 0) {
    rc = pw_seterr(err, PW_EIO, "cannot write %s: %s", tmp, strerror(errno));
    if (fd >= 0) close(fd);
    unlink(tmp);
  } else if (close(fd) != 0 || rename(tmp, path) != 0) {
    rc = pw_seterr(err, PW_EIO, "cannot write %s: %s", path, strerror(errno));
    unlink(tmp);
  }
  free(text);
  return rc;
}

static int cmp_manifest(const void *a, const void *b) {
  return strcmp(((const store_manifest *)a)->name, ((const store_manifest *)b)->name);
}

int store_list(store *s, store_manifest **out, size_t *n, char *err) {
  *out = NULL;
  *n = 0;
  char dir[STORE_PATH_MAX];
  snprintf(dir, sizeof dir, "%s/manifests", s->home);
  DIR *d = opendir(dir);
  if (!d) return pw_seterr(err, PW_EIO, "cannot read %s: %s", dir, strerror(errno));
  store_manifest *v = NULL;
  size_t cnt = 0, cap = 0;
  int rc = PW_OK;
  struct dirent *e;
  while ((e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (e->d_name[0] == '.' || len <= 5 || len - 5 > STORE_NAME_MAX || strcmp(e->d_name + len - 5, ".json")) continue;
    char name[STORE_NAME_MAX + 1], norm[STORE_NAME_MAX + 1], e2[PW_ERRMAX];
    memcpy(name, e->d_name, len - 5);
    name[len - 5] = 0;
    if (store_name_check(name, norm, e2) || strcmp(name, norm)) continue;
    if (cnt == cap) {
      size_t nc = cap ? cap * 2 : 16;
      store_manifest *nv = realloc(v, nc * sizeof *nv);
      if (!nv) {
        rc = pw_seterr(err, PW_ENOMEM, "out of memory");
        break;
      }
      v = nv;
      cap = nc;
    }
    if (store_get(s, name, &v[cnt], e2)) {
      pw_log(PW_LOG_WARN, "skipping %s", e2);
      continue;
    }
    cnt++;
  }
  closedir(d);
  if (rc) {
    free(v);
    return rc;
  }
  if (cnt) qsort(v, cnt, sizeof *v, cmp_manifest);
  *out = v;
  *n = cnt;
  return PW_OK;
}

/* Removes blobs of m that no manifest refers to. Caller holds the lock and
 * has already removed m's own manifest. */
static int gc_blobs(store *s, const store_manifest *m, char *err) {
  store_manifest *all;
  size_t n;
  int rc = store_list(s, &all, &n, err);
  if (rc) return rc;
  for (int i = 0; i < m->n_blobs; i++) {
    int used = 0;
    for (size_t j = 0; j < n && !used; j++)
      for (int k = 0; k < all[j].n_blobs && !used; k++) used = !strcmp(all[j].blobs[k].digest, m->blobs[i].digest);
    if (used) continue;
    char p[STORE_PATH_MAX];
    store_blob_path(s, m->blobs[i].digest, p);
    if (unlink(p) != 0 && errno != ENOENT) rc = pw_seterr(err, PW_EIO, "cannot remove %s: %s", p, strerror(errno));
  }
  free(all);
  return rc;
}

/* ---- split models: the loaders find a split's parts by llama.cpp's file
 * names (PREFIX-0000i-of-0000N.gguf), which blobs named by digest do not
 * have; a directory of links splits/<key>/model-0000i-of-0000N.gguf -> the
 * blobs gives them those names. <key> is 16 hex of the SHA-256 of the
 * parts' digests, so two splits never share a directory. */
static void split_links_dir(const store *s, const store_manifest *m, char *out) {
  pw_sha256_ctx *h = pw_sha256_begin();
  uint8_t d[32] = {0};
  char hex[65];
  if (h) {
    for (int i = 0; i < m->n_blobs; i++) pw_sha256_update(h, m->blobs[i].digest, 64);
    pw_sha256_end(h, d);
  }
  pw_hex(d, 8, hex);
  snprintf(out, STORE_PATH_MAX, "%s/splits/%s", s->home, hex);
}

static void split_links_rm(const store *s, const store_manifest *m) {
  char dir[STORE_PATH_MAX], p[STORE_PATH_MAX + 64];
  split_links_dir(s, m, dir);
  for (int i = 0; i < m->n_blobs; i++) {
    snprintf(p, sizeof p, "%s/model-%05d-of-%05d.gguf", dir, i + 1, m->n_blobs);
    unlink(p);
  }
  rmdir(dir);
}

static int split_links(const store *s, const store_manifest *m, char *out, char *err) {
  char dir[STORE_PATH_MAX], p[STORE_PATH_MAX + 64], blob[STORE_PATH_MAX], cur[STORE_PATH_MAX];
  split_links_dir(s, m, dir);
  snprintf(p, sizeof p, "%s/splits", s->home);
  if (mkdir(p, 0755) && errno != EEXIST) return pw_seterr(err, PW_EIO, "cannot create %s: %s", p, strerror(errno));
  if (mkdir(dir, 0755) && errno != EEXIST) return pw_seterr(err, PW_EIO, "cannot create %s: %s", dir, strerror(errno));
  for (int i = 0; i < m->n_blobs; i++) {
    store_blob_path(s, m->blobs[i].digest, blob);
    snprintf(p, sizeof p, "%s/model-%05d-of-%05d.gguf", dir, i + 1, m->n_blobs);
    ssize_t n = readlink(p, cur, sizeof cur - 1);
    if (n > 0 && (size_t)n == strlen(blob) && !memcmp(cur, blob, (size_t)n)) continue;
    unlink(p);
    /* concurrent resolves make the same link: EEXIST is theirs */
    if (symlink(blob, p) && errno != EEXIST)
      return pw_seterr(err, PW_EIO, "cannot link %s: %s", p, strerror(errno));
  }
  snprintf(out, STORE_PATH_MAX, "%.*s/model-%05d-of-%05d.gguf", STORE_PATH_MAX - 40, dir, 1, m->n_blobs);
  return PW_OK;
}

int store_rm(store *s, const char *name, char *err) {
  store_manifest m;
  int rc = store_lock(s, err);
  if (rc) return rc;
  if ((rc = store_get(s, name, &m, err))) goto fail;
  char path[STORE_PATH_MAX];
  manifest_path(s, m.name, path);
  if (unlink(path) != 0) {
    rc = pw_seterr(err, PW_EIO, "cannot remove %s: %s", path, strerror(errno));
    goto fail;
  }
  rc = gc_blobs(s, &m, err);
  if (!rc && m.n_blobs > 1 && !store_blob_exists(s, m.blobs[0].digest)) split_links_rm(s, &m);
fail:
  store_unlock(s);
  return rc;
}

static void now_iso(char *out, size_t cap) {
  time_t t = time(NULL);
  struct tm tm;
  gmtime_r(&t, &tm);
  strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

int store_cp(store *s, const char *src, const char *dst, char *err) {
  char norm[STORE_NAME_MAX + 1], path[STORE_PATH_MAX];
  int rc = store_name_check(dst, norm, err);
  if (rc) return rc;
  store_manifest m;
  if ((rc = store_lock(s, err))) return rc;
  if ((rc = store_get(s, src, &m, err))) goto fail;
  manifest_path(s, norm, path);
  if (access(path, F_OK) == 0) {
    rc = pw_seterr(err, PW_EINVAL, "model '%s' already exists (rm it first)", norm);
    goto fail;
  }
  snprintf(m.name, sizeof m.name, "%s", norm);
  now_iso(m.added, sizeof m.added);
  rc = manifest_write(s, &m, NULL, err);
fail:
  store_unlock(s);
  return rc;
}

/* llama.cpp's general.file_type values (LLAMA_FTYPE_MOSTLY_*). */
static const struct {
  uint32_t ftype;
  const char *label;
} k_ftypes[] = {{0, "F32"},     {1, "F16"},     {2, "Q4_0"},    {3, "Q4_1"},    {7, "Q8_0"},    {8, "Q5_0"},
                {9, "Q5_1"},    {10, "Q2_K"},   {11, "Q3_K_S"}, {12, "Q3_K_M"}, {13, "Q3_K_L"}, {14, "Q4_K_S"},
                {15, "Q4_K_M"}, {16, "Q5_K_S"}, {17, "Q5_K_M"}, {18, "Q6_K"},   {19, "IQ2_XXS"}, {20, "IQ2_XS"},
                {21, "Q2_K_S"}, {22, "IQ3_XS"}, {23, "IQ3_XXS"}, {24, "IQ1_S"}, {25, "IQ4_NL"}, {26, "IQ3_S"},
                {27, "IQ3_M"},  {28, "IQ2_S"},  {29, "IQ2_M"},  {30, "IQ4_XS"}, {31, "IQ1_M"},  {32, "BF16"},
                {36, "TQ1_0"},  {37, "TQ2_0"}};

const char *store_ftype_label(uint32_t ftype) {
  for (size_t i = 0; i < sizeof k_ftypes / sizeof k_ftypes[0]; i++)
    if (k_ftypes[i].ftype == ftype) return k_ftypes[i].label;
  return NULL;
}

int store_describe_gguf(const char *path, store_manifest *m, char *err) {
  gguf_file *f;
  char e2[PW_ERRMAX];
  /* the first part of a split holds the metadata: that file alone */
  if (gguf_open_file(path, &f, e2)) return pw_seterr(err, PW_EFORMAT, "not a valid GGUF file: %s", e2);
  m->architecture[0] = 0;
  gguf_get_cstr(f, "general.architecture", m->architecture, sizeof m->architecture);
  uint32_t ft;
  const char *label = gguf_get_u32(f, "general.file_type", &ft) ? store_ftype_label(ft) : NULL;
  if (label) snprintf(m->quantization, sizeof m->quantization, "%s", label);
  gguf_close(f);
  return PW_OK;
}

int store_commit(store *s, store_manifest *m, char *const *paths, const char *const *urls, char *err) {
  int rc = store_lock(s, err);
  if (rc) return rc;
  store_manifest old;
  char e2[PW_ERRMAX];
  int had_old = store_get(s, m->name, &old, e2) == PW_OK;
  for (int i = 0; i < m->n_blobs; i++) {
    char blob[STORE_PATH_MAX];
    store_blob_path(s, m->blobs[i].digest, blob);
    if (!paths[i] || !strcmp(paths[i], blob)) continue;
    if (store_blob_exists(s, m->blobs[i].digest)) {
      unlink(paths[i]); /* the same bytes are already there */
      continue;
    }
    if (rename(paths[i], blob) != 0) {
      rc = pw_seterr(err, PW_EIO, "cannot move %s to %s: %s", paths[i], blob, strerror(errno));
      goto fail;
    }
  }
  m->size = 0;
  for (int i = 0; i < m->n_blobs; i++) m->size += m->blobs[i].size;
  now_iso(m->added, sizeof m->added);
  rc = manifest_write(s, m, urls, err);
  if (!rc && had_old) rc = gc_blobs(s, &old, err);
fail:
  store_unlock(s);
  return rc;
}

/* Copies src to dst while hashing what is written. */
static int copy_hashed(const char *src, const char *dst, uint8_t digest[32], char *err) {
  int in = open(src, O_RDONLY | O_CLOEXEC), out = -1, rc = PW_OK;
  char *buf = malloc(1 << 20);
  pw_sha256_ctx *h = pw_sha256_begin();
  if (in < 0) {
    rc = pw_seterr(err, PW_EIO, "%s: %s", src, strerror(errno));
    goto fail;
  }
  if (!buf || !h) {
    rc = pw_seterr(err, PW_ENOMEM, "out of memory");
    goto fail;
  }
  out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    rc = pw_seterr(err, PW_EIO, "cannot write %s: %s", dst, strerror(errno));
    goto fail;
  }
  for (;;) {
    ssize_t n = read(in, buf, 1 << 20);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      rc = pw_seterr(err, PW_EIO, "%s: %s", src, strerror(errno));
      goto fail;
    }
    if (n == 0) break;
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(out, buf + off, (size_t)(n - off));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) {
        rc = pw_seterr(err, PW_EIO, "cannot write %s: %s", dst, strerror(errno));
        goto fail;
      }
      off += w;
    }
    pw_sha256_update(h, buf, (size_t)n);
  }
  if (fsync(out) != 0) {
    rc = pw_seterr(err, PW_EIO, "cannot write %s: %s", dst, strerror(errno));
    goto fail;
  }
  pw_sha256_end(h, digest);
  h = NULL;
fail:
  pw_sha256_free(h);
  free(buf);
  if (in >= 0) close(in);
  if (out >= 0) close(out);
  if (rc) unlink(dst);
  return rc;
}

/* Links (or copies) path into the store's tmp name while hashing it. */
static int import_one(const char *path, const char *tmp, store_blob *b, char *err) {
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
    return pw_seterr(err, PW_EIO, "%s: %s", path, errno ? strerror(errno) : "not a regular file");
  b->size = (uint64_t)st.st_size;
  /* One pass over the bytes either way: a hard link is hashed where it
   * lies, a copy is hashed as it is written. */
  unlink(tmp);
  uint8_t d[32];
  int rc = link(path, tmp) == 0 ? pw_sha256_file(tmp, d, err) : copy_hashed(path, tmp, d, err);
  if (rc) return rc;
  struct stat st2;
  if (stat(tmp, &st2) != 0 || (uint64_t)st2.st_size != b->size)
    return pw_seterr(err, PW_EIO, "%s changed while it was imported", path);
  pw_hex(d, 32, b->digest);
  return PW_OK;
}

int store_import(store *s, const char *path, const char *name, store_manifest *m, char *err) {
  char norm[STORE_NAME_MAX + 1], mpath[STORE_PATH_MAX];
  int rc = store_name_check(name, norm, err);
  if (rc) return rc;
  memset(m, 0, sizeof *m);
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode))
    return pw_seterr(err, PW_EIO, "%s: %s", path, errno ? strerror(errno) : "not a regular file");
  if ((rc = store_describe_gguf(path, m, err))) return rc;
  manifest_path(s, norm, mpath);
  if (access(mpath, F_OK) == 0) return pw_seterr(err, PW_EINVAL, "model '%s' already exists (rm it first)", norm);
  snprintf(m->name, sizeof m->name, "%s", norm);
  char real[STORE_PATH_MAX];
  snprintf(m->source, sizeof m->source, "import:%.2000s", realpath(path, real) ? real : path);
  /* the first part of a split model brings its other parts */
  gguf_file *f = NULL, **parts = NULL;
  char **names = NULL;
  int n = 0;
  if ((rc = gguf_open_file(path, &f, err))) return rc;
  rc = gguf_split_open_parts(path, f, &parts, &names, &n, err);
  gguf_close(f);
  free(parts);
  if (rc) return rc;
  if (n > STORE_MAX_PARTS) {
    gguf_split_free_names(names, n);
    return pw_seterr(err, PW_ELIMIT, "%s: a split of %d parts (the store takes at most %d)", path, n, STORE_MAX_PARTS);
  }
  m->n_blobs = n ? n : 1;
  char (*tmp)[STORE_PATH_MAX + 48] = calloc(STORE_MAX_PARTS, sizeof *tmp);
  char *paths[STORE_MAX_PARTS];
  int made = 0;
  if (!tmp) {
    gguf_split_free_names(names, n);
    return pw_seterr(err, PW_ENOMEM, "out of memory");
  }
  for (int i = 0; i < m->n_blobs && !rc; i++, made++) {
    snprintf(tmp[i], sizeof tmp[i], "%s/blobs/.import-%ld-%d", s->home, (long)getpid(), i);
    paths[i] = tmp[i];
    rc = import_one(n ? names[i] : path, tmp[i], &m->blobs[i], err);
  }
  gguf_split_free_names(names, n);
  if (rc) goto fail;
  if ((rc = store_lock(s, err))) goto fail;
  if (access(mpath, F_OK) == 0) rc = pw_seterr(err, PW_EINVAL, "model '%s' already exists (rm it first)", norm);
  else rc = store_commit(s, m, paths, NULL, err);
  store_unlock(s);
fail:
  for (int i = 0; i < made; i++) unlink(tmp[i]); /* after a commit they are gone already */
  free(tmp);
  return rc;
}

int store_find_url(store *s, const char *url, char *digest, uint64_t *size) {
  char dir[STORE_PATH_MAX];
  snprintf(dir, sizeof dir, "%s/manifests", s->home);
  DIR *d = opendir(dir);
  if (!d) return 0;
  int found = 0;
  struct dirent *e;
  while (!found && (e = readdir(d))) {
    size_t len = strlen(e->d_name);
    if (e->d_name[0] == '.' || len <= 5 || strcmp(e->d_name + len - 5, ".json")) continue;
    char path[STORE_PATH_MAX + 256];
    snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
    struct stat st;
    if (stat(path, &st) != 0 || st.st_size > MANIFEST_MAX_BYTES) continue;
    json_t *root = json_load_file(path, 0, NULL);
    json_t *blobs = json_object_get(root, "blobs");
    for (size_t i = 0; !found && i < json_array_size(blobs); i++) {
      json_t *b = json_array_get(blobs, i);
      const char *u = json_string_value(json_object_get(b, "url"));
      const char *dg = json_string_value(json_object_get(b, "digest"));
      json_int_t sz = json_integer_value(json_object_get(b, "size"));
      if (!u || strcmp(u, url) || !dg || strncmp(dg, "sha256:", 7) || !is_hex64(dg + 7)) continue;
      if (!store_blob_exists(s, dg + 7)) continue;
      memcpy(digest, dg + 7, 65);
      *size = (uint64_t)sz;
      found = 1;
    }
    json_decref(root);
  }
  closedir(d);
  return found;
}

int store_resolve(store *s, const char *name, char *out, char *err) {
  store_manifest m;
  int rc = store_get(s, name, &m, err);
  if (rc) return rc;
  for (int i = 0; i < m.n_blobs; i++)
    if (!store_blob_exists(s, m.blobs[i].digest))
      return pw_seterr(err, PW_ENOTFOUND, "model '%s': blob sha256-%.12s is missing from the store", m.name,
                       m.blobs[i].digest);
  if (m.n_blobs > 1) return split_links(s, &m, out, err);
  store_blob_path(s, m.blobs[0].digest, out);
  return PW_OK;
}
