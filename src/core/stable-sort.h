/* A stable sort with a context argument (C11's qsort has none, glibc's
 * qsort_r is neither portable nor stable): a bottom-up merge sort, n log n
 * comparisons, one scratch array of n elements. */
#ifndef PETREL_CORE_STABLE_SORT_H
#define PETREL_CORE_STABLE_SORT_H

#include <stddef.h>

/* Sorts `n` elements of `size` bytes at `base`; cmp < 0 puts a first,
 * equal elements keep their order. */
void stable_sort(void *base, size_t n, size_t size,
                 int (*cmp)(const void *a, const void *b, void *ctx), void *ctx);

#endif
