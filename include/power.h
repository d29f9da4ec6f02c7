/* power.h - public API of libpower, a listener-free LLM inference library.
 *
 * libpower loads GGUF models and runs them on the CPU. It opens no socket and
 * downloads nothing. Every fallible call returns 0 or a negative pw_status and
 * can write a one-line reason into a caller buffer of PW_ERRMAX bytes.
 */
#ifndef POWER_H
#define POWER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PW_ERRMAX 256

/* One table for every status code: X(name, value, message). */
#define PW_STATUS_TABLE(X)                                              \
  X(PW_OK, 0, "ok")                                                     \
  X(PW_EINVAL, -1, "invalid argument")                                  \
  X(PW_ENOMEM, -2, "out of memory")                                     \
  X(PW_EIO, -3, "input/output error")                                   \
  X(PW_EFORMAT, -4, "malformed file")                                   \
  X(PW_EUNSUPPORTED, -5, "unsupported")                                 \
  X(PW_ERANGE, -6, "value out of range")                                \
  X(PW_ENOTFOUND, -7, "not found")                                      \
  X(PW_ECANCELED, -8, "cancelled")                                      \
  X(PW_ETIMEOUT, -9, "deadline exceeded")                               \
  X(PW_EBUSY, -10, "overloaded")                                        \
  X(PW_ETEMPLATE, -11, "template error")                                \
  X(PW_ECONTEXT, -12, "context length exceeded")                        \
  X(PW_ELIMIT, -13, "limit exceeded")                                   \
  X(PW_EINTERNAL, -14, "internal error")

typedef enum pw_status {
#define PW_X_ENUM(name, value, msg) name = value,
  PW_STATUS_TABLE(PW_X_ENUM)
#undef PW_X_ENUM
} pw_status;

/* Static description of a status code; never NULL. */
const char *pw_strerror(int status);

/* Library version string, e.g. "0.1.0". */
const char *pw_version(void);

#ifdef __cplusplus
}
#endif
#endif
