/* The framing shared by Petrel's TAB-separated line protocols (the auth
 * protocol, docs/auth-protocol.md, and the warden protocol,
 * docs/warden-protocol.md): one message per LF-terminated line, fields
 * separated by TAB, each field escaped so that it can hold any byte but NUL:
 *
 *   backslash -> `\\`   TAB -> `\t`   LF -> `\n`   CR -> `\r`
 *
 * Every other byte (control characters, bytes >= 128, invalid UTF-8)
 * travels as itself. On reading, a backslash before anything else, a
 * backslash at the end of the line, a raw NUL byte and an empty line are
 * errors. Parameters are fields `key=value` (split at the first '=').
 *
 * This module only frames: each protocol keeps its verbs, its grammar and
 * its limits (passed in) in its own file. It keeps no state. */
#ifndef PETREL_NET_LINE_FIELDS_H
#define PETREL_NET_LINE_FIELDS_H

#include "core/buf.h"
#include "core/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a protocol accepts when it splits a line. */
struct line_fields_limits {
    size_t max_len;    /* bytes per line, escaped, without the LF */
    size_t max_fields; /* fields per line: the capacity of the caller's array */
    /* How `\0` is refused: true, as an "escaped NUL (fields cannot hold
     * NUL)" (the auth protocol's wording); false, as any other "bad escape"
     * (the warden's). Either way the line is refused. */
    bool name_escaped_nul;
};

/* Splits one line (without its LF) in place and unescapes each field into
 * fields[0..*count). line[len] must be writable (the LF's place): it ends
 * the last field. The fields point into `line`, NUL-terminated. False with a
 * reason in err (*count then says how far the split got): empty, longer than max_len, more
 * than max_fields fields, a NUL byte, a bad escape, a backslash at the end. */
bool line_fields_split(char *line, size_t len, const struct line_fields_limits *limits,
                       char **fields, size_t *count, struct petrel_error *err);

/* Appends `field` escaped; a TAB goes before it unless `out` is empty or
 * ends with LF (the start of a line: lines start with a verb, never empty). */
void line_fields_add(struct buf *out, const char *field);
/* Appends "key=value" as one field, key and value escaped. */
void line_fields_add_param(struct buf *out, const char *key, const char *value);
/* Appends a decimal number as one field. */
void line_fields_add_uint(struct buf *out, uint64_t value);
/* Ends the line (LF). */
void line_fields_end(struct buf *out);

/* The value of the first parameter `key` among fields[first..count), or
 * NULL. With `flags`, a field that is exactly `key` (a flag such as
 * "temp") matches too and gives "". */
const char *line_fields_param(char *const *fields, size_t count, size_t first, const char *key,
                              bool flags);

/* Ids and tokens: 1..max bytes of [A-Za-z0-9_.-] or of `extra` (a string
 * of further allowed characters, "" for none). */
bool line_fields_token_valid(const char *s, size_t max, const char *extra);

#endif
