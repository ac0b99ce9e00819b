/* memory: an in-process ordered map, for tests and caches. Contents are lost
 * at restart. Single-value. TTLs are honoured lazily on read and removed by
 * expire-scan. SortByKey is the natural order; SortByValue buffers the
 * matching rows. */
#include "dict/dict-private.h"

#include "core/sorted-map.h"
#include "core/xalloc.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct memory_dict {
    struct smap *map;
};

struct memory_iterate {
    struct dict_iterate head;
    struct dict_map_cursor cursor;
};

static void *memory_config_read(const struct cfg_ctx *ctx, const struct ynode *map,
                                const char *path, const char *dict_name)
{
    static const char *const keys[] = {"driver", NULL};
    (void)dict_name;
    if (!cfg_check_keys(ctx, map, path, keys))
        return NULL;
    return xstrdup("memory"); /* no options: a non-NULL marker */
}

static void memory_config_free(void *config)
{
    free(config);
}

static void entry_free(void *p)
{
    struct dict_mem_entry *e = p;
    free(e->value);
    free(e);
}

static bool memory_open(struct dict *dict, struct petrel_error *err)
{
    (void)err;
    struct memory_dict *md = xcalloc(1, sizeof(*md));
    md->map = smap_new();
    dict->driver_data = md;
    return true;
}

static void memory_close(struct dict *dict)
{
    struct memory_dict *md = dict->driver_data;
    smap_free(md->map, entry_free);
    free(md);
    dict->driver_data = NULL;
}

static void memory_lookup(struct dict *dict, const char *key, dict_lookup_cb *cb, void *ctx)
{
    struct memory_dict *md = dict->driver_data;
    dict_mem_lookup(md->map, key, cb, ctx);
}

static struct dict_iterate *memory_iterate_init(struct dict *dict, const char *prefix,
                                                unsigned flags)
{
    struct memory_iterate *it = xcalloc(1, sizeof(*it));
    dict_iterate_head_init(&it->head, dict, prefix, flags);
    dict_map_cursor_init(&it->cursor, flags);
    return &it->head;
}

static enum dict_iter_status memory_iterate_next(struct dict_iterate *head, struct dict_row *row)
{
    struct memory_iterate *it = (struct memory_iterate *)head;
    struct memory_dict *md = head->dict->driver_data;
    return dict_map_cursor_next(&it->cursor, md->map, head->prefix, head->flags, row);
}

static void memory_iterate_deinit(struct dict_iterate *head)
{
    struct memory_iterate *it = (struct memory_iterate *)head;
    dict_map_cursor_free(&it->cursor);
    free(it);
}

/* What the batch itself has written to a key so far, for the checks below. */
struct pending_value {
    bool deleted;
    const char *value; /* NULL: deleted, or the stored value is to be used */
    size_t len;
    char number[32]; /* an atomic-inc's result */
};

static void pending_free(void *p)
{
    free(p);
}

static void memory_commit(struct dict *dict, const struct dict_tx_op *ops, size_t count,
                          int64_t expire_secs, dict_commit_cb *cb, void *ctx)
{
    struct memory_dict *md = dict->driver_data;
    int64_t now = dict_now();
    /* Validate everything first so that a failure applies nothing. The
     * batch may touch a key twice, so counters are checked against the
     * value the batch itself would have written; an increment past the
     * 64-bit range fails the batch as the file, sql and kvstore drivers do
     * (the sum would be undefined behaviour in C, and a silent wrap would
     * turn a quota counter negative). */
    struct smap *pending = smap_new();
    for (size_t i = 0; i < count; i++) {
        const struct dict_tx_op *op = &ops[i];
        struct pending_value *pv = smap_get(pending, op->key);
        if (op->kind == DICT_OP_SET || op->kind == DICT_OP_UNSET) {
            if (pv == NULL) {
                pv = xcalloc(1, sizeof(*pv));
                smap_put(pending, op->key, pv);
            }
            pv->deleted = op->kind == DICT_OP_UNSET;
            pv->value = pv->deleted ? NULL : op->value;
            pv->len = pv->deleted ? 0 : op->value_len;
            continue;
        }
        const char *value = NULL;
        size_t len = 0;
        if (pv != NULL) {
            value = pv->value;
            len = pv->len;
        } else {
            struct dict_mem_entry *e = smap_get(md->map, op->key);
            if (e != NULL && !dict_mem_expired(e, now)) {
                value = e->value;
                len = e->len;
            }
        }
        if (value == NULL)
            continue; /* not found: the rest of the batch still applies */
        int64_t v;
        int64_t sum;
        char msg[160];
        if (!dict_parse_counter(value, len, &v))
            snprintf(msg, sizeof(msg), "atomic-inc: value of %.80s is not an integer", op->key);
        else if (__builtin_add_overflow(v, op->delta, &sum))
            snprintf(msg, sizeof(msg), "atomic-inc: %.80s would overflow a 64-bit integer",
                     op->key);
        else {
            if (pv == NULL) {
                pv = xcalloc(1, sizeof(*pv));
                smap_put(pending, op->key, pv);
            }
            int n = snprintf(pv->number, sizeof(pv->number), "%" PRId64, sum);
            pv->deleted = false;
            pv->value = pv->number;
            pv->len = (size_t)n;
            continue;
        }
        smap_free(pending, pending_free);
        cb(DICT_COMMIT_FAILED, msg, ctx);
        return;
    }
    smap_free(pending, pending_free);

    enum dict_commit_result result = DICT_COMMIT_OK;
    for (size_t i = 0; i < count; i++) {
        const struct dict_tx_op *op = &ops[i];
        if (op->kind == DICT_OP_SET) {
            struct dict_mem_entry *e = xcalloc(1, sizeof(*e));
            e->value = xmalloc(op->value_len + 1);
            memcpy(e->value, op->value, op->value_len);
            e->value[op->value_len] = '\0';
            e->len = op->value_len;
            e->expires_at = expire_secs > 0 ? now + expire_secs : 0;
            struct dict_mem_entry *old = smap_put(md->map, op->key, e);
            if (old != NULL)
                entry_free(old);
        } else if (op->kind == DICT_OP_UNSET) {
            struct dict_mem_entry *old = smap_remove(md->map, op->key);
            if (old != NULL)
                entry_free(old);
        } else {
            struct dict_mem_entry *e = smap_get(md->map, op->key);
            int64_t v;
            int64_t sum;
            if (e == NULL || dict_mem_expired(e, now) || !dict_parse_counter(e->value, e->len, &v) ||
                __builtin_add_overflow(v, op->delta, &sum)) {
                result = DICT_COMMIT_NOT_FOUND; /* the checks above make the last two impossible */
                continue;
            }
            char text[32];
            int n = snprintf(text, sizeof(text), "%" PRId64, sum);
            free(e->value);
            e->value = xstrndup(text, (size_t)n);
            e->len = (size_t)n;
        }
    }
    cb(result, NULL, ctx);
}

static void memory_expire_scan(struct dict *dict, dict_expire_cb *cb, void *ctx)
{
    struct memory_dict *md = dict->driver_data;
    int64_t now = dict_now();
    const char *key = NULL;
    char *from = xstrdup("");
    bool strict = false;
    for (;;) {
        struct dict_mem_entry *e = smap_seek(md->map, from, strict, &key);
        if (e == NULL)
            break;
        char *k = xstrdup(key);
        free(from);
        from = k;
        strict = true;
        if (dict_mem_expired(e, now))
            entry_free(smap_remove(md->map, k));
    }
    free(from);
    cb(true, NULL, ctx);
}

const struct dict_driver_ops dict_driver_memory = {
    .name = "memory",
    .multi_value = false,
    .config_read = memory_config_read,
    .config_free = memory_config_free,
    .open = memory_open,
    .close = memory_close,
    .lookup = memory_lookup,
    .iterate_init = memory_iterate_init,
    .iterate_next = memory_iterate_next,
    .iterate_deinit = memory_iterate_deinit,
    .commit = memory_commit,
    .expire_scan = memory_expire_scan,
};
