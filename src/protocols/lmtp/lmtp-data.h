/* The DATA stream of an LMTP transaction (RFC 5321 4.5.2), no I/O: finds
 * the end marker CRLF "." CRLF, removes the dot a client added to lines
 * starting with one, and collects the message up to a size limit.
 *
 * Lines end only at CRLF: a bare LF or CR is message content, so a line
 * "." ended by a bare LF does not end the data (what an MTA in front of
 * Petrel would not take for the end either: no SMTP smuggling through
 * LMTP). The CRLF before the final "." belongs to the message. Bytes are
 * kept as sent otherwise (8-bit, NUL included).
 *
 * A message over the limit is read to its end all the same (the client
 * sends it anyway) but no more of it is kept: `too_big` tells the server to
 * refuse it, and whatever prefix the buffer holds then is to be dropped. */
#ifndef PETREL_PROTOCOLS_LMTP_LMTP_DATA_H
#define PETREL_PROTOCOLS_LMTP_LMTP_DATA_H

#include "core/buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum lmtp_data_state {
    LMTP_DATA_LINE_START,
    LMTP_DATA_DOT,    /* "." at a line start */
    LMTP_DATA_DOT_CR, /* "." CR at a line start */
    LMTP_DATA_IN_LINE,
    LMTP_DATA_CR, /* CR inside a line */
    LMTP_DATA_DONE,
};

struct lmtp_data {
    enum lmtp_data_state state;
    uint64_t max_size; /* bytes of message kept at most */
    uint64_t size;     /* message bytes seen (also past the limit) */
    bool too_big;
    struct buf *out; /* the caller's buffer; appended to */
};

/* Starts reading a message into `out` (not reset). */
void lmtp_data_init(struct lmtp_data *d, struct buf *out, uint64_t max_size);
/* Consumes bytes; *consumed tells how many (all of them unless the end
 * marker came first: what follows it is the client's next command).
 * Returns true once the end marker has been read. */
bool lmtp_data_feed(struct lmtp_data *d, const char *in, size_t len, size_t *consumed);

/* The other way, for a proxy passing a received message on: the message
 * bytes as the DATA stream, the exact inverse of lmtp_data_feed (a dot is
 * added to every line that starts with one, lines being what the decoder
 * takes for lines: ended by CRLF only), so decoding the output gives the
 * message back byte for byte. */
struct lmtp_data_encoder {
    enum lmtp_data_state state; /* LINE_START, IN_LINE or CR */
};

void lmtp_data_encoder_init(struct lmtp_data_encoder *e);
/* Appends `len` message bytes, dot-stuffed, to `out`. */
void lmtp_data_encode(struct lmtp_data_encoder *e, const char *in, size_t len, struct buf *out);
/* Appends the end marker: a CRLF first when the message did not end with
 * one (a message the decoder made always does, or is empty), then ".\r\n". */
void lmtp_data_encode_end(struct lmtp_data_encoder *e, struct buf *out);

#endif
