/* IMAP URLs for CATENATE (see imap-url.h). */
#include "protocols/imap/imap-url.h"

#include "core/slice.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

/* Percent-decodes [s, s+len) into `out` (size `cap`, NUL-terminated). */
static bool decode(const char *s, size_t len, char *out, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (c == '%') {
            if (len - i < 3)
                return false;
            int h = hex_digit_value(s[i + 1]), l = hex_digit_value(s[i + 2]);
            if (h < 0 || l < 0)
                return false;
            c = (char)(h * 16 + l);
            i += 2;
        }
        if (c == '\0' || o + 1 >= cap)
            return false;
        out[o++] = c;
    }
    out[o] = '\0';
    return true;
}

/* Decimal, 1 to 20 digits, at most `max`. */
static bool parse_u64(const char *s, size_t len, uint64_t max, uint64_t *out)
{
    return len <= 20 && slice_parse_u64((struct slice){s, len}, max, out);
}

static bool take_prefix(const char **p, const char *end, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(end - *p) < n || strncasecmp(*p, word, n) != 0)
        return false;
    *p += n;
    return true;
}

/* A non-zero 32-bit number up to the next '/' or the end (RFC 5092
 * nz-number: UIDVALIDITY and UID); *p moves past it. */
static bool take_nz_number(const char **p, const char *end, uint32_t *out)
{
    const char *n = *p;
    while (*p < end && **p != '/')
        (*p)++;
    uint64_t v = 0;
    if (!parse_u64(n, (size_t)(*p - n), UINT32_MAX, &v) || v == 0)
        return false;
    *out = (uint32_t)v;
    return true;
}

bool imap_url_parse(const char *text, size_t len, struct imap_url *out)
{
    memset(out, 0, sizeof(*out));
    if (len == 0 || len > IMAP_URL_MAX)
        return false;
    const char *p = text, *end = text + len;
    if (take_prefix(&p, end, "imap://")) {
        out->absolute = true;
        const char *slash = memchr(p, '/', (size_t)(end - p));
        if (slash == NULL)
            return false;
        const char *at = NULL;
        for (const char *q = p; q < slash; q++)
            if (*q == '@')
                at = q;
        if (at != NULL) {
            /* user[;AUTH=mech] */
            const char *semi = memchr(p, ';', (size_t)(at - p));
            if (!decode(p, (size_t)((semi != NULL ? semi : at) - p), out->user, sizeof(out->user)))
                return false;
        }
        if ((at != NULL ? at + 1 : p) == slash) /* no host */
            return false;
        p = slash;
    }
    /* ";UID=n...": a relative URL naming a message of the selected
     * mailbox (RFC 5092 7.1); the mailbox stays "". */
    if (out->absolute || !take_prefix(&p, end, ";UID=")) {
        if (p >= end || *p != '/')
            return false;
        p++;
        /* mailbox up to ";UIDVALIDITY=" or "/;UID=" */
        const char *mb_end = p;
        while (mb_end < end && *mb_end != ';' &&
               !(*mb_end == '/' && mb_end + 1 < end && mb_end[1] == ';'))
            mb_end++;
        if (mb_end == p || !decode(p, (size_t)(mb_end - p), out->mailbox, sizeof(out->mailbox)))
            return false;
        p = mb_end;
        if (take_prefix(&p, end, ";UIDVALIDITY=") && !take_nz_number(&p, end, &out->uid_validity))
            return false;
        if (!take_prefix(&p, end, "/;UID="))
            return false;
    }
    if (!take_nz_number(&p, end, &out->uid))
        return false;
    if (take_prefix(&p, end, "/;SECTION=")) {
        const char *s = p;
        while (p < end && *p != '/')
            p++;
        if (p == s || !decode(s, (size_t)(p - s), out->section, sizeof(out->section)))
            return false;
    }
    if (take_prefix(&p, end, "/;PARTIAL=")) {
        const char *s = p;
        while (p < end && *p != '.')
            p++;
        if (!parse_u64(s, (size_t)(p - s), UINT32_MAX, &out->partial_start))
            return false;
        if (p < end) {
            p++;
            if (!parse_u64(p, (size_t)(end - p), UINT32_MAX, &out->partial_len) ||
                out->partial_len == 0)
                return false;
            p = end;
        }
        out->partial = true;
    }
    return p == end;
}
