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

static void handle_list(struct http_request *req, struct storage_request *sr,
                        struct petrel_error *err)
{
    storage_reply_names(req, sr, err, "subscriptions", mail_subscriptions_list);
}

enum subscription_op { UNSUBSCRIBE, SUBSCRIBE };

static void handle_change(struct http_request *req, struct storage_request *sr,
                          struct petrel_error *err)
{
    bool changed = false;
    storage_reply_done(
        req,
        mail_subscriptions_set(sr->user, sr->ns, sr->folder, sr->op == SUBSCRIBE, &changed, err),
        err);
}

static void handle_migrate(struct http_request *req, struct storage_request *sr,
                           struct petrel_error *err)
{
    bool apply = false;
    struct mail_subscriptions_migration m;
    if (!json_get_bool(sr->body, "apply", false, &apply, err)) {
        http_reply_error(req, 400, "%s", err->message);
    } else if (!mail_subscriptions_migrate(sr->user, sr->ns, apply, &m, err)) {
        http_reply_petrel_error(req, err);
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
}

void backend_api_register_subscriptions(struct http_server *http, struct storage_api *api)
{
    static const struct storage_route routes[] = {
        {"/api/backend/subscriptions/list", STORAGE_FOLDER_NONE, handle_list, 0},
        {"/api/backend/subscriptions/add", STORAGE_FOLDER_REQUIRED, handle_change, SUBSCRIBE},
        {"/api/backend/subscriptions/remove", STORAGE_FOLDER_REQUIRED, handle_change, UNSUBSCRIBE},
        {"/api/backend/subscriptions/migrate", STORAGE_FOLDER_NONE, handle_migrate, 0},
    };
    storage_register(http, api, NULL, routes, sizeof(routes) / sizeof(routes[0]));
}
