/* IMAP FETCH section contents (RFC 3501 6.4.5, RFC 3516 BINARY): BODY[section]
 * <partial> and BINARY[section]<partial> cut from a parsed message, always
 * in CRLF form whatever line ends the stored bytes use, plus the sizes
 * RFC822.SIZE and BINARY.SIZE report. Pure functions over the message. */
#ifndef PETREL_PROTOCOLS_IMAP_SECTION_H
#define PETREL_PROTOCOLS_IMAP_SECTION_H

#include "core/buf.h"
#include "core/error.h"
#include "storage/message/message-parser.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IMAP_SECTION_MAX_NUMBERS 128
#define IMAP_SECTION_MAX_FIELDS 64

enum imap_section_text {
    IMAP_SECTION_BODY, /* "" or a bare part number: the content */
    IMAP_SECTION_HEADER,
    IMAP_SECTION_HEADER_FIELDS,
    IMAP_SECTION_HEADER_FIELDS_NOT,
    IMAP_SECTION_TEXT,
    IMAP_SECTION_MIME,
};

struct imap_section_field {
    const char *name; /* borrowed from the parsed text */
    size_t len;
};

struct imap_section {
    unsigned numbers[IMAP_SECTION_MAX_NUMBERS];
    size_t number_count;
    enum imap_section_text text;
    struct imap_section_field fields[IMAP_SECTION_MAX_FIELDS];
    size_t field_count;
};

/* Parses what stands between the brackets: "", "1.2", "HEADER",
 * "2.HEADER.FIELDS (From To)", "1.MIME"... Field names point into `spec`.
 * False (with a message) for anything RFC 3501 does not allow. */
bool imap_section_parse(const char *spec, size_t len, struct imap_section *out,
                        struct petrel_error *err);

/* Appends the section's bytes (CRLF form) to `out`; with `partial` only the
 * `count` bytes from octet `start` (fewer near the end, none past it).
 * False (PETREL_ERR_NOT_FOUND) when the section addresses no part or a
 * HEADER/TEXT of a part that is not a message. */
bool imap_section_fetch(const struct message *msg, const struct imap_section *section, bool partial,
                        uint64_t start, uint64_t count, struct buf *out, struct petrel_error *err);

/* HEADER, HEADER.FIELDS or HEADER.FIELDS.NOT of the top-level message
 * (`section` has no part numbers) from its header block alone: `header` is
 * the stored bytes of the block through the blank line that ends it (or to
 * the end of the message when there is none), as message_parse() delimits
 * parts[0].header. Appends exactly what imap_section_fetch() appends for the
 * whole message, without parsing it. */
void imap_section_fetch_header(const char *header, size_t len, const struct imap_section *section,
                               bool partial, uint64_t start, uint64_t count, struct buf *out);

/* BINARY[numbers]<start.count>: the part's content with its
 * Content-Transfer-Encoding undone (base64, quoted-printable; 7bit, 8bit and
 * binary as they are, in CRLF form). PETREL_ERR_UNSUPPORTED for an unknown
 * encoding (IMAP [UNKNOWN-CTE]), PETREL_ERR_NOT_FOUND for no such part. */
bool imap_section_binary(const struct message *msg, const unsigned *numbers, size_t count,
                         bool partial, uint64_t start, uint64_t len, struct buf *out,
                         struct petrel_error *err);

/* BINARY.SIZE[numbers]: the decoded size; errors as imap_section_binary(). */
bool imap_section_binary_size(const struct message *msg, const unsigned *numbers, size_t count,
                              uint64_t *size, struct petrel_error *err);

/* RFC822.SIZE: the whole message in CRLF form. */
uint64_t imap_section_rfc822_size(const struct message *msg);

#endif
