/* POP3 wire form of a stored message (see pop3-body.h). */
#include "protocols/pop3/pop3-body.h"

#include <string.h>

void pop3_body_init(struct pop3_body_writer *w, const char *data, size_t size, bool top,
                    uint64_t lines)
{
    *w = (struct pop3_body_writer){.data = data,
                                   .size = size,
                                   .at_line_start = true,
                                   .top = top,
                                   .in_header = true,
                                   .body_lines = lines};
}

static void finish(struct pop3_body_writer *w, struct buf *out)
{
    if (!w->at_line_start)
        buf_append(out, "\r\n", 2);
    buf_append(out, ".\r\n", 3);
    w->done = true;
}

bool pop3_body_write(struct pop3_body_writer *w, struct buf *out, size_t max)
{
    size_t start = out->len;
    if (max == 0)
        max = 1;
    while (!w->done) {
        size_t used = out->len - start;
        if (used >= max)
            break;
        if (w->at_line_start) {
            if ((w->top && !w->in_header && w->body_lines == 0) || w->pos >= w->size) {
                finish(w, out);
                break;
            }
            if (w->data[w->pos] == '.')
                buf_append_char(out, '.');
            w->at_line_start = false;
            w->line_len = 0;
            used = out->len - start;
        }
        if (w->pos >= w->size) {
            finish(w, out); /* the message ends inside a line */
            break;
        }
        if (used >= max)
            break;
        size_t budget = max - used;
        size_t avail = w->size - w->pos;
        const char *from = w->data + w->pos;
        const char *lf = memchr(from, '\n', avail);
        size_t before = lf != NULL ? (size_t)(lf - from) : avail;
        if (lf == NULL || before >= budget) {
            size_t n = before < budget ? before : budget;
            buf_append(out, from, n);
            w->pos += n;
            w->line_len += n;
            continue;
        }
        size_t at = w->pos + before;
        bool crlf = at > 0 && w->data[at - 1] == '\r';
        if (crlf) {
            buf_append(out, from, before + 1);
        } else {
            buf_append(out, from, before);
            buf_append(out, "\r\n", 2);
        }
        uint64_t content = w->line_len + before - (crlf ? 1 : 0);
        w->pos = at + 1;
        w->at_line_start = true;
        if (w->top) {
            if (w->in_header) {
                if (content == 0)
                    w->in_header = false;
            } else if (w->body_lines > 0) {
                w->body_lines--;
            }
        }
    }
    return w->done;
}

uint64_t pop3_body_size(const char *data, size_t size)
{
    uint64_t n = size;
    const char *p = data;
    const char *end = data + size;
    while (p < end) {
        const char *lf = memchr(p, '\n', (size_t)(end - p));
        if (lf == NULL)
            break;
        if (lf == data || lf[-1] != '\r')
            n++;
        p = lf + 1;
    }
    return n;
}
