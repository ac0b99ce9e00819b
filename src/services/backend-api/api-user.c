/* /api/backend/user/{info,iterate,usage} */
#include "services/backend-api/api-storage.h"
#include "services/backend-api/backend-api.h"

#include "core/json-util.h"
#include "core/xalloc.h"
#include "clients/auth/auth-client.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* A user/info or user/iterate request waiting for the auth service. */
struct auth_call {
    struct http_request *req; /* NULL once the HTTP side went away */
    struct auth_client_request *areq;
    json_t *reply; /* user/info: the reply without the userdb keys */
};

static void auth_call_cancel(struct http_request *req, enum http_cancel_reason why, void *ctx)
{
    (void)req;
    (void)why;
    struct auth_call *call = ctx;
    auth_client_cancel(call->areq);
    json_decref(call->reply);
    free(call);
}

/* The HTTP request, detached from the cancel hook; frees the call. */
static struct http_request *auth_call_finish(struct auth_call *call, json_t **reply)
{
    struct http_request *req = call->req;
    http_request_set_cancel(req, NULL, NULL);
    if (reply != NULL)
        *reply = call->reply;
    free(call);
    return req;
}

static void info_userdb_done(const struct auth_client_reply *r, void *ctx)
{
    json_t *reply = NULL;
    struct http_request *req = auth_call_finish(ctx, &reply);
    if (r->status == AUTH_CLIENT_OK && r->userdb != NULL) {
        json_object_set_new(reply, "userdb_status", json_string("ok"));
        json_object_set_new(reply, "userdb", userdb_entry_to_json(r->userdb));
    } else {
        bool missing = r->status == AUTH_CLIENT_NOT_FOUND;
        json_object_set_new(reply, "userdb_status", json_string(missing ? "not_found" : "error"));
        json_object_set_new(reply, "userdb", json_null());
    }
    http_reply_json(req, 200, reply);
}

static void handle_info(struct http_request *req, void *ctx)
{
    struct storage_request sr;
    if (!storage_request_begin(ctx, req, STORAGE_FOLDER_NONE, &sr))
        return;
    const struct mail_config *cfg = mail_storage_config(mail_user_storage(sr.user));
    json_t *namespaces = json_array();
    for (size_t i = 0; i < cfg->namespace_count; i++) {
        const struct namespace_config *ns = &cfg->namespaces[i];
        struct buf root = {0};
        struct petrel_error err;
        bool resolved = mail_user_namespace_root(sr.user, ns, &root, &err);
        struct stat st;
        bool exists = resolved && stat(root.data, &st) == 0 && S_ISDIR(st.st_mode);
        json_array_append_new(namespaces,
                              json_pack("{s:s, s:s, s:s, s:s, s:s, s:b}", "name", ns->name, "type",
                                        namespace_type_name(ns->type), "prefix", ns->prefix, "home",
                                        resolved ? root.data : "", "location", ns->location,
                                        "exists", exists));
        buf_free(&root);
    }
    json_t *reply = json_pack("{s:s, s:s, s:o}", "username", mail_user_name(sr.user), "home",
                              mail_user_home(sr.user), "namespaces", namespaces);
    struct storage_api *api = ctx;
    if (api->auth == NULL) {
        http_reply_json(req, 200, reply);
        storage_request_end(&sr);
        return;
    }
    struct auth_call *call = xcalloc(1, sizeof(*call));
    call->req = req;
    call->reply = reply;
    http_request_set_cancel(req, auth_call_cancel, call);
    const char *username = mail_user_name(sr.user);
    /* The callback never runs inside auth_client_user (auth-client.h), so
     * the handle can be stored afterwards. */
    call->areq = auth_client_user(api->auth, username, info_userdb_done, call);
    storage_request_end(&sr);
}

static void iterate_done(const struct auth_client_reply *r, void *ctx)
{
    struct http_request *req = auth_call_finish(ctx, NULL);
    if (r->status != AUTH_CLIENT_OK) {
        http_reply_error(req, 502, "auth service: %s",
                         r->reason != NULL ? r->reason : "user iteration failed");
        return;
    }
    json_t *users = json_array();
    for (size_t i = 0; i < r->user_count; i++)
        json_array_append_new(users, json_string(r->users[i]));
    http_reply_json(req, 200, json_pack("{s:o}", "users", users));
}

static void handle_iterate(struct http_request *req, void *ctx)
{
    struct storage_api *api = ctx;
    if (api->auth == NULL) {
        /* Listing users needs the auth side; the spec's answer without one. */
        http_reply_error(req, 503,
                         "user iteration needs the auth service (backend_api.auth_master_addr)");
        return;
    }
    struct auth_call *call = xcalloc(1, sizeof(*call));
    call->req = req;
    http_request_set_cancel(req, auth_call_cancel, call);
    call->areq = auth_client_iterate(api->auth, iterate_done, call);
}

struct usage_totals {
    json_t *folders;
    uint64_t messages;
    uint64_t bytes;
};

static void handle_usage(struct http_request *req, void *ctx)
{
    struct storage_request sr;
    if (!storage_request_begin(ctx, req, STORAGE_FOLDER_NONE, &sr))
        return;
    const struct mail_config *cfg = mail_storage_config(mail_user_storage(sr.user));
    struct usage_totals t = {json_array(), 0, 0};
    struct petrel_error err;
    bool ok = true;
    for (size_t n = 0; ok && n < cfg->namespace_count; n++) {
        const struct namespace_config *ns = &cfg->namespaces[n];
        char **names = NULL;
        size_t count = 0;
        if (ns->per_owner)
            continue; /* other users' folders: theirs to count */
        if (!mail_folder_list(sr.user, ns, &names, &count, &err)) {
            ok = false;
            break;
        }
        for (size_t i = 0; i < count; i++) {
            struct mailbox *box = mailbox_open(sr.user, ns, names[i], &err);
            if (box == NULL) {
                if (err.code == PETREL_ERR_NOT_FOUND)
                    continue; /* removed while we walked */
                ok = false;
                break;
            }
            struct mailbox_info info;
            ok = mailbox_get_info(box, true, &info, &err);
            mailbox_close(box);
            if (!ok)
                break;
            json_array_append_new(t.folders,
                                  json_pack("{s:s, s:s, s:I, s:I}", "namespace", ns->slug, "folder",
                                            names[i], "messages", (json_int_t)info.messages,
                                            "size_bytes", (json_int_t)info.size_bytes));
            t.messages += info.messages;
            t.bytes += info.size_bytes;
        }
        mail_folder_list_free(names, count);
    }
    if (!ok) {
        json_decref(t.folders);
        http_reply_petrel_error(req, &err);
    } else {
        http_reply_json(req, 200,
                        json_pack("{s:s, s:o, s:I, s:I}", "user", mail_user_name(sr.user),
                                  "folders", t.folders, "total_messages", (json_int_t)t.messages,
                                  "total_size_bytes", (json_int_t)t.bytes));
    }
    storage_request_end(&sr);
}

void backend_api_register_user(struct http_server *http, struct storage_api *api)
{
    http_server_route(http, HTTP_POST, "/api/backend/user/info", 0, handle_info, api);
    http_server_route(http, HTTP_POST, "/api/backend/user/iterate", 0, handle_iterate, api);
    http_server_route(http, HTTP_POST, "/api/backend/user/usage", 0, handle_usage, api);
}
