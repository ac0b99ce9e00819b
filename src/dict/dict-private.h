/* The driver interface behind dict.h. One driver per file (dict-memory.c,
 * dict-file.c, dict-sql.c, dict-redis.c, dict-fail.c), each exporting one
 * `const struct dict_driver_ops` table.
 *
 * Drivers see storage keys only: the common layer has validated every key
 * and mapped "priv/<rest>" to "priv/<username>/<rest>" (usernames never
 * contain '/'), so a driver stores and compares plain strings. Rows a driver
 * returns carry storage keys; the common layer maps them back. */
#ifndef PETREL_DICT_PRIVATE_H
#define PETREL_DICT_PRIVATE_H

#include "core/buf.h"
#include "core/cfg-read.h"
#include "dict/dict.h"

enum dict_op_kind { DICT_OP_SET, DICT_OP_UNSET, DICT_OP_INC };

struct dict_tx_op {
    enum dict_op_kind kind;
    char *key; /* storage key */
    char *value;
    size_t value_len;
    int64_t delta;
};

struct dict_driver_ops {
    const char *name;
    bool multi_value;
    /* Reads the driver's options from the dict's mapping (every key but
     * `driver`); must reject unknown keys with cfg_check_keys. `path` is
     * "dicts.<name>". Returns the driver's config object (never NULL on
     * success; NULL with ctx->err set on failure). */
    void *(*config_read)(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                         const char *dict_name);
    void (*config_free)(void *config);
    /* Creates dict->driver_data. Network drivers must not fail when the
     * server is down: they connect lazily and fail operations instead. */
    bool (*open)(struct dict *dict, struct petrel_error *err);
    /* Frees driver_data; in-flight callbacks must have been answered (with
     * an error) before it returns. */
    void (*close)(struct dict *dict);
    void (*lookup)(struct dict *dict, const char *key, dict_lookup_cb *cb, void *ctx);
    /* `prefix` is a storage key prefix (EXACT_KEY: the whole key). Drivers
     * apply RECURSE / EXACT_KEY / NO_VALUE / SORT_* (dict_iter_key_wanted and
     * struct dict_row_buffer help) and return their own iterator whose first
     * member is struct dict_iterate. */
    struct dict_iterate *(*iterate_init)(struct dict *dict, const char *prefix, unsigned flags);
    enum dict_iter_status (*iterate_next)(struct dict_iterate *it, struct dict_row *row);
    void (*iterate_deinit)(struct dict_iterate *it);
    /* All or nothing. expire_secs > 0 applies to every set. */
    void (*commit)(struct dict *dict, const struct dict_tx_op *ops, size_t count,
                   int64_t expire_secs, dict_commit_cb *cb, void *ctx);
    void (*expire_scan)(struct dict *dict, dict_expire_cb *cb, void *ctx);
};

struct dict {
    char *name;
    const struct dict_driver_ops *ops;
    void *config;
    void *driver_data;
    struct event_base *base;
    struct metrics_registry *metrics;
    bool closing;
    /* `config`'s owners: the registry's dict and each of its instances
     * (dict_instance_new); the last one frees it (an instance may be
     * closed after the registry, on another thread's way out). */
    struct dict_config_ref *config_ref;
};

/* Common head of every driver iterator. */
struct dict_iterate {
    struct dict *dict;
    unsigned flags;
    char *prefix;   /* storage prefix */
    char *username; /* set for priv/ paths: stripped from returned keys */
    char *error;    /* set by the driver on DICT_ITER_ERROR */
    void (*async_cb)(void *ctx);
    void *async_ctx;
    struct buf key_buf; /* caller-facing key of the current row */
};

/* Initialises the common head (driver iterators call this first). */
void dict_iterate_head_init(struct dict_iterate *it, struct dict *dict, const char *prefix,
                            unsigned flags);
/* Records an error message for DICT_ITER_ERROR. */
void dict_iterate_set_error(struct dict_iterate *it, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Drivers returning WAIT call this when rows (or the end) become available. */
void dict_iterate_notify(struct dict_iterate *it);

/* Does storage key `key` belong in an iteration of `prefix` with `flags`?
 * EXACT_KEY: key == prefix; RECURSE: any key starting with prefix;
 * otherwise only direct children (no '/' after the prefix). */
bool dict_iter_key_wanted(const char *prefix, const char *key, unsigned flags);

/* A buffer of copied rows, sorted on demand: for drivers that cannot sort
 * natively. Memory grows with the result (documented on such drivers). */
struct dict_row_buffer {
    struct dict_buffered_row *rows;
    size_t count;
    size_t cap;
    size_t next;
};
void dict_row_buffer_add(struct dict_row_buffer *b, const char *key,
                         const struct dict_value *values, size_t value_count);
/* Sorts by key or by first value, per the flags (no-op without SORT_*). */
void dict_row_buffer_sort(struct dict_row_buffer *b, unsigned flags);
/* Fills *row with the next buffered row; false at the end. */
bool dict_row_buffer_next(struct dict_row_buffer *b, struct dict_row *row);
void dict_row_buffer_free(struct dict_row_buffer *b);

/* Counters (atomic-inc) are stored as decimal text, as Dovecot does:
 * parses one strictly (no spaces, no trailing bytes, 64-bit range). */
bool dict_parse_counter(const char *value, size_t len, int64_t *out);

/* An entry of the drivers that keep the whole dict in a sorted map
 * (memory, file): the value and its expiry (0 = never). */
struct dict_mem_entry {
    char *value;
    size_t len;
    int64_t expires_at;
};
struct smap;
/* Is the entry past its expiry at `now` (seconds since the epoch)? */
bool dict_mem_expired(const struct dict_mem_entry *e, int64_t now);
/* Answers a lookup of `key` from such a map (expired entries are absent). */
void dict_mem_lookup(const struct smap *map, const char *key, dict_lookup_cb *cb, void *ctx);

/* Walks a sorted map of struct dict_mem_entry for one iteration: by key
 * order from the prefix, remembering the last key so writes between steps
 * are harmless; expired entries and keys the flags exclude are skipped;
 * SortByValue buffers the matching rows. */
struct dict_map_cursor {
    char *last_key;
    bool started;
    bool buffered;
    struct dict_row_buffer buffer;
    struct dict_value current;
};
void dict_map_cursor_init(struct dict_map_cursor *c, unsigned flags);
/* ROW or DONE; the row is valid until the next call. */
enum dict_iter_status dict_map_cursor_next(struct dict_map_cursor *c, const struct smap *map,
                                           const char *prefix, unsigned flags,
                                           struct dict_row *row);
void dict_map_cursor_free(struct dict_map_cursor *c);

/* Seconds since the epoch, for TTL bookkeeping. */
int64_t dict_now(void);

extern const struct dict_driver_ops dict_driver_memory;
extern const struct dict_driver_ops dict_driver_file;
extern const struct dict_driver_ops dict_driver_sql;
extern const struct dict_driver_ops dict_driver_kvstore;
extern const struct dict_driver_ops dict_driver_fail;

#endif
