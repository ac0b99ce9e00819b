/* METADATA entries in a dict (metadata-store.h). */
#include "storage/metadata/metadata-store.h"

#include "core/buf.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "dict/dict.h"
#include "storage/acl/acl-rights.h"
#include "storage/mail-storage-private.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COMPONENT "metadata"

/* ---------- the dict of a storage handle ---------- */

void metadata_storage_set_dict(struct mail_storage *storage, struct dict *dict)
{
    storage->attr_proto = dict;
    storage->attr_main = true;
}

void metadata_storage_bind_loop(struct mail_storage *storage, struct event_base *base)
{
    storage->attr_base = base;
    /* Made now, on the thread that owns the registry, so that the
     * instance holds the configuration whatever the registry does later;
     * opened on the loop's own thread at first use. */
    if (storage->attr_proto != NULL && storage->attr_dict == NULL)
        storage->attr_dict = dict_instance_new(storage->attr_proto);
}

struct dict *metadata_storage_dict(struct mail_storage *storage, struct petrel_error *err)
{
    if (storage->attr_proto == NULL) {
        petrel_error_set(err, PETREL_ERR_UNSUPPORTED, "METADATA is not configured");
        return NULL;
    }
    if (storage->attr_main)
        return storage->attr_proto;
    if (storage->attr_dict == NULL || storage->attr_base == NULL) {
        petrel_error_set(err, PETREL_ERR_UNAVAILABLE, "METADATA is not available here");
        return NULL;
    }
    if (!dict_instance_start(storage->attr_dict, storage->attr_base, err)) {
        log_error(COMPONENT, "cannot open the attribute dict", "error=\"%s\"", err->message);
        err->code = PETREL_ERR_UNAVAILABLE;
        return NULL;
    }
    return storage->attr_dict;
}

void metadata_storage_free(struct mail_storage *storage)
{
    dict_instance_free(storage->attr_dict);
    storage->attr_dict = NULL;
}

uint64_t metadata_max_value(const struct mail_storage *storage)
{
    return (uint64_t)storage->cfg.metadata_max_value_bytes;
}

uint64_t metadata_max_entries(const struct mail_storage *storage)
{
    return (uint64_t)storage->cfg.metadata_max_entries;
}

/* ---------- where entries live ---------- */

unsigned metadata_access_for(enum metadata_scope scope, bool write)
{
    if (scope == METADATA_SHARED)
        return write ? METADATA_WRITE_SHARED : METADATA_READ_SHARED;
    return write ? METADATA_WRITE_PRIVATE : METADATA_READ_PRIVATE;
}

bool metadata_access_check(struct mail_user *user, const struct namespace_config *ns,
                           const char *name, unsigned access, struct petrel_error *err)
{
    if (access == METADATA_ACCESS_NONE || !user->session || name == NULL || *name == '\0')
        return true;
    if (!mail_storage_config(mail_user_storage(user))->acl.enabled) {
        if (ns->type == NAMESPACE_PERSONAL)
            return true;
        return petrel_error_set(err, PETREL_ERR_PERMISSION,
                                "metadata of another namespace's folder %s", name);
    }
    uint32_t have = mail_folder_my_rights(user, ns, name);
    if ((have & ACL_LOOKUP) == 0)
        return petrel_error_set(err, PETREL_ERR_NOT_FOUND, "folder not found: %s", name);
    /* RFC 5464 3.3: "l" and any one of "r", "s", "w", "i" or "p", for
     * private and shared entries alike. */
    if ((have & (ACL_READ | ACL_WRITE_SEEN | ACL_WRITE | ACL_INSERT | ACL_POST)) == 0)
        return petrel_error_set(err, PETREL_ERR_PERMISSION, "no right on folder %s's metadata",
                                name);
    if ((access & METADATA_READ_SHARED) != 0 && (have & ACL_READ) == 0)
        return petrel_error_set(err, PETREL_ERR_PERMISSION,
                                "reading /shared entries of %s needs the r right", name);
    if ((access & METADATA_WRITE_SHARED) != 0 && (have & ACL_WRITE) == 0)
        return petrel_error_set(err, PETREL_ERR_PERMISSION,
                                "writing /shared entries of %s needs the w right", name);
    return true;
}

bool metadata_target_resolve(struct mail_user *user, const struct namespace_config *ns,
                             const char *name, const char *private_user, unsigned access,
                             struct metadata_target *t, struct petrel_error *err)
{
    memset(t, 0, sizeof(*t));
    t->server = name == NULL || *name == '\0';
    if (t->server) {
        /* Server entries live on the user's INBOX, as Dovecot keeps them. */
        ns = mail_user_namespace(user, "personal", err);
        if (ns == NULL)
            return false;
        name = "INBOX";
    }
    const char *who = private_user != NULL ? private_user : mail_user_name(user);
    if (strlen(who) >= sizeof(t->username))
        return petrel_error_set(err, PETREL_ERR_INVALID, "user name is too long");
    snprintf(t->username, sizeof(t->username), "%s", who);
    if (!t->server && !mail_folder_exists(user, ns, name))
        return petrel_error_set(err, PETREL_ERR_NOT_FOUND, "folder not found: %s", name);
    if (!t->server && !metadata_access_check(user, ns, name, access, err))
        return false;
    /* The GUID only, once the rights above said yes: opened past the
     * modules' open checks, which ask for the right to read messages
     * (RFC 5464 lets "l" with "w", "i", "s" or "p" reach the entries, a
     * folder's deletion needs only "x", the server's entries none). */
    struct mailbox *box = user->storage->v->mailbox_open(user, ns, name, err);
    if (box == NULL)
        return false;
    struct mailbox_info info;
    bool ok = mailbox_get_info(box, false, &info, err);
    mailbox_close(box);
    if (!ok)
        return false;
    if (t->server)
        t->server_admin = mail_storage_config(mail_user_storage(user))->metadata_server_admin;
    static const uint8_t zero[16];
    if (memcmp(info.guid, zero, sizeof(zero)) == 0)
        return petrel_error_set(err, PETREL_ERR_IO, "folder %s has no GUID in its index", name);
    mailbox_guid_hex(info.guid, t->guid);
    return true;
}

static struct dict_op_settings op_settings(const struct metadata_target *t)
{
    return (struct dict_op_settings){.username = t->username};
}

/* ---------- reading ---------- */

/* Reads base by base: a lookup of the base itself (unless it is a bare
 * scope, which holds no value), then, with a depth, an iteration of the
 * keys below it (direct children for 1, all for infinity); each entry goes
 * to the row callback as it comes, and the configured server /shared/admin
 * comes last. Between two rows the reader may rest (paused): the dict's
 * cursor stays where it is, its rows are not taken. */
struct metadata_reader {
    struct dict *dict;
    struct metadata_target t;
    struct metadata_entry *bases;
    size_t count;
    size_t next;         /* the base being read */
    bool looked;         /* its lookup is done */
    bool lookup_pending; /* a dict_lookup has not answered yet */
    bool admin_done;     /* the configured /shared/admin is out (or not wanted) */
    int depth;
    struct dict_iterate *it;
    metadata_row_cb *row_cb;
    metadata_end_cb *end_cb;
    void *ctx;
    bool pumping;
    bool paused;
    bool aborted; /* abandoned while a lookup was out: freed when it answers */
    char *error;  /* a lookup failed */
};

static bool read_step(struct metadata_reader *op);

static bool is_server_admin(const struct metadata_target *t, const struct metadata_entry *e)
{
    return t->server && t->server_admin != NULL && e->scope == METADATA_SHARED &&
           strcmp(e->path, "admin") == 0;
}

static void reader_free(struct metadata_reader *op)
{
    if (op->it != NULL)
        dict_iterate_deinit(op->it);
    free(op->bases);
    free(op->error);
    free(op);
}

static void read_finish(struct metadata_reader *op, const char *error)
{
    char msg[512];
    if (error != NULL)
        snprintf(msg, sizeof(msg), "%s", error); /* it may live in op */
    op->end_cb(error == NULL, error != NULL ? msg : NULL, op->ctx);
    reader_free(op);
}

/* One entry to the caller; the dict's own /shared/admin gives way to the
 * configured one. */
static void read_emit(struct metadata_reader *op, const struct metadata_entry *e, const char *value,
                      size_t len)
{
    if (is_server_admin(&op->t, e))
        return;
    if (op->row_cb(e, value, len, op->ctx) == METADATA_ROW_PAUSE)
        op->paused = true;
}

static void read_looked_up(const struct dict_lookup_result *r, void *ctx)
{
    struct metadata_reader *op = ctx;
    op->lookup_pending = false;
    if (op->aborted) {
        reader_free(op);
        return;
    }
    const struct metadata_entry *base = &op->bases[op->next];
    op->looked = true;
    if (r->ret < 0)
        op->error = xstrdup(r->error != NULL ? r->error : "lookup failed");
    else if (r->ret > 0 && r->value_count > 0 && !metadata_entry_internal(base))
        read_emit(op, base, r->values[0].data, r->values[0].len);
    if (!op->pumping && !op->paused)
        read_step(op);
}

static void read_iter_ready(void *ctx)
{
    struct metadata_reader *op = ctx;
    if (!op->pumping && !op->paused)
        read_step(op);
}

enum iter_rows { ROWS_END, ROWS_WAIT, ROWS_PAUSED, ROWS_FINISHED };

/* Takes the rows the iteration has, up to a pause; FINISHED when the
 * reader ended (and is freed). */
static enum iter_rows read_iter_rows(struct metadata_reader *op)
{
    const struct metadata_entry *base = &op->bases[op->next];
    struct dict_row row;
    for (;;) {
        enum dict_iter_status st = dict_iterate_next(op->it, &row);
        if (st == DICT_ITER_WAIT)
            return ROWS_WAIT;
        if (st == DICT_ITER_ERROR) {
            char msg[512];
            snprintf(msg, sizeof(msg), "%s", dict_iterate_error(op->it));
            read_finish(op, msg);
            return ROWS_FINISHED;
        }
        if (st == DICT_ITER_DONE) {
            dict_iterate_deinit(op->it);
            op->it = NULL;
            return ROWS_END;
        }
        struct metadata_entry e;
        if (row.value_count > 0 &&
            metadata_entry_from_key(row.key, base->scope, op->t.guid, op->t.server, &e) &&
            metadata_entry_in_depth(base, &e, op->depth)) {
            read_emit(op, &e, row.values[0].data, row.values[0].len);
            if (op->paused)
                return ROWS_PAUSED;
        }
    }
}

/* The configured server /shared/admin, once, when a base asks for it. */
static void read_server_admin(struct metadata_reader *op)
{
    op->admin_done = true;
    if (!op->t.server || op->t.server_admin == NULL)
        return;
    struct metadata_entry admin = {.scope = METADATA_SHARED, .path = "admin"};
    for (size_t i = 0; i < op->count; i++) {
        if (metadata_entry_in_depth(&op->bases[i], &admin, op->depth)) {
            if (op->row_cb(&admin, op->t.server_admin, strlen(op->t.server_admin), op->ctx) ==
                METADATA_ROW_PAUSE)
                op->paused = true;
            return;
        }
    }
}

/* Goes on until the end, a pause or a wait for the dict; false when the
 * reader ended (and is freed). */
static bool read_step(struct metadata_reader *op)
{
    op->pumping = true;
    struct dict_op_settings set = op_settings(&op->t);
    while (op->next < op->count) {
        const struct metadata_entry *base = &op->bases[op->next];
        if (!op->looked && base->path[0] != '\0') {
            struct buf key = {0};
            metadata_dict_key(base, op->t.guid, op->t.server, &key);
            op->lookup_pending = true;
            /* a synchronous driver answers inside the call */
            dict_lookup(op->dict, &set, buf_cstr(&key), read_looked_up, op);
            buf_free(&key);
            if (op->lookup_pending) {
                op->pumping = false;
                return true; /* read_looked_up goes on */
            }
        }
        if (op->error != NULL) {
            read_finish(op, op->error);
            return false;
        }
        op->looked = true;
        if (op->paused) {
            op->pumping = false;
            return true;
        }
        if (op->depth != 0) {
            if (op->it == NULL) {
                struct buf path = {0};
                if (base->path[0] == '\0') {
                    metadata_dict_prefix(base->scope, op->t.guid, op->t.server, &path);
                } else {
                    metadata_dict_key(base, op->t.guid, op->t.server, &path);
                    buf_append_char(&path, '/');
                }
                struct petrel_error err;
                petrel_error_clear(&err);
                unsigned flags = DICT_ITER_SORT_BY_KEY | (op->depth < 0 ? DICT_ITER_RECURSE : 0);
                op->it = dict_iterate_init(op->dict, &set, buf_cstr(&path), flags, &err);
                buf_free(&path);
                if (op->it == NULL) {
                    read_finish(op, err.message);
                    return false;
                }
                dict_iterate_set_async_callback(op->it, read_iter_ready, op);
            }
            enum iter_rows rows = read_iter_rows(op);
            if (rows == ROWS_FINISHED)
                return false;
            if (rows != ROWS_END) {
                op->pumping = false;
                return true;
            }
        }
        op->next++;
        op->looked = false;
    }
    if (!op->admin_done) {
        read_server_admin(op);
        if (op->paused) {
            op->pumping = false;
            return true;
        }
    }
    op->pumping = false;
    read_finish(op, NULL);
    return false;
}

struct metadata_reader *metadata_read_start(struct dict *dict, const struct metadata_target *t,
                                            const struct metadata_entry *bases, size_t count,
                                            int depth, metadata_row_cb *row_cb,
                                            metadata_end_cb *end_cb, void *ctx)
{
    struct metadata_reader *op = xcalloc(1, sizeof(*op));
    op->dict = dict;
    op->t = *t;
    op->bases = xmalloc((count > 0 ? count : 1) * sizeof(*bases));
    if (count > 0)
        memcpy(op->bases, bases, count * sizeof(*bases));
    op->count = count;
    op->depth = depth;
    op->row_cb = row_cb;
    op->end_cb = end_cb;
    op->ctx = ctx;
    return read_step(op) ? op : NULL;
}

void metadata_reader_resume(struct metadata_reader *op)
{
    if (!op->paused)
        return;
    op->paused = false;
    if (!op->pumping && !op->lookup_pending)
        read_step(op);
}

void metadata_reader_abort(struct metadata_reader *op)
{
    if (op == NULL)
        return;
    if (op->lookup_pending) {
        op->aborted = true; /* dict_lookup cannot be called off */
        return;
    }
    reader_free(op); /* an iteration's pending reply is dropped by its deinit */
}

/* metadata_read: the rows collected for one answer. */
struct read_all {
    struct metadata_value *values;
    size_t count, cap;
    metadata_read_cb *cb;
    void *ctx;
};

static enum metadata_row_action read_all_row(const struct metadata_entry *e, const char *value,
                                             size_t len, void *ctx)
{
    struct read_all *all = ctx;
    all->values = xgrow(all->values, &all->cap, all->count + 1, sizeof(*all->values));
    struct metadata_value *v = &all->values[all->count++];
    v->entry = *e;
    v->value = xmalloc(len + 1);
    memcpy(v->value, value, len);
    v->value[len] = '\0';
    v->len = len;
    return METADATA_ROW_MORE;
}

static void read_all_end(bool ok, const char *error, void *ctx)
{
    struct read_all *all = ctx;
    struct metadata_read_result r = {
        .ok = ok,
        .error = error,
        .values = all->values,
        .count = ok ? all->count : 0,
    };
    all->cb(&r, all->ctx);
    for (size_t i = 0; i < all->count; i++)
        free(all->values[i].value);
    free(all->values);
    free(all);
}

void metadata_read(struct dict *dict, const struct metadata_target *t,
                   const struct metadata_entry *bases, size_t count, int depth,
                   metadata_read_cb *cb, void *ctx)
{
    struct read_all *all = xcalloc(1, sizeof(*all));
    all->cb = cb;
    all->ctx = ctx;
    /* never paused: it ends by itself, at once or when the dict answers */
    (void)metadata_read_start(dict, t, bases, count, depth, read_all_row, read_all_end, all);
}

/* ---------- writing ---------- */

struct write_op {
    struct dict *dict;
    struct metadata_target t;
    struct metadata_change *changes; /* entries and values copied */
    size_t count;
    uint64_t max_entries;
    /* counting the folder's entries first (a set that may add one) */
    struct dict_iterate *it;
    int scope; /* the scope being counted */
    uint64_t existing;
    bool *exists; /* per change: its entry is there already */
    bool pumping;
    bool counted;
    metadata_write_cb *cb;
    void *ctx;
};

static void write_free(struct write_op *op)
{
    for (size_t i = 0; i < op->count; i++)
        free((char *)op->changes[i].value);
    free(op->changes);
    free(op->exists);
    free(op);
}

static void write_committed(enum dict_commit_result result, const char *error, void *ctx)
{
    struct write_op *op = ctx;
    if (result == DICT_COMMIT_OK || result == DICT_COMMIT_NOT_FOUND)
        op->cb(METADATA_WRITE_OK, NULL, op->ctx);
    else
        op->cb(METADATA_WRITE_FAILED,
               error != NULL                           ? error
               : result == DICT_COMMIT_WRITE_UNCERTAIN ? "write outcome uncertain"
                                                       : "commit failed",
               op->ctx);
    write_free(op);
}

static void write_commit(struct write_op *op)
{
    if (op->counted && op->max_entries > 0) {
        uint64_t total = op->existing;
        for (size_t i = 0; i < op->count; i++) {
            /* a name given twice counts once: the later change wins */
            bool later = false;
            for (size_t k = i + 1; k < op->count && !later; k++)
                later = op->changes[k].entry.scope == op->changes[i].entry.scope &&
                        strcmp(op->changes[k].entry.path, op->changes[i].entry.path) == 0;
            if (later)
                continue;
            if (op->changes[i].value != NULL && !op->exists[i])
                total++;
            else if (op->changes[i].value == NULL && op->exists[i] && total > 0)
                total--;
        }
        if (total > op->max_entries) {
            op->cb(METADATA_WRITE_TOOMANY, NULL, op->ctx);
            write_free(op);
            return;
        }
    }
    struct dict_op_settings set = op_settings(&op->t);
    struct dict_transaction *tx = dict_transaction_begin(op->dict, &set);
    struct buf key = {0};
    for (size_t i = 0; i < op->count; i++) {
        buf_reset(&key);
        metadata_dict_key(&op->changes[i].entry, op->t.guid, op->t.server, &key);
        if (op->changes[i].value != NULL)
            dict_set(tx, buf_cstr(&key), op->changes[i].value, op->changes[i].len);
        else
            dict_unset(tx, buf_cstr(&key));
    }
    buf_free(&key);
    dict_transaction_commit(tx, write_committed, op);
}

static void write_count_step(struct write_op *op);

static void write_count_ready(void *ctx)
{
    struct write_op *op = ctx;
    if (!op->pumping)
        write_count_step(op);
}

static void write_count_step(struct write_op *op)
{
    op->pumping = true;
    struct dict_op_settings set = op_settings(&op->t);
    while (op->scope <= METADATA_SHARED) {
        if (op->it == NULL) {
            struct petrel_error err;
            petrel_error_clear(&err);
            op->it = metadata_iterate_keys(op->dict, &set, (enum metadata_scope)op->scope,
                                           op->t.guid, op->t.server, write_count_ready, op, &err);
            if (op->it == NULL) {
                op->pumping = false;
                op->cb(METADATA_WRITE_FAILED, err.message, op->ctx);
                write_free(op);
                return;
            }
        }
        struct dict_row row;
        enum dict_iter_status st;
        while ((st = dict_iterate_next(op->it, &row)) == DICT_ITER_ROW) {
            struct metadata_entry e;
            if (!metadata_entry_from_key(row.key, (enum metadata_scope)op->scope, op->t.guid,
                                         op->t.server, &e))
                continue;
            op->existing++;
            for (size_t i = 0; i < op->count; i++)
                if (op->changes[i].entry.scope == e.scope &&
                    strcmp(op->changes[i].entry.path, e.path) == 0)
                    op->exists[i] = true;
        }
        if (st == DICT_ITER_WAIT) {
            op->pumping = false;
            return;
        }
        if (st == DICT_ITER_ERROR) {
            char msg[512];
            snprintf(msg, sizeof(msg), "%s", dict_iterate_error(op->it));
            dict_iterate_deinit(op->it);
            op->pumping = false;
            op->cb(METADATA_WRITE_FAILED, msg, op->ctx);
            write_free(op);
            return;
        }
        dict_iterate_deinit(op->it);
        op->it = NULL;
        op->scope++;
    }
    op->pumping = false;
    op->counted = true;
    write_commit(op);
}

void metadata_write(struct dict *dict, const struct metadata_target *t,
                    const struct metadata_change *changes, size_t count, uint64_t max_entries,
                    metadata_write_cb *cb, void *ctx)
{
    for (size_t i = 0; i < count; i++) {
        if (is_server_admin(t, &changes[i].entry)) {
            cb(METADATA_WRITE_READONLY, NULL, ctx);
            return;
        }
    }
    struct write_op *op = xcalloc(1, sizeof(*op));
    op->dict = dict;
    op->t = *t;
    op->count = count;
    op->max_entries = max_entries;
    op->cb = cb;
    op->ctx = ctx;
    op->changes = xcalloc(count > 0 ? count : 1, sizeof(*op->changes));
    op->exists = xcalloc(count > 0 ? count : 1, sizeof(*op->exists));
    bool adds = false;
    for (size_t i = 0; i < count; i++) {
        op->changes[i].entry = changes[i].entry;
        if (changes[i].value != NULL) {
            char *v = xmalloc(changes[i].len + 1);
            memcpy(v, changes[i].value, changes[i].len);
            v[changes[i].len] = '\0';
            op->changes[i].value = v;
            op->changes[i].len = changes[i].len;
            adds = true;
        }
    }
    op->scope = METADATA_PRIVATE;
    if (adds && max_entries > 0)
        write_count_step(op);
    else
        write_commit(op);
}

struct dict_iterate *metadata_iterate_keys(struct dict *dict, const struct dict_op_settings *set,
                                           enum metadata_scope scope, const char *guid_hex,
                                           bool server, void (*ready)(void *ctx), void *ctx,
                                           struct petrel_error *err)
{
    struct buf path = {0};
    metadata_dict_prefix(scope, guid_hex, server, &path);
    struct dict_iterate *it =
        dict_iterate_init(dict, set, buf_cstr(&path), DICT_ITER_RECURSE | DICT_ITER_NO_VALUE, err);
    buf_free(&path);
    if (it != NULL)
        dict_iterate_set_async_callback(it, ready, ctx);
    return it;
}
