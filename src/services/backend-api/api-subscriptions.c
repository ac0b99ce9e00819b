/* /api/backend/subscriptions/{list,add,remove,migrate}
 *
 * Where a namespace's subscriptions live: a namespace with
 * `subscriptions: true` keeps its own file at "<namespace root>/subscriptions"
 * holding names relative to the namespace; one with `subscriptions: false`
 * has its rows in the user's own file (the personal namespace root) with the
 * namespace prefix in front. The personal file is the one IMAP SUBSCRIBE
 * writes. migrate folds the old per-namespace files of a namespace that
 * keeps none any more ("<namespace root>/subscriptions" and the earlier
 * path form "<personal root>/subscriptions.<slug>") into the user's file
 * (storage/subscriptions-migrate.h). */
#include "services/backend-api/api-storage.h"
#include "services/backend-api/backend-api.h"

#include "core/json-util.h"
#include "storage/subscription-store.h"
#include "storage/subscriptions-migrate.h"

#define COMPONENT "backend-api"

static void handle_list(struct http_request *req, void *ctx)
{
    storage_handle_names(req, ctx, "subscriptions", mail_subscriptions_list);
}

static void change(struct http_request *req, void *ctx, bool add)
{
    struct storage_request sr;
    if (!storage_request_begin(ctx, req, STORAGE_FOLDER_REQUIRED, &sr))
        return;
    struct petrel_error err;
    petrel_error_clear(&err);
    bool changed = false;
    storage_reply_done(req, mail_subscriptions_set(sr.user, sr.ns, sr.folder, add, &changed, &err),
                       &err);
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
    struct mail_subscriptions_migration m;
    if (!json_get_bool(sr.body, "apply", false, &apply, &err)) {
        http_reply_error(req, 400, "%s", err.message);
    } else if (!mail_subscriptions_migrate(sr.user, sr.ns, apply, &m, &err)) {
        http_reply_petrel_error(req, &err);
        mail_subscriptions_migration_free(&m);
    } else {
        json_t *read = json_array();
        for (size_t i = 0; i < m.source_count; i++)
            json_array_append_new(read, json_string(m.sources[i]));
        /* A dry run reports what would be folded. */
        http_reply_json(req, 200,
                        json_pack("{s:o, s:I, s:I, s:b}", "sources", read, "folded",
                                  (json_int_t)m.folded, "already", (json_int_t)m.already, "apply",
                                  apply));
        mail_subscriptions_migration_free(&m);
    }
    storage_request_end(&sr);
}

void backend_api_register_subscriptions(struct http_server *http, struct storage_api *api)
{
    http_server_route(http, HTTP_POST, "/api/backend/subscriptions/list", 0, handle_list, api);
    http_server_route(http, HTTP_POST, "/api/backend/subscriptions/add", 0, handle_add, api);
    http_server_route(http, HTTP_POST, "/api/backend/subscriptions/remove", 0, handle_remove, api);
    http_server_route(http, HTTP_POST, "/api/backend/subscriptions/migrate", 0, handle_migrate,
                      api);
}
