/* MIME message parsing over a message held in memory (no I/O, fuzzable).
 * message_parse() reads the RFC 5322 header block and the MIME tree
 * (multipart, message/rfc822 and message/global) of the stored bytes, LF or
 * CRLF line ends alike, and records for every part where its header and body
 * lie plus the line counts that give the size IMAP reports in CRLF form.
 * Malformed input is never an error: whatever cannot be structured (depth,
 * part or header caps reached, boundaries missing) stays opaque body. The
 * parse is linear in the message size times the nesting depth.
 * The message bytes are borrowed: they must outlive the struct message. */
#ifndef PETREL_STORAGE_MESSAGE_PARSER_H
#define PETREL_STORAGE_MESSAGE_PARSER_H

#include "core/buf.h"

#include <stdbool.h>
#include <stddef.h>

#define MESSAGE_DEFAULT_MAX_DEPTH 100
#define MESSAGE_DEFAULT_MAX_PARTS 10000
#define MESSAGE_DEFAULT_MAX_HEADERS 1000
/* Longer boundaries are not RFC 2046 (70 at most): such a multipart is opaque. */
#define MESSAGE_MAX_BOUNDARY 200
/* Parameters kept per Content-Type / Content-Disposition, languages per
 * Content-Language: the rest is ignored. */
#define MESSAGE_MAX_PARAMS 100
#define MESSAGE_PART_NONE ((size_t)-1)

struct message_limits {
    unsigned max_depth; /* nested multipart / message levels below the root */
    size_t max_parts;   /* parts in the whole tree, root included */
    size_t max_headers; /* header fields interpreted per header block */
};

/* A byte range of the stored message with what converting it to CRLF form
 * needs: each LF without a CR before it becomes CRLF. */
struct message_range {
    size_t start;   /* offset in the stored message */
    size_t len;     /* bytes in the stored form */
    size_t lines;   /* LF characters inside */
    size_t bare_lf; /* LFs not preceded by CR */
};

struct message_param {
    char *name;
    char *value;
};

enum message_part_kind {
    MESSAGE_PART_LEAF,      /* any other type, or a container beyond the caps */
    MESSAGE_PART_MULTIPART, /* children are the body parts */
    MESSAGE_PART_MESSAGE,   /* message/rfc822 or message/global: one child, the
                               encapsulated message (its header and body) */
};

struct message_part {
    size_t parent; /* index into message.parts, MESSAGE_PART_NONE for the root */
    size_t first_child;
    size_t next_sibling;
    size_t child_count;
    unsigned depth;
    enum message_part_kind kind;
    /* True for the root and for a message/rfc822 part's child: the header is
     * an RFC 5322 message header (ENVELOPE applies). */
    bool is_message;
    /* The header block including the blank line that ends it (when there is
     * one); the body follows it and, inside a multipart, ends before the line
     * end that precedes the next boundary line. */
    struct message_range header;
    struct message_range body;
    /* Content-Type as sent (case kept); defaults filled in: text/plain, or
     * message/rfc822 inside multipart/digest. Never NULL. */
    char *type;
    char *subtype;
    bool has_content_type;
    struct message_param *params; /* RFC 2231 continuations joined */
    size_t param_count;
    /* The other Content-* fields, unfolded and trimmed; NULL when absent. */
    char *encoding;
    char *id;
    char *description;
    char *md5;
    char *location;
    char *disposition;
    struct message_param *disposition_params;
    size_t disposition_param_count;
    char **languages;
    size_t language_count;
};

struct message {
    const char *data; /* borrowed */
    size_t len;
    struct message_part *parts; /* pre-order; parts[0] is the whole message */
    size_t part_count;
    bool hit_limit; /* some structure was left opaque because of a cap */
};

/* Fills `limits` with the MESSAGE_DEFAULT_* values. */
void message_limits_default(struct message_limits *limits);

/* Parses `len` bytes at `data` into `out` (`limits` NULL for the defaults).
 * Never fails; free the result with message_free(). */
void message_parse(const char *data, size_t len, const struct message_limits *limits,
                   struct message *out);
void message_free(struct message *msg);

/* The root header block exactly as message_parse finds it (parts[0].header)
 * without parsing anything else: from the start through the first empty
 * line, or the whole message when there is none. */
struct message_range message_header_block(const char *data, size_t len);

/* The size of `range` in CRLF form (what IMAP reports). */
size_t message_range_crlf_size(const struct message_range *range);

/* Case-insensitive parameter lookup; the value or NULL. */
const char *message_param_find(const struct message_param *params, size_t count, const char *name);

/* True when the part's Content-Type is `type`/`subtype` (case-insensitive;
 * a NULL subtype matches any). */
bool message_part_is(const struct message_part *part, const char *type, const char *subtype);

/* IMAP part numbering (RFC 3501 6.4.5): follows `count` part numbers from
 * the root. A non-multipart message (or encapsulated message) is its own
 * part 1; numbers after a message/rfc822 part address the encapsulated
 * message's parts. Returns the part index or MESSAGE_PART_NONE. */
size_t message_part_by_number(const struct message *msg, const unsigned *numbers, size_t count);

/* The encapsulated message of a message/rfc822 part, the part itself for
 * the root or an encapsulated message; MESSAGE_PART_NONE otherwise. This is
 * what HEADER and TEXT sections of `part` address. */
size_t message_part_message(const struct message *msg, size_t part);

/* One header field as found in a header block: slices of the stored bytes. */
struct message_header_field {
    size_t start; /* the field's first byte */
    size_t len;   /* through the line end of its last line */
    size_t name_start;
    size_t name_len;    /* trailing blanks before the colon excluded */
    size_t value_start; /* after the colon and leading blanks */
    size_t value_len;   /* through its last line's content, line ends inside kept */
    bool has_colon;     /* false: a line that is not a field (name = the line) */
};

/* Iterates the fields of the header block `header`: starts at *pos (set it
 * to header->start first) and advances it. False once the block ends (at
 * the blank line or the end of the range). */
bool message_header_next(const char *data, const struct message_range *header, size_t *pos,
                         struct message_header_field *out);

/* True when the field's name equals `name` (case-insensitive). */
bool message_header_is(const char *data, const struct message_header_field *field,
                       const char *name);

/* Appends `len` bytes at `value` with line ends removed (RFC 5322 unfolding);
 * NUL bytes become spaces so the result is safe as a C string. */
void message_header_unfold(struct buf *out, const char *value, size_t len);

#endif
