/* One bounded line out of an evbuffer (evbuffer-line.h). */
#include "net/evbuffer-line.h"

enum evbuffer_line_result evbuffer_line_take(struct evbuffer *in, enum evbuffer_eol_style style,
                                             size_t max_line, struct buf *line)
{
    size_t eol_len = 0;
    struct evbuffer_ptr eol = evbuffer_search_eol(in, NULL, &eol_len, style);
    if (eol.pos < 0)
        return evbuffer_get_length(in) > max_line ? EVBUFFER_LINE_TOO_LONG : EVBUFFER_LINE_NONE;
    size_t len = (size_t)eol.pos;
    if (len > max_line)
        return EVBUFFER_LINE_TOO_LONG;
    buf_reset(line);
    buf_reserve(line, len);
    evbuffer_remove(in, line->data, len);
    evbuffer_drain(in, eol_len);
    line->len = len;
    line->data[len] = '\0';
    return EVBUFFER_LINE_OK;
}
