#include "protocols/imap/imap-quote.h"

#include "protocols/imap/imap-date.h"

#include <string.h>
#include <strings.h>

static bool quotable(const char *s, size_t len, unsigned flags)
{
    if (len > IMAP_QUOTE_MAX_QUOTED)
        return false;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\r' || c == '\n' || c == '\0')
            return false;
        if (c >= 0x80 && (flags & IMAP_QUOTE_UTF8) == 0)
            return false;
    }
    return true;
}

static bool is_astring_char(unsigned char c)
{
    return c > 0x20 && c < 0x7f && c != '(' && c != ')' && c != '{' && c != '"' && c != '\\' &&
           c != '%' && c != '*';
}

void imap_quote_string(struct buf *out, const char *s, size_t len, unsigned flags)
{
    if (!quotable(s, len, flags)) {
        buf_printf(out, "{%zu}\r\n", len);
        size_t at = out->len;
        buf_append(out, s, len);
        /* No NUL in a literal (RFC 3501): 0x80 stands in, as in BODY[]. */
        for (char *p = out->data + at; (p = memchr(p, '\0', out->len - (size_t)(p - out->data)));)
            *p++ = (char)0x80;
        return;
    }
    buf_append_char(out, '"');
    size_t run = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '"' || s[i] == '\\') {
            buf_append(out, s + run, i - run);
            buf_append_char(out, '\\');
            run = i;
        }
    }
    buf_append(out, s + run, len - run);
    buf_append_char(out, '"');
}

void imap_quote_nstring(struct buf *out, const char *s, size_t len, unsigned flags)
{
    if (s == NULL)
        buf_append_str(out, "NIL");
    else
        imap_quote_string(out, s, len, flags);
}

void imap_quote_astring(struct buf *out, const char *s, size_t len, unsigned flags)
{
    bool atom =
        len > 0 && len <= IMAP_QUOTE_MAX_QUOTED && !(len == 3 && strncasecmp(s, "NIL", 3) == 0);
    for (size_t i = 0; atom && i < len; i++)
        atom = is_astring_char((unsigned char)s[i]);
    if (atom)
        buf_append(out, s, len);
    else
        imap_quote_string(out, s, len, flags);
}

void imap_quote_mailbox(struct buf *out, const char *name, unsigned flags)
{
    imap_quote_string(out, name, strlen(name), flags);
}

void imap_quote_datetime(struct buf *out, int64_t t, int tz_minutes)
{
    buf_append_char(out, '"');
    imap_datetime_format(out, t, tz_minutes);
    buf_append_char(out, '"');
}
