/* fail: every operation fails. For exercising error paths end to end. */
#include "dict/dict-private.h"

#include "core/xalloc.h"

#include <stdlib.h>

#define FAIL_MESSAGE "the fail driver fails every operation"

struct fail_iterate {
    struct dict_iterate head;
};

static void *fail_config_read(const struct cfg_ctx *ctx, const struct ynode *map, const char *path,
                              const char *dict_name)
{
    static const char *const keys[] = {"driver", NULL};
    (void)dict_name;
    if (!cfg_check_keys(ctx, map, path, keys))
        return NULL;
    return xstrdup("fail");
}

static void fail_config_free(void *config)
{
    free(config);
}

static bool fail_open(struct dict *dict, struct petrel_error *err)
{
    (void)err;
    dict->driver_data = xstrdup("fail");
    return true;
}

static void fail_close(struct dict *dict)
{
    free(dict->driver_data);
    dict->driver_data = NULL;
}

static void fail_lookup(struct dict *dict, const char *key, dict_lookup_cb *cb, void *ctx)
{
    (void)dict;
    (void)key;
    struct dict_lookup_result r = {.ret = -1, .error = FAIL_MESSAGE};
    cb(&r, ctx);
}

static struct dict_iterate *fail_iterate_init(struct dict *dict, const char *prefix, unsigned flags)
{
    struct fail_iterate *it = xcalloc(1, sizeof(*it));
    dict_iterate_head_init(&it->head, dict, prefix, flags);
    return &it->head;
}

static enum dict_iter_status fail_iterate_next(struct dict_iterate *it, struct dict_row *row)
{
    (void)row;
    dict_iterate_set_error(it, FAIL_MESSAGE);
    return DICT_ITER_ERROR;
}

static void fail_iterate_deinit(struct dict_iterate *it)
{
    free(it);
}

static void fail_commit(struct dict *dict, const struct dict_tx_op *ops, size_t count,
                        int64_t expire_secs, dict_commit_cb *cb, void *ctx)
{
    (void)dict;
    (void)ops;
    (void)count;
    (void)expire_secs;
    cb(DICT_COMMIT_FAILED, FAIL_MESSAGE, ctx);
}

static void fail_expire_scan(struct dict *dict, dict_expire_cb *cb, void *ctx)
{
    (void)dict;
    cb(false, FAIL_MESSAGE, ctx);
}

const struct dict_driver_ops dict_driver_fail = {
    .name = "fail",
    .config_read = fail_config_read,
    .config_free = fail_config_free,
    .open = fail_open,
    .close = fail_close,
    .lookup = fail_lookup,
    .iterate_init = fail_iterate_init,
    .iterate_next = fail_iterate_next,
    .iterate_deinit = fail_iterate_deinit,
    .commit = fail_commit,
    .expire_scan = fail_expire_scan,
};
