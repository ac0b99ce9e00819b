/* Binary search in a sorted array that also says where a missing element
 * would go (as Dovecot's bsearch_insert_pos): sorted arrays that take
 * inserts (subscriptions, ACL entries) share one search. */
#ifndef PETREL_CORE_BSEARCH_INSERT_H
#define PETREL_CORE_BSEARCH_INSERT_H

#include <stdbool.h>
#include <stddef.h>

/* Searches `count` elements of `size` bytes at `base`, sorted by `cmp`
 * (called as cmp(key, element)). Returns the index of an element equal to
 * `key` with *found true, or the index where `key` would be inserted to
 * keep the order with *found false. */
size_t bsearch_insert_pos(const void *key, const void *base, size_t count, size_t size,
                          int (*cmp)(const void *key, const void *element), bool *found);

#endif
