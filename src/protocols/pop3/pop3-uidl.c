/* POP3 unique-id formats (see pop3-uidl.h). */
#include "protocols/pop3/pop3-uidl.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
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
        if (*p == '0') /* zero padding: the only padding an id can have */
            p++;
        unsigned width = 0;
        int digits = 0;
        while (*p >= '0' && *p <= '9' && digits < 3) {
            width = width * 10 + (unsigned)(*p - '0');
            p++;
            digits++;
        }
        /* Dovecot's var_expand modifiers, applied in the order written:
         * X hexadecimal (lower case, as Dovecot prints it; x is taken too),
         * U upper case, L lower case. */
        char mods[8];
        size_t nmods = 0;
        bool hex = false;
        while (*p == 'X' || *p == 'x' || *p == 'U' || *p == 'L') {
            if (nmods == sizeof(mods))
                return petrel_error_set(err, PETREL_ERR_INVALID, "too many modifiers");
            mods[nmods++] = *p == 'x' ? 'X' : *p;
            hex = hex || *p == 'X' || *p == 'x';
            p++;
        }
        if ((*p != 'u' && *p != 'v') || width > UIDL_MAX_WIDTH)
            return petrel_error_set(err, PETREL_ERR_INVALID,
                                    "unknown variable (use %%u, %%v with an optional zero-padded "
                                    "width up to %d and the modifiers X, U, L as in %%08Xu; "
                                    "%%%% for a percent sign)",
                                    UIDL_MAX_WIDTH);
        uint32_t value = *p == 'u' ? uid : uid_validity;
        if (*p == 'u')
            *has_uid = true;
        if (out != NULL) {
            char digits_buf[16];
            snprintf(digits_buf, sizeof(digits_buf), "%u", (unsigned)value);
            for (size_t m = 0; m < nmods; m++) {
                if (mods[m] == 'X') {
                    /* Applied to the decimal text, as Dovecot does. */
                    unsigned long long v = strtoull(digits_buf, NULL, 10);
                    snprintf(digits_buf, sizeof(digits_buf), "%llx", v);
                } else {
                    for (char *t = digits_buf; *t != '\0'; t++)
                        *t = (char)(mods[m] == 'U' ? toupper((unsigned char)*t)
                                                   : tolower((unsigned char)*t));
                }
            }
            /* Padded with zeros whether or not the width asked for them: a
             * space would not be allowed in the id. */
            size_t got = strlen(digits_buf);
            for (size_t pad = got; pad < width; pad++)
                buf_append_char(out, '0');
            buf_append_str(out, digits_buf);
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
