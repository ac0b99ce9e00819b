/* /api/backend/metadata/{list,get,set,delete} (document 1 "Metadata",
 * DECISIONS.md for the reply shapes): RFC 5464 entries through the same
 * store IMAP uses (storage/metadata/metadata-store.h), on the main loop's
 * handle of mail.attribute_dict. Nothing is cached on either side, so an
 * IMAP session sees a write made here at its next command. */
#include "services/backend-api/api-pending.h"
#include "services/backend-api/api-storage.h"
#include "services/backend-api/backend-api.h"

#include "core/base64.h"
#include "core/buf.h"
#include "core/json-util.h"
#include "core/user-name.h"
#include "core/xalloc.h"
#include "storage/metadata/metadata-store.h"

#include <stdlib.h>
#include <string.h>

enum md_op { MD_LIST, MD_GET, MD_SET, MD_DELETE };

/* A request waiting for the dict (the client may leave meanwhile). */
struct md_call {
    struct api_pending pending;
    struct metadata_entry entry;
};

static struct md_call *call_new(struct http_request *req, const struct metadata_entry *e)
{
    struct md_call *call = xcalloc(1, sizeof(*call));
    if (e != NULL)
        call->entry = *e;
    api_pending_hold(&call->pending, req);
    return call;
}

/* The request to answer (api_pending_take), the call freed. */
static struct http_request *call_take(struct md_call *call)
{
    struct http_request *req = api_pending_take(&call->pending);
    free(call);
    return req;
}

/* Decodes the envelope, resolves the folder's GUID and the dict. Replies
 * itself and returns NULL on failure. `entry`: the entry for get, set and
 * delete; the bare scope of `scope` for list. */
static struct dict *prepare(struct http_request *req, struct mail_storage *storage, enum md_op op,
                            struct storage_request *sr, struct metadata_target *t,
                            struct metadata_entry *entry)
{
    struct petrel_error err;
    petrel_error_clear(&err);
    const char *as_user = NULL;
    if (!json_get_string(sr->body, "as_user", false, &as_user, &err)) {
        http_reply_error(req, 400, "%s", err.message);
        return NULL;
    }
    if (as_user != NULL && *as_user == '\0')
        as_user = NULL;
    if (as_user != NULL &&
        (!user_name_valid(as_user, USER_NAME_MAX, &err) || strchr(as_user, '/') != NULL)) {
        http_reply_error(req, 400, "as_user: %s",
                         err.message[0] != '\0' ? err.message : "invalid user name");
        return NULL;
    }
    if (op == MD_LIST) {
        const char *scope = NULL;
        if (!json_get_string(sr->body, "scope", true, &scope, &err)) {
            http_reply_error(req, 400, "%s", err.message);
            return NULL;
        }
        memset(entry, 0, sizeof(*entry));
        if (strcmp(scope, "private") == 0)
            entry->scope = METADATA_PRIVATE;
        else if (strcmp(scope, "shared") == 0)
            entry->scope = METADATA_SHARED;
        else {
            http_reply_error(req, 400, "scope must be private or shared");
            return NULL;
        }
    } else {
        const char *name = NULL;
        const char *why = NULL;
        if (!json_get_string(sr->body, "entry", true, &name, &err)) {
            http_reply_error(req, 400, "%s", err.message);
            return NULL;
        }
        if (!metadata_entry_parse(name, strlen(name), false, entry, &why)) {
            http_reply_error(req, 400, "entry: %s", why);
            return NULL;
        }
        if (metadata_entry_internal(entry)) {
            http_reply_error(req, 400, "entry: Entry name is reserved for the server's own use");
            return NULL;
        }
    }
    const struct mail_config *cfg = mail_storage_config(storage);
    if (entry->scope == METADATA_PRIVATE && !cfg->metadata_private) {
        http_reply_error(req, 400, "private entries are disabled (mail.metadata_private)");
        return NULL;
    }
    struct dict *dict = metadata_storage_dict(storage, &err);
    if (dict == NULL) {
        http_reply_petrel_error(req, &err);
        return NULL;
    }
    /* The admin plane's user passes the rights check (document 1). */
    unsigned access = metadata_access_for(entry->scope, op == MD_SET || op == MD_DELETE);
    if (!metadata_target_resolve(sr->user, sr->ns, sr->folder, as_user, access, t, &err)) {
        if (err.code == PETREL_ERR_NOT_FOUND)
            http_reply_error(req, 404, "folder not found: %s", sr->folder);
        else
            http_reply_petrel_error(req, &err);
        return NULL;
    }
    return dict;
}

/* ---------- list / get ---------- */

static void list_done(const struct metadata_read_result *r, void *ctx)
{
    struct http_request *req = call_take(ctx);
    if (req == NULL)
        return;
    if (!r->ok) {
        http_reply_error(req, 500, "metadata read failed: %s", r->error);
        return;
    }
    json_t *entries = json_array();
    struct buf name = {0}, b64 = {0};
    for (size_t i = 0; i < r->count; i++) {
        buf_reset(&name);
        buf_reset(&b64);
        metadata_entry_format(&r->values[i].entry, &name);
        base64_encode_append(&b64, r->values[i].value, r->values[i].len);
        json_array_append_new(entries,
                              json_pack("{s:s%, s:s%}", "entry", name.data, name.len, "value",
                                        b64.data != NULL ? b64.data : "", b64.len));
    }
    buf_free(&name);
    buf_free(&b64);
    http_reply_json(req, 200, json_pack("{s:o}", "entries", entries));
}

static void get_done(const struct metadata_read_result *r, void *ctx)
{
    struct md_call *call = ctx;
    struct buf name = {0};
    metadata_entry_format(&call->entry, &name);
    struct http_request *req = call_take(call);
    if (req == NULL) {
        buf_free(&name);
        return;
    }
    if (!r->ok) {
        http_reply_error(req, 500, "metadata read failed: %s", r->error);
    } else if (r->count == 0) {
        http_reply_json(req, 200,
                        json_pack("{s:s, s:b, s:n}", "entry", name.data, "found", 0, "value"));
    } else {
        struct buf b64 = {0};
        base64_encode_append(&b64, r->values[0].value, r->values[0].len);
        http_reply_json(req, 200,
                        json_pack("{s:s, s:b, s:s%}", "entry", name.data, "found", 1, "value",
                                  b64.data != NULL ? b64.data : "", b64.len));
        buf_free(&b64);
    }
    buf_free(&name);
}

static void write_done(enum metadata_write_status status, const char *error, void *ctx)
{
    struct http_request *req = call_take(ctx);
    if (req == NULL)
        return;
    if (status == METADATA_WRITE_OK)
        http_reply_json(req, 200, json_pack("{s:s}", "status", "ok"));
    else if (status == METADATA_WRITE_TOOMANY)
        http_reply_error(req, 409, "too many entries (mail.metadata_max_entries)");
    else if (status == METADATA_WRITE_READONLY)
        http_reply_error(req, 403, "/shared/admin is set by mail.metadata_server_admin");
    else
        http_reply_error(req, 500, "metadata write failed: %s", error != NULL ? error : "");
}

static void handle(struct http_request *req, struct storage_request *sr, struct petrel_error *err)
{
    enum md_op op = sr->op;
    struct mail_storage *storage = mail_user_storage(sr->user);
    struct metadata_target t;
    struct metadata_entry entry;
    struct dict *dict = prepare(req, storage, op, sr, &t, &entry);
    if (dict == NULL)
        return;
    if (op == MD_LIST) {
        metadata_read(dict, &t, &entry, 1, -1, list_done, call_new(req, NULL));
    } else if (op == MD_GET) {
        metadata_read(dict, &t, &entry, 1, 0, get_done, call_new(req, &entry));
    } else {
        struct metadata_change change = {.entry = entry};
        struct buf value = {0};
        if (op == MD_SET) {
            const char *b64 = NULL;
            if (!json_get_string(sr->body, "value", true, &b64, err)) {
                http_reply_error(req, 400, "%s", err->message);
                goto out;
            }
            if (!base64_decode_append(&value, b64, strlen(b64))) {
                http_reply_error(req, 400, "value: invalid base64");
                goto out;
            }
            uint64_t max = metadata_max_value(storage);
            if ((uint64_t)value.len > max) {
                http_reply_error(req, 400,
                                 "value: %zu bytes is more than mail.metadata_max_value_bytes "
                                 "(%llu)",
                                 value.len, (unsigned long long)max);
                goto out;
            }
            change.value = value.data != NULL ? value.data : "";
            change.len = value.len;
        }
        metadata_write(dict, &t, &change, 1, metadata_max_entries(storage), write_done,
                       call_new(req, NULL));
    out:
        buf_free(&value);
    }
}

void backend_api_register_metadata(struct http_server *http, struct storage_api *api)
{
    static const struct storage_route routes[] = {
        {"/api/backend/metadata/list", STORAGE_FOLDER_OPTIONAL, handle, MD_LIST},
        {"/api/backend/metadata/get", STORAGE_FOLDER_OPTIONAL, handle, MD_GET},
        {"/api/backend/metadata/set", STORAGE_FOLDER_OPTIONAL, handle, MD_SET},
        {"/api/backend/metadata/delete", STORAGE_FOLDER_OPTIONAL, handle, MD_DELETE},
    };
    storage_register(http, api, NULL, routes, sizeof(routes) / sizeof(routes[0]));
}
