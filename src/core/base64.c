#include "core/base64.h"

#include <stdint.h>

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

void base64_encode_append(struct buf *out, const void *data, size_t len)
{
    const unsigned char *p = data;
    buf_reserve(out, (len + 2) / 3 * 4);
    char *o = out->data + out->len;
    size_t i = 0;
    for (; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8 | p[i + 2];
        *o++ = alphabet[v >> 18];
        *o++ = alphabet[(v >> 12) & 63];
        *o++ = alphabet[(v >> 6) & 63];
        *o++ = alphabet[v & 63];
    }
    if (len - i == 1) {
        uint32_t v = (uint32_t)p[i] << 16;
        *o++ = alphabet[v >> 18];
        *o++ = alphabet[(v >> 12) & 63];
        *o++ = '=';
        *o++ = '=';
    } else if (len - i == 2) {
        uint32_t v = (uint32_t)p[i] << 16 | (uint32_t)p[i + 1] << 8;
        *o++ = alphabet[v >> 18];
        *o++ = alphabet[(v >> 12) & 63];
        *o++ = alphabet[(v >> 6) & 63];
        *o++ = '=';
    }
    out->len = (size_t)(o - out->data);
    out->data[out->len] = '\0';
}

int base64_char_value(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

bool base64_decode_append(struct buf *out, const char *text, size_t len)
{
    if (len % 4 != 0)
        return false;
    size_t start = out->len;
    buf_reserve(out, len / 4 * 3);
    for (size_t i = 0; i < len; i += 4) {
        int a = base64_char_value(text[i]);
        int b = base64_char_value(text[i + 1]);
        bool last = i + 4 == len;
        int c = text[i + 2] == '=' && last ? -2 : base64_char_value(text[i + 2]);
        int d = text[i + 3] == '=' && last ? -2 : base64_char_value(text[i + 3]);
        if (a < 0 || b < 0 || c == -1 || d == -1 || (c == -2 && d != -2))
            goto invalid;
        uint32_t v = (uint32_t)a << 18 | (uint32_t)b << 12;
        out->data[out->len++] = (char)(v >> 16);
        if (c == -2) {
            if ((b & 15) != 0)
                goto invalid; /* non-canonical trailing bits */
            break;
        }
        v |= (uint32_t)c << 6;
        out->data[out->len++] = (char)((v >> 8) & 0xff);
        if (d == -2) {
            if ((c & 3) != 0)
                goto invalid;
            break;
        }
        v |= (uint32_t)d;
        out->data[out->len++] = (char)(v & 0xff);
    }
    out->data[out->len] = '\0';
    return true;
invalid:
    out->len = start;
    out->data[out->len] = '\0';
    return false;
}
