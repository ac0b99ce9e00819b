/* A YAML document loaded into a tree that remembers where each node stood,
 * so configuration errors can say `file:line: message`. Aliases and anchors
 * are refused (configuration has no use for them and they invite billion-laughs
 * expansion). Limits: depth 64, 1 MiB input. The tree owns all its strings;
 * free it with ydoc_free(). */
#ifndef PETREL_CORE_YAML_DOC_H
#define PETREL_CORE_YAML_DOC_H

#include "core/error.h"

#include <stdbool.h>
#include <stddef.h>

enum ynode_type { YNODE_SCALAR, YNODE_MAP, YNODE_SEQ };

struct ynode {
    enum ynode_type type;
    int line;
    /* Scalars: the text; `quoted` tells "yes" from yes. */
    char *scalar;
    bool quoted;
    /* Maps: keys[i] -> items[i]; sequences: items[i]. */
    size_t count;
    size_t cap;
    char **keys;
    int *key_lines;
    struct ynode **items;
};

struct ydoc {
    char *file;
    struct ynode *root; /* NULL for an empty document */
};

/* Parses `len` bytes. On failure returns NULL with `file:line: message` in err. */
struct ydoc *ydoc_parse(const char *file, const char *text, size_t len, struct petrel_error *err);
/* Reads and parses a file (max 1 MiB). */
struct ydoc *ydoc_load_file(const char *path, struct petrel_error *err);
void ydoc_free(struct ydoc *doc);

/* Map lookup; NULL when absent or `map` is not a map. */
struct ynode *ynode_get(const struct ynode *map, const char *key);
const char *ynode_type_name(enum ynode_type type);

#endif
