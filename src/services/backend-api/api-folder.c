/* /api/backend/folder/{list,info,guid,stats,create,delete,rename,expunge} */
#include "services/backend-api/api-storage.h"
#include "services/backend-api/backend-api.h"

#include "core/json-util.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "storage/special-use.h"

#include <stdlib.h>
#include <string.h>

#define COMPONENT "backend-api"
#define EXPUNGE_MAX_UIDS 100000

static void handle_list(struct http_request *req, struct storage_request *sr,
                        struct petrel_error *err)
{
    storage_reply_names(req, sr, err, "folders", mail_folder_list);
}

static json_t *info_json(const char *name, const struct mailbox_info *info, bool stats)
{
    char guid[33];
    mailbox_guid_hex(info->guid, guid);
    json_t *o =
        json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I}", "name", name, "guid", guid, "uid_validity",
                  (json_int_t)info->uid_validity, "next_uid", (json_int_t)info->next_uid,
                  "messages", (json_int_t)info->messages, "unseen", (json_int_t)info->unseen,
                  "highest_modseq", (json_int_t)info->highest_modseq);
    if (stats) {
        json_object_set_new(o, "size_bytes", json_integer((json_int_t)info->size_bytes));
        json_object_set_new(o, "on_disk_count", json_integer((json_int_t)info->on_disk_count));
    }
    return o;
}

enum info_op { INFO_PLAIN, INFO_GUID, INFO_STATS };

/* info, guid (the GUID alone) and stats (info with the sizes) */
static void handle_info(struct http_request *req, struct storage_request *sr,
                        struct petrel_error *err)
{
    struct mailbox *box = storage_request_open(req, sr);
    if (box == NULL)
        return;
    bool stats = sr->op == INFO_STATS;
    struct mailbox_info info;
    if (!mailbox_get_info(box, stats, &info, err)) {
        http_reply_petrel_error(req, err);
    } else if (sr->op == INFO_GUID) {
        char guid[33];
        mailbox_guid_hex(info.guid, guid);
        http_reply_json(req, 200,
                        json_pack("{s:s, s:s}", "folder", mailbox_name(box), "guid", guid));
    } else {
        http_reply_json(req, 200, info_json(mailbox_name(box), &info, stats));
    }
    mailbox_close(box);
}

static void handle_create(struct http_request *req, struct storage_request *sr,
                          struct petrel_error *err)
{
    const char *special_use = NULL;
    if (!json_get_string(sr->body, "special_use", false, &special_use, err)) {
        http_reply_error(req, 400, "%s", err->message);
    } else if (special_use != NULL && special_use[0] != '\0' &&
               !special_use_attr_valid(special_use)) {
        http_reply_error(req, 400, "unknown special-use attribute '%s'", special_use);
    } else {
        /* The folder stays when its special use cannot be set (the reply
         * says why), and one asked for outside the personal namespace is
         * ignored: the API's contract (docs/storage.md). */
        struct mail_folder_create_params params = {
            .special_use = special_use != NULL && special_use[0] != '\0' ? special_use : NULL,
            .special_use_optional = true};
        if (!mail_folder_create_with(sr->user, sr->ns, sr->folder, &params, err)) {
            http_reply_petrel_error(req, err);
        } else {
            json_t *reply = json_pack("{s:s}", "status", "ok");
            if (params.special_use_failed)
                json_object_set_new(reply, "special_use_error",
                                    json_string(params.special_use_error));
            http_reply_json(req, 200, reply);
        }
    }
}

static void handle_delete(struct http_request *req, struct storage_request *sr,
                          struct petrel_error *err)
{
    storage_reply_done(req, mail_folder_delete(sr->user, sr->ns, sr->folder, err), err);
}

static void handle_rename(struct http_request *req, struct storage_request *sr,
                          struct petrel_error *err)
{
    const char *old_name = NULL;
    const char *new_name = NULL;
    if (!json_get_string(sr->body, "old_folder", true, &old_name, err) ||
        !json_get_string(sr->body, "new_folder", true, &new_name, err)) {
        http_reply_error(req, 400, "%s", err->message);
    } else if (old_name[0] == '\0' || new_name[0] == '\0') {
        http_reply_error(req, 400, "folder is required");
    } else {
        storage_reply_done(req, mail_folder_rename(sr->user, sr->ns, old_name, new_name, err), err);
    }
}

static void handle_expunge(struct http_request *req, struct storage_request *sr,
                           struct petrel_error *err)
{
    json_t *uids_json = NULL;
    uint32_t *uids = NULL;
    size_t uid_count = 0;
    bool ok = json_get_array(sr->body, "uids", false, &uids_json, err);
    if (ok && uids_json != NULL) {
        if (json_array_size(uids_json) > EXPUNGE_MAX_UIDS) {
            ok = petrel_error_set(err, PETREL_ERR_INVALID, "more than %d uids", EXPUNGE_MAX_UIDS);
        } else {
            uids = xcalloc(json_array_size(uids_json) + 1, sizeof(*uids));
            size_t i;
            json_t *v;
            json_array_foreach(uids_json, i, v)
            {
                json_int_t uid = json_is_integer(v) ? json_integer_value(v) : 0;
                if (uid <= 0 || uid > UINT32_MAX) {
                    ok = petrel_error_set(err, PETREL_ERR_INVALID,
                                          "uids must be integers from 1 to 4294967295");
                    break;
                }
                uids[uid_count++] = (uint32_t)uid;
            }
        }
    }
    if (!ok) {
        http_reply_error(req, 400, "%s", err->message);
    } else {
        struct mailbox *box = storage_request_open(req, sr);
        if (box != NULL) {
            uint32_t *done = NULL;
            size_t done_count = 0;
            if (!mailbox_expunge(box, uids_json != NULL ? uids : NULL, uid_count, &done,
                                 &done_count, err)) {
                http_reply_petrel_error(req, err);
            } else {
                json_t *arr = json_array();
                for (size_t i = 0; i < done_count; i++)
                    json_array_append_new(arr, json_integer(done[i]));
                http_reply_json(req, 200,
                                json_pack("{s:s, s:o, s:I}", "status", "ok", "expunged", arr,
                                          "count", (json_int_t)done_count));
            }
            free(done);
            mailbox_close(box);
        }
    }
    free(uids);
}

void backend_api_register_folder(struct http_server *http, struct storage_api *api)
{
    static const struct storage_route routes[] = {
        {"/api/backend/folder/list", STORAGE_FOLDER_NONE, handle_list, 0},
        {"/api/backend/folder/info", STORAGE_FOLDER_REQUIRED, handle_info, INFO_PLAIN},
        {"/api/backend/folder/guid", STORAGE_FOLDER_REQUIRED, handle_info, INFO_GUID},
        {"/api/backend/folder/stats", STORAGE_FOLDER_REQUIRED, handle_info, INFO_STATS},
        {"/api/backend/folder/create", STORAGE_FOLDER_REQUIRED, handle_create, 0},
        {"/api/backend/folder/delete", STORAGE_FOLDER_REQUIRED, handle_delete, 0},
        {"/api/backend/folder/rename", STORAGE_FOLDER_NONE, handle_rename, 0},
        {"/api/backend/folder/expunge", STORAGE_FOLDER_REQUIRED, handle_expunge, 0},
    };
    storage_register(http, api, NULL, routes, sizeof(routes) / sizeof(routes[0]));
}
