/* Subscription files of a namespace folded into the user's own
 * (subscriptions-migrate.h). */
#include "storage/subscriptions-migrate.h"

#include "core/log.h"
#include "core/xalloc.h"
#include "storage/subscription-store.h"
#include "storage/subscriptions.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COMPONENT "storage"

struct rows {
    char **v;
    size_t count;
    size_t cap;
};

static void rows_free(struct rows *r)
{
    for (size_t i = 0; i < r->count; i++)
        free(r->v[i]);
    free(r->v);
}

/* Adds the rows of source `path` that are new to `have` and to `rows`. */
static bool read_source(const char *path, const char *file_prefix, const struct subscriptions *have,
                        struct rows *rows, size_t *already, struct petrel_error *err)
{
    struct subscriptions src;
    memset(&src, 0, sizeof(src));
    if (!subscriptions_read(path, &src, err))
        return false;
    for (size_t i = 0; i < src.count; i++) {
        char *row = xasprintf("%s%s", file_prefix, src.names[i]);
        bool dup = subscriptions_contains(have, row);
        for (size_t k = 0; k < rows->count && !dup; k++)
            dup = strcmp(rows->v[k], row) == 0;
        if (dup) {
            (*already)++;
            free(row);
            continue;
        }
        rows->v = xgrow(rows->v, &rows->cap, rows->count + 1, sizeof(*rows->v));
        rows->v[rows->count++] = row;
    }
    subscriptions_free(&src);
    return true;
}

bool mail_subscriptions_migrate(struct mail_user *user, const struct namespace_config *ns,
                                bool apply, struct mail_subscriptions_migration *out,
                                struct petrel_error *err)
{
    memset(out, 0, sizeof(*out));
    if (ns->subscriptions || ns->type == NAMESPACE_PERSONAL)
        return petrel_error_set(err, PETREL_ERR_INVALID,
                                "namespace %s keeps its own subscriptions; nothing to migrate",
                                ns->slug);
    const struct namespace_config *personal = mail_user_namespace(user, "personal", err);
    struct buf dest = {0};
    struct buf ns_root = {0};
    struct buf personal_root = {0};
    const char *prefix = "";
    bool ok = personal != NULL && mail_subscriptions_file(user, ns, &dest, &prefix, err) &&
              mail_user_namespace_root(user, ns, &ns_root, err) &&
              mail_user_namespace_root(user, personal, &personal_root, err);
    char *candidates[2] = {NULL, NULL};
    struct subscriptions have;
    memset(&have, 0, sizeof(have));
    struct rows rows = {0};
    /* Rows of the source files are relative to the namespace and use '/';
     * the prefix in front of them uses the namespace separator. */
    char *file_prefix = mail_subscriptions_row(prefix, "", ns->separator);
    if (ok) {
        candidates[0] = xasprintf("%s/subscriptions", ns_root.data);
        candidates[1] = xasprintf("%s/subscriptions.%s", personal_root.data, ns->slug);
        ok = subscriptions_read(dest.data, &have, err);
    }
    for (size_t s = 0; ok && s < 2; s++) {
        if (strcmp(candidates[s], dest.data) == 0 || access(candidates[s], F_OK) != 0)
            continue;
        ok = read_source(candidates[s], file_prefix, &have, &rows, &out->already, err);
        if (ok)
            out->sources[out->source_count++] = xstrdup(candidates[s]);
    }
    out->folded = rows.count;
    if (ok && apply) {
        ok = subscriptions_add_many(dest.data, rows.v, rows.count, &out->folded, err);
        for (size_t s = 0; ok && s < out->source_count; s++) {
            if (unlink(out->sources[s]) != 0 && errno != ENOENT)
                log_warn(COMPONENT, "migrated subscriptions file not removed",
                         "path=%s error=\"%s\"", out->sources[s], strerror(errno));
        }
    }
    rows_free(&rows);
    free(file_prefix);
    free(candidates[0]);
    free(candidates[1]);
    subscriptions_free(&have);
    buf_free(&dest);
    buf_free(&ns_root);
    buf_free(&personal_root);
    return ok;
}

void mail_subscriptions_migration_free(struct mail_subscriptions_migration *m)
{
    for (size_t i = 0; i < m->source_count; i++)
        free(m->sources[i]);
    memset(m, 0, sizeof(*m));
}
