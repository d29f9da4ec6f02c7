/* jcs.h - canonical JSON as RFC 8785 (JSON Canonicalization Scheme) over
 * jansson values, and SHA-256 digests of it.
 *
 * What it is: the one serialization that evidence digests are taken over.
 * Object members sorted by their names' UTF-16 code units; no white space;
 * strings with the shortest escapes JCS allows (\" \\ \b \f \n \r \t,
 * other controls as \u00xx, everything else as literal UTF-8); numbers as
 * ECMAScript's Number.prototype.toString prints the IEEE double (shortest
 * digits that read back to the same double, exponent form below 1e-6 and
 * from 1e21, "-0" as "0").
 * What it is not: a parser (jansson parses), a pretty-printer.
 *
 * Integers: JCS knows only doubles, so a jansson integer is printed as the
 * double nearest to it, as any JCS implementation would after parsing the
 * same text; integers beyond 2^53 therefore lose their low bits. Values the
 * receipts must keep exactly (seeds, sizes) are stored as strings or are
 * far below 2^53. NaN and infinities have no JSON form: PW_EINVAL. */
#ifndef PW_EVIDENCE_JCS_H
#define PW_EVIDENCE_JCS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define JCS_MAX_DEPTH 512 /* nesting levels accepted (arrays and objects) */

/* The canonical text of v. *out is malloc'ed, NUL-terminated, owned by the
 * caller; *len excludes the NUL. 0, or PW_EINVAL (non-finite number,
 * invalid UTF-8, nesting deeper than JCS_MAX_DEPTH) / PW_ENOMEM with err set. */
int jcs_encode(const json_t *v, char **out, size_t *len, char *err);
/* SHA-256 of the canonical text of v. */
int jcs_sha256(const json_t *v, uint8_t out[32], char *err);
/* The same as lowercase hex (65 bytes with the NUL). */
int jcs_sha256_hex(const json_t *v, char hex[65], char *err);
/* ECMAScript's form of x into buf (at least 32 bytes). PW_EINVAL for NaN
 * and infinities. */
int jcs_number(double x, char *buf, size_t cap);

#endif
