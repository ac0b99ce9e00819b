/* The METADATA storage module (metadata-store.h "the storage module"): a
 * deleted folder's entries leave the dict with it. */
#include "storage/metadata/metadata-store.h"

#include "core/buf.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "dict/dict.h"

#include <stdlib.h>
#include <string.h>

#define COMPONENT "metadata"

struct purge_op {
    struct dict *dict;
    struct metadata_target t;
    struct dict_iterate *it;
    int scope;
    char **keys;
    size_t key_count, key_cap;
    bool pumping;
};

static void purge_free(struct purge_op *op)
{
    for (size_t i = 0; i < op->key_count; i++)
        free(op->keys[i]);
    free(op->keys);
    free(op);
}

static void purge_committed(enum dict_commit_result result, const char *error, void *ctx)
{
    struct purge_op *op = ctx;
    if (result != DICT_COMMIT_OK && result != DICT_COMMIT_NOT_FOUND)
        log_warn(COMPONENT, "cannot delete a deleted folder's entries", "guid=%s error=\"%s\"",
                 op->t.guid, error != NULL ? error : "commit failed");
    purge_free(op);
}

static void purge_step(struct purge_op *op);

static void purge_ready(void *ctx)
{
    struct purge_op *op = ctx;
    if (!op->pumping)
        purge_step(op);
}

static void purge_step(struct purge_op *op)
{
    op->pumping = true;
    struct dict_op_settings set = {.username = op->t.username};
    while (op->scope <= METADATA_SHARED) {
        if (op->it == NULL) {
            struct petrel_error err;
            petrel_error_clear(&err);
            /* the folder's prefix: its entries and Dovecot's internal ones */
            op->it = metadata_iterate_keys(op->dict, &set, (enum metadata_scope)op->scope,
                                           op->t.guid, false, purge_ready, op, &err);
            if (op->it == NULL) {
                log_warn(COMPONENT, "cannot list a deleted folder's entries",
                         "guid=%s error=\"%s\"", op->t.guid, err.message);
                purge_free(op);
                return;
            }
        }
        struct dict_row row;
        enum dict_iter_status st;
        while ((st = dict_iterate_next(op->it, &row)) == DICT_ITER_ROW) {
            op->keys = xgrow(op->keys, &op->key_cap, op->key_count + 1, sizeof(*op->keys));
            op->keys[op->key_count++] = xstrdup(row.key);
        }
        if (st == DICT_ITER_WAIT) {
            op->pumping = false;
            return;
        }
        if (st == DICT_ITER_ERROR)
            log_warn(COMPONENT, "cannot list a deleted folder's entries", "guid=%s error=\"%s\"",
                     op->t.guid, dict_iterate_error(op->it));
        dict_iterate_deinit(op->it);
        op->it = NULL;
        op->scope++;
    }
    op->pumping = false;
    if (op->key_count == 0) {
        purge_free(op);
        return;
    }
    struct dict_transaction *tx = dict_transaction_begin(op->dict, &set);
    for (size_t i = 0; i < op->key_count; i++)
        dict_unset(tx, op->keys[i]);
    dict_transaction_commit(tx, purge_committed, op);
}

/* Before the folder goes (its GUID is still in its index). Registered
 * after every module that may say no, so a folder another module keeps
 * keeps its entries; if the deletion itself fails afterwards the entries
 * are gone already (logged by the storage), which loses annotations but
 * never shows one folder's entries on another. */
static bool module_folder_delete(void *ctx, struct mail_user *user,
                                 const struct namespace_config *ns, const char *name,
                                 struct petrel_error *err)
{
    (void)ctx;
    (void)err;
    struct petrel_error e;
    petrel_error_clear(&e);
    struct dict *dict = metadata_storage_dict(mail_user_storage(user), &e);
    if (dict == NULL)
        return true;
    struct purge_op *op = xcalloc(1, sizeof(*op));
    op->dict = dict;
    if (!metadata_target_resolve(user, ns, name, NULL, METADATA_ACCESS_NONE, &op->t, &e)) {
        free(op);
        return true; /* no index, no GUID: no entries can be keyed to it */
    }
    op->scope = METADATA_PRIVATE;
    purge_step(op);
    return true;
}

const struct mail_storage_module metadata_module = {
    .name = "metadata",
    .folder_delete = module_folder_delete,
};
