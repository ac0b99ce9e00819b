#include "dict/dict-private.h"

#include "core/log.h"
#include "core/slice.h"
#include "core/sorted-map.h"
#include "core/xalloc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define DICT_MAX_KEY 4096
#define DICT_MAX_USERNAME 256
#define DICT_MAX_DICTS 64

/* Every registered driver, in name order (the drivers endpoint lists them so). */
static const struct dict_driver_ops *const drivers[] = {
    &dict_driver_fail,   &dict_driver_file, &dict_driver_kvstore,
    &dict_driver_memory, &dict_driver_sql,
};
#define DRIVER_COUNT (sizeof(drivers) / sizeof(drivers[0]))

size_t dict_driver_count(void)
{
    return DRIVER_COUNT;
}

const char *dict_driver_name_at(size_t i)
{
    return i < DRIVER_COUNT ? drivers[i]->name : NULL;
}

struct dict_config_ref {
    atomic_uint refs;
};

/* Both hold dicts: the settings' are never opened (prototypes holding the
 * driver options), the registry's are instances of them. */
struct dict_settings {
    struct dict **dicts;
    size_t count;
    size_t cap;
};

struct dict_registry {
    struct dict **dicts;
    size_t count;
};

bool dict_parse_counter(const char *value, size_t len, int64_t *out)
{
    if (value == NULL)
        return false;
    return slice_parse_i64((struct slice){.ptr = value, .len = len}, INT64_MIN, INT64_MAX, out);
}

int64_t dict_now(void)
{
    return (int64_t)time(NULL);
}

bool dict_mem_expired(const struct dict_mem_entry *e, int64_t now)
{
    return e->expires_at != 0 && e->expires_at <= now;
}

void dict_mem_lookup(const struct smap *map, const char *key, dict_lookup_cb *cb, void *ctx)
{
    const struct dict_mem_entry *e = smap_get(map, key);
    struct dict_lookup_result r = {.ret = 0};
    struct dict_value v;
    if (e != NULL && !dict_mem_expired(e, dict_now())) {
        v.data = e->value;
        v.len = e->len;
        r.ret = 1;
        r.values = &v;
        r.value_count = 1;
    }
    cb(&r, ctx);
}

/* ---------- registry ---------- */

static const struct dict_driver_ops *find_driver(const char *name)
{
    if (strcmp(name, "redis") == 0)
        name = "kvstore"; /* the Redis-protocol driver answers to both names */
    for (size_t i = 0; i < DRIVER_COUNT; i++) {
        if (strcmp(drivers[i]->name, name) == 0)
            return drivers[i];
    }
    return NULL;
}

static bool valid_dict_name(const char *name)
{
    if (*name == '\0' || strlen(name) > 64)
        return false;
    for (const char *p = name; *p != '\0'; p++) {
        char c = *p;
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '-' || c == '_'))
            return false;
    }
    return true;
}

static void dict_free(struct dict *dict)
{
    if (dict == NULL)
        return;
    if (dict->driver_data != NULL)
        dict->ops->close(dict);
    if (dict->config_ref != NULL) {
        if (atomic_fetch_sub(&dict->config_ref->refs, 1) == 1) {
            free(dict->config_ref);
            dict->config_ref = NULL;
        } else {
            dict->config = NULL; /* another owner still uses it */
        }
    }
    if (dict->config != NULL)
        dict->ops->config_free(dict->config);
    free(dict->name);
    free(dict);
}

struct dict *dict_instance_new(const struct dict *proto)
{
    struct dict *dict = xcalloc(1, sizeof(*dict));
    dict->name = xstrdup(proto->name);
    dict->ops = proto->ops;
    dict->config = proto->config;
    dict->config_ref = proto->config_ref;
    atomic_fetch_add(&dict->config_ref->refs, 1);
    return dict;
}

bool dict_instance_start(struct dict *dict, struct event_base *base, struct petrel_error *err)
{
    if (dict->driver_data != NULL)
        return true;
    dict->base = base;
    if (!dict->ops->open(dict, err)) {
        petrel_error_prefix(err, "dict %s", dict->name);
        if (dict->driver_data != NULL)
            dict->ops->close(dict);
        dict->driver_data = NULL;
        return false;
    }
    return true;
}

void dict_instance_free(struct dict *dict)
{
    if (dict != NULL)
        dict->closing = true;
    dict_free(dict);
}

struct dict_settings *dict_settings_read(const char *file, const struct ynode *section,
                                         struct petrel_error *err)
{
    struct cfg_ctx ctx = {.file = file, .err = err};
    struct dict_settings *reg = xcalloc(1, sizeof(*reg));
    if (!cfg_expect_map(&ctx, section, "dicts"))
        goto fail;
    if (section == NULL || section->type != YNODE_MAP)
        return reg;
    if (section->count > DICT_MAX_DICTS) {
        cfg_fail(&ctx, section, "dicts", "more than %d dicts", DICT_MAX_DICTS);
        goto fail;
    }
    for (size_t i = 0; i < section->count; i++) {
        const char *name = section->keys[i];
        const struct ynode *node = section->items[i];
        char path[128];
        snprintf(path, sizeof(path), "dicts.%s", name);
        if (!valid_dict_name(name)) {
            petrel_error_set(err, PETREL_ERR_INVALID,
                             "%s:%d: %s: dict names use letters, digits, '-' and '_' (max 64)",
                             file, section->key_lines[i], path);
            goto fail;
        }
        if (node->type != YNODE_MAP) {
            cfg_fail(&ctx, node, path, "expected a mapping with at least `driver:`");
            goto fail;
        }
        char *driver_name = NULL;
        if (!cfg_string(&ctx, node, path, "driver", &driver_name))
            goto fail;
        if (driver_name == NULL) {
            cfg_fail(&ctx, node, path, "driver is required (see GET /api/backend/dict/drivers)");
            goto fail;
        }
        const struct dict_driver_ops *ops = find_driver(driver_name);
        if (ops == NULL) {
            cfg_fail(&ctx, ynode_get(node, "driver"), path, "unknown driver '%s'", driver_name);
            free(driver_name);
            goto fail;
        }
        free(driver_name);
        void *config = ops->config_read(&ctx, node, path, name);
        if (config == NULL)
            goto fail;
        struct dict *dict = xcalloc(1, sizeof(*dict));
        dict->name = xstrdup(name);
        dict->ops = ops;
        dict->config = config;
        dict->config_ref = xcalloc(1, sizeof(*dict->config_ref));
        atomic_init(&dict->config_ref->refs, 1);
        reg->dicts = xgrow(reg->dicts, &reg->cap, reg->count + 1, sizeof(*reg->dicts));
        reg->dicts[reg->count++] = dict;
    }
    return reg;
fail:
    dict_settings_free(reg);
    return NULL;
}

size_t dict_settings_count(const struct dict_settings *s)
{
    return s != NULL ? s->count : 0;
}

const char *dict_settings_name(const struct dict_settings *s, size_t i)
{
    return s->dicts[i]->name;
}

const char *dict_settings_driver(const struct dict_settings *s, size_t i)
{
    return s->dicts[i]->ops->name;
}

bool dict_settings_has(const struct dict_settings *s, const char *name)
{
    for (size_t i = 0; i < dict_settings_count(s); i++) {
        if (strcmp(s->dicts[i]->name, name) == 0)
            return true;
    }
    return false;
}

static void dicts_free(struct dict **dicts, size_t count)
{
    for (size_t i = 0; i < count; i++)
        dict_free(dicts[i]);
    free(dicts);
}

void dict_settings_free(struct dict_settings *s)
{
    if (s != NULL)
        dicts_free(s->dicts, s->count);
    free(s);
}

struct dict_registry *dict_registry_new(const struct dict_settings *s)
{
    struct dict_registry *reg = xcalloc(1, sizeof(*reg));
    size_t n = dict_settings_count(s);
    reg->dicts = n > 0 ? xcalloc(n, sizeof(*reg->dicts)) : NULL;
    for (size_t i = 0; i < n; i++)
        reg->dicts[reg->count++] = dict_instance_new(s->dicts[i]);
    return reg;
}

bool dict_registry_open(struct dict_registry *reg, struct event_base *base,
                        struct metrics_registry *metrics, struct petrel_error *err)
{
    for (size_t i = 0; i < reg->count; i++) {
        struct dict *dict = reg->dicts[i];
        dict->base = base;
        dict->metrics = metrics;
        if (!dict->ops->open(dict, err)) {
            petrel_error_prefix(err, "dict %s", dict->name);
            return false;
        }
        log_info("dict", "opened", "dict=%s driver=%s", dict->name, dict->ops->name);
    }
    return true;
}

struct dict *dict_registry_get(struct dict_registry *reg, const char *name)
{
    if (reg == NULL)
        return NULL;
    for (size_t i = 0; i < reg->count; i++) {
        if (strcmp(reg->dicts[i]->name, name) == 0)
            return reg->dicts[i];
    }
    return NULL;
}

size_t dict_registry_count(const struct dict_registry *reg)
{
    return reg != NULL ? reg->count : 0;
}

void dict_registry_close(struct dict_registry *reg)
{
    if (reg == NULL)
        return;
    for (size_t i = 0; i < reg->count; i++)
        reg->dicts[i]->closing = true;
}

void dict_registry_free(struct dict_registry *reg)
{
    if (reg != NULL)
        dicts_free(reg->dicts, reg->count);
    free(reg);
}

const char *dict_name(const struct dict *dict)
{
    return dict->name;
}

const char *dict_driver_name(const struct dict *dict)
{
    return dict->ops->name;
}

bool dict_is_open(const struct dict *dict)
{
    return !dict->closing;
}

bool dict_is_multi_value(const struct dict *dict)
{
    return dict->ops->multi_value;
}

/* ---------- keys ---------- */

static bool valid_username(const char *u, struct petrel_error *err)
{
    size_t len = strlen(u);
    if (len == 0 || len > DICT_MAX_USERNAME)
        return petrel_error_set(err, PETREL_ERR_INVALID, "op.username must be 1 to %d bytes",
                                DICT_MAX_USERNAME);
    for (const unsigned char *p = (const unsigned char *)u; *p != '\0'; p++) {
        if (*p < 0x20 || *p == 0x7f || *p == '/')
            return petrel_error_set(err, PETREL_ERR_INVALID,
                                    "op.username must not contain '/' or control characters");
    }
    return true;
}

bool dict_key_validate(const char *key, const struct dict_op_settings *set, bool is_path,
                       struct petrel_error *err)
{
    const char *what = is_path ? "path" : "key";
    size_t len = strlen(key);
    if (len > DICT_MAX_KEY)
        return petrel_error_set(err, PETREL_ERR_INVALID, "%s longer than %d bytes", what,
                                DICT_MAX_KEY);
    for (const unsigned char *p = (const unsigned char *)key; *p != '\0'; p++) {
        if (*p < 0x20 || *p == 0x7f)
            return petrel_error_set(err, PETREL_ERR_INVALID, "%s contains a control character",
                                    what);
    }
    if (strncmp(key, "shared/", 7) == 0)
        return true;
    if (strncmp(key, "priv/", 5) == 0) {
        if (set == NULL || set->username == NULL || set->username[0] == '\0')
            return petrel_error_set(err, PETREL_ERR_INVALID,
                                    "priv/ %ss need op.username (the key belongs to a user)", what);
        return valid_username(set->username, err);
    }
    return petrel_error_set(err, PETREL_ERR_INVALID, "%s must start with priv/ or shared/", what);
}

/* "priv/<rest>" -> "priv/<user>/<rest>"; shared keys unchanged. */
static char *storage_key(const char *key, const struct dict_op_settings *set)
{
    if (strncmp(key, "priv/", 5) == 0)
        return xasprintf("priv/%s/%s", set->username, key + 5);
    return xstrdup(key);
}

/* ---------- lookup ---------- */

void dict_lookup(struct dict *dict, const struct dict_op_settings *set, const char *key,
                 dict_lookup_cb *cb, void *ctx)
{
    struct petrel_error err;
    petrel_error_clear(&err);
    struct dict_lookup_result r = {.ret = -1};
    if (dict->closing) {
        r.error = "dict is closing (shutting down)";
        cb(&r, ctx);
        return;
    }
    if (!dict_key_validate(key, set, false, &err)) {
        r.error = err.message;
        cb(&r, ctx);
        return;
    }
    char *skey = storage_key(key, set);
    dict->ops->lookup(dict, skey, cb, ctx);
    free(skey);
}

/* ---------- iterate ---------- */

void dict_iterate_head_init(struct dict_iterate *it, struct dict *dict, const char *prefix,
                            unsigned flags)
{
    it->dict = dict;
    it->flags = flags;
    it->prefix = xstrdup(prefix);
}

void dict_iterate_set_error(struct dict_iterate *it, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    free(it->error);
    it->error = xvasprintf(fmt, ap);
    va_end(ap);
}

void dict_iterate_notify(struct dict_iterate *it)
{
    if (it->async_cb != NULL)
        it->async_cb(it->async_ctx);
}

bool dict_iter_key_wanted(const char *prefix, const char *key, unsigned flags)
{
    if ((flags & DICT_ITER_EXACT_KEY) != 0)
        return strcmp(prefix, key) == 0;
    size_t plen = strlen(prefix);
    if (strncmp(key, prefix, plen) != 0)
        return false;
    if ((flags & DICT_ITER_RECURSE) != 0)
        return true;
    return strchr(key + plen, '/') == NULL;
}

struct dict_iterate *dict_iterate_init(struct dict *dict, const struct dict_op_settings *set,
                                       const char *path, unsigned flags, struct petrel_error *err)
{
    if (dict->closing) {
        petrel_error_set(err, PETREL_ERR_UNAVAILABLE, "dict is closing (shutting down)");
        return NULL;
    }
    if ((flags & ~(unsigned)DICT_ITER_ALL_FLAGS) != 0) {
        petrel_error_set(err, PETREL_ERR_INVALID, "unknown iterate flag bits 0x%x",
                         flags & ~(unsigned)DICT_ITER_ALL_FLAGS);
        return NULL;
    }
    if ((flags & DICT_ITER_SORT_BY_KEY) && (flags & DICT_ITER_SORT_BY_VALUE)) {
        petrel_error_set(err, PETREL_ERR_INVALID, "SortByKey and SortByValue are exclusive");
        return NULL;
    }
    if ((flags & DICT_ITER_EXACT_KEY) && (flags & DICT_ITER_RECURSE)) {
        petrel_error_set(err, PETREL_ERR_INVALID, "ExactKey does not recurse");
        return NULL;
    }
    if (!dict_key_validate(path, set, true, err))
        return NULL;
    char *prefix = storage_key(path, set);
    struct dict_iterate *it = dict->ops->iterate_init(dict, prefix, flags);
    free(prefix);
    if (strncmp(path, "priv/", 5) == 0)
        it->username = xstrdup(set->username);
    return it;
}

enum dict_iter_status dict_iterate_next(struct dict_iterate *it, struct dict_row *row)
{
    enum dict_iter_status st = it->dict->ops->iterate_next(it, row);
    if (st != DICT_ITER_ROW)
        return st;
    if (it->username != NULL) {
        /* "priv/<user>/<rest>" -> "priv/<rest>" */
        size_t ulen = strlen(it->username);
        buf_reset(&it->key_buf);
        buf_append_str(&it->key_buf, "priv/");
        if (strlen(row->key) > 5 + ulen + 1)
            buf_append_str(&it->key_buf, row->key + 5 + ulen + 1);
        row->key = buf_cstr(&it->key_buf);
    }
    if ((it->flags & DICT_ITER_NO_VALUE) != 0) {
        row->values = NULL;
        row->value_count = 0;
    }
    return st;
}

void dict_iterate_set_async_callback(struct dict_iterate *it, void (*cb)(void *ctx), void *ctx)
{
    it->async_cb = cb;
    it->async_ctx = ctx;
}

const char *dict_iterate_error(const struct dict_iterate *it)
{
    return it->error != NULL ? it->error : "iteration failed";
}

void dict_iterate_deinit(struct dict_iterate *it)
{
    if (it == NULL)
        return;
    char *prefix = it->prefix;
    char *username = it->username;
    char *error = it->error;
    struct buf key_buf = it->key_buf;
    it->dict->ops->iterate_deinit(it);
    free(prefix);
    free(username);
    free(error);
    buf_free(&key_buf);
}

/* ---------- row buffer ---------- */

struct dict_buffered_row {
    char *key;
    struct dict_value *values;
    size_t value_count;
};

void dict_row_buffer_add(struct dict_row_buffer *b, const char *key,
                         const struct dict_value *values, size_t value_count)
{
    b->rows = xgrow(b->rows, &b->cap, b->count + 1, sizeof(*b->rows));
    struct dict_buffered_row *r = &b->rows[b->count++];
    r->key = xstrdup(key);
    r->value_count = value_count;
    r->values = xcalloc(value_count + 1, sizeof(*r->values));
    for (size_t i = 0; i < value_count; i++) {
        char *copy = xmalloc(values[i].len + 1);
        memcpy(copy, values[i].data, values[i].len);
        copy[values[i].len] = '\0';
        r->values[i].data = copy;
        r->values[i].len = values[i].len;
    }
}

static int cmp_values(const struct dict_value *a, size_t na, const struct dict_value *b, size_t nb)
{
    if (na == 0 || nb == 0)
        return (na > 0) - (nb > 0);
    size_t n = a[0].len < b[0].len ? a[0].len : b[0].len;
    int c = memcmp(a[0].data, b[0].data, n);
    if (c != 0)
        return c;
    return (a[0].len > b[0].len) - (a[0].len < b[0].len);
}

static int cmp_by_key(const void *x, const void *y)
{
    const struct dict_buffered_row *a = x;
    const struct dict_buffered_row *b = y;
    return strcmp(a->key, b->key);
}

static int cmp_by_value(const void *x, const void *y)
{
    const struct dict_buffered_row *a = x;
    const struct dict_buffered_row *b = y;
    int c = cmp_values(a->values, a->value_count, b->values, b->value_count);
    return c != 0 ? c : strcmp(a->key, b->key);
}

void dict_row_buffer_sort(struct dict_row_buffer *b, unsigned flags)
{
    if (b->count < 2)
        return;
    if (flags & DICT_ITER_SORT_BY_KEY)
        qsort(b->rows, b->count, sizeof(*b->rows), cmp_by_key);
    else if (flags & DICT_ITER_SORT_BY_VALUE)
        qsort(b->rows, b->count, sizeof(*b->rows), cmp_by_value);
}

bool dict_row_buffer_next(struct dict_row_buffer *b, struct dict_row *row)
{
    if (b->next >= b->count)
        return false;
    const struct dict_buffered_row *r = &b->rows[b->next++];
    row->key = r->key;
    row->values = r->values;
    row->value_count = r->value_count;
    return true;
}

void dict_row_buffer_free(struct dict_row_buffer *b)
{
    for (size_t i = 0; i < b->count; i++) {
        for (size_t v = 0; v < b->rows[i].value_count; v++)
            free((char *)b->rows[i].values[v].data);
        free(b->rows[i].values);
        free(b->rows[i].key);
    }
    free(b->rows);
    memset(b, 0, sizeof(*b));
}

/* ---------- transactions ---------- */

struct dict_transaction {
    struct dict *dict;
    char *username;
    int64_t expire_secs;
    struct dict_tx_op *ops;
    size_t count;
    size_t cap;
    char *invalid; /* first invalid key's message */
};

struct dict_transaction *dict_transaction_begin(struct dict *dict,
                                                const struct dict_op_settings *set)
{
    struct dict_transaction *tx = xcalloc(1, sizeof(*tx));
    tx->dict = dict;
    if (set != NULL) {
        if (set->username != NULL)
            tx->username = xstrdup(set->username);
        tx->expire_secs = set->expire_secs;
    }
    return tx;
}

void dict_transaction_set_user(struct dict_transaction *tx, const char *username)
{
    free(tx->username);
    tx->username = username != NULL ? xstrdup(username) : NULL;
}

static struct dict_tx_op *add_op(struct dict_transaction *tx, enum dict_op_kind kind,
                                 const char *key)
{
    struct dict_op_settings set = {.username = tx->username};
    struct petrel_error err;
    petrel_error_clear(&err);
    if (!dict_key_validate(key, &set, false, &err)) {
        if (tx->invalid == NULL)
            tx->invalid = xasprintf("%s", err.message);
        return NULL;
    }
    tx->ops = xgrow(tx->ops, &tx->cap, tx->count + 1, sizeof(*tx->ops));
    struct dict_tx_op *op = &tx->ops[tx->count++];
    memset(op, 0, sizeof(*op));
    op->kind = kind;
    op->key = storage_key(key, &set);
    return op;
}

void dict_set(struct dict_transaction *tx, const char *key, const void *value, size_t len)
{
    struct dict_tx_op *op = add_op(tx, DICT_OP_SET, key);
    if (op == NULL)
        return;
    op->value = xmalloc(len + 1);
    memcpy(op->value, value, len);
    op->value[len] = '\0';
    op->value_len = len;
}

void dict_unset(struct dict_transaction *tx, const char *key)
{
    add_op(tx, DICT_OP_UNSET, key);
}

void dict_atomic_inc(struct dict_transaction *tx, const char *key, int64_t delta)
{
    struct dict_tx_op *op = add_op(tx, DICT_OP_INC, key);
    if (op != NULL)
        op->delta = delta;
}

bool dict_transaction_valid(const struct dict_transaction *tx, struct petrel_error *err)
{
    if (tx->invalid != NULL)
        return petrel_error_set(err, PETREL_ERR_INVALID, "%s", tx->invalid);
    return true;
}

void dict_transaction_rollback(struct dict_transaction *tx)
{
    if (tx == NULL)
        return;
    for (size_t i = 0; i < tx->count; i++) {
        free(tx->ops[i].key);
        free(tx->ops[i].value);
    }
    free(tx->ops);
    free(tx->username);
    free(tx->invalid);
    free(tx);
}

void dict_transaction_commit(struct dict_transaction *tx, dict_commit_cb *cb, void *ctx)
{
    struct dict *dict = tx->dict;
    if (dict->closing) {
        dict_transaction_rollback(tx);
        cb(DICT_COMMIT_FAILED, "dict is closing (shutting down)", ctx);
        return;
    }
    if (tx->invalid != NULL) {
        char *msg = xstrdup(tx->invalid);
        dict_transaction_rollback(tx);
        cb(DICT_COMMIT_FAILED, msg, ctx);
        free(msg);
        return;
    }
    if (tx->count == 0) {
        dict_transaction_rollback(tx);
        cb(DICT_COMMIT_OK, NULL, ctx);
        return;
    }
    /* Drivers copy what they need before returning, so the ops can go now. */
    dict->ops->commit(dict, tx->ops, tx->count, tx->expire_secs, cb, ctx);
    dict_transaction_rollback(tx);
}

void dict_expire_scan(struct dict *dict, dict_expire_cb *cb, void *ctx)
{
    if (dict->closing) {
        cb(false, "dict is closing (shutting down)", ctx);
        return;
    }
    dict->ops->expire_scan(dict, cb, ctx);
}

/* ---------- sorted-map cursor (memory and file drivers) ---------- */

void dict_map_cursor_init(struct dict_map_cursor *c, unsigned flags)
{
    memset(c, 0, sizeof(*c));
    c->buffered = (flags & DICT_ITER_SORT_BY_VALUE) != 0;
}

/* The next live, wanted entry after the cursor's position. */
static bool cursor_step(struct dict_map_cursor *c, const struct smap *map, const char *prefix,
                        unsigned flags, const char **key, const struct dict_mem_entry **entry)
{
    int64_t now = dict_now();
    size_t plen = strlen(prefix);
    const char *from = c->started ? c->last_key : prefix;
    bool strict = c->started;
    for (;;) {
        const char *k = NULL;
        const struct dict_mem_entry *e = smap_seek(map, from, strict, &k);
        if (e == NULL || strncmp(k, prefix, plen) != 0)
            return false;
        free(c->last_key);
        c->last_key = xstrdup(k);
        c->started = true;
        from = c->last_key;
        strict = true;
        if ((e->expires_at != 0 && e->expires_at <= now) || !dict_iter_key_wanted(prefix, k, flags))
            continue;
        *key = k;
        *entry = e;
        return true;
    }
}

enum dict_iter_status dict_map_cursor_next(struct dict_map_cursor *c, const struct smap *map,
                                           const char *prefix, unsigned flags, struct dict_row *row)
{
    const char *key;
    const struct dict_mem_entry *e;
    if (c->buffered) {
        if (!c->started) {
            while (cursor_step(c, map, prefix, flags, &key, &e)) {
                struct dict_value v = {e->value, e->len};
                dict_row_buffer_add(&c->buffer, key, &v, 1);
            }
            c->started = true;
            dict_row_buffer_sort(&c->buffer, flags);
        }
        return dict_row_buffer_next(&c->buffer, row) ? DICT_ITER_ROW : DICT_ITER_DONE;
    }
    if (!cursor_step(c, map, prefix, flags, &key, &e))
        return DICT_ITER_DONE;
    c->current.data = e->value;
    c->current.len = e->len;
    row->key = key;
    row->values = &c->current;
    row->value_count = 1;
    return DICT_ITER_ROW;
}

void dict_map_cursor_free(struct dict_map_cursor *c)
{
    free(c->last_key);
    dict_row_buffer_free(&c->buffer);
    memset(c, 0, sizeof(*c));
}
