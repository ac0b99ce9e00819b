#include "services/backend-api/api-storage.h"

#include "core/json-util.h"
#include "core/xalloc.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

bool storage_request_begin(struct storage_api *api, struct http_request *req,
                           enum storage_folder_rule folder_rule, struct storage_request *out)
{
    return storage_request_begin_as(api, req, "user", folder_rule, out);
}

bool storage_request_begin_as(struct storage_api *api, struct http_request *req,
                              const char *user_field, enum storage_folder_rule folder_rule,
                              struct storage_request *out)
{
    memset(out, 0, sizeof(*out));
    out->body = http_request_json(req);
    if (out->body == NULL)
        return false;
    struct petrel_error err;
    petrel_error_clear(&err);
    const char *user = NULL;
    const char *slug = "personal";
    const char *folder = NULL;
    if (!json_get_string(out->body, user_field, true, &user, &err) ||
        !json_get_string(out->body, "namespace", false, &slug, &err) ||
        (folder_rule != STORAGE_FOLDER_NONE &&
         !json_get_string(out->body, "folder", false, &folder, &err))) {
        http_reply_error(req, 400, "%s", err.message);
        goto fail;
    }
    if (slug[0] == '\0')
        slug = "personal";
    out->user = mail_user_get(api->storage, user, &err);
    if (out->user == NULL) {
        http_reply_error(req, 400, "%s", err.message);
        goto fail;
    }
    out->ns = mail_user_namespace(out->user, slug, &err);
    if (out->ns == NULL) {
        http_reply_error(req, 404, "%s", err.message);
        goto fail;
    }
    if (folder_rule == STORAGE_FOLDER_REQUIRED && (folder == NULL || folder[0] == '\0')) {
        http_reply_error(req, 400, "folder is required");
        goto fail;
    }
    out->folder = folder;
    return true;
fail:
    json_decref(out->body);
    out->body = NULL;
    return false;
}

void storage_request_end(struct storage_request *sr)
{
    json_decref(sr->body);
    sr->body = NULL;
}

struct mailbox *storage_request_open(struct http_request *req, struct storage_request *sr)
{
    struct petrel_error err;
    petrel_error_clear(&err);
    struct mailbox *box = mailbox_open(sr->user, sr->ns, sr->folder, &err);
    if (box == NULL) {
        if (err.code == PETREL_ERR_NOT_FOUND)
            http_reply_error(req, 404, "folder not found: %s", sr->folder);
        else
            http_reply_petrel_error(req, &err);
    }
    return box;
}

json_t *storage_flags_json(uint32_t flags, const char *const *keywords, size_t keyword_count)
{
    static const struct {
        uint32_t bit;
        const char *name;
    } names[] = {
        {MAIL_FLAG_ANSWERED, "\\Answered"}, {MAIL_FLAG_FLAGGED, "\\Flagged"},
        {MAIL_FLAG_DELETED, "\\Deleted"},   {MAIL_FLAG_SEEN, "\\Seen"},
        {MAIL_FLAG_DRAFT, "\\Draft"},       {MAIL_FLAG_PASSED, "$Forwarded"},
    };
    json_t *arr = json_array();
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if ((flags & names[i].bit) != 0)
            json_array_append_new(arr, json_string(names[i].name));
    }
    for (size_t i = 0; i < keyword_count; i++)
        json_array_append_new(arr, json_string(keywords[i]));
    return arr;
}

/* A route's context: the area's API and check, and the route. */
struct storage_route_ctx {
    struct storage_api *api;
    storage_check_fn *check;
    const struct storage_route *route;
};

static void run_route(struct http_request *req, void *ctx)
{
    const struct storage_route_ctx *rc = ctx;
    struct storage_request sr;
    if (!storage_request_begin(rc->api, req, rc->route->folder_rule, &sr))
        return;
    sr.op = rc->route->op;
    if (rc->check == NULL || rc->check(req, &sr)) {
        struct petrel_error err;
        petrel_error_clear(&err);
        rc->route->handler(req, &sr, &err);
    }
    storage_request_end(&sr);
}

void storage_register(struct http_server *http, struct storage_api *api, storage_check_fn *check,
                      const struct storage_route *routes, size_t count)
{
    struct storage_route_ctx *ctxs = xcalloc(count, sizeof(*ctxs));
    for (size_t i = 0; i < count; i++) {
        ctxs[i].api = api;
        ctxs[i].check = check;
        ctxs[i].route = &routes[i];
        http_server_route(http, HTTP_POST, routes[i].path, 0, run_route, &ctxs[i]);
    }
    http_server_on_free(http, free, ctxs);
}

void storage_reply_names(struct http_request *req, const struct storage_request *sr,
                         struct petrel_error *err, const char *key, storage_names_fn *list)
{
    char **names = NULL;
    size_t count = 0;
    if (!list(sr->user, sr->ns, &names, &count, err)) {
        http_reply_petrel_error(req, err);
    } else {
        json_t *arr = json_array();
        for (size_t i = 0; i < count; i++)
            json_array_append_new(arr, json_string(names[i]));
        http_reply_json(req, 200, json_pack("{s:o}", key, arr));
    }
    mail_folder_list_free(names, count);
}

void storage_reply_done(struct http_request *req, bool ok, const struct petrel_error *err)
{
    if (ok)
        http_reply_json(req, 200, json_pack("{s:s}", "status", "ok"));
    else
        http_reply_petrel_error(req, err);
}

long long storage_elapsed_ms(const struct timespec *start)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)(now.tv_sec - start->tv_sec) * 1000 +
           (now.tv_nsec - start->tv_nsec) / 1000000;
}
