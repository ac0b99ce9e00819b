/* The owner-discovery registry (see acl-registry.h). */
#include "storage/acl/acl-registry.h"

#include "core/buf.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "dict/dict.h"
#include "storage/mail-storage-private.h"

#include <stdlib.h>
#include <string.h>

#define COMPONENT "acl"

/* ---------- the dict of a storage handle ---------- */

void acl_registry_storage_set_dict(struct mail_storage *storage, struct dict *dict)
{
    storage->acl_reg_proto = dict;
    storage->acl_reg_main = true;
}

void acl_registry_storage_bind_loop(struct mail_storage *storage, struct event_base *base)
{
    storage->acl_reg_base = base;
    if (storage->acl_reg_proto != NULL && storage->acl_reg_dict == NULL)
        storage->acl_reg_dict = dict_instance_new(storage->acl_reg_proto);
}

bool acl_registry_configured(const struct mail_storage *storage)
{
    return storage->acl_reg_proto != NULL;
}

struct dict *acl_registry_dict(struct mail_storage *storage, struct petrel_error *err)
{
    if (storage->acl_reg_proto == NULL) {
        petrel_error_set(err, PETREL_ERR_UNSUPPORTED, "acl_sharing_map is not configured");
        return NULL;
    }
    if (storage->acl_reg_main)
        return storage->acl_reg_proto;
    if (storage->acl_reg_dict == NULL || storage->acl_reg_base == NULL) {
        petrel_error_set(err, PETREL_ERR_UNAVAILABLE, "the sharing registry is not available here");
        return NULL;
    }
    if (!dict_instance_start(storage->acl_reg_dict, storage->acl_reg_base, err)) {
        log_error(COMPONENT, "cannot open the sharing registry dict", "error=\"%s\"", err->message);
        err->code = PETREL_ERR_UNAVAILABLE;
        return NULL;
    }
    return storage->acl_reg_dict;
}

void acl_registry_storage_free(struct mail_storage *storage)
{
    dict_instance_free(storage->acl_reg_dict);
    storage->acl_reg_dict = NULL;
}

/* ---------- sorted string sets ---------- */

struct strset {
    char **items;
    size_t count;
    size_t cap;
};

static void strset_add(struct strset *s, const char *item)
{
    s->items = xgrow(s->items, &s->cap, s->count + 1, sizeof(*s->items));
    s->items[s->count++] = xstrdup(item);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorts and drops repeats. */
static void strset_finish(struct strset *s)
{
    if (s->count == 0)
        return;
    qsort(s->items, s->count, sizeof(*s->items), cmp_str);
    size_t w = 1;
    for (size_t i = 1; i < s->count; i++) {
        if (strcmp(s->items[i], s->items[w - 1]) == 0)
            free(s->items[i]);
        else
            s->items[w++] = s->items[i];
    }
    s->count = w;
}

static void strset_free(struct strset *s)
{
    for (size_t i = 0; i < s->count; i++)
        free(s->items[i]);
    free(s->items);
    memset(s, 0, sizeof(*s));
}

/* ---------- keys ---------- */

void acl_registry_ids_of(const struct acl_index *idx, const char *owner, char ***out, size_t *count)
{
    struct strset ids = {0};
    struct buf id = {0};
    for (size_t i = 0; i < idx->count; i++) {
        const struct acl_index_row *r = &idx->rows[i];
        const struct acl_id *e = &r->entry.id;
        if (r->folder[0] == '\0' || e->negative || (r->entry.rights & ACL_LOOKUP) == 0)
            continue;
        buf_reset(&id);
        switch (e->kind) {
        case ACL_ID_ANYONE:
        case ACL_ID_AUTHENTICATED:
            buf_append_str(&id, "anyone");
            break;
        case ACL_ID_USER:
            if (strcmp(e->name, owner) == 0)
                continue;
            buf_append_str(&id, "user/");
            buf_append_str(&id, e->name);
            break;
        case ACL_ID_GROUP:
        case ACL_ID_GROUP_OVERRIDE:
            buf_append_str(&id, "group/");
            buf_append_str(&id, e->name);
            break;
        case ACL_ID_OWNER:
            continue;
        }
        if (strchr(e->name, '/') != NULL)
            continue;
        buf_append_char(&id, '\0');
        strset_add(&ids, id.data);
    }
    buf_free(&id);
    strset_finish(&ids);
    ids.items = xgrow(ids.items, &ids.cap, ids.count + 1, sizeof(*ids.items));
    ids.items[ids.count] = NULL;
    *out = ids.items;
    *count = ids.count;
}

void acl_registry_ids_free(char **ids, size_t count)
{
    for (size_t i = 0; i < count; i++)
        free(ids[i]);
    free(ids);
}

/* ---------- iterating a path, whatever the driver ---------- */

/* One recursive iteration of `path` at a time; `row` gets each key,
 * `done` the end (false with the error). */
struct walk {
    struct dict *dict;
    struct dict_iterate *it;
    bool pumping;
    bool (*next_path)(struct walk *w, struct buf *path); /* false: no more paths */
    void (*row)(struct walk *w, const char *key);
    void (*done)(struct walk *w, bool ok, const char *error);
};

static void walk_step(struct walk *w);

static void walk_ready(void *ctx)
{
    struct walk *w = ctx;
    if (!w->pumping)
        walk_step(w);
}

static void walk_step(struct walk *w)
{
    w->pumping = true;
    struct dict_op_settings set = {0};
    for (;;) {
        if (w->it == NULL) {
            struct buf path = {0};
            if (!w->next_path(w, &path)) {
                buf_free(&path);
                w->pumping = false;
                w->done(w, true, NULL);
                return;
            }
            buf_append_char(&path, '\0');
            struct petrel_error err;
            petrel_error_clear(&err);
            w->it = dict_iterate_init(w->dict, &set, path.data,
                                      DICT_ITER_RECURSE | DICT_ITER_NO_VALUE, &err);
            buf_free(&path);
            if (w->it == NULL) {
                w->pumping = false;
                w->done(w, false, err.message);
                return;
            }
            dict_iterate_set_async_callback(w->it, walk_ready, w);
        }
        struct dict_row row;
        enum dict_iter_status st;
        while ((st = dict_iterate_next(w->it, &row)) == DICT_ITER_ROW)
            w->row(w, row.key);
        if (st == DICT_ITER_WAIT) {
            w->pumping = false;
            return;
        }
        if (st == DICT_ITER_ERROR) {
            char error[256];
            const char *e = dict_iterate_error(w->it);
            snprintf(error, sizeof(error), "%s", e != NULL ? e : "iteration failed");
            dict_iterate_deinit(w->it);
            w->it = NULL;
            w->pumping = false;
            w->done(w, false, error);
            return;
        }
        dict_iterate_deinit(w->it);
        w->it = NULL;
    }
}

/* ---------- lookup ---------- */

struct owners_op {
    struct walk walk; /* first */
    char *user;
    char **groups;
    size_t group_count;
    size_t next;       /* 0 anyone, 1 user, 2.. groups */
    struct buf prefix; /* the path being walked, NUL-terminated */
    struct strset owners;
    acl_registry_owners_cb *cb;
    void *ctx;
};

static bool owners_next_path(struct walk *w, struct buf *path)
{
    struct owners_op *op = (struct owners_op *)w;
    for (;;) {
        size_t i = op->next++;
        buf_append_str(path, ACL_REGISTRY_PREFIX);
        if (i == 0) {
            buf_append_str(path, "anyone/");
        } else if (i == 1) {
            if (op->user == NULL || strchr(op->user, '/') != NULL) {
                buf_reset(path);
                continue;
            }
            buf_append_str(path, "user/");
            buf_append_str(path, op->user);
            buf_append_char(path, '/');
        } else if (i - 2 < op->group_count) {
            if (strchr(op->groups[i - 2], '/') != NULL) {
                buf_reset(path);
                continue;
            }
            buf_append_str(path, "group/");
            buf_append_str(path, op->groups[i - 2]);
            buf_append_char(path, '/');
        } else {
            return false;
        }
        buf_reset(&op->prefix);
        buf_append(&op->prefix, path->data, path->len);
        buf_append_char(&op->prefix, '\0');
        return true;
    }
}

static void owners_row(struct walk *w, const char *key)
{
    struct owners_op *op = (struct owners_op *)w;
    size_t plen = op->prefix.len - 1;
    if (strncmp(key, op->prefix.data, plen) != 0)
        return;
    const char *owner = key + plen;
    /* Only keys one level down are owners ("user/bob/alice"). */
    if (owner[0] == '\0' || strchr(owner, '/') != NULL)
        return;
    strset_add(&op->owners, owner);
}

static void owners_free(struct owners_op *op)
{
    free(op->user);
    for (size_t i = 0; i < op->group_count; i++)
        free(op->groups[i]);
    free(op->groups);
    buf_free(&op->prefix);
    strset_free(&op->owners);
    free(op);
}

static void owners_done(struct walk *w, bool ok, const char *error)
{
    struct owners_op *op = (struct owners_op *)w;
    if (!ok) {
        op->cb(false, error, NULL, 0, op->ctx);
    } else {
        strset_finish(&op->owners);
        op->cb(true, NULL, (const char *const *)op->owners.items, op->owners.count, op->ctx);
    }
    owners_free(op);
}

void acl_registry_owners(struct dict *dict, const struct acl_identity *who,
                         acl_registry_owners_cb *cb, void *ctx)
{
    struct owners_op *op = xcalloc(1, sizeof(*op));
    op->walk = (struct walk){
        .dict = dict, .next_path = owners_next_path, .row = owners_row, .done = owners_done};
    op->cb = cb;
    op->ctx = ctx;
    if (who->user != NULL) {
        op->user = xstrdup(who->user);
        op->groups = xcalloc(who->group_count + 1, sizeof(*op->groups));
        for (size_t i = 0; i < who->group_count; i++)
            op->groups[i] = xstrdup(who->groups[i]);
        op->group_count = who->group_count;
    }
    walk_step(&op->walk);
}

/* ---------- sync ---------- */

struct sync_op {
    struct walk walk; /* first */
    char *owner;
    bool walked;
    char **ids;
    size_t id_count;
    struct strset old; /* ids the owner has now */
    acl_registry_done_cb *cb;
    void *ctx;
};

static bool sync_next_path(struct walk *w, struct buf *path)
{
    struct sync_op *op = (struct sync_op *)w;
    if (op->walked)
        return false;
    op->walked = true;
    buf_append_str(path, ACL_REGISTRY_PREFIX);
    return true;
}

static void sync_row(struct walk *w, const char *key)
{
    struct sync_op *op = (struct sync_op *)w;
    size_t plen = strlen(ACL_REGISTRY_PREFIX);
    if (strncmp(key, ACL_REGISTRY_PREFIX, plen) != 0)
        return;
    const char *rest = key + plen; /* <type>[/<dest>]/<owner> */
    const char *slash = strrchr(rest, '/');
    if (slash == NULL || strcmp(slash + 1, op->owner) != 0)
        return;
    struct buf id = {0};
    buf_append(&id, rest, (size_t)(slash - rest));
    buf_append_char(&id, '\0');
    strset_add(&op->old, id.data);
    buf_free(&id);
}

static void sync_free(struct sync_op *op)
{
    free(op->owner);
    acl_registry_ids_free(op->ids, op->id_count);
    strset_free(&op->old);
    free(op);
}

static void sync_committed(enum dict_commit_result result, const char *error, void *ctx)
{
    struct sync_op *op = ctx;
    bool ok = result == DICT_COMMIT_OK || result == DICT_COMMIT_NOT_FOUND;
    op->cb(ok, ok ? NULL : (error != NULL ? error : "commit failed"), op->id_count, op->ctx);
    sync_free(op);
}

static void key_of(struct buf *key, const char *id, const char *owner)
{
    buf_reset(key);
    buf_append_str(key, ACL_REGISTRY_PREFIX);
    buf_append_str(key, id);
    buf_append_char(key, '/');
    buf_append_str(key, owner);
    buf_append_char(key, '\0');
}

static void sync_done(struct walk *w, bool ok, const char *error)
{
    struct sync_op *op = (struct sync_op *)w;
    if (!ok) {
        op->cb(false, error, 0, op->ctx);
        sync_free(op);
        return;
    }
    strset_finish(&op->old);
    struct dict_op_settings set = {0};
    struct dict_transaction *tx = dict_transaction_begin(op->walk.dict, &set);
    struct buf key = {0};
    size_t n = 0, o = 0, changes = 0;
    while (n < op->id_count || o < op->old.count) {
        int c = n == op->id_count    ? 1
                : o == op->old.count ? -1
                                     : strcmp(op->ids[n], op->old.items[o]);
        if (c == 0) {
            n++, o++;
        } else if (c < 0) {
            key_of(&key, op->ids[n++], op->owner);
            dict_set(tx, key.data, "1", 1);
            changes++;
        } else {
            key_of(&key, op->old.items[o++], op->owner);
            dict_unset(tx, key.data);
            changes++;
        }
    }
    buf_free(&key);
    if (changes == 0) {
        dict_transaction_rollback(tx);
        op->cb(true, NULL, op->id_count, op->ctx);
        sync_free(op);
        return;
    }
    dict_transaction_commit(tx, sync_committed, op);
}

void acl_registry_sync(struct dict *dict, const char *owner, const struct acl_index *idx,
                       acl_registry_done_cb *cb, void *ctx)
{
    struct sync_op *op = xcalloc(1, sizeof(*op));
    op->walk = (struct walk){
        .dict = dict, .next_path = sync_next_path, .row = sync_row, .done = sync_done};
    op->owner = xstrdup(owner);
    op->cb = cb;
    op->ctx = ctx;
    acl_registry_ids_of(idx, owner, &op->ids, &op->id_count);
    if (strchr(owner, '/') != NULL) {
        cb(false, "an owner name with '/' cannot be a registry key", 0, ctx);
        sync_free(op);
        return;
    }
    walk_step(&op->walk);
}

static void update_logged(enum dict_commit_result result, const char *error, void *ctx)
{
    char *owner = ctx;
    if (result != DICT_COMMIT_OK && result != DICT_COMMIT_NOT_FOUND)
        log_warn(COMPONENT, "sharing registry not synced (acl/registry/rebuild repairs it)",
                 "owner=%s error=\"%s\"", owner, error != NULL ? error : "commit failed");
    free(owner);
}

void acl_registry_sync_owner(struct mail_user *owner, const struct namespace_config *ns,
                             const struct acl_index *before, const struct acl_index *after)
{
    struct mail_storage *storage = mail_user_storage(owner);
    const char *name = mail_user_name(owner);
    if (ns->type != NAMESPACE_PERSONAL || !acl_registry_configured(storage) ||
        strchr(name, '/') != NULL)
        return;
    char **old_ids = NULL, **new_ids = NULL;
    size_t old_count = 0, new_count = 0;
    acl_registry_ids_of(before, name, &old_ids, &old_count);
    acl_registry_ids_of(after, name, &new_ids, &new_count);
    struct petrel_error err;
    petrel_error_clear(&err);
    struct dict *dict = NULL;
    /* Nothing to say when neither index gives anyone a key. */
    if (old_count + new_count > 0 && (dict = acl_registry_dict(storage, &err)) == NULL)
        log_warn(COMPONENT, "sharing registry not synced (acl/registry/rebuild repairs it)",
                 "owner=%s error=\"%s\"", name, err.message);
    if (dict != NULL) {
        /* The keys the new index gives are (re)set, so one that went
         * missing comes back; those only the old one gave go. */
        struct dict_transaction *tx = dict_transaction_begin(dict, &(struct dict_op_settings){0});
        struct buf key = {0};
        for (size_t i = 0; i < new_count; i++) {
            key_of(&key, new_ids[i], name);
            dict_set(tx, key.data, "1", 1);
        }
        for (size_t i = 0, j = 0; i < old_count; i++) {
            while (j < new_count && strcmp(new_ids[j], old_ids[i]) < 0)
                j++;
            if (j < new_count && strcmp(new_ids[j], old_ids[i]) == 0)
                continue;
            key_of(&key, old_ids[i], name);
            dict_unset(tx, key.data);
        }
        buf_free(&key);
        dict_transaction_commit(tx, update_logged, xstrdup(name));
    }
    acl_registry_ids_free(old_ids, old_count);
    acl_registry_ids_free(new_ids, new_count);
}
