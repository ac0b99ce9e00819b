/* /api/backend/acl/{get,set,delete,apply,materialise,my-rights,list-rights}
 * (document 1 "ACL", DECISIONS.md): the folders' dovecot-acl files through
 * storage/acl/acl-store.h. Admin plane: no ACL is checked here (document 1
 * "Folder operations are admin-path operations"). Writes go through
 * acl_store_update(), under the ACL's lock, so a concurrent IMAP SETACL or
 * another apply is never lost.
 *
 * Entries in JSON: {"identifier": "user=bob" | "-group=staff" | "owner" |
 * "anyone" | "authenticated", "rights": "lr"}; rights are answered in RFC
 * 4314's canonical order with the virtual c and d; an unknown letter or
 * identifier answers 400. `root: true` addresses the namespace root (no
 * folder with it: 400); a named folder that does not exist answers 404
 * "folder not found" and nothing is written. */
#include "services/backend-api/api-storage.h"
#include "services/backend-api/backend-api.h"

#include "core/json-util.h"
#include "storage/acl/acl-module.h"
#include "storage/acl/acl-rights.h"
#include "storage/acl/acl-store.h"
#include "storage/mailbox-name.h"

#include <stdlib.h>
#include <string.h>

/* The addressed place: a folder or the root (folder ""), its directory. */
struct acl_target {
    const char *folder; /* "" for the root */
    bool root;
    struct buf dir; /* NUL-terminated */
};

/* Resolves the request's place; replies itself and returns false when it
 * cannot be addressed. */
static bool target_begin(struct http_request *req, const struct storage_request *sr,
                         struct acl_target *t)
{
    memset(t, 0, sizeof(*t));
    struct petrel_error err;
    petrel_error_clear(&err);
    bool root = false;
    if (!json_get_bool(sr->body, "root", false, &root, &err)) {
        http_reply_error(req, 400, "%s", err.message);
        goto fail;
    }
    t->root = root;
    const char *folder = sr->folder != NULL ? sr->folder : "";
    if (root && folder[0] != '\0') {
        http_reply_error(req, 400, "conflicting fields: root addresses no folder");
        goto fail;
    }
    if (!root && folder[0] == '\0') {
        http_reply_error(req, 400, "folder is required");
        goto fail;
    }
    if (!root && !mailbox_name_is_inbox(folder) &&
        !mailbox_name_validate(folder, sr->ns->separator, &err)) {
        http_reply_error(req, 400, "%s", err.message);
        goto fail;
    }
    if (!root && !mail_folder_exists(sr->user, sr->ns, folder)) {
        http_reply_error(req, 404, "folder not found");
        goto fail;
    }
    t->folder = folder;
    if (root && sr->ns->type == NAMESPACE_PERSONAL) {
        /* The root of a user who never had mail yet: opening INBOX makes
         * it (as any first login does), so a root ACL can be written. */
        struct mailbox *inbox = mailbox_open(sr->user, sr->ns, "INBOX", &err);
        if (inbox != NULL)
            mailbox_close(inbox);
    }
    if (!acl_store_dir(sr->user, sr->ns, folder, &t->dir, &err)) {
        http_reply_petrel_error(req, &err);
        goto fail;
    }
    buf_append_char(&t->dir, '\0');
    return true;
fail:
    buf_free(&t->dir);
    return false;
}

static void target_end(struct acl_target *t)
{
    buf_free(&t->dir);
}

static json_t *rights_json(uint32_t rights)
{
    char letters[14];
    return json_string(acl_rights_str(rights, true, letters));
}

static json_t *entry_json(const struct acl_entry *e)
{
    struct buf id = {0};
    acl_id_format(&e->id, &id);
    buf_append_char(&id, '\0');
    json_t *o = json_pack("{s:s, s:o}", "identifier", id.data, "rights", rights_json(e->rights));
    buf_free(&id);
    return o;
}

static json_t *entries_json(const struct acl_list *list)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < list->count; i++)
        json_array_append_new(arr, entry_json(&list->entries[i]));
    return arr;
}

/* Field `key` as an identifier; replies 400 itself. */
static bool get_identifier(struct http_request *req, const json_t *obj, const char *key,
                           struct acl_id *id)
{
    struct petrel_error err;
    petrel_error_clear(&err);
    const char *text = NULL;
    if (!json_get_string(obj, key, true, &text, &err)) {
        http_reply_error(req, 400, "%s", err.message);
        return false;
    }
    const char *why = NULL;
    if (!acl_id_parse(text, strlen(text), id, &why)) {
        http_reply_error(req, 400, "identifier '%s': %s", text, why != NULL ? why : "not valid");
        return false;
    }
    return true;
}

static bool get_rights(struct http_request *req, const json_t *obj, bool required, uint32_t *rights)
{
    struct petrel_error err;
    petrel_error_clear(&err);
    const char *text = "";
    if (!json_get_string(obj, "rights", required, &text, &err)) {
        http_reply_error(req, 400, "%s", err.message);
        return false;
    }
    char bad = 0;
    if (!acl_rights_parse(text, strlen(text), rights, &bad)) {
        http_reply_error(req, 400, "unknown right '%c'", bad);
        return false;
    }
    return true;
}

/* ---------- get ---------- */

static void get_acl(struct http_request *req, const struct storage_request *sr,
                    const struct acl_target *t, struct petrel_error *err)
{
    struct acl_list list = {0};
    if (acl_store_read(t->dir.data, &list, NULL, err) < 0)
        http_reply_petrel_error(req, err);
    else
        http_reply_json(req, 200,
                        json_pack("{s:s, s:s, s:b, s:o}", "folder", t->folder, "namespace",
                                  sr->ns->slug, "root", t->root, "entries", entries_json(&list)));
    acl_list_free(&list);
}

/* ---------- set, delete, apply ---------- */

static void set_acl(struct http_request *req, const struct storage_request *sr,
                    const struct acl_target *t, struct petrel_error *err)
{
    json_t *entries = NULL;
    struct acl_list list = {0};
    if (!json_get_array(sr->body, "entries", true, &entries, err)) {
        http_reply_error(req, 400, "%s", err->message);
        goto out;
    }
    for (size_t i = 0; i < json_array_size(entries); i++) {
        json_t *e = json_array_get(entries, i);
        struct acl_id id;
        uint32_t rights = 0;
        if (!json_is_object(e)) {
            http_reply_error(req, 400, "entries[%zu] must be an object", i);
            goto out;
        }
        if (!get_identifier(req, e, "identifier", &id) || !get_rights(req, e, true, &rights))
            goto out;
        acl_list_modify(&list, &id, rights, ACL_MODIFY_ADD);
    }
    storage_reply_done(req, acl_store_write_folder(sr->user, sr->ns, t->folder, &list, err), err);
out:
    acl_list_free(&list);
}

static void change(struct http_request *req, const struct storage_request *sr,
                   const struct acl_target *t, const struct acl_change *c, struct petrel_error *err)
{
    storage_reply_done(req, acl_store_change_folder(sr->user, sr->ns, t->folder, c, err), err);
}

static void delete_entry(struct http_request *req, const struct storage_request *sr,
                         const struct acl_target *t, struct petrel_error *err)
{
    struct acl_change c = {.remove = true};
    if (get_identifier(req, sr->body, "identifier", &c.id))
        change(req, sr, t, &c, err);
}

static void apply_entry(struct http_request *req, const struct storage_request *sr,
                        const struct acl_target *t, struct petrel_error *err)
{
    struct acl_change c = {.mode = ACL_MODIFY_REPLACE};
    const char *mode = "replace";
    if (!get_identifier(req, sr->body, "identifier", &c.id) ||
        !get_rights(req, sr->body, false, &c.rights))
        return;
    if (!json_get_string(sr->body, "mode", false, &mode, err)) {
        http_reply_error(req, 400, "%s", err->message);
        return;
    }
    if (strcmp(mode, "add") == 0)
        c.mode = ACL_MODIFY_ADD;
    else if (strcmp(mode, "remove") == 0)
        c.mode = ACL_MODIFY_REMOVE;
    else if (strcmp(mode, "replace") != 0) {
        http_reply_error(req, 400, "mode must be add, remove or replace");
        return;
    }
    change(req, sr, t, &c, err);
}

/* ---------- my-rights, list-rights ---------- */

static void my_rights(struct http_request *req, const struct storage_request *sr,
                      const struct acl_target *t, struct petrel_error *err)
{
    struct acl_id id;
    struct acl_list list = {0};
    if (!get_identifier(req, sr->body, "identifier", &id))
        goto out;
    if (id.negative) {
        http_reply_error(req, 400, "identifier: a negative identifier has no rights of its own");
        goto out;
    }
    if (acl_store_read(t->dir.data, &list, NULL, err) < 0) {
        http_reply_petrel_error(req, err);
        goto out;
    }
    /* Who the identifier stands for; the admin plane knows no one's groups
     * but the one named. */
    const char *owner_name = mail_user_name(sr->user);
    const char *group = id.name;
    struct acl_identity who = {.user = ""};
    switch (id.kind) {
    case ACL_ID_ANYONE:
        who.user = NULL;
        break;
    case ACL_ID_AUTHENTICATED:
        break;
    case ACL_ID_OWNER:
        who.user = owner_name;
        who.owner = sr->ns->type == NAMESPACE_PERSONAL;
        break;
    case ACL_ID_USER:
        who.user = id.name;
        who.owner = sr->ns->type == NAMESPACE_PERSONAL && strcmp(id.name, owner_name) == 0;
        break;
    case ACL_ID_GROUP:
    case ACL_ID_GROUP_OVERRIDE:
        who.groups = &group;
        who.group_count = 1;
        break;
    }
    struct buf idtext = {0};
    acl_id_format(&id, &idtext);
    buf_append_char(&idtext, '\0');
    http_reply_json(req, 200,
                    json_pack("{s:s, s:s, s:b, s:s, s:o}", "folder", t->folder, "namespace",
                              sr->ns->slug, "root", t->root, "identifier", idtext.data, "rights",
                              rights_json(acl_list_rights(&list, &who))));
    buf_free(&idtext);
out:
    acl_list_free(&list);
}

static void list_rights(struct http_request *req, const struct storage_request *sr,
                        const struct acl_target *t, struct petrel_error *err)
{
    struct acl_id id;
    if (get_identifier(req, sr->body, "identifier", &id)) {
        /* RFC 4314 LISTRIGHTS: nothing is always granted, each right can
         * be given alone (as IMAP LISTRIGHTS answers). */
        struct buf idtext = {0};
        acl_id_format(&id, &idtext);
        buf_append_char(&idtext, '\0');
        json_t *optional = json_array();
        for (const char *p = "lrwstpiekxacd"; *p != '\0'; p++) {
            char one[2] = {*p, '\0'};
            json_array_append_new(optional, json_string(one));
        }
        http_reply_json(req, 200,
                        json_pack("{s:s, s:s, s:b, s:s, s:s, s:o}", "folder", t->folder,
                                  "namespace", sr->ns->slug, "root", t->root, "identifier",
                                  idtext.data, "required", "", "optional", optional));
        buf_free(&idtext);
    }
}

/* ---------- the addressed operations ---------- */

/* What the routes on a folder or the root do (sr->op). */
enum acl_op { OP_GET, OP_SET, OP_DELETE, OP_APPLY, OP_MY_RIGHTS, OP_LIST_RIGHTS };

typedef void acl_op_fn(struct http_request *req, const struct storage_request *sr,
                       const struct acl_target *t, struct petrel_error *err);

/* Resolves the addressed folder or root (replying itself when it cannot),
 * then runs the route's operation on it. */
static void handle_target(struct http_request *req, struct storage_request *sr,
                          struct petrel_error *err)
{
    static acl_op_fn *const ops[] = {
        [OP_GET] = get_acl,       [OP_SET] = set_acl,         [OP_DELETE] = delete_entry,
        [OP_APPLY] = apply_entry, [OP_MY_RIGHTS] = my_rights, [OP_LIST_RIGHTS] = list_rights,
    };
    struct acl_target t;
    if (!target_begin(req, sr, &t))
        return;
    ops[sr->op](req, sr, &t, err);
    target_end(&t);
}

/* ---------- materialise ---------- */

struct materialise {
    const struct acl_list *parent;
    const char *folder;
    json_t *added;
    json_t *skipped;
};

static json_t *report(const char *folder, const struct acl_entry *e)
{
    json_t *o = entry_json(e);
    json_object_set_new(o, "folder", json_string(folder));
    return o;
}

/* Adds the parent's entries the folder lacks; an identifier already in
 * the folder's file is left as it is. */
static bool add_missing(struct acl_list *list, void *ctx, struct petrel_error *err)
{
    (void)err;
    struct materialise *m = ctx;
    for (size_t i = 0; i < m->parent->count; i++) {
        const struct acl_entry *e = &m->parent->entries[i];
        const struct acl_entry *have = acl_list_find(list, &e->id);
        if (have != NULL) {
            json_array_append_new(m->skipped, report(m->folder, have));
            continue;
        }
        json_array_append_new(m->added, report(m->folder, e));
        acl_list_modify(list, &e->id, e->rights, ACL_MODIFY_REPLACE);
    }
    return true;
}

static void handle_materialise(struct http_request *req, struct storage_request *sr,
                               struct petrel_error *err)
{
    json_t *folders = NULL;
    bool apply = false;
    if (!json_get_array(sr->body, "folders", true, &folders, err) ||
        !json_get_bool(sr->body, "apply", false, &apply, err)) {
        http_reply_error(req, 400, "%s", err->message);
        return;
    }
    /* Every name is checked before anything is written. */
    for (size_t i = 0; i < json_array_size(folders); i++) {
        const char *name = json_string_value(json_array_get(folders, i));
        if (name == NULL || name[0] == '\0') {
            http_reply_error(req, 400, "folders[%zu] must be a folder name", i);
            return;
        }
        if (!mail_folder_exists(sr->user, sr->ns, name)) {
            http_reply_error(req, 404, "folder not found: %s", name);
            return;
        }
    }
    json_t *added = json_array();
    json_t *skipped = json_array();
    bool ok = true;
    for (size_t i = 0; ok && i < json_array_size(folders); i++) {
        const char *name = json_string_value(json_array_get(folders, i));
        struct buf parent = {0};
        struct buf from = {0};
        struct buf to = {0};
        struct acl_list plist = {0};
        acl_parent_of(sr->user, sr->ns, name, &parent);
        ok = acl_store_dir(sr->user, sr->ns, parent.data, &from, err) &&
             acl_store_dir(sr->user, sr->ns, name, &to, err);
        if (ok) {
            buf_append_char(&from, '\0');
            buf_append_char(&to, '\0');
            ok = acl_store_read(from.data, &plist, NULL, err) >= 0;
        }
        if (ok && plist.count > 0) {
            struct materialise m = {
                .parent = &plist, .folder = name, .added = added, .skipped = skipped};
            if (apply) {
                ok = acl_store_update_folder(sr->user, sr->ns, name, add_missing, &m, err);
            } else {
                /* A dry run: the same answer from the file as it is. */
                struct acl_list now = {0};
                ok = acl_store_read(to.data, &now, NULL, err) >= 0 && add_missing(&now, &m, err);
                acl_list_free(&now);
            }
        }
        acl_list_free(&plist);
        buf_free(&parent);
        buf_free(&from);
        buf_free(&to);
    }
    if (ok)
        http_reply_json(
            req, 200,
            json_pack("{s:o, s:o, s:b}", "added", added, "skipped", skipped, "apply", apply));
    else {
        json_decref(added);
        json_decref(skipped);
        http_reply_petrel_error(req, err);
    }
}

void backend_api_register_acl(struct http_server *http, struct storage_api *api)
{
    static const struct storage_route routes[] = {
        {"/api/backend/acl/get", STORAGE_FOLDER_OPTIONAL, handle_target, OP_GET},
        {"/api/backend/acl/set", STORAGE_FOLDER_OPTIONAL, handle_target, OP_SET},
        {"/api/backend/acl/delete", STORAGE_FOLDER_OPTIONAL, handle_target, OP_DELETE},
        {"/api/backend/acl/apply", STORAGE_FOLDER_OPTIONAL, handle_target, OP_APPLY},
        {"/api/backend/acl/materialise", STORAGE_FOLDER_NONE, handle_materialise, 0},
        {"/api/backend/acl/my-rights", STORAGE_FOLDER_OPTIONAL, handle_target, OP_MY_RIGHTS},
        {"/api/backend/acl/list-rights", STORAGE_FOLDER_OPTIONAL, handle_target, OP_LIST_RIGHTS},
    };
    storage_register(http, api, NULL, routes, sizeof(routes) / sizeof(routes[0]));
}
