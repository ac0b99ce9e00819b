/* The ACL storage module (see acl-module.h). */
#include "storage/acl/acl-module.h"

#include "core/clock.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "storage/acl/acl-rights.h"
#include "storage/acl/acl-store.h"
#include "storage/mail-storage-private.h"

#include <stdlib.h>
#include <string.h>

#define COMPONENT "acl"
#define DENIED "Permission denied"

void acl_user_identity(const struct mail_user *user, const struct namespace_config *ns,
                       struct acl_identity *out)
{
    *out = (struct acl_identity){
        .user = user->name,
        .groups = (const char *const *)user->groups,
        .group_count = user->group_count,
        .owner = ns->type == NAMESPACE_PERSONAL,
    };
}

bool acl_id_matches_user(const struct acl_id *id, const struct mail_user *user,
                         const struct namespace_config *ns)
{
    switch (id->kind) {
    case ACL_ID_ANYONE:
    case ACL_ID_AUTHENTICATED:
        return true;
    case ACL_ID_OWNER:
        return ns->type == NAMESPACE_PERSONAL;
    case ACL_ID_USER:
        return strcmp(id->name, user->name) == 0;
    case ACL_ID_GROUP:
    case ACL_ID_GROUP_OVERRIDE:
        for (size_t i = 0; i < user->group_count; i++) {
            if (strcmp(user->groups[i], id->name) == 0)
                return true;
        }
        return false;
    }
    return false;
}

/* The rights `user` has from the ACL in `dir`. A file that cannot be read
 * gives none (a list half understood must not grant), and says so in the
 * log; *stamp (may be NULL) is what was read. */
static uint32_t rights_in(const char *dir, struct mail_user *user,
                          const struct namespace_config *ns, uint64_t *stamp)
{
    struct acl_list list = {0};
    struct petrel_error err;
    int r = acl_store_read(dir, &list, stamp, &err);
    uint32_t rights = 0;
    if (r < 0) {
        log_error(COMPONENT, "ACL file unusable: access refused", "user=%s dir=%s error=\"%s\"",
                  user->name, dir, err.message);
    } else {
        struct acl_identity who;
        acl_user_identity(user, ns, &who);
        rights = acl_list_rights(&list, &who);
    }
    acl_list_free(&list);
    return rights;
}

/* The rights on folder `name` ("" the root), read now. */
static uint32_t rights_now(struct mail_user *user, const struct namespace_config *ns,
                           const char *name)
{
    struct buf dir = {0};
    struct petrel_error err;
    uint32_t rights;
    if (acl_store_dir(user, ns, name, &dir, &err)) {
        buf_append_char(&dir, '\0');
        rights = rights_in(dir.data, user, ns, NULL);
    } else {
        /* A name no folder can have: the storage refuses it itself. */
        rights = ACL_ALL_RIGHTS;
    }
    buf_free(&dir);
    return rights;
}

/* rights_now() through the user's small cache of folders by name: a
 * folder asked again within cache_ms (a LIST after a LIST, STATUS of a
 * folder just listed) costs a lookup, not a path and an open. */
static uint32_t rights_by_name(const struct mail_acl_config *cfg, struct mail_user *user,
                               const struct namespace_config *ns, const char *name)
{
    if (cfg->cache_ms <= 0)
        return rights_now(user, ns, name);
    int64_t now = clock_mono_ms();
    if (user->rights == NULL)
        user->rights = xcalloc(MAIL_USER_RIGHTS_CACHED, sizeof(*user->rights));
    for (size_t i = 0; i < MAIL_USER_RIGHTS_CACHED; i++) {
        struct mail_user_rights *e = &user->rights[i];
        if (e->name != NULL && e->ns == ns && e->gen == user->rights_gen &&
            now - e->checked_ms < cfg->cache_ms && strcmp(e->name, name) == 0)
            return e->rights;
    }
    uint32_t rights = rights_now(user, ns, name);
    struct mail_user_rights *e = &user->rights[user->rights_next];
    user->rights_next = (user->rights_next + 1) % MAIL_USER_RIGHTS_CACHED;
    free(e->name);
    *e = (struct mail_user_rights){.ns = ns,
                                   .name = xstrdup(name),
                                   .rights = rights,
                                   .checked_ms = now,
                                   .gen = user->rights_gen};
    return rights;
}

/* The rights on an open handle, from its cache while that is fresh: the
 * file is looked at (a stat) at most every cache_ms, and read again only
 * when it changed. */
static uint32_t rights_cached(const struct mail_acl_config *cfg, struct mailbox *box)
{
    struct mailbox_common *c = mailbox_common(box);
    struct mailbox_rights_cache *rc = &c->rights;
    int64_t now = clock_mono_ms();
    bool current = rc->valid && rc->gen == c->user->rights_gen;
    if (current && now - rc->checked_ms < cfg->cache_ms)
        return rc->rights;
    if (!current && cfg->cache_ms > 0) {
        /* A handle just opened was checked by name a moment ago: start
         * from that answer; the file's state is taken when it expires. */
        rc->rights = rights_by_name(cfg, c->user, c->ns, c->name);
        rc->valid = true;
        rc->stamped = false;
        rc->gen = c->user->rights_gen;
        rc->checked_ms = now;
        return rc->rights;
    }
    struct buf dir = {0};
    struct petrel_error err;
    if (!acl_store_dir(c->user, c->ns, c->name, &dir, &err)) {
        buf_free(&dir);
        return ACL_ALL_RIGHTS;
    }
    buf_append_char(&dir, '\0');
    uint64_t st = acl_store_stamp_of(dir.data);
    if (!current || !rc->stamped || st != rc->stamp) {
        rc->rights = rights_in(dir.data, c->user, c->ns, &st);
        rc->stamp = st;
        rc->stamped = true;
        rc->valid = true;
        rc->gen = c->user->rights_gen;
    }
    rc->checked_ms = now;
    buf_free(&dir);
    return rc->rights;
}

static uint32_t module_folder_rights(void *ctx, struct mail_user *user,
                                     const struct namespace_config *ns, const char *name,
                                     struct mailbox *box)
{
    if (!user->session)
        return ACL_ALL_RIGHTS;
    return box != NULL ? rights_cached(ctx, box) : rights_by_name(ctx, user, ns, name);
}

/* False with the refusal for someone lacking `need` (all of it) out of
 * `have`: as a missing folder without l, else PERMISSION. */
static bool require(uint32_t have, uint32_t need, const char *name, struct petrel_error *err)
{
    if ((have & need) == need)
        return true;
    if ((have & ACL_LOOKUP) == 0)
        return petrel_error_set(err, PETREL_ERR_NOT_FOUND, "folder not found: %s", name);
    return petrel_error_set(err, PETREL_ERR_PERMISSION, DENIED);
}

/* Delivery: p, or i for the owner of the folder (their own delivery is
 * an insert of theirs; Dovecot's lmtp_save_to_detail_mailbox). */
static uint32_t post_need(uint32_t have, const struct namespace_config *ns)
{
    if ((have & ACL_POST) == 0 && ns->type == NAMESPACE_PERSONAL && (have & ACL_INSERT) != 0)
        return ACL_INSERT;
    return ACL_POST;
}

static bool module_open_for(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                            const char *name, enum mailbox_open_purpose purpose,
                            struct petrel_error *err)
{
    if (!user->session)
        return true;
    uint32_t have = rights_by_name(ctx, user, ns, name);
    switch (purpose) {
    case MAILBOX_OPEN_READ:
        return require(have, ACL_READ, name, err);
    case MAILBOX_OPEN_SAVE:
        return require(have, ACL_INSERT, name, err);
    case MAILBOX_OPEN_POST:
        return require(have, post_need(have, ns), name, err);
    }
    return true;
}

void acl_parent_of(struct mail_user *user, const struct namespace_config *ns, const char *name,
                   struct buf *out)
{
    buf_reset(out);
    buf_append_str(out, name);
    buf_append_char(out, '\0');
    for (;;) {
        char *sep = strrchr(out->data, ns->separator);
        if (sep == NULL) {
            buf_reset(out);
            buf_append_char(out, '\0');
            return;
        }
        *sep = '\0';
        out->len = (size_t)(sep - out->data) + 1;
        if (mail_folder_exists(user, ns, out->data))
            return;
    }
}

static bool may_create_in(struct mail_user *user, const struct namespace_config *ns,
                          const char *name, struct petrel_error *err)
{
    struct buf parent = {0};
    acl_parent_of(user, ns, name, &parent);
    uint32_t have = rights_now(user, ns, parent.data);
    bool ok = (have & ACL_CREATE) != 0 || petrel_error_set(err, PETREL_ERR_PERMISSION, DENIED);
    buf_free(&parent);
    return ok;
}

static bool module_folder_create(void *ctx, struct mail_user *user,
                                 const struct namespace_config *ns, const char *name,
                                 struct mail_folder_create_params *params, struct petrel_error *err)
{
    (void)ctx;
    (void)params;
    if (!user->session)
        return true;
    return may_create_in(user, ns, name, err);
}

/* Inheritance, written at creation (document 1): the new folder's ACL is
 * a copy of its parent's, or the root's. For every creator, the admin
 * plane's too. */
static bool module_folder_created(void *ctx, struct mail_user *user,
                                  const struct namespace_config *ns, const char *name,
                                  struct mail_folder_create_params *params,
                                  struct petrel_error *err)
{
    (void)ctx;
    (void)params;
    (void)err;
    mail_user_rights_changed(user);
    struct buf parent = {0};
    struct buf from = {0};
    struct buf to = {0};
    struct acl_list list = {0};
    struct petrel_error e;
    acl_parent_of(user, ns, name, &parent);
    if (!acl_store_dir(user, ns, parent.data, &from, &e) || !acl_store_dir(user, ns, name, &to, &e))
        goto out;
    buf_append_char(&from, '\0');
    buf_append_char(&to, '\0');
    int r = acl_store_read(from.data, &list, NULL, &e);
    if (r < 0)
        log_error(COMPONENT, "parent ACL unusable: the new folder inherits nothing",
                  "user=%s folder=%s error=\"%s\"", user->name, name, e.message);
    else if (r > 0 && list.count > 0 && !acl_store_write_folder(user, ns, name, &list, &e))
        log_error(COMPONENT, "cannot write the inherited ACL", "user=%s folder=%s error=\"%s\"",
                  user->name, name, e.message);
out:
    acl_list_free(&list);
    buf_free(&parent);
    buf_free(&from);
    buf_free(&to);
    /* A folder without its inherited ACL is still the creator's: the
     * creation stands (materialise repairs it). */
    return true;
}

static bool module_folder_delete(void *ctx, struct mail_user *user,
                                 const struct namespace_config *ns, const char *name,
                                 struct petrel_error *err)
{
    (void)ctx;
    if (!user->session)
        return true;
    return require(rights_now(user, ns, name), ACL_DELETE, name, err);
}

static bool module_folder_rename(void *ctx, struct mail_user *user,
                                 const struct namespace_config *ns, const char *old_name,
                                 const char *new_name, struct petrel_error *err)
{
    (void)ctx;
    if (!user->session)
        return true;
    return require(rights_now(user, ns, old_name), ACL_DELETE, old_name, err) &&
           may_create_in(user, ns, new_name, err);
}

/* A name now means another folder (or none): what was cached for names
 * of this user is worked out again. */
static void module_folder_deleted(void *ctx, struct mail_user *user,
                                  const struct namespace_config *ns, const char *name)
{
    (void)ctx, (void)ns, (void)name;
    mail_user_rights_changed(user);
}

static void module_folder_renamed(void *ctx, struct mail_user *user,
                                  const struct namespace_config *ns, const char *old_name,
                                  const char *new_name)
{
    (void)ctx, (void)ns, (void)old_name, (void)new_name;
    mail_user_rights_changed(user);
}

static uint32_t box_rights(void *ctx, struct mailbox *box)
{
    return rights_cached(ctx, box);
}

static bool box_require(void *ctx, struct mailbox *box, uint32_t need, struct petrel_error *err)
{
    if (!mailbox_common(box)->user->session)
        return true;
    return require(box_rights(ctx, box), need, mailbox_common(box)->name, err);
}

static bool module_save(void *ctx, const struct mail_save_info *info, struct petrel_error *err)
{
    const struct mailbox_common *dst = mailbox_common(info->dst);
    if (!dst->user->session)
        return true;
    uint32_t need = ACL_INSERT;
    if (info->kind == MAIL_SAVE_APPEND && dst->purpose == MAILBOX_OPEN_POST)
        need = post_need(box_rights(ctx, info->dst), dst->ns);
    if (!box_require(ctx, info->dst, need, err))
        return false;
    if (info->src == NULL)
        return true;
    need = info->kind == MAIL_SAVE_MOVE ? ACL_READ | ACL_WRITE_DELETED | ACL_EXPUNGE : ACL_READ;
    return box_require(ctx, info->src, need, err);
}

static bool module_expunge(void *ctx, struct mailbox *box, const uint32_t *uids, size_t uid_count,
                           struct petrel_error *err)
{
    (void)uids;
    (void)uid_count;
    return box_require(ctx, box, ACL_EXPUNGE, err);
}

static bool module_flags(void *ctx, struct mailbox *box, const uint32_t *uids, size_t uid_count,
                         const struct mailbox_flags_update *upd, struct petrel_error *err)
{
    (void)uids;
    (void)uid_count;
    uint32_t need = 0;
    if (upd->mode == MAILBOX_FLAGS_REPLACE) {
        /* Replacing may clear any flag: it takes each right. */
        need = ACL_WRITE_SEEN | ACL_WRITE_DELETED | ACL_WRITE;
    } else {
        if ((upd->flags & MAIL_FLAG_SEEN) != 0)
            need |= ACL_WRITE_SEEN;
        if ((upd->flags & MAIL_FLAG_DELETED) != 0)
            need |= ACL_WRITE_DELETED;
        if ((upd->flags & ~(uint32_t)(MAIL_FLAG_SEEN | MAIL_FLAG_DELETED)) != 0 ||
            (upd->keywords != NULL && upd->keywords[0] != NULL))
            need |= ACL_WRITE;
    }
    return box_require(ctx, box, need, err);
}

const struct mail_storage_module acl_storage_module = {
    .name = "acl",
    .folder_create = module_folder_create,
    .folder_created = module_folder_created,
    .folder_delete = module_folder_delete,
    .folder_deleted = module_folder_deleted,
    .folder_rename = module_folder_rename,
    .folder_renamed = module_folder_renamed,
    .save = module_save,
    .expunge = module_expunge,
    .flags = module_flags,
    .mailbox_open_for = module_open_for,
    .folder_rights = module_folder_rights,
};
