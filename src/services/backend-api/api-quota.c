/* /api/backend/quota/{show,recalc,clone/list,clone/get} (document 3, reply
 * shapes from DECISIONS.md). show and recalc read the user's quota_rule
 * from the userdb through the auth service (the limits, and the folders a
 * rule marks ignore), then sum the folder aggregates of the personal
 * namespace; recalc first rebuilds each aggregate from its records under
 * the folder's index lock. clone/get reads the two mirror keys of one
 * configured clone dict: advisory, show is authoritative. */
#include "services/backend-api/api-storage.h"
#include "services/backend-api/backend-api.h"

#include "core/json-util.h"
#include "core/xalloc.h"
#include "clients/auth/auth-client.h"
#include "storage/quota/quota-clone.h"
#include "storage/quota/quota-limits.h"
#include "storage/quota/quota-rule.h"
#include "storage/quota/quota-usage.h"

#include <stdlib.h>
#include <string.h>

/* Folder aggregates remembered between show calls (about 200 bytes each;
 * checked against the index files on each use, so never stale). */
#define QUOTA_API_USAGE_CACHE_FOLDERS 65536

struct quota_api {
    struct storage_api *storage;
    const struct quota_config *cfg;
    struct dict_registry *dicts;
    struct fileindex_usage_cache *usage_cache;
};

/* ---------- show, recalc ---------- */

struct usage_call {
    struct quota_api *api;
    struct http_request *req; /* NULL once the client went away */
    struct auth_client_request *areq;
    bool recalc;
    char *username; /* as asked */
};

static void usage_call_cancel(struct http_request *req, enum http_cancel_reason why, void *ctx)
{
    (void)req;
    (void)why;
    struct usage_call *call = ctx;
    auth_client_cancel(call->areq);
    free(call->username);
    free(call);
}

static json_t *pair_json(uint64_t used, uint64_t limit)
{
    return json_pack("{s:I, s:I}", "used", (json_int_t)used, "limit", (json_int_t)limit);
}

/* The answer for a user the userdb knows (`name` is its canonical name). */
static void usage_reply(struct quota_api *api, struct http_request *req, const char *name,
                        char *const *rule_fields, bool recalc)
{
    struct petrel_error err;
    petrel_error_clear(&err);
    struct quota_rules rules;
    quota_rules_init(&rules);
    struct mail_user *user = mail_user_get(api->storage->storage, name, &err);
    if (user == NULL) {
        http_reply_error(req, 400, "%s", err.message);
        goto out;
    }
    if (!quota_rules_add_list(&rules, rule_fields, &err)) {
        http_reply_error(req, 500, "user %s: quota_rule: %s", name, err.message);
        goto out;
    }
    struct quota_usage usage;
    bool ok = recalc ? quota_usage_recalc(user, &rules, &usage, &err)
                     : quota_usage_get(user, &rules, api->usage_cache, &usage, &err);
    if (!ok) {
        http_reply_petrel_error(req, &err);
        goto out;
    }
    struct quota_limits limits;
    quota_limits_compute(api->cfg, &rules, NULL, QUOTA_POINT_INTERACTIVE, &limits);
    http_reply_json(req, 200,
                    json_pack("{s:s, s:o, s:o}", "user", name, "storage",
                              pair_json(usage.storage, limits.storage), "messages",
                              pair_json(usage.messages, limits.messages)));
out:
    quota_rules_free(&rules);
}

static void usage_userdb_done(const struct auth_client_reply *r, void *ctx)
{
    struct usage_call *call = ctx;
    struct http_request *req = call->req;
    http_request_set_cancel(req, NULL, NULL);
    struct quota_api *api = call->api;
    bool recalc = call->recalc;
    char *username = call->username;
    free(call);
    if (r->status == AUTH_CLIENT_NOT_FOUND) {
        http_reply_error(req, 404, "user not found: %s", username);
        free(username);
        return;
    }
    free(username);
    if (r->status != AUTH_CLIENT_OK || r->userdb == NULL || r->user == NULL) {
        http_reply_error(req, 502, "auth service: %s",
                         r->reason != NULL ? r->reason : "userdb lookup failed");
        return;
    }
    usage_reply(api, req, r->user, r->userdb->quota_rule, recalc);
}

/* A user name is given and valid; else a 400 is sent. */
static bool check_user(struct quota_api *api, struct http_request *req, const char *username)
{
    struct petrel_error err;
    if (username == NULL || *username == '\0') {
        http_reply_error(req, 400, "user is required");
        return false;
    }
    if (mail_user_get(api->storage->storage, username, &err) == NULL) {
        http_reply_error(req, 400, "%s", err.message);
        return false;
    }
    return true;
}

static void usage_begin(struct quota_api *api, struct http_request *req, const char *username,
                        bool recalc)
{
    if (!check_user(api, req, username))
        return;
    if (api->storage->auth == NULL) {
        /* The limits are the userdb's quota_rule: nothing to answer without it. */
        http_reply_error(req, 503, "quota needs the auth service (backend_api.auth_master_addr)");
        return;
    }
    struct usage_call *call = xcalloc(1, sizeof(*call));
    call->api = api;
    call->req = req;
    call->recalc = recalc;
    call->username = xstrdup(username);
    http_request_set_cancel(req, usage_call_cancel, call);
    /* The callback never runs inside auth_client_user (auth-client.h). */
    call->areq = auth_client_user(api->storage->auth, username, usage_userdb_done, call);
}

static void handle_show(struct http_request *req, void *ctx)
{
    usage_begin(ctx, req, http_request_query(req, "user"), false);
}

static void handle_recalc(struct http_request *req, void *ctx)
{
    json_t *body = http_request_json(req);
    if (body == NULL)
        return;
    const char *user = NULL;
    struct petrel_error err;
    petrel_error_clear(&err);
    if (!json_get_string(body, "user", true, &user, &err))
        http_reply_error(req, 400, "%s", err.message);
    else
        usage_begin(ctx, req, user, true);
    json_decref(body);
}

/* ---------- clone/list, clone/get ---------- */

static void handle_clone_list(struct http_request *req, void *ctx)
{
    struct quota_api *api = ctx;
    json_t *names = json_array();
    for (size_t i = 0; api->cfg->clone_dicts[i] != NULL; i++)
        json_array_append_new(names, json_string(api->cfg->clone_dicts[i]));
    http_reply_json(req, 200, json_pack("{s:o}", "backends", names));
}

/* Two lookups (storage, messages) answered in any order. */
struct clone_call {
    struct http_request *req; /* NULL once the client went away */
    char *backend;
    char *user;
    int waiting;
    bool failed;
    char error[256];
    json_t *values[2];
};

static const char *const clone_keys[2] = {QUOTA_CLONE_KEY_STORAGE, QUOTA_CLONE_KEY_MESSAGES};

static void clone_call_cancel(struct http_request *req, enum http_cancel_reason why, void *ctx)
{
    (void)req;
    (void)why;
    struct clone_call *call = ctx;
    call->req = NULL; /* the lookups still answer: they free the call */
}

static void clone_call_finish(struct clone_call *call)
{
    struct http_request *req = call->req;
    if (req != NULL) {
        http_request_set_cancel(req, NULL, NULL);
        if (call->failed) {
            http_reply_error(req, 502, "clone dict %s: %s", call->backend, call->error);
        } else {
            http_reply_json(req, 200,
                            json_pack("{s:s, s:s, s:O, s:O}", "backend", call->backend, "user",
                                      call->user, "storage", call->values[0], "messages",
                                      call->values[1]));
        }
    }
    for (int i = 0; i < 2; i++)
        json_decref(call->values[i]);
    free(call->backend);
    free(call->user);
    free(call);
}

static void clone_lookup_done(struct clone_call *call, int which,
                              const struct dict_lookup_result *r)
{
    if (r->ret < 0 && !call->failed) {
        call->failed = true;
        snprintf(call->error, sizeof(call->error), "%s", r->error != NULL ? r->error : "error");
    } else if (r->ret > 0 && r->value_count > 0) {
        uint64_t v;
        if (quota_clone_parse_value(r->values[0].data, r->values[0].len, &v)) {
            call->values[which] = json_integer((json_int_t)v);
        } else if (!call->failed) {
            call->failed = true;
            snprintf(call->error, sizeof(call->error), "%s: not a number", clone_keys[which]);
        }
    }
    if (--call->waiting == 0)
        clone_call_finish(call);
}

static void clone_storage_done(const struct dict_lookup_result *r, void *ctx)
{
    clone_lookup_done(ctx, 0, r);
}

static void clone_messages_done(const struct dict_lookup_result *r, void *ctx)
{
    clone_lookup_done(ctx, 1, r);
}

static void handle_clone_get(struct http_request *req, void *ctx)
{
    struct quota_api *api = ctx;
    const char *backend = http_request_query(req, "backend");
    const char *username = http_request_query(req, "user");
    if (backend == NULL || *backend == '\0') {
        http_reply_error(req, 400, "backend is required");
        return;
    }
    if (!check_user(api, req, username))
        return;
    bool configured = false;
    for (size_t i = 0; api->cfg->clone_dicts[i] != NULL && !configured; i++)
        configured = strcmp(api->cfg->clone_dicts[i], backend) == 0;
    struct dict *dict = configured ? dict_registry_get(api->dicts, backend) : NULL;
    if (dict == NULL) {
        http_reply_error(req, 404, "clone backend not configured: %s", backend);
        return;
    }
    struct clone_call *call = xcalloc(1, sizeof(*call));
    call->req = req;
    call->backend = xstrdup(backend);
    call->user = xstrdup(username);
    call->waiting = 2;
    call->values[0] = json_null();
    call->values[1] = json_null();
    http_request_set_cancel(req, clone_call_cancel, call);
    struct dict_op_settings set = {.username = call->user};
    /* Synchronous drivers answer inside dict_lookup: the second lookup is
     * started before the first could free the call. */
    call->waiting++;
    dict_lookup(dict, &set, QUOTA_CLONE_KEY_STORAGE, clone_storage_done, call);
    dict_lookup(dict, &set, QUOTA_CLONE_KEY_MESSAGES, clone_messages_done, call);
    if (--call->waiting == 0)
        clone_call_finish(call);
}

static void quota_api_free(void *ctx)
{
    struct quota_api *api = ctx;
    quota_usage_cache_free(api->usage_cache);
    free(api);
}

void backend_api_register_quota(struct http_server *http, struct storage_api *storage,
                                const struct quota_config *cfg, struct dict_registry *dicts)
{
    struct quota_api *api = xcalloc(1, sizeof(*api));
    api->storage = storage;
    api->cfg = cfg;
    api->dicts = dicts;
    api->usage_cache = quota_usage_cache_new(QUOTA_API_USAGE_CACHE_FOLDERS);
    http_server_on_free(http, quota_api_free, api);
    http_server_route(http, HTTP_GET, "/api/backend/quota/show", 0, handle_show, api);
    http_server_route(http, HTTP_POST, "/api/backend/quota/recalc", 0, handle_recalc, api);
    http_server_route(http, HTTP_GET, "/api/backend/quota/clone/list", 0, handle_clone_list, api);
    http_server_route(http, HTTP_GET, "/api/backend/quota/clone/get", 0, handle_clone_get, api);
}
