#include "storage/mailbox-name.h"

#include "core/utf8.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

static const char mutf7_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+,";

bool mailbox_name_is_inbox(const char *name)
{
    return strcasecmp(name, "INBOX") == 0;
}

bool mailbox_name_validate(const char *name, char separator, struct petrel_error *err)
{
    size_t len = strlen(name);
    if (len == 0)
        return petrel_error_set(err, PETREL_ERR_INVALID, "folder name is empty");
    if (len > MAILBOX_NAME_MAX)
        return petrel_error_set(err, PETREL_ERR_INVALID, "folder name longer than %d bytes",
                                MAILBOX_NAME_MAX);
    const unsigned char *p = (const unsigned char *)name;
    size_t levels = 1;
    size_t level_start = 0;
    for (size_t i = 0; i <= len; i++) {
        bool end_of_level = i == len || (char)p[i] == separator;
        if (end_of_level) {
            size_t level_len = i - level_start;
            const char *level = name + level_start;
            if (level_len == 0)
                return petrel_error_set(err, PETREL_ERR_INVALID,
                                        "folder name has an empty level (leading, trailing or "
                                        "doubled '%c')",
                                        separator);
            if ((level_len == 1 && level[0] == '.') ||
                (level_len == 2 && level[0] == '.' && level[1] == '.'))
                return petrel_error_set(err, PETREL_ERR_INVALID,
                                        "folder name must not contain '.' or '..' levels");
            if (i < len && ++levels > MAILBOX_NAME_MAX_LEVELS)
                return petrel_error_set(err, PETREL_ERR_INVALID,
                                        "folder name deeper than %d levels",
                                        MAILBOX_NAME_MAX_LEVELS);
            level_start = i + 1;
            continue;
        }
        uint32_t cp;
        size_t n = utf8_decode(p + i, len - i, &cp);
        if (n == 0)
            return petrel_error_set(err, PETREL_ERR_INVALID, "folder name is not valid UTF-8");
        if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0))
            return petrel_error_set(err, PETREL_ERR_INVALID,
                                    "folder name contains a control character");
        if (cp == '.' || cp == '/' || cp == '\\')
            return petrel_error_set(err, PETREL_ERR_INVALID,
                                    "folder name must not contain '%c' inside a level",
                                    (char)cp);
        i += n - 1;
    }
    return true;
}

/* An open modified-BASE64 run: UTF-16 units go in as they come, so a run of
 * any length stays one "&...-" shift (two shifts in a row are not canonical
 * and the decoder refuses them). */
struct shift_state {
    bool open;
    uint32_t bits;
    int nbits;
};

static void shift_unit(struct shift_state *st, uint16_t unit, struct buf *out)
{
    if (!st->open) {
        buf_append_char(out, '&');
        st->open = true;
    }
    st->bits = st->bits << 16 | unit;
    st->nbits += 16;
    while (st->nbits >= 6) {
        st->nbits -= 6;
        buf_append_char(out, mutf7_alphabet[(st->bits >> st->nbits) & 63]);
    }
    st->bits &= (1u << st->nbits) - 1;
}

static void shift_close(struct shift_state *st, struct buf *out)
{
    if (!st->open)
        return;
    if (st->nbits > 0)
        buf_append_char(out, mutf7_alphabet[(st->bits << (6 - st->nbits)) & 63]);
    buf_append_char(out, '-');
    memset(st, 0, sizeof(*st));
}

bool mailbox_name_to_mutf7(const char *utf8, struct buf *out)
{
    const unsigned char *p = (const unsigned char *)utf8;
    size_t len = strlen(utf8);
    size_t start = out->len;
    struct shift_state st = {false, 0, 0};
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n = utf8_decode(p + i, len - i, &cp);
        if (n == 0) {
            out->len = start; /* nothing appended on failure */
            if (out->data != NULL)
                out->data[start] = '\0';
            return false;
        }
        i += n;
        if (cp >= 0x20 && cp <= 0x7e) {
            shift_close(&st, out);
            if (cp == '&')
                buf_append(out, "&-", 2);
            else
                buf_append_char(out, (char)cp);
        } else if (cp >= 0x10000) {
            uint32_t v = cp - 0x10000;
            shift_unit(&st, (uint16_t)(0xd800 | (v >> 10)), out);
            shift_unit(&st, (uint16_t)(0xdc00 | (v & 0x3ff)), out);
        } else {
            shift_unit(&st, (uint16_t)cp, out);
        }
    }
    shift_close(&st, out);
    return true;
}

static int mutf7_value(char c)
{
    const char *pos = c != '\0' ? strchr(mutf7_alphabet, c) : NULL;
    return pos != NULL ? (int)(pos - mutf7_alphabet) : -1;
}

bool mailbox_name_from_mutf7(const char *mutf7, struct buf *out)
{
    size_t start = out->len;
    const char *p = mutf7;
    while (*p != '\0') {
        unsigned char c = (unsigned char)*p;
        if (c < 0x20 || c > 0x7e)
            goto invalid;
        if (c != '&') {
            buf_append_char(out, (char)c);
            p++;
            continue;
        }
        p++;
        if (*p == '-') {
            buf_append_char(out, '&');
            p++;
            continue;
        }
        uint32_t bits = 0;
        int nbits = 0;
        uint32_t high = 0;
        size_t decoded = 0;
        while (*p != '-') {
            int v = mutf7_value(*p);
            if (v < 0)
                goto invalid;
            bits = bits << 6 | (uint32_t)v;
            nbits += 6;
            p++;
            if (nbits < 16)
                continue;
            nbits -= 16;
            uint16_t unit = (uint16_t)(bits >> nbits);
            bits &= (1u << nbits) - 1;
            decoded++;
            if (high != 0) {
                if (unit < 0xdc00 || unit > 0xdfff)
                    goto invalid;
                utf8_encode(0x10000 + ((high - 0xd800) << 10) + (unit - 0xdc00), out);
                high = 0;
            } else if (unit >= 0xd800 && unit <= 0xdbff) {
                high = unit;
            } else if (unit >= 0xdc00 && unit <= 0xdfff) {
                goto invalid;
            } else if (unit == 0 || (unit >= 0x20 && unit <= 0x7e)) {
                goto invalid; /* NUL; printable ASCII must not be shifted */
            } else {
                utf8_encode(unit, out);
            }
        }
        p++; /* '-' */
        if (decoded == 0 || high != 0 || nbits >= 6 || bits != 0)
            goto invalid;
        if (p[0] == '&' && p[1] != '-')
            goto invalid; /* "&..-&..-" is one shift in canonical form */
    }
    return true;
invalid:
    out->len = start;
    if (out->data != NULL)
        out->data[start] = '\0';
    return false;
}
