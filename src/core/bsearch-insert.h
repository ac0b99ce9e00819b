/* Binary search in a sorted array that also says where a missing element
 * would go (as Dovecot's bsearch_insert_pos): sorted arrays that take
 * inserts (subscriptions, ACL entries) share one search. */
#ifndef PETREL_CORE_BSEARCH_INSERT_H
#define PETREL_CORE_BSEARCH_INSERT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Searches `count` elements of `size` bytes at `base`, sorted by `cmp`
 * (called as cmp(key, element)). Returns the index of an element equal to
 * `key` with *found true, or the index where `key` would be inserted to
 * keep the order with *found false. */
size_t bsearch_insert_pos(const void *key, const void *base, size_t count, size_t size,
                          int (*cmp)(const void *key, const void *element), bool *found);

/* The index of the first of `count` elements of `size` bytes at `base`,
 * sorted by the uint32_t at byte `key_offset` of each, whose key is not
 * below `key` (`count` when there is none). Inline and without a compare
 * call: for the lookups by UID that FETCH and the index make per message. */
static inline size_t bsearch_u32_lower(const void *base, size_t count, size_t size,
                                       size_t key_offset, uint32_t key)
{
    const char *p = base;
    size_t lo = 0, hi = count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        uint32_t v;
        memcpy(&v, p + mid * size + key_offset, sizeof(v));
        if (v < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

#endif
