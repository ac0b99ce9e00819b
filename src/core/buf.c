#include "core/buf.h"

#include "core/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void buf_reserve(struct buf *b, size_t extra)
{
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return;
    b->data = xgrow(b->data, &b->cap, need, 1);
}

void buf_append(struct buf *b, const void *data, size_t len)
{
    buf_reserve(b, len);
    if (len > 0)
        memcpy(b->data + b->len, data, len);
    b->len += len;
    b->data[b->len] = '\0';
}

void buf_append_char(struct buf *b, char c)
{
    buf_append(b, &c, 1);
}

bool buf_append_stream(struct buf *b, FILE *in)
{
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), in)) > 0)
        buf_append(b, chunk, n);
    return !ferror(in);
}

size_t uint_to_digits(char out[UINT_DIGITS_MAX], unsigned long long v)
{
    char digits[UINT_DIGITS_MAX];
    size_t n = sizeof(digits);
    do {
        digits[--n] = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    memcpy(out, digits + n, sizeof(digits) - n);
    return sizeof(digits) - n;
}

void buf_append_uint(struct buf *b, unsigned long long v)
{
    char digits[UINT_DIGITS_MAX];
    buf_append(b, digits, uint_to_digits(digits, v));
}

void buf_insert(struct buf *b, size_t at, const void *data, size_t len)
{
    if (at > b->len)
        petrel_fatal("buf_insert past the end");
    if (len == 0)
        return;
    buf_reserve(b, len);
    memmove(b->data + at + len, b->data + at, b->len - at);
    memcpy(b->data + at, data, len);
    b->len += len;
    b->data[b->len] = '\0';
}

void buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    char small[256];
    int n = vsnprintf(small, sizeof(small), fmt, ap2);
    va_end(ap2);
    if (n < 0)
        petrel_fatal("invalid format string");
    if ((size_t)n < sizeof(small)) {
        buf_append(b, small, (size_t)n);
        return;
    }
    buf_reserve(b, (size_t)n);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
}

void buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    buf_vprintf(b, fmt, ap);
    va_end(ap);
}

void buf_reset(struct buf *b)
{
    b->len = 0;
    if (b->data != NULL)
        b->data[0] = '\0';
}

const char *buf_cstr(const struct buf *b)
{
    return b->data != NULL ? b->data : "";
}

char *buf_steal(struct buf *b)
{
    char *p = b->data != NULL ? b->data : xstrdup("");
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
    return p;
}

void buf_free(struct buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = 0;
    b->cap = 0;
}
