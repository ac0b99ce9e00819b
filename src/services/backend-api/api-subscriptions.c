/* /api/backend/subscriptions/{list,add,remove,migrate}
 *
 * Where a namespace's subscriptions live: a namespace with
 * `subscriptions: true` keeps its own file at "<namespace root>/subscriptions"
 * holding names relative to the namespace; one with `subscriptions: false`
 * has its rows in the user's own file (the personal namespace root) with the
 * namespace prefix in front. The personal file is the one IMAP SUBSCRIBE
 * writes. migrate folds the old per-namespace files of a namespace that
 * keeps none any more ("<namespace root>/subscriptions" and the earlier
 * path form "<personal root>/subscriptions.<slug>") into the user's file. */
#include "services/backend-api/api-storage.h"
#include "services/backend-api/backend-api.h"

#include "core/json-util.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "storage/mailbox-name.h"
#include "storage/subscription-store.h"
#include "storage/subscriptions.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define COMPONENT "backend-api"

static void handle_list(struct http_request *req, void *ctx)
{
    struct storage_request sr;
    if (!storage_request_begin(ctx, req, STORAGE_FOLDER_NONE, &sr))
        return;
    struct petrel_error err;
    char **names = NULL;
    size_t count = 0;
    if (!mail_subscriptions_list(sr.user, sr.ns, &names, &count, &err)) {
        http_reply_petrel_error(req, &err);
    } else {
        json_t *arr = json_array();
        for (size_t i = 0; i < count; i++)
            json_array_append_new(arr, json_string(names[i]));
        http_reply_json(req, 200, json_pack("{s:o}", "subscriptions", arr));
    }
    mail_folder_list_free(names, count);
    storage_request_end(&sr);
}

static void change(struct http_request *req, void *ctx, bool add)
{
    struct storage_request sr;
    if (!storage_request_begin(ctx, req, STORAGE_FOLDER_REQUIRED, &sr))
        return;
    struct petrel_error err;
    petrel_error_clear(&err);
    bool changed = false;
    if (!mail_subscriptions_set(sr.user, sr.ns, sr.folder, add, &changed, &err))
        http_reply_petrel_error(req, &err);
    else
        http_reply_json(req, 200, json_pack("{s:s}", "status", "ok"));
    storage_request_end(&sr);
}

static void handle_add(struct http_request *req, void *ctx)
{
    change(req, ctx, true);
}

static void handle_remove(struct http_request *req, void *ctx)
{
    change(req, ctx, false);
}

static void handle_migrate(struct http_request *req, void *ctx)
{
    struct storage_request sr;
    if (!storage_request_begin(ctx, req, STORAGE_FOLDER_NONE, &sr))
        return;
    struct petrel_error err;
    petrel_error_clear(&err);
    bool apply = false;
    if (!json_get_bool(sr.body, "apply", false, &apply, &err)) {
        http_reply_error(req, 400, "%s", err.message);
        storage_request_end(&sr);
        return;
    }
    if (sr.ns->subscriptions || sr.ns->type == NAMESPACE_PERSONAL) {
        http_reply_error(req, 400,
                         "namespace %s keeps its own subscriptions; nothing to migrate",
                         sr.ns->slug);
        storage_request_end(&sr);
        return;
    }
    const struct namespace_config *personal = mail_user_namespace(sr.user, "personal", &err);
    struct buf dest = {0};
    struct buf ns_root = {0};
    struct buf personal_root = {0};
    const char *prefix = "";
    bool ok = personal != NULL && mail_subscriptions_file(sr.user, sr.ns, &dest, &prefix, &err) &&
              mail_user_namespace_root(sr.user, sr.ns, &ns_root, &err) &&
              mail_user_namespace_root(sr.user, personal, &personal_root, &err);
    char *sources[2] = {NULL, NULL};
    if (ok) {
        sources[0] = xasprintf("%s/subscriptions", ns_root.data);
        sources[1] = xasprintf("%s/subscriptions.%s", personal_root.data, sr.ns->slug);
    }
    struct subscriptions have;
    memset(&have, 0, sizeof(have));
    if (ok)
        ok = subscriptions_read(dest.data, &have, &err);
    json_t *read = json_array();
    char **rows = NULL;
    size_t row_count = 0;
    size_t row_cap = 0;
    size_t already = 0;
    bool read_any[2] = {false, false};
    /* Rows of the source files are relative to the namespace and use '/';
     * the prefix in front of them uses the namespace separator. */
    char *file_prefix = mail_subscriptions_row(prefix, "", sr.ns->separator);
    for (size_t s = 0; ok && s < 2; s++) {
        if (strcmp(sources[s], dest.data) == 0 || access(sources[s], F_OK) != 0)
            continue;
        struct subscriptions src;
        memset(&src, 0, sizeof(src));
        if (!subscriptions_read(sources[s], &src, &err)) {
            ok = false;
            break;
        }
        read_any[s] = true;
        json_array_append_new(read, json_string(sources[s]));
        for (size_t i = 0; i < src.count; i++) {
            char *row = xasprintf("%s%s", file_prefix, src.names[i]);
            bool dup = subscriptions_contains(&have, row);
            for (size_t k = 0; k < row_count && !dup; k++)
                dup = strcmp(rows[k], row) == 0;
            if (dup) {
                already++;
                free(row);
                continue;
            }
            rows = xgrow(rows, &row_cap, row_count + 1, sizeof(*rows));
            rows[row_count++] = row;
        }
        subscriptions_free(&src);
    }
    size_t added = 0;
    if (ok && apply) {
        /* Every row is in the destination before any source goes away. */
        ok = subscriptions_add_many(dest.data, rows, row_count, &added, &err);
        for (size_t s = 0; ok && s < 2; s++) {
            if (read_any[s] && unlink(sources[s]) != 0 && errno != ENOENT)
                log_warn(COMPONENT, "migrated subscriptions file not removed",
                         "path=%s error=\"%s\"", sources[s], strerror(errno));
        }
    }
    if (!ok) {
        json_decref(read);
        http_reply_petrel_error(req, &err);
    } else {
        /* A dry run reports what would be folded. */
        http_reply_json(req, 200,
                        json_pack("{s:o, s:I, s:I, s:b}", "sources", read, "folded",
                                  (json_int_t)(apply ? added : row_count), "already",
                                  (json_int_t)already, "apply", apply));
    }
    for (size_t i = 0; i < row_count; i++)
        free(rows[i]);
    free(rows);
    free(file_prefix);
    free(sources[0]);
    free(sources[1]);
    subscriptions_free(&have);
    buf_free(&dest);
    buf_free(&ns_root);
    buf_free(&personal_root);
    storage_request_end(&sr);
}

void backend_api_register_subscriptions(struct http_server *http, struct storage_api *api)
{
    http_server_route(http, HTTP_POST, "/api/backend/subscriptions/list", 0, handle_list, api);
    http_server_route(http, HTTP_POST, "/api/backend/subscriptions/add", 0, handle_add, api);
    http_server_route(http, HTTP_POST, "/api/backend/subscriptions/remove", 0, handle_remove,
                      api);
    http_server_route(http, HTTP_POST, "/api/backend/subscriptions/migrate", 0, handle_migrate,
                      api);
}
