/* /api/backend/user/{info,iterate,usage} */
#include "services/backend-api/api-storage.h"
#include "services/backend-api/backend-api.h"

#include "core/json-util.h"
#include "storage/maildir/maildir-filename.h"

#include <string.h>
#include <sys/stat.h>

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
                              json_pack("{s:s, s:s, s:s, s:s, s:s, s:b}", "name", ns->name,
                                        "type", namespace_type_name(ns->type), "prefix",
                                        ns->prefix, "home", resolved ? root.data : "",
                                        "location", ns->location, "exists", exists));
        buf_free(&root);
    }
    http_reply_json(req, 200,
                    json_pack("{s:s, s:s, s:o}", "username", mail_user_name(sr.user), "home",
                              mail_user_home(sr.user), "namespaces", namespaces));
    storage_request_end(&sr);
}

static void handle_iterate(struct http_request *req, void *ctx)
{
    (void)ctx;
    /* Listing users needs the auth side; the spec's answer without one. */
    http_reply_error(req, 503,
                     "user iteration needs the auth service (backend_api.auth_master_addr)");
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
                                  json_pack("{s:s, s:s, s:I, s:I}", "namespace", ns->slug,
                                            "folder", names[i], "messages",
                                            (json_int_t)info.messages, "size_bytes",
                                            (json_int_t)info.size_bytes));
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
