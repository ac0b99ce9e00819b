#include "core/xalloc.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

_Noreturn void petrel_fatal_at(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "%s:%d: fatal: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

void *xmalloc(size_t size)
{
    void *p = malloc(size == 0 ? 1 : size);
    if (p == NULL)
        petrel_fatal("out of memory allocating %zu bytes", size);
    return p;
}

void *xcalloc(size_t count, size_t size)
{
    void *p = calloc(count == 0 ? 1 : count, size == 0 ? 1 : size);
    if (p == NULL)
        petrel_fatal("out of memory allocating %zu x %zu bytes", count, size);
    return p;
}

void *xrealloc(void *ptr, size_t size)
{
    void *p = realloc(ptr, size == 0 ? 1 : size);
    if (p == NULL)
        petrel_fatal("out of memory reallocating %zu bytes", size);
    return p;
}

void *xgrow(void *ptr, size_t *capacity, size_t need, size_t elem_size)
{
    if (need <= *capacity)
        return ptr;
    size_t cap = *capacity < 8 ? 8 : *capacity;
    while (cap < need) {
        if (cap > SIZE_MAX / 2)
            petrel_fatal("array size overflow");
        cap *= 2;
    }
    if (elem_size != 0 && cap > SIZE_MAX / elem_size)
        petrel_fatal("array size overflow");
    *capacity = cap;
    return xrealloc(ptr, cap * elem_size);
}

char *xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
    char *p = xmalloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *xvasprintf(const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        petrel_fatal("invalid format string");
    char *p = xmalloc((size_t)n + 1);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    return p;
}

char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *p = xvasprintf(fmt, ap);
    va_end(ap);
    return p;
}
