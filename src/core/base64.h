/* Standard base64 (RFC 4648, with padding). Decoding is strict: only the
 * standard alphabet, correct padding, no whitespace; so a value that round
 * trips is exactly what the client meant. */
#ifndef PETREL_CORE_BASE64_H
#define PETREL_CORE_BASE64_H

#include "core/buf.h"

#include <stdbool.h>
#include <stddef.h>

void base64_encode_append(struct buf *out, const void *data, size_t len);
/* The 6-bit value of a character of the standard alphabet, -1 for any other. */
int base64_char_value(char c);
/* Appends the decoded bytes to `out`; false (out unchanged) on invalid input. */
bool base64_decode_append(struct buf *out, const char *text, size_t len);

#endif
