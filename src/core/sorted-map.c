#include "core/sorted-map.h"

#include "core/xalloc.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct smap_node {
    struct smap_node *left;
    struct smap_node *right;
    uint32_t priority;
    void *value;
    char key[];
};

struct smap {
    struct smap_node *root;
    size_t count;
    uint64_t rng;
};

struct smap *smap_new(void)
{
    struct smap *map = xcalloc(1, sizeof(*map));
    map->rng = 0x9e3779b97f4a7c15ULL ^ (uint64_t)(uintptr_t)map;
    return map;
}

static uint32_t next_priority(struct smap *map)
{
    /* xorshift64*: deterministic per map, good enough to balance a treap. */
    uint64_t x = map->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    map->rng = x;
    return (uint32_t)((x * 0x2545F4914F6CDD1DULL) >> 32);
}

static void free_nodes(struct smap_node *n, void (*free_value)(void *))
{
    /* Iterative to stay safe on degenerate shapes: rotate left children up. */
    while (n != NULL) {
        if (n->left != NULL) {
            struct smap_node *l = n->left;
            n->left = l->right;
            l->right = n;
            n = l;
            continue;
        }
        struct smap_node *right = n->right;
        if (free_value != NULL)
            free_value(n->value);
        free(n);
        n = right;
    }
}

void smap_free(struct smap *map, void (*free_value)(void *value))
{
    if (map == NULL)
        return;
    free_nodes(map->root, free_value);
    free(map);
}

size_t smap_count(const struct smap *map)
{
    return map->count;
}

void *smap_get(const struct smap *map, const char *key)
{
    const struct smap_node *n = map->root;
    while (n != NULL) {
        int c = strcmp(key, n->key);
        if (c == 0)
            return n->value;
        n = c < 0 ? n->left : n->right;
    }
    return NULL;
}

/* Splits the tree into keys < key (or <= when `inclusive_left`) and the rest. */
static void split(struct smap_node *n, const char *key, bool inclusive_left,
                  struct smap_node **left, struct smap_node **right)
{
    struct smap_node **l = left;
    struct smap_node **r = right;
    while (n != NULL) {
        int c = strcmp(n->key, key);
        bool goes_left = c < 0 || (inclusive_left && c == 0);
        if (goes_left) {
            *l = n;
            l = &n->right;
            n = n->right;
        } else {
            *r = n;
            r = &n->left;
            n = n->left;
        }
    }
    *l = NULL;
    *r = NULL;
}

static struct smap_node *merge(struct smap_node *a, struct smap_node *b)
{
    struct smap_node *root = NULL;
    struct smap_node **slot = &root;
    while (a != NULL && b != NULL) {
        if (a->priority > b->priority) {
            *slot = a;
            slot = &a->right;
            a = a->right;
        } else {
            *slot = b;
            slot = &b->left;
            b = b->left;
        }
    }
    *slot = a != NULL ? a : b;
    return root;
}

void *smap_put(struct smap *map, const char *key, void *value)
{
    struct smap_node *n = map->root;
    while (n != NULL) {
        int c = strcmp(key, n->key);
        if (c == 0) {
            void *old = n->value;
            n->value = value;
            return old;
        }
        n = c < 0 ? n->left : n->right;
    }
    size_t len = strlen(key);
    struct smap_node *node = xmalloc(sizeof(*node) + len + 1);
    memcpy(node->key, key, len + 1);
    node->left = NULL;
    node->right = NULL;
    node->value = value;
    node->priority = next_priority(map);
    struct smap_node *less;
    struct smap_node *more;
    split(map->root, key, false, &less, &more);
    map->root = merge(merge(less, node), more);
    map->count++;
    return NULL;
}

void *smap_remove(struct smap *map, const char *key)
{
    struct smap_node **slot = &map->root;
    while (*slot != NULL) {
        int c = strcmp(key, (*slot)->key);
        if (c == 0) {
            struct smap_node *n = *slot;
            void *value = n->value;
            *slot = merge(n->left, n->right);
            free(n);
            map->count--;
            return value;
        }
        slot = c < 0 ? &(*slot)->left : &(*slot)->right;
    }
    return NULL;
}

void *smap_seek(const struct smap *map, const char *key, bool strict, const char **key_out)
{
    const struct smap_node *n = map->root;
    const struct smap_node *best = NULL;
    while (n != NULL) {
        int c = strcmp(n->key, key);
        if (c > 0 || (!strict && c == 0)) {
            best = n;
            n = n->left;
        } else {
            n = n->right;
        }
    }
    if (best == NULL)
        return NULL;
    if (key_out != NULL)
        *key_out = best->key;
    return best->value;
}
