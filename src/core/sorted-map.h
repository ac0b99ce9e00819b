/* An ordered map from NUL-terminated string keys (byte order, strcmp) to
 * caller-owned values: a treap, O(log n) expected per operation. Iteration
 * is by key (lower/upper bound), so an iterator that remembers its last key
 * survives inserts and removals between steps. The map owns copies of the
 * keys; values are the caller's (free them before removing or use the
 * free function given to smap_free). Not thread-safe. */
#ifndef PETREL_CORE_SORTED_MAP_H
#define PETREL_CORE_SORTED_MAP_H

#include <stdbool.h>
#include <stddef.h>

struct smap;

struct smap *smap_new(void);
/* `free_value` (may be NULL) is called for every remaining value. */
void smap_free(struct smap *map, void (*free_value)(void *value));
size_t smap_count(const struct smap *map);
void *smap_get(const struct smap *map, const char *key);
/* Inserts or replaces; returns the previous value (or NULL). */
void *smap_put(struct smap *map, const char *key, void *value);
/* Removes; returns the value (or NULL when absent). */
void *smap_remove(struct smap *map, const char *key);
/* First entry with key >= `key` (or > when `strict`); NULL past the end.
 * *key_out points into the map, valid until that entry is removed. */
void *smap_seek(const struct smap *map, const char *key, bool strict, const char **key_out);

#endif
