/* Allocation that succeeds or never returns (Postfix mymalloc style).
 * Every function aborts the process with a message on exhaustion, so callers
 * have no unchecked NULL paths. Free with free(). */
#ifndef PETREL_CORE_XALLOC_H
#define PETREL_CORE_XALLOC_H

#include <stdarg.h>
#include <stddef.h>

void *xmalloc(size_t size);
void *xcalloc(size_t count, size_t size);
void *xrealloc(void *ptr, size_t size);
/* Grows an array of `*capacity` elements of `elem_size` to hold at least `need`. */
void *xgrow(void *ptr, size_t *capacity, size_t need, size_t elem_size);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* printf into a fresh allocation. */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
char *xvasprintf(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

/* Ends the process after printing `file:line: message` to stderr. */
_Noreturn void petrel_fatal_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define petrel_fatal(...) petrel_fatal_at(__FILE__, __LINE__, __VA_ARGS__)

/* Documents a branch that cannot happen; fatal (with location) when it does. */
#define PETREL_ASSERT(cond)                                                                        \
    do {                                                                                           \
        if (!(cond))                                                                               \
            petrel_fatal_at(__FILE__, __LINE__, "assertion failed: %s", #cond);                   \
    } while (0)

#endif
