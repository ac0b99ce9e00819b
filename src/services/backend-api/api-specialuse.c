/* /api/backend/specialuse/{list,get,set,delete} (personal namespace) */
#include "services/backend-api/api-storage.h"
#include "services/backend-api/backend-api.h"

#include "core/json-util.h"
#include "storage/mailbox-name.h"
#include "storage/special-use.h"

#include <string.h>

/* Every request's check: attributes belong to the personal namespace, and
 * a folder name follows its rules (400 otherwise, as on every other folder
 * endpoint). */
static bool check_request(struct http_request *req, const struct storage_request *sr)
{
    struct petrel_error err;
    if (sr->ns->type != NAMESPACE_PERSONAL) {
        http_reply_error(req, 400, "special-use attributes exist in the personal namespace only");
        return false;
    }
    if (sr->folder != NULL && !mailbox_name_is_inbox(sr->folder) &&
        !mailbox_name_validate(sr->folder, sr->ns->separator, &err)) {
        http_reply_error(req, 400, "%s", err.message);
        return false;
    }
    return true;
}

static void handle_list(struct http_request *req, struct storage_request *sr,
                        struct petrel_error *err)
{
    struct special_use_list list;
    if (!special_use_read(sr->user, &list, err)) {
        http_reply_petrel_error(req, err);
    } else {
        json_t *overrides = json_object();
        for (size_t i = 0; i < list.count; i++)
            json_object_set_new(overrides, list.entries[i].folder,
                                json_string(list.entries[i].attr));
        json_t *defaults = json_object();
        const struct mail_config *cfg = mail_storage_config(mail_user_storage(sr->user));
        for (size_t i = 0; i < cfg->special_use_count; i++)
            json_object_set_new(defaults, cfg->special_use[i].folder,
                                json_string(cfg->special_use[i].attr));
        special_use_list_free(&list);
        http_reply_json(req, 200,
                        json_pack("{s:o, s:o}", "overrides", overrides, "defaults", defaults));
    }
}

static void handle_get(struct http_request *req, struct storage_request *sr,
                       struct petrel_error *err)
{
    struct special_use_list scratch;
    memset(&scratch, 0, sizeof(scratch));
    const char *attr = "";
    enum special_use_source source;
    if (!special_use_get(sr->user, sr->folder, &attr, &source, &scratch, err))
        http_reply_petrel_error(req, err);
    else
        http_reply_json(req, 200,
                        json_pack("{s:s, s:s, s:s}", "folder", sr->folder, "attr", attr, "source",
                                  special_use_source_name(source)));
    special_use_list_free(&scratch);
}

static void handle_set(struct http_request *req, struct storage_request *sr,
                       struct petrel_error *err)
{
    const char *attr = NULL;
    const struct namespace_config *personal = mail_user_namespace(sr->user, "personal", err);
    if (!json_get_string(sr->body, "attr", true, &attr, err)) {
        http_reply_error(req, 400, "%s", err->message);
    } else if (!special_use_attr_valid(attr)) {
        http_reply_error(req, 400, "unknown special-use attribute '%s'", attr);
    } else if (personal == NULL || !mail_folder_exists(sr->user, personal, sr->folder)) {
        http_reply_error(req, 404, "folder not found: %s", sr->folder);
    } else {
        storage_reply_done(req, special_use_set(sr->user, sr->folder, attr, err), err);
    }
}

static void handle_delete(struct http_request *req, struct storage_request *sr,
                          struct petrel_error *err)
{
    storage_reply_done(req, special_use_set(sr->user, sr->folder, NULL, err), err);
}

void backend_api_register_specialuse(struct http_server *http, struct storage_api *api)
{
    static const struct storage_route routes[] = {
        {"/api/backend/specialuse/list", STORAGE_FOLDER_NONE, handle_list, 0},
        {"/api/backend/specialuse/get", STORAGE_FOLDER_REQUIRED, handle_get, 0},
        {"/api/backend/specialuse/set", STORAGE_FOLDER_REQUIRED, handle_set, 0},
        {"/api/backend/specialuse/delete", STORAGE_FOLDER_REQUIRED, handle_delete, 0},
    };
    storage_register(http, api, check_request, routes, sizeof(routes) / sizeof(routes[0]));
}
