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

/* Emits the ordinary content byte `c`: a CR may start a line end. */
static void content(struct lmtp_data *d, char c)
{
    put(d, &c, 1);
    d->state = c == '\r' ? LMTP_DATA_CR : LMTP_DATA_IN_LINE;
}

bool lmtp_data_feed(struct lmtp_data *d, const char *in, size_t len, size_t *consumed)
{
    size_t i = 0;
    while (i < len && d->state != LMTP_DATA_DONE) {
        char c = in[i];
        switch (d->state) {
        case LMTP_DATA_LINE_START: /* a dot may begin the end line */
        case LMTP_DATA_DOT:        /* then a CR; anything else follows a stuffed dot (dropped) */
            if (d->state == LMTP_DATA_LINE_START && c == '.')
                d->state = LMTP_DATA_DOT;
            else if (d->state == LMTP_DATA_DOT && c == '\r')
                d->state = LMTP_DATA_DOT_CR;
            else
                content(d, c);
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
            content(d, c);
            if (c == '\n')
                d->state = LMTP_DATA_LINE_START;
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
