/* A stored message in POP3's wire form for RETR and TOP (RFC 1939 section 3):
 * every line ends in CRLF (bare LFs as stored become CRLF, a bare CR stays a
 * plain byte), a line starting with "." gets one more ".", a message that
 * does not end in a line break gets a CRLF, and ".\r\n" ends the response.
 * TOP sends the header, the empty line after it and the first N lines of
 * the body (all of a message that has no empty line).
 *
 * The writer produces that in pieces of bounded size, so a large message is
 * sent without copying it whole; it reads the stored bytes it was given and
 * owns nothing. Pure: no I/O, no allocation beyond `out`. */
#ifndef PETREL_PROTOCOLS_POP3_BODY_H
#define PETREL_PROTOCOLS_POP3_BODY_H

#include "core/buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct pop3_body_writer {
    const char *data; /* the message as stored */
    size_t size;
    size_t pos;         /* next stored byte to send */
    bool at_line_start; /* the last byte sent ended a line (or nothing was sent) */
    uint64_t line_len;  /* stored bytes of the current line sent so far */
    bool top;           /* TOP: stop after the header and body_lines lines */
    bool in_header;
    uint64_t body_lines; /* TOP: body lines still to send */
    bool done;           /* the terminating ".\r\n" has been written */
};

/* Starts a writer over `size` stored bytes; `top` with `lines` for TOP. */
void pop3_body_init(struct pop3_body_writer *w, const char *data, size_t size, bool top,
                    uint64_t lines);
/* Appends the next piece of wire form to `out`: at least one byte and about
 * `max` bytes (a line break or the terminator may go a few bytes over).
 * Returns true once the terminator has been written; later calls append
 * nothing and return true. */
bool pop3_body_write(struct pop3_body_writer *w, struct buf *out, size_t max);

/* The message's size as RETR sends it, without byte-stuffing and without the
 * terminator: stored size plus one for every bare LF (IMAP's RFC822.SIZE,
 * the index's vsize). A missing final line break is not counted. */
uint64_t pop3_body_size(const char *data, size_t size);

#endif
