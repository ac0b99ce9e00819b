/* DATA stream decoding (see lmtp-data.h). Runs of ordinary line content
 * are copied in one piece; only line starts and CRs take the slow path. */
#include "protocols/lmtp/lmtp-data.h"

#include <string.h>

void lmtp_data_init(struct lmtp_data *d, struct buf *out, uint64_t max_size)
{
    memset(d, 0, sizeof(*d));
    d->state = LMTP_DATA_LINE_START;
    d->max_size = max_size;
    d->out = out;
}

static void put(struct lmtp_data *d, const char *p, size_t n)
{
    d->size += n;
    if (d->too_big)
        return;
    if (d->size > d->max_size) {
        d->too_big = true;
        return;
    }
    buf_append(d->out, p, n);
}

/* Next state after emitting the ordinary content byte `c`. */
static enum lmtp_data_state after(char c, enum lmtp_data_state in_line)
{
    if (c == '\r')
        return LMTP_DATA_CR;
    return in_line;
}

bool lmtp_data_feed(struct lmtp_data *d, const char *in, size_t len, size_t *consumed)
{
    size_t i = 0;
    while (i < len && d->state != LMTP_DATA_DONE) {
        char c = in[i];
        switch (d->state) {
        case LMTP_DATA_LINE_START:
        case LMTP_DATA_DOT:
            /* A line's leading dot is held back; after it a CR may end the
             * data, anything else means the dot was stuffed (dropped) and c
             * starts the line's content. */
            if (d->state == LMTP_DATA_LINE_START && c == '.')
                d->state = LMTP_DATA_DOT;
            else if (d->state == LMTP_DATA_DOT && c == '\r')
                d->state = LMTP_DATA_DOT_CR;
            else {
                put(d, &c, 1);
                d->state = after(c, LMTP_DATA_IN_LINE);
            }
            i++;
            break;
        case LMTP_DATA_DOT_CR:
            if (c == '\n') {
                d->state = LMTP_DATA_DONE;
                i++;
                break;
            }
            /* "." CR then more: the dot was stuffed, the CR is content. */
            put(d, "\r", 1);
            d->state = LMTP_DATA_CR;
            break; /* c is handled in the CR state */
        case LMTP_DATA_CR:
            put(d, &c, 1);
            d->state = c == '\n' ? LMTP_DATA_LINE_START : after(c, LMTP_DATA_IN_LINE);
            i++;
            break;
        case LMTP_DATA_IN_LINE: {
            const char *cr = memchr(in + i, '\r', len - i);
            size_t run = cr != NULL ? (size_t)(cr - (in + i)) + 1 : len - i;
            put(d, in + i, run);
            i += run;
            if (cr != NULL)
                d->state = LMTP_DATA_CR;
            break;
        }
        case LMTP_DATA_DONE:
            break;
        }
    }
    *consumed = i;
    return d->state == LMTP_DATA_DONE;
}

void lmtp_data_encoder_init(struct lmtp_data_encoder *e)
{
    e->state = LMTP_DATA_LINE_START;
}

void lmtp_data_encode(struct lmtp_data_encoder *e, const char *in, size_t len, struct buf *out)
{
    size_t i = 0;
    while (i < len) {
        if (in[i] == '\n') {
            /* A bare LF goes out as CRLF: a backend that also ends lines
             * at a bare LF (Postfix, Dovecot's LMTP) must see the same
             * lines as the stuffing below, or "\n.\r\n" would end the
             * message there and the rest run as commands (smuggling). */
            buf_append_str(out, e->state == LMTP_DATA_CR ? "\n" : "\r\n");
            e->state = LMTP_DATA_LINE_START;
            i++;
            continue;
        }
        if (e->state == LMTP_DATA_LINE_START && in[i] == '.')
            buf_append_char(out, '.');
        /* The rest of the line up to its LF, or up to (and with) a CR
         * before it, in one piece. */
        const char *lf = memchr(in + i, '\n', len - i);
        size_t limit = lf != NULL ? (size_t)(lf - (in + i)) : len - i;
        const char *cr = memchr(in + i, '\r', limit);
        size_t run = cr != NULL ? (size_t)(cr - (in + i)) + 1 : limit;
        buf_append(out, in + i, run);
        i += run;
        e->state = cr != NULL ? LMTP_DATA_CR : LMTP_DATA_IN_LINE;
    }
}

void lmtp_data_encode_end(struct lmtp_data_encoder *e, struct buf *out)
{
    if (e->state != LMTP_DATA_LINE_START)
        buf_append_str(out, e->state == LMTP_DATA_CR ? "\n" : "\r\n");
    buf_append_str(out, ".\r\n");
    e->state = LMTP_DATA_LINE_START;
}
