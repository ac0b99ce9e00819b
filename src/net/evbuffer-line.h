/* Taking one line at a time out of a libevent input buffer, with a bound on
 * its length: the framing the director's ring links and the monitor's
 * probes and director link share. */
#ifndef PETREL_NET_EVBUFFER_LINE_H
#define PETREL_NET_EVBUFFER_LINE_H

#include "core/buf.h"

#include <event2/buffer.h>

enum evbuffer_line_result {
    EVBUFFER_LINE_NONE,     /* no complete line yet, and no more than max_line bytes wait */
    EVBUFFER_LINE_OK,       /* `line` holds the next line */
    EVBUFFER_LINE_TOO_LONG, /* a line (complete or not) is over max_line bytes */
};

/* Moves the next line of `in` (ended as `style` says, see
 * evbuffer_search_eol) into `line` without its end, NUL-terminated, and
 * drains its end. On NONE and TOO_LONG nothing is taken. */
enum evbuffer_line_result evbuffer_line_take(struct evbuffer *in, enum evbuffer_eol_style style,
                                             size_t max_line, struct buf *line);

#endif
