#include "core/yaml-doc.h"

#include "core/xalloc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#define YDOC_MAX_DEPTH 64
#define YDOC_MAX_BYTES (1024 * 1024)

static void ynode_free(struct ynode *n)
{
    if (n == NULL)
        return;
    free(n->scalar);
    for (size_t i = 0; i < n->count; i++) {
        if (n->keys != NULL)
            free(n->keys[i]);
        ynode_free(n->items[i]);
    }
    free(n->keys);
    free(n->key_lines);
    free(n->items);
    free(n);
}

void ydoc_free(struct ydoc *doc)
{
    if (doc == NULL)
        return;
    ynode_free(doc->root);
    free(doc->file);
    free(doc);
}

static struct ynode *ynode_new(enum ynode_type type, int line)
{
    struct ynode *n = xcalloc(1, sizeof(*n));
    n->type = type;
    n->line = line;
    return n;
}

static void ynode_push(struct ynode *parent, char *key, int key_line, struct ynode *child)
{
    size_t cap = parent->cap;
    parent->items = xgrow(parent->items, &cap, parent->count + 1, sizeof(*parent->items));
    if (parent->type == YNODE_MAP) {
        size_t kcap = parent->cap;
        parent->keys = xgrow(parent->keys, &kcap, parent->count + 1, sizeof(*parent->keys));
        size_t lcap = parent->cap;
        parent->key_lines =
            xgrow(parent->key_lines, &lcap, parent->count + 1, sizeof(*parent->key_lines));
        parent->keys[parent->count] = key;
        parent->key_lines[parent->count] = key_line;
    }
    parent->cap = cap;
    parent->items[parent->count++] = child;
}

struct parse_state {
    yaml_parser_t parser;
    const char *file;
    struct petrel_error *err;
};

static bool next_event(struct parse_state *st, yaml_event_t *ev)
{
    if (!yaml_parser_parse(&st->parser, ev)) {
        int line = (int)st->parser.problem_mark.line + 1;
        const char *problem = st->parser.problem != NULL ? st->parser.problem : "syntax error";
        if (st->parser.context != NULL)
            petrel_error_set(st->err, PETREL_ERR_INVALID, "%s:%d: %s %s", st->file, line, problem,
                             st->parser.context);
        else
            petrel_error_set(st->err, PETREL_ERR_INVALID, "%s:%d: %s", st->file, line, problem);
        return false;
    }
    return true;
}

/* Builds the node that starts with `ev` (already consumed). `path` is the
 * dotted key path of the node ("" for the root), so messages read
 * `file:line: key.path: message` like the configuration readers' own. */
static struct ynode *build_node(struct parse_state *st, yaml_event_t *ev, int depth,
                                const char *path)
{
    const char *sep = *path != '\0' ? ": " : "";
    int line = (int)ev->start_mark.line + 1;
    if (depth > YDOC_MAX_DEPTH) {
        petrel_error_set(st->err, PETREL_ERR_INVALID, "%s:%d: nesting deeper than %d levels",
                         st->file, line, YDOC_MAX_DEPTH);
        return NULL;
    }
    switch (ev->type) {
    case YAML_SCALAR_EVENT: {
        struct ynode *n = ynode_new(YNODE_SCALAR, line);
        n->scalar = xstrndup((const char *)ev->data.scalar.value, ev->data.scalar.length);
        n->quoted = ev->data.scalar.style == YAML_SINGLE_QUOTED_SCALAR_STYLE ||
                    ev->data.scalar.style == YAML_DOUBLE_QUOTED_SCALAR_STYLE ||
                    ev->data.scalar.style == YAML_LITERAL_SCALAR_STYLE ||
                    ev->data.scalar.style == YAML_FOLDED_SCALAR_STYLE;
        if (ev->data.scalar.anchor != NULL) {
            petrel_error_set(st->err, PETREL_ERR_INVALID, "%s:%d: %s%sanchors are not supported",
                             st->file, line, path, sep);
            ynode_free(n);
            return NULL;
        }
        return n;
    }
    case YAML_ALIAS_EVENT:
        petrel_error_set(st->err, PETREL_ERR_INVALID, "%s:%d: %s%saliases are not supported",
                         st->file, line, path, sep);
        return NULL;
    case YAML_SEQUENCE_START_EVENT:
    case YAML_MAPPING_START_EVENT: {
        bool is_map = ev->type == YAML_MAPPING_START_EVENT;
        if ((is_map ? ev->data.mapping_start.anchor : ev->data.sequence_start.anchor) != NULL) {
            petrel_error_set(st->err, PETREL_ERR_INVALID, "%s:%d: %s%sanchors are not supported",
                             st->file, line, path, sep);
            return NULL;
        }
        struct ynode *n = ynode_new(is_map ? YNODE_MAP : YNODE_SEQ, line);
        char child_path[256];
        for (;;) {
            yaml_event_t child;
            if (!next_event(st, &child))
                goto fail;
            if (child.type == YAML_SEQUENCE_END_EVENT || child.type == YAML_MAPPING_END_EVENT) {
                yaml_event_delete(&child);
                return n;
            }
            char *key = NULL;
            int key_line = 0;
            if (is_map) {
                key_line = (int)child.start_mark.line + 1;
                if (child.type != YAML_SCALAR_EVENT) {
                    petrel_error_set(st->err, PETREL_ERR_INVALID,
                                     "%s:%d: mapping keys must be plain strings", st->file,
                                     key_line);
                    yaml_event_delete(&child);
                    goto fail;
                }
                key = xstrndup((const char *)child.data.scalar.value, child.data.scalar.length);
                yaml_event_delete(&child);
                int w = snprintf(child_path, sizeof(child_path), "%s%s%s", path,
                                 *path != '\0' ? "." : "", key);
                /* The path only names places in messages: a longer one is
                 * cut, and says so. */
                if (w < 0 || (size_t)w >= sizeof(child_path))
                    memcpy(child_path + sizeof(child_path) - 4, "...", 4);
                for (size_t i = 0; i < n->count; i++) {
                    if (strcmp(n->keys[i], key) == 0) {
                        petrel_error_set(st->err, PETREL_ERR_INVALID,
                                         "%s:%d: %s: duplicate key (first at line %d)", st->file,
                                         key_line, child_path, n->key_lines[i]);
                        free(key);
                        goto fail;
                    }
                }
                if (!next_event(st, &child)) {
                    free(key);
                    goto fail;
                }
            }
            struct ynode *c = build_node(st, &child, depth + 1, is_map ? child_path : path);
            yaml_event_delete(&child);
            if (c == NULL) {
                free(key);
                goto fail;
            }
            ynode_push(n, key, key_line, c);
        }
    fail:
        ynode_free(n);
        return NULL;
    }
    default:
        petrel_error_set(st->err, PETREL_ERR_INVALID, "%s:%d: unexpected YAML event", st->file,
                         line);
        return NULL;
    }
}

struct ydoc *ydoc_parse(const char *file, const char *text, size_t len, struct petrel_error *err)
{
    if (len > YDOC_MAX_BYTES) {
        petrel_error_set(err, PETREL_ERR_INVALID, "%s: larger than %d bytes", file, YDOC_MAX_BYTES);
        return NULL;
    }
    struct parse_state st = {.file = file, .err = err};
    if (!yaml_parser_initialize(&st.parser))
        petrel_fatal("yaml_parser_initialize failed");
    yaml_parser_set_input_string(&st.parser, (const unsigned char *)text, len);

    struct ydoc *doc = xcalloc(1, sizeof(*doc));
    doc->file = xstrdup(file);
    bool ok = false;
    bool seen_doc = false;
    for (;;) {
        yaml_event_t ev;
        if (!next_event(&st, &ev))
            break;
        yaml_event_type_t type = ev.type;
        if (type == YAML_STREAM_END_EVENT) {
            yaml_event_delete(&ev);
            ok = true;
            break;
        }
        if (type == YAML_DOCUMENT_START_EVENT && seen_doc) {
            petrel_error_set(err, PETREL_ERR_INVALID, "%s:%d: only one YAML document allowed", file,
                             (int)ev.start_mark.line + 1);
            yaml_event_delete(&ev);
            break;
        }
        if (type == YAML_DOCUMENT_START_EVENT)
            seen_doc = true;
        if (type == YAML_SCALAR_EVENT || type == YAML_SEQUENCE_START_EVENT ||
            type == YAML_MAPPING_START_EVENT || type == YAML_ALIAS_EVENT) {
            doc->root = build_node(&st, &ev, 0, "");
            yaml_event_delete(&ev);
            if (doc->root == NULL)
                break;
            /* A document whose whole body is an empty scalar is an empty document. */
            if (doc->root->type == YNODE_SCALAR && doc->root->scalar[0] == '\0' &&
                !doc->root->quoted) {
                ynode_free(doc->root);
                doc->root = NULL;
            }
            continue;
        }
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&st.parser);
    if (!ok) {
        ydoc_free(doc);
        return NULL;
    }
    return doc;
}

struct ydoc *ydoc_load_file(const char *path, struct petrel_error *err)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        petrel_error_set(err, PETREL_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    char *text = xmalloc(YDOC_MAX_BYTES + 1);
    size_t len = fread(text, 1, YDOC_MAX_BYTES + 1, f);
    bool read_error = ferror(f) != 0;
    fclose(f);
    if (read_error) {
        free(text);
        petrel_error_set(err, PETREL_ERR_IO, "%s: read error", path);
        return NULL;
    }
    struct ydoc *doc = ydoc_parse(path, text, len, err);
    free(text);
    return doc;
}

struct ynode *ynode_get(const struct ynode *map, const char *key)
{
    if (map == NULL || map->type != YNODE_MAP)
        return NULL;
    for (size_t i = 0; i < map->count; i++) {
        if (strcmp(map->keys[i], key) == 0)
            return map->items[i];
    }
    return NULL;
}

const char *ynode_type_name(enum ynode_type type)
{
    switch (type) {
    case YNODE_SCALAR:
        return "a scalar";
    case YNODE_MAP:
        return "a mapping";
    case YNODE_SEQ:
        return "a list";
    }
    return "?";
}
