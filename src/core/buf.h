/* Growable byte buffer, always NUL-terminated after `len` bytes so its data
 * can be passed to libc, while staying binary-safe. The owner frees with
 * buf_free(); a zero-initialised struct buf is a valid empty buffer. */
#ifndef PETREL_CORE_BUF_H
#define PETREL_CORE_BUF_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

struct buf {
    char *data;
    size_t len;
    size_t cap;
};

/* Makes room for `extra` more bytes (plus the terminator). */
void buf_reserve(struct buf *b, size_t extra);
void buf_append(struct buf *b, const void *data, size_t len);
/* Inline so that the length of a string literal is known when compiling
 * (replies are assembled from many short literals). */
static inline void buf_append_str(struct buf *b, const char *s)
{
    buf_append(b, s, strlen(s));
}
void buf_append_char(struct buf *b, char c);
/* Appends what `in` holds up to its end; false on a read error (what was
 * read stays appended). */
bool buf_append_stream(struct buf *b, FILE *in);
/* Digits of the largest unsigned long long (2^64 - 1). */
#define UINT_DIGITS_MAX 20
/* Writes `v` in decimal to `out` (no terminator); returns how many digits. */
size_t uint_to_digits(char out[UINT_DIGITS_MAX], unsigned long long v);
/* Appends `v` in decimal: what buf_printf("%llu") gives, without the cost of
 * formatting (IMAP writes several numbers per FETCH line). */
void buf_append_uint(struct buf *b, unsigned long long v);
/* Inserts `len` bytes at offset `at` (at most b->len), moving what follows:
 * for a length prefix known only after its content was appended. */
void buf_insert(struct buf *b, size_t at, const void *data, size_t len);
void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void buf_vprintf(struct buf *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* Empties the buffer, keeping its allocation. */
void buf_reset(struct buf *b);
/* Returns the data ("" for an empty buffer); valid until the next change. */
const char *buf_cstr(const struct buf *b);
/* Hands the allocation to the caller (never NULL) and empties the buffer. */
char *buf_steal(struct buf *b);
void buf_free(struct buf *b);

#endif
