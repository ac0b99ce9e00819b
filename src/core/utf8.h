/* UTF-8 decoding and encoding (RFC 3629: no overlong forms, no surrogates,
 * nothing above U+10FFFF). */
#ifndef PETREL_CORE_UTF8_H
#define PETREL_CORE_UTF8_H

#include "core/buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decodes the code point at p (at most `avail` bytes): returns its length
 * (1-4) and sets *cp, or returns 0 for an invalid or cut sequence. */
size_t utf8_decode(const unsigned char *p, size_t avail, uint32_t *cp);
/* Appends the encoding of `cp` (must be a valid scalar value). */
void utf8_encode(uint32_t cp, struct buf *out);
/* True when all `len` bytes are valid UTF-8. */
bool utf8_valid(const char *s, size_t len);

#endif
