/* /api/backend/acl/rebuild, /acl/registry/list and /acl/registry/rebuild
 * (document 1 "ACL" items 5 and 6, DECISIONS.md): the namespace's ACL list
 * index reseeded from the dovecot-acl files (storage/acl/acl-list-index.h)
 * and the owner-discovery registry (storage/acl/acl-registry.h). Admin
 * plane: no ACL is checked for the caller.
 *
 * rebuild: `folders` (names; "" is the root) merge: exactly those folders'
 * rows become what their files hold (a folder that does not exist or has
 * no ACL file is listed under `skipped` with a reason and its rows, if any,
 * go; a file that cannot be read is skipped and its rows kept). `all`
 * true: every folder and the root, and the index is replaced (rows of
 * folders that are gone go); a failing folder enumeration answers 500
 * before anything is written. `all` with `folders`: 400; neither: 400.
 * `dry_run` writes nothing and reports the difference per row. */
#include "services/backend-api/api-pending.h"
#include "services/backend-api/api-storage.h"
#include "services/backend-api/backend-api.h"

#include "core/json-util.h"
#include "core/user-name.h"
#include "core/xalloc.h"
#include "storage/acl/acl-list-index.h"
#include "storage/acl/acl-registry.h"
#include "storage/acl/acl-rights.h"
#include "storage/acl/acl-store.h"
#include "storage/mailbox-name.h"

#include <stdlib.h>
#include <string.h>

static json_t *rights_json(uint32_t rights)
{
    char letters[14];
    return json_string(acl_rights_str(rights, true, letters));
}

static json_t *row_json(const char *folder, const struct acl_entry *e)
{
    struct buf id = {0};
    acl_id_format(&e->id, &id);
    buf_append_char(&id, '\0');
    json_t *o = json_pack("{s:s, s:s, s:o}", "folder", folder, "identifier", id.data, "rights",
                          rights_json(e->rights));
    buf_free(&id);
    return o;
}

/* What the files say for the folders in scope. */
struct scope {
    struct acl_index want; /* rows of the reseeded folders */
    char **names;          /* folders whose rows are set to `want`'s (maybe none) */
    size_t count;
    size_t cap;
    bool all;
};

static void scope_add(struct scope *s, const char *name)
{
    s->names = xgrow(s->names, &s->cap, s->count + 1, sizeof(*s->names));
    s->names[s->count++] = xstrdup(name);
}

static void scope_free(struct scope *s)
{
    for (size_t i = 0; i < s->count; i++)
        free(s->names[i]);
    free(s->names);
    acl_list_index_free(&s->want);
}

/* Applies the scope to an index: `all` replaces, else the named folders'
 * rows are set (merge). */
static void scope_apply(const struct scope *s, struct acl_index *idx)
{
    if (s->all)
        acl_list_index_clear(idx);
    struct acl_list list = {0};
    for (size_t i = 0; i < s->count; i++) {
        acl_list_index_folder(&s->want, s->names[i], &list);
        acl_list_index_set_folder(idx, s->names[i], &list);
    }
    acl_list_free(&list);
}

static bool scope_change(struct acl_index *idx, void *ctx, struct petrel_error *err)
{
    (void)err;
    scope_apply(ctx, idx);
    return true;
}

static json_t *skip(const char *folder, const char *reason)
{
    return json_pack("{s:s, s:s}", "folder", folder, "reason", reason);
}

/* Reads folder `name`'s file into the scope; false when skipped (the
 * reason appended to `skipped`). */
static bool reseed(struct storage_request *sr, const char *name, struct scope *s, json_t *rebuilt,
                   json_t *skipped, bool *root_has_acl)
{
    bool is_root = name[0] == '\0';
    if (!is_root && !mail_folder_exists(sr->user, sr->ns, name)) {
        /* (With `all`, the INBOX of a user who never had mail.) */
        if (!s->all)
            json_array_append_new(skipped, skip(name, "folder not found"));
        scope_add(s, name); /* stale rows of a gone folder go */
        return false;
    }
    struct buf dir = {0};
    struct acl_list list = {0};
    struct petrel_error err;
    petrel_error_clear(&err);
    bool ok = false;
    if (!acl_store_dir(sr->user, sr->ns, name, &dir, &err)) {
        json_array_append_new(skipped, skip(name, err.message));
        goto out;
    }
    buf_append_char(&dir, '\0');
    int r = acl_store_read(dir.data, &list, NULL, &err);
    if (r < 0) {
        /* Unreadable: its rows stay as they are (nothing is known). */
        char reason[sizeof(err.message) + 32];
        snprintf(reason, sizeof(reason), "ACL file unusable: %s", err.message);
        json_array_append_new(skipped, skip(name, reason));
        goto out;
    }
    scope_add(s, name);
    if (r == 0 || list.count == 0) {
        if (!is_root && !s->all)
            json_array_append_new(skipped, skip(name, "no ACL"));
        goto out;
    }
    acl_list_index_set_folder(&s->want, name, &list);
    if (is_root)
        *root_has_acl = true;
    else
        json_array_append_new(rebuilt, json_string(name));
    ok = true;
out:
    acl_list_free(&list);
    buf_free(&dir);
    return ok;
}

/* The dry run's report: per row of the folders in scope (every folder of
 * either index with `all`). */
static json_t *diff(const struct acl_index *now, const struct acl_index *after)
{
    json_t *missing = json_array(), *stale = json_array(), *mismatched = json_array();
    json_t *in_sync = json_array();
    size_t i = 0, j = 0;
    const char *folder = NULL;
    bool folder_synced = true;
    while (i < now->count || j < after->count) {
        const struct acl_index_row *a = i < now->count ? &now->rows[i] : NULL;
        const struct acl_index_row *b = j < after->count ? &after->rows[j] : NULL;
        int c;
        if (a == NULL)
            c = 1;
        else if (b == NULL)
            c = -1;
        else {
            c = strcmp(a->folder, b->folder);
            if (c == 0)
                c = acl_id_compare(&a->entry.id, &b->entry.id);
        }
        const char *f = c <= 0 ? a->folder : b->folder;
        if (folder == NULL || strcmp(folder, f) != 0) {
            if (folder != NULL && folder_synced)
                json_array_append_new(in_sync, json_string(folder));
            folder = f;
            folder_synced = true;
        }
        if (c < 0) {
            json_array_append_new(stale, row_json(a->folder, &a->entry));
            folder_synced = false;
            i++;
        } else if (c > 0) {
            json_array_append_new(missing, row_json(b->folder, &b->entry));
            folder_synced = false;
            j++;
        } else {
            if (a->entry.rights != b->entry.rights) {
                json_t *o = row_json(b->folder, &b->entry);
                json_object_set_new(o, "indexed", rights_json(a->entry.rights));
                json_array_append_new(mismatched, o);
                folder_synced = false;
            }
            i++, j++;
        }
    }
    if (folder != NULL && folder_synced)
        json_array_append_new(in_sync, json_string(folder));
    return json_pack("{s:o, s:o, s:o, s:o}", "missing", missing, "stale", stale, "mismatched",
                     mismatched, "in_sync", in_sync);
}

/* The rows of `idx` that belong to the scope's folders (all of them with
 * `all`), for the dry run's comparison. */
static void scope_rows(const struct scope *s, const struct acl_index *idx, struct acl_index *out)
{
    acl_list_index_clear(out);
    struct acl_list list = {0};
    for (size_t i = 0; i < idx->count; i++) {
        bool in = s->all;
        for (size_t k = 0; !in && k < s->count; k++)
            in = strcmp(s->names[k], idx->rows[i].folder) == 0;
        if (!in)
            continue;
        acl_list_index_folder(idx, idx->rows[i].folder, &list);
        acl_list_index_set_folder(out, idx->rows[i].folder, &list);
    }
    acl_list_free(&list);
}

static void handle_rebuild(struct http_request *req, struct storage_request *sr,
                           struct petrel_error *err)
{
    json_t *folders = NULL;
    bool all = false, dry_run = false;
    struct scope s = {0};
    json_t *rebuilt = json_array(), *skipped = json_array();
    char **names = NULL;
    size_t name_count = 0;
    struct acl_index now = {0}, after = {0}, before = {0};
    if (!json_get_array(sr->body, "folders", false, &folders, err) ||
        !json_get_bool(sr->body, "all", false, &all, err) ||
        !json_get_bool(sr->body, "dry_run", false, &dry_run, err)) {
        http_reply_error(req, 400, "%s", err->message);
        goto out;
    }
    if (all && folders != NULL) {
        http_reply_error(req, 400, "conflicting fields: all and folders");
        goto out;
    }
    if (!all && folders == NULL) {
        http_reply_error(req, 400, "folders or all is required");
        goto out;
    }
    for (size_t i = 0; folders != NULL && i < json_array_size(folders); i++) {
        const char *name = json_string_value(json_array_get(folders, i));
        if (name == NULL) {
            http_reply_error(req, 400, "folders[%zu] must be a string", i);
            goto out;
        }
        if (name[0] != '\0' && !mailbox_name_is_inbox(name) &&
            !mailbox_name_validate(name, sr->ns->separator, err)) {
            http_reply_error(req, 400, "folders[%zu]: %s", i, err->message);
            goto out;
        }
    }
    s.all = all;
    bool root_has_acl = false;
    if (all) {
        /* Enumerate first: a failure here writes nothing. */
        if (!mail_folder_list(sr->user, sr->ns, &names, &name_count, err)) {
            http_reply_error(req, 500, "cannot enumerate the folders: %s", err->message);
            goto out;
        }
        reseed(sr, "", &s, rebuilt, skipped, &root_has_acl);
        for (size_t i = 0; i < name_count; i++)
            reseed(sr, names[i], &s, rebuilt, skipped, &root_has_acl);
    } else {
        for (size_t i = 0; i < json_array_size(folders); i++)
            reseed(sr, json_string_value(json_array_get(folders, i)), &s, rebuilt, skipped,
                   &root_has_acl);
        if (!root_has_acl) {
            /* `root` answers for the root whether or not it was named. */
            struct buf dir = {0};
            struct acl_list list = {0};
            if (acl_store_dir(sr->user, sr->ns, "", &dir, err)) {
                buf_append_char(&dir, '\0');
                root_has_acl = acl_store_read(dir.data, &list, NULL, err) > 0 && list.count > 0;
            }
            acl_list_free(&list);
            buf_free(&dir);
        }
    }
    json_t *reply = json_pack("{s:o, s:I, s:o, s:b, s:b, s:b}", "rebuilt", rebuilt, "folders",
                              (json_int_t)json_array_size(rebuilt), "skipped", skipped, "all", all,
                              "root", root_has_acl, "dry_run", dry_run);
    rebuilt = skipped = NULL;
    if (dry_run) {
        if (acl_list_index_read(sr->user, sr->ns, &now, err) < 0)
            json_object_set_new(reply, "index_error", json_string(err->message));
        /* `after`: the scope's rows as the write would leave them */
        scope_rows(&s, &now, &before);
        scope_rows(&s, &now, &after);
        scope_apply(&s, &after);
        json_t *report = diff(&before, &after);
        json_object_update(reply, report);
        json_decref(report);
        http_reply_json(req, 200, reply);
        goto out;
    }
    /* A user without a namespace root has no files and needs no index. */
    if (!acl_list_index_update(sr->user, sr->ns, scope_change, &s, err) &&
        !(err->code == PETREL_ERR_NOT_FOUND && s.want.count == 0)) {
        json_decref(reply);
        http_reply_petrel_error(req, err);
        goto out;
    }
    http_reply_json(req, 200, reply);
out:
    json_decref(rebuilt);
    json_decref(skipped);
    mail_folder_list_free(names, name_count);
    scope_free(&s);
    acl_list_index_free(&now);
    acl_list_index_free(&after);
    acl_list_index_free(&before);
}

/* ---------- registry ---------- */

/* A request waiting for the dict (the client may leave meanwhile). */
struct reg_call {
    struct api_pending pending;
    char *user;
    char *ns;
};

static struct reg_call *call_new(struct http_request *req, const char *user, const char *ns)
{
    struct reg_call *call = xcalloc(1, sizeof(*call));
    call->user = xstrdup(user);
    call->ns = ns != NULL ? xstrdup(ns) : NULL;
    api_pending_hold(&call->pending, req);
    return call;
}

static void call_free(struct reg_call *call)
{
    free(call->user);
    free(call->ns);
    free(call);
}

/* The registry's dict; replies 400 itself when none is configured. */
static struct dict *registry_dict(struct http_request *req, struct storage_api *api)
{
    struct petrel_error err;
    petrel_error_clear(&err);
    struct dict *dict = acl_registry_dict(api->storage, &err);
    if (dict == NULL) {
        if (err.code == PETREL_ERR_UNSUPPORTED)
            http_reply_error(req, 400, "acl_sharing_map is not configured");
        else
            http_reply_petrel_error(req, &err);
    }
    return dict;
}

static void list_done(bool ok, const char *error, const char *const *owners, size_t count,
                      void *ctx)
{
    struct reg_call *call = ctx;
    struct http_request *req = api_pending_take(&call->pending);
    if (req != NULL) {
        if (!ok) {
            http_reply_error(req, 500, "registry lookup failed: %s", error != NULL ? error : "");
        } else {
            json_t *arr = json_array();
            for (size_t i = 0; i < count; i++)
                json_array_append_new(arr, json_string(owners[i]));
            http_reply_json(req, 200,
                            json_pack("{s:s, s:o, s:s}", "user", call->user, "owners", arr, "note",
                                      "group grants are not resolved on the admin plane"));
        }
    }
    call_free(call);
}

static void handle_registry_list(struct http_request *req, void *ctx)
{
    struct storage_api *api = ctx;
    json_t *body = http_request_json(req);
    if (body == NULL)
        return;
    struct petrel_error err;
    petrel_error_clear(&err);
    const char *user = NULL;
    if (!json_get_string(body, "user", true, &user, &err)) {
        http_reply_error(req, 400, "%s", err.message);
    } else if (!user_name_valid(user, USER_NAME_MAX, &err)) {
        http_reply_error(req, 400, "user: %s", err.message);
    } else {
        struct dict *dict = registry_dict(req, api);
        if (dict != NULL) {
            /* The bare user and anyone: the admin plane knows no groups. */
            struct acl_identity who = {.user = user};
            acl_registry_owners(dict, &who, list_done, call_new(req, user, NULL));
        }
    }
    json_decref(body);
}

static void rebuild_done(bool ok, const char *error, size_t rows, void *ctx)
{
    struct reg_call *call = ctx;
    struct http_request *req = api_pending_take(&call->pending);
    if (req != NULL) {
        if (!ok)
            http_reply_error(req, 500, "registry write failed: %s", error != NULL ? error : "");
        else
            http_reply_json(req, 200,
                            json_pack("{s:s, s:s, s:I}", "owner", call->user, "namespace", call->ns,
                                      "rows", (json_int_t)rows));
    }
    call_free(call);
}

static void handle_registry_rebuild(struct http_request *req, void *ctx)
{
    /* The owner is addressed as the user of any storage request. */
    struct storage_request sr;
    if (!storage_request_begin_as(ctx, req, "owner", STORAGE_FOLDER_NONE, &sr))
        return;
    const char *owner = json_string_value(json_object_get(sr.body, "owner"));
    struct acl_index idx = {0};
    struct petrel_error err;
    petrel_error_clear(&err);
    struct dict *dict = registry_dict(req, ctx);
    if (dict == NULL)
        goto out;
    if (sr.ns->type != NAMESPACE_PERSONAL) {
        http_reply_error(req, 400, "namespace %s has no owner to discover (personal only)",
                         sr.ns->slug);
        goto out;
    }
    if (acl_list_index_read(sr.user, sr.ns, &idx, &err) < 0) {
        http_reply_error(req, 500, "%s (acl/rebuild reseeds it)", err.message);
        goto out;
    }
    acl_registry_sync(dict, owner, &idx, rebuild_done, call_new(req, owner, sr.ns->slug));
out:
    acl_list_index_free(&idx);
    storage_request_end(&sr);
}

void backend_api_register_acl_index(struct http_server *http, struct storage_api *api)
{
    static const struct storage_route rebuild[] = {
        {"/api/backend/acl/rebuild", STORAGE_FOLDER_NONE, handle_rebuild, 0},
    };
    storage_register(http, api, NULL, rebuild, 1);
    http_server_route(http, HTTP_POST, "/api/backend/acl/registry/list", 0, handle_registry_list,
                      api);
    http_server_route(http, HTTP_POST, "/api/backend/acl/registry/rebuild", 0,
                      handle_registry_rebuild, api);
}
