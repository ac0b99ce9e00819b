/* A borrowed run of bytes ({ptr, len}, not NUL-terminated) and the strict
 * number parsers every protocol wants: digits only, no sign unless asked,
 * no white space, no locale, overflow checked against a caller's maximum.
 * strtol and friends accept " +12", "0x1f" and silently clamp; a wire
 * format must not. */
#ifndef PETREL_CORE_SLICE_H
#define PETREL_CORE_SLICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

struct slice {
    const char *ptr;
    size_t len;
};

/* The whole NUL-terminated string `s`. */
struct slice slice_of(const char *s);
/* Byte-wise equality with a NUL-terminated string; _ci folds ASCII case.
 * Inline: callers compare against literals (HTTP header names, methods),
 * whose strlen the compiler then folds; out of line it cost the HTTP
 * server a strlen and a call per header and candidate name. */
static inline bool slice_eq(struct slice s, const char *text)
{
    return strlen(text) == s.len && (s.len == 0 || memcmp(s.ptr, text, s.len) == 0);
}

static inline bool slice_eq_ci(struct slice s, const char *text)
{
    return strlen(text) == s.len && (s.len == 0 || strncasecmp(s.ptr, text, s.len) == 0);
}

/* One or more decimal digits, at most `max`. Leading zeros are allowed. */
bool slice_parse_u64(struct slice s, uint64_t max, uint64_t *out);
/* An optional '-' or '+', then decimal digits, within [min, max]. */
bool slice_parse_i64(struct slice s, int64_t min, int64_t max, int64_t *out);
/* One or more hex digits (either case), at most `max`. */
bool slice_parse_hex_u64(struct slice s, uint64_t max, uint64_t *out);

/* The same on NUL-terminated strings (an embedded NUL ends the text). */
bool str_parse_u64(const char *s, uint64_t max, uint64_t *out);
bool str_parse_i64(const char *s, int64_t min, int64_t max, int64_t *out);

/* 0-15 for a hex digit, -1 for anything else. Inline: the maildir
 * .recent claim parses its records with it by hand, for speed. */
static inline int hex_digit_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Whether `s` matches `pattern`, where `*` stands for any run of
 * characters and `?` for one; ASCII case folded when `fold_case`. */
bool str_glob_match(const char *pattern, const char *s, bool fold_case);

#endif
