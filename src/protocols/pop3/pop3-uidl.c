/* POP3 unique-id formats (see pop3-uidl.h). */
#include "protocols/pop3/pop3-uidl.h"

#include <stdio.h>
#include <string.h>

#define UIDL_MAX_WIDTH 20

/* Walks `format`; with `out` appends the expansion. Returns false (with
 * `err` when given) on a bad format. *longest is the longest expansion. */
static bool walk(const char *format, uint32_t uid, uint32_t uid_validity, struct buf *out,
                 size_t *longest, bool *has_uid, struct petrel_error *err)
{
    size_t len = 0;
    *has_uid = false;
    for (const char *p = format; *p != '\0'; p++) {
        unsigned char c = (unsigned char)*p;
        if (c != '%') {
            if (c < 0x21 || c > 0x7e)
                return petrel_error_set(err, PETREL_ERR_INVALID,
                                        "only printable ASCII without spaces is allowed");
            if (out != NULL)
                buf_append_char(out, (char)c);
            len++;
            continue;
        }
        p++;
        if (*p == '%') {
            if (out != NULL)
                buf_append_char(out, '%');
            len++;
            continue;
        }
        bool zero = false;
        if (*p == '0') {
            zero = true;
            p++;
        }
        unsigned width = 0;
        int digits = 0;
        while (*p >= '0' && *p <= '9' && digits < 3) {
            width = width * 10 + (unsigned)(*p - '0');
            p++;
            digits++;
        }
        bool hex = false;
        if (*p == 'X') {
            hex = true;
            p++;
        }
        if ((*p != 'u' && *p != 'v') || width > UIDL_MAX_WIDTH)
            return petrel_error_set(err, PETREL_ERR_INVALID,
                                    "unknown variable (use %%u, %%v, %%Xu, %%08Xu, %%%%; "
                                    "widths up to %d)",
                                    UIDL_MAX_WIDTH);
        uint32_t value = *p == 'u' ? uid : uid_validity;
        if (*p == 'u')
            *has_uid = true;
        if (out != NULL) {
            char tmp[32];
            if (hex)
                snprintf(tmp, sizeof(tmp), zero ? "%0*X" : "%*X", (int)width, (unsigned)value);
            else
                snprintf(tmp, sizeof(tmp), zero ? "%0*u" : "%*u", (int)width, (unsigned)value);
            /* A space-padded width would put spaces into the id: pad with zeros. */
            for (char *t = tmp; *t == ' '; t++)
                *t = '0';
            buf_append_str(out, tmp);
        }
        size_t widest = hex ? 8 : 10;
        len += width > widest ? width : widest;
    }
    *longest = len;
    return true;
}

bool pop3_uidl_format_check(const char *format, struct petrel_error *err)
{
    size_t longest = 0;
    bool has_uid = false;
    if (!walk(format, 0, 0, NULL, &longest, &has_uid, err))
        return false;
    if (!has_uid)
        return petrel_error_set(err, PETREL_ERR_INVALID,
                                "needs %%u (the UID) so every message gets its own id");
    if (longest > POP3_UIDL_MAX)
        return petrel_error_set(err, PETREL_ERR_INVALID,
                                "ids could be %zu characters long; RFC 1939 allows %d", longest,
                                POP3_UIDL_MAX);
    return true;
}

void pop3_uidl_format(const char *format, uint32_t uid, uint32_t uid_validity, struct buf *out)
{
    size_t longest = 0;
    bool has_uid = false;
    (void)walk(format, uid, uid_validity, out, &longest, &has_uid, NULL);
}
