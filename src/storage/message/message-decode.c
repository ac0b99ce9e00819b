#include "storage/message/message-decode.h"

#include "core/base64.h"
#include "core/slice.h"
#include "core/utf8.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

enum message_cte message_part_cte(const struct message_part *p)
{
    const char *enc = p->encoding;
    if (p->kind != MESSAGE_PART_LEAF || enc == NULL || strcasecmp(enc, "7bit") == 0 ||
        strcasecmp(enc, "8bit") == 0 || strcasecmp(enc, "binary") == 0)
        return MESSAGE_CTE_IDENTITY;
    if (strcasecmp(enc, "base64") == 0)
        return MESSAGE_CTE_BASE64;
    if (strcasecmp(enc, "quoted-printable") == 0)
        return MESSAGE_CTE_QP;
    return MESSAGE_CTE_UNKNOWN;
}

void message_decode_base64(struct buf *out, const char *s, size_t len)
{
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        if (s[i] == '=')
            break;
        int v = base64_char_value(s[i]);
        if (v < 0)
            continue;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            buf_append_char(out, (char)((acc >> bits) & 0xff));
        }
    }
}

void message_decode_qp(struct buf *out, const char *s, size_t len)
{
    size_t pos = 0;
    while (pos < len) {
        const char *lf = memchr(s + pos, '\n', len - pos);
        size_t end = lf != NULL ? (size_t)(lf - s) : len;
        size_t next = lf != NULL ? end + 1 : len;
        if (end > pos && s[end - 1] == '\r')
            end--;
        while (end > pos && (s[end - 1] == ' ' || s[end - 1] == '\t'))
            end--;
        bool soft = end > pos && s[end - 1] == '=';
        if (soft)
            end--;
        for (size_t i = pos; i < end; i++) {
            int hi, lo;
            if (s[i] == '=' && i + 2 < end && (hi = hex_digit_value(s[i + 1])) >= 0 &&
                (lo = hex_digit_value(s[i + 2])) >= 0) {
                buf_append_char(out, (char)(hi * 16 + lo));
                i += 2;
            } else {
                buf_append_char(out, s[i]);
            }
        }
        if (lf != NULL && !soft)
            buf_append(out, "\r\n", 2);
        pos = next;
    }
}

bool message_part_decode(const struct message *msg, size_t part, struct buf *out)
{
    const struct message_part *p = &msg->parts[part];
    const char *body = msg->data + p->body.start;
    switch (message_part_cte(p)) {
    case MESSAGE_CTE_IDENTITY:
        buf_append(out, body, p->body.len);
        return true;
    case MESSAGE_CTE_BASE64:
        message_decode_base64(out, body, p->body.len);
        return true;
    case MESSAGE_CTE_QP:
        message_decode_qp(out, body, p->body.len);
        return true;
    case MESSAGE_CTE_UNKNOWN:
        break;
    }
    return false;
}

/* Q encoding (RFC 2047 4.2): '_' is a space, =XX a byte. */
static void decode_q(struct buf *out, const char *s, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        int hi, lo;
        if (s[i] == '_') {
            buf_append_char(out, ' ');
        } else if (s[i] == '=' && i + 2 < len && (hi = hex_digit_value(s[i + 1])) >= 0 &&
                   (lo = hex_digit_value(s[i + 2])) >= 0) {
            buf_append_char(out, (char)(hi * 16 + lo));
            i += 2;
        } else {
            buf_append_char(out, s[i]);
        }
    }
}

static bool is_latin1(const char *charset, size_t len)
{
    static const char *const names[] = {"iso-8859-1", "iso-8859-15", "latin1", "windows-1252",
                                        "cp1252"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strlen(names[i]) == len && strncasecmp(charset, names[i], len) == 0)
            return true;
    }
    return false;
}

/* Appends decoded bytes in UTF-8 when the charset is one we can convert. */
static void append_charset(struct buf *out, const char *charset, size_t charset_len,
                           const char *bytes, size_t len)
{
    if (!is_latin1(charset, charset_len)) {
        buf_append(out, bytes, len);
        return;
    }
    for (size_t i = 0; i < len; i++)
        utf8_encode((unsigned char)bytes[i], out);
}

/* Recognises "=?charset?E?text?=" at `s` (within `len`); *word_len is its length. */
static bool encoded_word(const char *s, size_t len, size_t *word_len, const char **charset,
                         size_t *charset_len, char *enc, const char **text, size_t *text_len)
{
    if (len < 8 || s[0] != '=' || s[1] != '?')
        return false;
    const char *q1 = memchr(s + 2, '?', len - 2);
    if (q1 == NULL || (size_t)(q1 - s) + 3 >= len || q1[2] != '?')
        return false;
    const char *t = q1 + 3;
    const char *end = NULL;
    for (const char *p = t; p + 1 < s + len; p++) {
        if (p[0] == '?' && p[1] == '=') {
            end = p;
            break;
        }
        if (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
            return false;
    }
    if (end == NULL)
        return false;
    char e = (char)(q1[1] | 0x20);
    if (e != 'b' && e != 'q')
        return false;
    *charset = s + 2;
    *charset_len = (size_t)(q1 - (s + 2));
    /* RFC 2231 language suffix: "utf-8*en" */
    const char *star = memchr(*charset, '*', *charset_len);
    if (star != NULL)
        *charset_len = (size_t)(star - *charset);
    *enc = e;
    *text = t;
    *text_len = (size_t)(end - t);
    *word_len = (size_t)(end + 2 - s);
    return true;
}

void message_header_decode(const char *value, size_t len, struct buf *out)
{
    size_t i = 0;
    bool after_word = false;
    while (i < len) {
        size_t word_len, charset_len, text_len;
        const char *charset, *text;
        char enc;
        if (encoded_word(value + i, len - i, &word_len, &charset, &charset_len, &enc, &text,
                         &text_len)) {
            struct buf raw = {0};
            if (enc == 'b')
                message_decode_base64(&raw, text, text_len);
            else
                decode_q(&raw, text, text_len);
            append_charset(out, charset, charset_len, raw.data != NULL ? raw.data : "", raw.len);
            buf_free(&raw);
            i += word_len;
            after_word = true;
            continue;
        }
        if (after_word && (value[i] == ' ' || value[i] == '\t')) {
            /* Whitespace between two encoded words is not part of the text. */
            size_t j = i;
            while (j < len && (value[j] == ' ' || value[j] == '\t'))
                j++;
            size_t wl, cl, tl;
            const char *c, *t;
            char e;
            if (j < len && encoded_word(value + j, len - j, &wl, &c, &cl, &e, &t, &tl)) {
                i = j;
                continue;
            }
        }
        after_word = false;
        buf_append_char(out, value[i]);
        i++;
    }
}
