/* The storage API (mail-storage.h) over a driver (mail-storage-private.h):
 * handles and users, and every operation a storage module hooks (folder
 * create/delete/rename, open, save, expunge, flag changes), which runs the
 * modules' hooks in their order around the driver's call
 * (mail-storage-module.h). */
#include "storage/mail-storage-private.h"

#include "core/log.h"
#include "core/xalloc.h"
#include "storage/quota/quota-module.h"
#include "storage/acl/acl-rights.h"
#include "storage/special-use.h"
#include "storage/metadata/metadata-store.h"
#include "storage/shared-namespace.h"
#include "storage/mailbox-pvt.h"
#include "storage/acl/acl-registry.h"

#include <stdlib.h>
#include <string.h>

#define COMPONENT "storage"
#define MAX_CACHED_USERS 4096

static const struct mail_storage_vfuncs *const mail_storage_drivers[] = {
    &maildir_storage_vfuncs,
};

const struct mail_storage_vfuncs *mail_storage_driver_find(const char *location)
{
    for (size_t i = 0; i < sizeof(mail_storage_drivers) / sizeof(mail_storage_drivers[0]); i++) {
        size_t n = strlen(mail_storage_drivers[i]->scheme);
        if (strncmp(location, mail_storage_drivers[i]->scheme, n) == 0 && location[n] == ':')
            return mail_storage_drivers[i];
    }
    return NULL;
}

const struct mail_storage_vfuncs *mail_storage_driver_at(size_t i)
{
    return i < sizeof(mail_storage_drivers) / sizeof(mail_storage_drivers[0])
               ? mail_storage_drivers[i]
               : NULL;
}

/* The driver of the personal namespace's location scheme (the
 * configuration accepts only schemes a driver is listed for). */
static const struct mail_storage_vfuncs *driver_for(const struct mail_config *cfg)
{
    const struct namespace_config *ns = namespace_by_slug(cfg, "personal");
    const struct mail_storage_vfuncs *v =
        ns != NULL ? mail_storage_driver_find(ns->location) : NULL;
    return v != NULL ? v : mail_storage_drivers[0];
}

static struct mail_storage *storage_new(const struct mail_config *cfg,
                                        struct metrics_registry *metrics,
                                        struct mail_storage *parent)
{
    struct mail_storage *s = xcalloc(1, sizeof(*s));
    s->cfg = *cfg;
    s->metrics = metrics;
    s->index_settings.fsync = (enum fileindex_fsync)cfg->fsync;
    s->index_settings.metrics = metrics;
    s->v = driver_for(cfg);
    s->driver = s->v->storage_init(s, parent);
    if (parent != NULL) {
        memcpy(s->modules, parent->modules, sizeof(s->modules));
        s->module_count = parent->module_count;
        s->save_hooks = parent->save_hooks;
        s->attr_proto = parent->attr_proto;
        s->acl_reg_proto = parent->acl_reg_proto;
    } else {
        /* The storage's own rules come first. */
        mail_storage_module_register(s, &special_use_module, NULL, NULL);
    }
    return s;
}

struct mail_storage *mail_storage_new(const struct mail_config *cfg,
                                      struct metrics_registry *metrics)
{
    return storage_new(cfg, metrics, NULL);
}

struct mail_storage *mail_storage_new_sibling(struct mail_storage *parent,
                                              struct metrics_registry *metrics)
{
    return storage_new(&parent->cfg, metrics, parent);
}

void *mail_storage_module_ctx(const struct mail_storage *storage, const char *name)
{
    for (size_t i = 0; i < storage->module_count; i++) {
        if (strcmp(storage->modules[i].module->name, name) == 0)
            return storage->modules[i].ctx;
    }
    return NULL;
}

bool mail_storage_module_register(struct mail_storage *storage,
                                  const struct mail_storage_module *module, void *ctx,
                                  struct petrel_error *err)
{
    if (storage->module_count >= MAIL_STORAGE_MAX_MODULES)
        return petrel_error_set(err, PETREL_ERR_LIMIT, "more than %d storage modules",
                                MAIL_STORAGE_MAX_MODULES);
    storage->modules[storage->module_count++] =
        (struct mail_storage_module_entry){.module = module, .ctx = ctx};
    if (module->save != NULL)
        storage->save_hooks = true;
    log_debug(COMPONENT, "storage module registered", "module=%s position=%zu", module->name,
              storage->module_count);
    return true;
}

static void user_groups_free(struct mail_user *u)
{
    for (size_t i = 0; i < u->group_count; i++)
        free(u->groups[i]);
    free(u->groups);
    u->groups = NULL;
    u->group_count = 0;
}

/* The namespace's root for the user: its location's template expanded. */
static bool namespace_root_expand(const struct mail_user *user, const struct namespace_config *ns,
                                  struct buf *out, struct petrel_error *err)
{
    /* location is "<scheme>:<template>" */
    const char *colon = strchr(ns->location, ':');
    const char *template = colon != NULL ? colon + 1 : ns->location;
    return mail_template_expand(template, user->name, user->home, out, err);
}

static void user_free(struct mail_user *u)
{
    for (size_t i = 0; i < u->ns_root_count; i++)
        free(u->ns_roots[i]);
    free(u->ns_roots);
    quota_user_free(u->quota);
    user_groups_free(u);
    for (size_t i = 0; u->rights != NULL && i < MAIL_USER_RIGHTS_CACHED; i++)
        free(u->rights[i].name);
    free(u->rights);
    free(u->name);
    free(u->home);
    free(u);
}

void mail_storage_free(struct mail_storage *storage)
{
    if (storage == NULL)
        return;
    for (size_t i = 0; i < storage->user_count; i++)
        user_free(storage->users[i]);
    free(storage->users);
    metadata_storage_free(storage);
    mail_shared_namespaces_free(storage);
    acl_registry_storage_free(storage);
    storage->v->storage_deinit(storage->driver);
    free(storage);
}

const struct mail_config *mail_storage_config(const struct mail_storage *storage)
{
    return &storage->cfg;
}

/* ---------- users ---------- */

static struct mail_user *user_get(struct mail_storage *storage, const char *username, bool session,
                                  struct petrel_error *err)
{
    if (!user_name_valid(username, USER_NAME_MAX, err))
        return NULL;
    for (size_t i = 0; i < storage->user_count; i++) {
        if (storage->users[i]->session == session && strcmp(storage->users[i]->name, username) == 0)
            return storage->users[i];
    }
    struct buf home = {0};
    if (!mail_template_expand(storage->cfg.home, username, NULL, &home, err)) {
        buf_free(&home);
        return NULL;
    }
    if (storage->user_count >= MAX_CACHED_USERS) {
        /* Users are cheap to resolve again: drop the oldest half of those
         * nobody holds (a session keeps its user with mail_user_ref). */
        size_t target = storage->user_count / 2;
        size_t kept = 0;
        for (size_t i = 0; i < storage->user_count; i++) {
            struct mail_user *old = storage->users[i];
            if (old->refs == 0 && storage->user_count - (i - kept) > target)
                user_free(old);
            else
                storage->users[kept++] = old;
        }
        storage->user_count = kept;
    }
    struct mail_user *u = xcalloc(1, sizeof(*u));
    u->storage = storage;
    u->name = xstrdup(username);
    u->home = buf_steal(&home);
    u->session = session;
    u->ns_root_count = storage->cfg.namespace_count;
    u->ns_roots = xcalloc(u->ns_root_count + 1, sizeof(*u->ns_roots));
    for (size_t i = 0; i < u->ns_root_count; i++) {
        if (storage->cfg.namespaces[i].per_owner)
            continue; /* its roots are the owners' (mail_shared_namespace_root) */
        struct buf root = {0};
        if (namespace_root_expand(u, &storage->cfg.namespaces[i], &root, NULL))
            u->ns_roots[i] = buf_steal(&root);
        buf_free(&root);
    }
    storage->users =
        xgrow(storage->users, &storage->user_cap, storage->user_count + 1, sizeof(*storage->users));
    storage->users[storage->user_count++] = u;
    return u;
}

struct mail_user *mail_user_get(struct mail_storage *storage, const char *username,
                                struct petrel_error *err)
{
    return user_get(storage, username, false, err);
}

struct mail_user *mail_user_get_session(struct mail_storage *storage, const char *username,
                                        const char *const *groups, struct petrel_error *err)
{
    struct mail_user *u = user_get(storage, username, true, err);
    if (u == NULL)
        return NULL;
    user_groups_free(u);
    size_t n = 0;
    while (groups != NULL && groups[n] != NULL)
        n++;
    u->groups = xcalloc(n + 1, sizeof(*u->groups));
    for (size_t i = 0; i < n; i++)
        u->groups[i] = xstrdup(groups[i]);
    u->group_count = n;
    return u;
}

void mail_user_rights_changed(struct mail_user *user)
{
    user->rights_gen++;
}

bool mail_user_is_session(const struct mail_user *user)
{
    return user->session;
}

const char *const *mail_user_groups(const struct mail_user *user, size_t *count)
{
    *count = user->group_count;
    return (const char *const *)user->groups;
}

void mail_user_ref(struct mail_user *user)
{
    user->refs++;
}

void mail_user_unref(struct mail_user *user)
{
    if (user != NULL && user->refs > 0 && --user->refs == 0) {
        for (size_t i = user->storage->module_count; i-- > 0;) {
            const struct mail_storage_module_entry *e = &user->storage->modules[i];
            if (e->module->user_released != NULL)
                e->module->user_released(e->ctx, user);
        }
    }
}

const char *mail_user_name(const struct mail_user *user)
{
    return user->name;
}

struct mail_storage *mail_user_storage(const struct mail_user *user)
{
    return user->storage;
}

const char *mail_user_home(const struct mail_user *user)
{
    return user->home;
}

bool mail_user_namespace_root(const struct mail_user *user, const struct namespace_config *ns,
                              struct buf *out, struct petrel_error *err)
{
    if (ns->owner != NULL)
        return mail_shared_namespace_root(user->storage, ns, out, err);
    if (ns->per_owner) /* only its owners' instances have folders */
        return petrel_error_set(err, PETREL_ERR_NOT_FOUND, "folder not found");
    for (size_t i = 0; i < user->ns_root_count && i < user->storage->cfg.namespace_count; i++) {
        if (ns == &user->storage->cfg.namespaces[i] && user->ns_roots[i] != NULL) {
            buf_append_str(out, user->ns_roots[i]);
            return true;
        }
    }
    return namespace_root_expand(user, ns, out, err);
}

const struct namespace_config *mail_user_namespace(const struct mail_user *user, const char *slug,
                                                   struct petrel_error *err)
{
    const struct namespace_config *ns = namespace_by_slug(&user->storage->cfg, slug);
    if (ns == NULL)
        petrel_error_set(err, PETREL_ERR_NOT_FOUND, "namespace not configured: %s", slug);
    return ns;
}

/* ---------- hooks ---------- */

/* A module's refusal is the client's reply text (IMAP, LMTP): one line of
 * printable characters, whatever the module (or its configuration) wrote. */
static void veto_text(struct petrel_error *err)
{
    if (err == NULL)
        return;
    for (char *c = err->message; *c != '\0'; c++) {
        if ((unsigned char)*c < 0x20 || *c == 0x7f)
            *c = ' ';
    }
}

/* Runs hook `fn` of every module in order while they say yes. */
#define HOOKS_BEFORE(storage, fn, ...)                                                             \
    do {                                                                                           \
        for (size_t hook_i_ = 0; hook_i_ < (storage)->module_count; hook_i_++) {                   \
            const struct mail_storage_module_entry *e_ = &(storage)->modules[hook_i_];             \
            if (e_->module->fn != NULL && !e_->module->fn(e_->ctx, __VA_ARGS__)) {                 \
                log_debug(COMPONENT, "storage module said no", "module=%s hook=%s",                \
                          e_->module->name, #fn);                                                  \
                veto_text(err);                                                                    \
                return false;                                                                      \
            }                                                                                      \
        }                                                                                          \
    } while (0)

/* Tells every module, innermost (last registered) first. */
#define HOOKS_AFTER(storage, fn, ...)                                                              \
    do {                                                                                           \
        for (size_t hook_i_ = (storage)->module_count; hook_i_-- > 0;) {                           \
            const struct mail_storage_module_entry *e_ = &(storage)->modules[hook_i_];             \
            if (e_->module->fn != NULL)                                                            \
                e_->module->fn(e_->ctx, __VA_ARGS__);                                              \
        }                                                                                          \
    } while (0)

static struct mail_storage *box_storage(const struct mailbox *box)
{
    return mailbox_common(box)->user->storage;
}

/* The save hooks in order; a module that said yes hears save_aborted when
 * a later one says no. */
static bool save_before(struct mail_storage *st, const struct mail_save_info *info,
                        struct petrel_error *err)
{
    for (size_t i = 0; i < st->module_count; i++) {
        const struct mail_storage_module_entry *e = &st->modules[i];
        if (e->module->save == NULL || e->module->save(e->ctx, info, err))
            continue;
        log_debug(COMPONENT, "storage module said no", "module=%s hook=save", e->module->name);
        veto_text(err);
        while (i-- > 0) {
            e = &st->modules[i];
            if (e->module->save_aborted != NULL)
                e->module->save_aborted(e->ctx, info);
        }
        return false;
    }
    return true;
}

bool mail_save_test_wanted(const struct mail_user *user)
{
    const struct mail_storage *st = user->storage;
    for (size_t i = 0; i < st->module_count; i++) {
        if (st->modules[i].module->save_test != NULL)
            return true;
    }
    return false;
}

bool mail_save_test(struct mail_user *user, const struct namespace_config *ns, const char *name,
                    uint64_t size, uint64_t max_size, struct petrel_error *err)
{
    HOOKS_BEFORE(user->storage, save_test, user, ns, name, size, max_size, err);
    return true;
}

/* The driver failed after every save hook said yes. */
static void save_failed(struct mail_storage *st, const struct mail_save_info *info)
{
    HOOKS_AFTER(st, save_aborted, info);
}

/* ---------- folders ---------- */

/* A folder whose full name is another namespace's prefix without its
 * separator ("shared", "Public" in the personal namespace) would be listed
 * twice, once as the folder and once as that namespace's \Noselect root,
 * and could never be told apart by a client: the name is taken, as it is
 * in Dovecot, where such a name is the namespace itself. */
static bool shadows_namespace(const struct mail_user *user, const struct namespace_config *ns,
                              const char *name, struct petrel_error *err)
{
    const struct mail_config *cfg = &user->storage->cfg;
    size_t plen = strlen(ns->prefix);
    for (size_t i = 0; i < cfg->namespace_count; i++) {
        const struct namespace_config *other = &cfg->namespaces[i];
        /* The root a client sees: the prefix up to its first variable
         * ("shared/%u/" -> "shared/"), without the separator. */
        const char *var = strchr(other->prefix, '%');
        size_t olen = var != NULL ? (size_t)(var - other->prefix) : strlen(other->prefix);
        if (other == ns || olen < 2 || other->prefix[olen - 1] != other->separator)
            continue;
        size_t root = olen - 1;
        /* ns->prefix + name == that root */
        if (plen + strlen(name) == root && strncmp(other->prefix, ns->prefix, plen) == 0 &&
            strncmp(other->prefix + plen, name, root - plen) == 0) {
            petrel_error_set(err, PETREL_ERR_EXISTS, "the name is the namespace '%.*s'",
                             (int)olen, other->prefix);
            return true;
        }
    }
    return false;
}

bool mail_folder_create_with(struct mail_user *user, const struct namespace_config *ns,
                             const char *name, struct mail_folder_create_params *params,
                             struct petrel_error *err)
{
    struct mail_storage *st = user->storage;
    params->special_use_failed = false;
    params->special_use_error[0] = '\0';
    if (shadows_namespace(user, ns, name, err))
        return false;
    HOOKS_BEFORE(st, folder_create, user, ns, name, params, err);
    if (!st->v->folder_create(user, ns, name, err))
        return false;
    /* Innermost first, like every hook after an operation; the folder goes
     * again when one of them cannot give what the creator asked of it, and
     * the modules told of it already hear of its deletion, so none keeps
     * state (a special use, an ACL) for a folder that is not there. */
    for (size_t i = st->module_count; i-- > 0;) {
        const struct mail_storage_module_entry *e = &st->modules[i];
        if (e->module->folder_created == NULL ||
            e->module->folder_created(e->ctx, user, ns, name, params, err))
            continue;
        veto_text(err);
        log_warn(COMPONENT, "folder creation undone", "user=%s module=%s error=\"%s\"", user->name,
                 e->module->name, err != NULL ? err->message : "");
        struct petrel_error derr;
        if (!st->v->folder_delete(user, ns, name, &derr))
            log_error(COMPONENT, "folder left behind", "user=%s folder=%s error=\"%s\"", user->name,
                      name, derr.message);
        for (size_t k = i + 1; k < st->module_count; k++) {
            const struct mail_storage_module_entry *told = &st->modules[k];
            if (told->module->folder_deleted != NULL)
                told->module->folder_deleted(told->ctx, user, ns, name);
        }
        return false;
    }
    return true;
}

bool mail_folder_create(struct mail_user *user, const struct namespace_config *ns, const char *name,
                        struct petrel_error *err)
{
    struct mail_folder_create_params params = {0};
    return mail_folder_create_with(user, ns, name, &params, err);
}

bool mail_folder_delete(struct mail_user *user, const struct namespace_config *ns, const char *name,
                        struct petrel_error *err)
{
    struct mail_storage *st = user->storage;
    HOOKS_BEFORE(st, folder_delete, user, ns, name, err);
    if (!st->v->folder_delete(user, ns, name, err))
        return false;
    HOOKS_AFTER(st, folder_deleted, user, ns, name);
    return true;
}

bool mail_folder_rename(struct mail_user *user, const struct namespace_config *ns,
                        const char *old_name, const char *new_name, struct petrel_error *err)
{
    struct mail_storage *st = user->storage;
    if (shadows_namespace(user, ns, new_name, err))
        return false;
    HOOKS_BEFORE(st, folder_rename, user, ns, old_name, new_name, err);
    if (!st->v->folder_rename(user, ns, old_name, new_name, err))
        return false;
    HOOKS_AFTER(st, folder_renamed, user, ns, old_name, new_name);
    return true;
}

bool mail_folder_dir(struct mail_user *user, const struct namespace_config *ns, const char *name,
                     struct buf *out, struct petrel_error *err)
{
    return user->storage->v->folder_dir(user, ns, name, out, err);
}

/* ---------- rights ---------- */

static uint32_t module_rights(struct mail_user *user, const struct namespace_config *ns,
                              const char *name, struct mailbox *box)
{
    struct mail_storage *st = user->storage;
    uint32_t rights = ACL_ALL_RIGHTS;
    for (size_t i = 0; i < st->module_count; i++) {
        const struct mail_storage_module_entry *e = &st->modules[i];
        if (e->module->folder_rights != NULL)
            rights &= e->module->folder_rights(e->ctx, user, ns, name, box);
    }
    return rights;
}

uint32_t mail_folder_my_rights(struct mail_user *user, const struct namespace_config *ns,
                               const char *name)
{
    return module_rights(user, ns, name, NULL);
}

uint32_t mailbox_my_rights(struct mailbox *box)
{
    const struct mailbox_common *c = mailbox_common(box);
    return module_rights(c->user, c->ns, c->name, box);
}

/* ---------- one folder ---------- */

struct mailbox *mailbox_open_for(struct mail_user *user, const struct namespace_config *ns,
                                 const char *name, enum mailbox_open_purpose purpose,
                                 struct petrel_error *err)
{
    struct mail_storage *st = user->storage;
    for (size_t i = 0; i < st->module_count; i++) {
        const struct mail_storage_module_entry *e = &st->modules[i];
        if (e->module->mailbox_open != NULL &&
            !e->module->mailbox_open(e->ctx, user, ns, name, err)) {
            veto_text(err);
            return NULL;
        }
    }
    for (size_t i = 0; i < st->module_count; i++) {
        const struct mail_storage_module_entry *e = &st->modules[i];
        if (e->module->mailbox_open_for != NULL &&
            !e->module->mailbox_open_for(e->ctx, user, ns, name, purpose, err)) {
            veto_text(err);
            return NULL;
        }
    }
    struct mailbox *box = st->v->mailbox_open(user, ns, name, err);
    if (box != NULL)
        mailbox_common(box)->purpose = purpose;
    return box;
}

struct mailbox *mailbox_open(struct mail_user *user, const struct namespace_config *ns,
                             const char *name, struct petrel_error *err)
{
    return mailbox_open_for(user, ns, name, MAILBOX_OPEN_READ, err);
}

const char *mailbox_name(const struct mailbox *box)
{
    return mailbox_common(box)->name;
}

struct mail_user *mailbox_user(const struct mailbox *box)
{
    return mailbox_common(box)->user;
}

void mailbox_set_delivery(struct mailbox *box, bool delivery)
{
    mailbox_common(box)->delivery = delivery;
}

/* ---------- saving ---------- */

/* A reader with private \Seen saving a message with \Seen: the flag is
 * theirs (mailbox-pvt.h), not the folder's. */
static bool pvt_take_seen(struct mailbox *box, uint32_t *flags)
{
    if ((*flags & MAIL_FLAG_SEEN) == 0 || !mailbox_pvt_active(box))
        return false;
    *flags &= ~(uint32_t)MAIL_FLAG_SEEN;
    return true;
}

static void pvt_mark_seen(struct mailbox *box, bool seen, uint32_t uid)
{
    struct petrel_error e;
    if (seen && !mailbox_pvt_set(box, &uid, 1, true, &e))
        log_warn(COMPONENT, "private seen flag not kept", "user=%s folder=%s error=\"%s\"",
                 mailbox_common(box)->user->name, mailbox_common(box)->name, e.message);
}

/* The save info of appending one message of `size` bytes to `box`. */
static struct mail_save_info append_info(struct mailbox *box, uint64_t size)
{
    return (struct mail_save_info){.kind = MAIL_SAVE_APPEND,
                                   .dst = box,
                                   .count = 1,
                                   .size = size,
                                   .max_size = size,
                                   .delivery = mailbox_common(box)->delivery};
}

/* Ends an append the modules said yes to: `ok` is the driver's answer. */
static bool append_done(struct mail_storage *st, const struct mail_save_info *info, bool ok,
                        bool pvt_seen, uint32_t uid, uint32_t *uid_out)
{
    if (!ok) {
        save_failed(st, info);
        return false;
    }
    pvt_mark_seen(info->dst, pvt_seen, uid);
    HOOKS_AFTER(st, saved, info, &uid, 1);
    if (uid_out != NULL)
        *uid_out = uid;
    return true;
}

bool mailbox_append(struct mailbox *box, const void *data, size_t len, uint32_t flags,
                    const char *const *keywords, int64_t internal_date, uint32_t *uid_out,
                    struct petrel_error *err)
{
    struct mail_storage *st = box_storage(box);
    uint32_t uid = 0;
    struct mail_save_info info = append_info(box, len);
    if (!save_before(st, &info, err))
        return false;
    bool pvt_seen = pvt_take_seen(box, &flags);
    bool ok = st->v->append(box, data, len, flags, keywords, internal_date, &uid, err);
    return append_done(st, &info, ok, pvt_seen, uid, uid_out);
}

bool mailbox_append_file(struct mailbox *box, const void *prefix, size_t prefix_len, int fd,
                         uint64_t offset, uint64_t len, uint32_t flags, const char *const *keywords,
                         int64_t internal_date, uint32_t *uid_out, struct petrel_error *err)
{
    struct mail_storage *st = box_storage(box);
    uint32_t uid = 0;
    struct mail_save_info info = append_info(box, prefix_len + len);
    if (!save_before(st, &info, err))
        return false;
    bool pvt_seen = pvt_take_seen(box, &flags);
    bool ok = st->v->append_file(box, prefix, prefix_len, fd, offset, len, flags, keywords,
                                 internal_date, &uid, err);
    return append_done(st, &info, ok, pvt_seen, uid, uid_out);
}

/* What copying `uids` of `src` adds up to. Sizes come from the index, so
 * this costs a lookup per message; it is done only when a module wants to
 * know (st->save_hooks). A message gone meanwhile counts nothing. */
static void copy_info(struct mail_storage *st, enum mail_save_kind kind, struct mailbox *src,
                      const uint32_t *uids, size_t uid_count, struct mailbox *dst,
                      struct mail_save_info *info)
{
    *info = (struct mail_save_info){.kind = kind, .dst = dst, .src = src, .count = uid_count};
    if (!st->save_hooks)
        return;
    for (size_t i = 0; i < uid_count; i++) {
        uint64_t size = 0;
        uint64_t vsize = 0;
        if (mailbox_message_sizes(src, uids[i], &size, &vsize, NULL)) {
            info->size += size;
            if (size > info->max_size)
                info->max_size = size;
        }
    }
}

bool mailbox_copy(struct mailbox *src, const uint32_t *uids, size_t uid_count, struct mailbox *dst,
                  bool keep_flags, uint32_t **new_uids, struct petrel_error *err)
{
    struct mail_storage *st = box_storage(dst);
    struct mail_save_info info;
    *new_uids = NULL;
    copy_info(st, MAIL_SAVE_COPY, src, uids, uid_count, dst, &info);
    if (!save_before(st, &info, err))
        return false;
    if (!st->v->copy(src, uids, uid_count, dst, keep_flags, new_uids, err)) {
        save_failed(st, &info);
        return false;
    }
    HOOKS_AFTER(st, saved, &info, *new_uids, uid_count);
    return true;
}

bool mailbox_move(struct mailbox *src, const uint32_t *uids, size_t uid_count, struct mailbox *dst,
                  uint32_t **new_uids, struct petrel_error *err)
{
    struct mail_storage *st = box_storage(dst);
    struct mail_save_info info;
    *new_uids = NULL;
    copy_info(st, MAIL_SAVE_MOVE, src, uids, uid_count, dst, &info);
    if (!save_before(st, &info, err))
        return false;
    if (!st->v->move(src, uids, uid_count, dst, new_uids, err)) {
        save_failed(st, &info);
        return false;
    }
    HOOKS_AFTER(st, saved, &info, *new_uids, uid_count);
    return true;
}

bool mailbox_append_undo(struct mailbox *box, const uint32_t *uids, size_t uid_count,
                         struct petrel_error *err)
{
    struct mail_storage *st = box_storage(box);
    if (uid_count == 0)
        return true;
    /* Not asked: taking out what the modules let in must not depend on
     * them (a user may append without the right to expunge). Told: a quota
     * gives the bytes back. */
    const struct mailbox_flags_update del = {.mode = MAILBOX_FLAGS_ADD, .flags = MAIL_FLAG_DELETED};
    uint32_t *gone = NULL;
    size_t gone_count = 0;
    bool ok = st->v->update_flags(box, uids, uid_count, &del, NULL, NULL, NULL, NULL, err) &&
              st->v->expunge(box, uids, uid_count, &gone, &gone_count, err);
    if (gone_count > 0)
        HOOKS_AFTER(st, expunged, box, gone, gone_count);
    free(gone);
    return ok;
}

/* ---------- expunge and flags ---------- */

bool mailbox_expunge(struct mailbox *box, const uint32_t *uids, size_t uid_count,
                     uint32_t **expunged, size_t *expunged_count, struct petrel_error *err)
{
    struct mail_storage *st = box_storage(box);
    *expunged = NULL;
    *expunged_count = 0;
    HOOKS_BEFORE(st, expunge, box, uids, uid_count, err);
    if (!st->v->expunge(box, uids, uid_count, expunged, expunged_count, err))
        return false;
    if (*expunged_count > 0)
        HOOKS_AFTER(st, expunged, box, *expunged, *expunged_count);
    return true;
}

static int cmp_result(const void *a, const void *b)
{
    uint32_t x = ((const struct mailbox_flags_result *)a)->uid;
    uint32_t y = ((const struct mailbox_flags_result *)b)->uid;
    return x < y ? -1 : x > y;
}

/* Results and failures gathered over several driver updates. */
struct flags_gathered {
    struct mailbox_flags_result *res;
    size_t res_count;
    uint32_t *failed;
    size_t failed_count;
};

/* One driver update whose results and failures are added to `out`. */
static bool pvt_driver_update(struct mailbox *box, const uint32_t *uids, size_t uid_count,
                              const struct mailbox_flags_update *upd, struct flags_gathered *out,
                              struct petrel_error *err)
{
    struct mailbox_flags_result *r = NULL;
    uint32_t *f = NULL;
    size_t rn = 0, fn = 0;
    if (uid_count == 0)
        return true;
    bool ok = box_storage(box)->v->update_flags(box, uids, uid_count, upd, &r, &rn, &f, &fn, err);
    if (ok) {
        out->res = xrealloc(out->res, (out->res_count + rn + 1) * sizeof(*out->res));
        memcpy(out->res + out->res_count, r, rn * sizeof(*r));
        out->res_count += rn;
        out->failed = xrealloc(out->failed, (out->failed_count + fn + 1) * sizeof(*out->failed));
        memcpy(out->failed + out->failed_count, f, fn * sizeof(*f));
        out->failed_count += fn;
    }
    free(r);
    free(f);
    return ok;
}

/* A reader with private \Seen (mailbox-pvt.h): \Seen goes to the reader's
 * set, everything else to the folder, whose own \Seen stays as it is (a
 * replacement is made per message: those with the folder's \Seen keep
 * it). The results show the reader's \Seen. */
static bool pvt_update_flags(struct mailbox *box, const uint32_t *uids, size_t uid_count,
                             const struct mailbox_flags_update *upd,
                             struct mailbox_flags_result **results, size_t *result_count,
                             uint32_t **failed, size_t *failed_count, struct petrel_error *err)
{
    struct flags_gathered g = {0};
    struct mailbox_flags_update shared = *upd;
    shared.flags &= ~(uint32_t)MAIL_FLAG_SEEN;
    bool ok;
    if (upd->mode != MAILBOX_FLAGS_REPLACE) {
        ok = pvt_driver_update(box, uids, uid_count, &shared, &g, err);
    } else {
        /* The folder's \Seen of each message first (an update that adds
         * nothing changes nothing), then one replacement for the messages
         * that have it and one for those that do not. */
        const struct mailbox_flags_update look = {.mode = MAILBOX_FLAGS_ADD};
        struct flags_gathered now = {0};
        ok = pvt_driver_update(box, uids, uid_count, &look, &now, err);
        uint32_t *with = xcalloc(now.res_count + 1, sizeof(*with));
        uint32_t *without = xcalloc(now.res_count + 1, sizeof(*without));
        size_t wn = 0, won = 0;
        for (size_t i = 0; ok && i < now.res_count; i++) {
            if ((now.res[i].flags & MAIL_FLAG_SEEN) != 0)
                with[wn++] = now.res[i].uid;
            else
                without[won++] = now.res[i].uid;
        }
        struct mailbox_flags_update keep = shared;
        keep.flags |= MAIL_FLAG_SEEN;
        ok = ok && pvt_driver_update(box, with, wn, &keep, &g, err) &&
             pvt_driver_update(box, without, won, &shared, &g, err);
        free(with);
        free(without);
        free(now.res);
        free(now.failed);
        if (g.res_count > 1)
            qsort(g.res, g.res_count, sizeof(*g.res), cmp_result);
    }
    bool seen_asked = upd->mode == MAILBOX_FLAGS_REPLACE || (upd->flags & MAIL_FLAG_SEEN) != 0;
    if (ok && seen_asked && g.res_count > 0) {
        bool seen = upd->mode == MAILBOX_FLAGS_REMOVE ? false : (upd->flags & MAIL_FLAG_SEEN) != 0;
        uint32_t *done = xcalloc(g.res_count, sizeof(*done));
        for (size_t i = 0; i < g.res_count; i++)
            done[i] = g.res[i].uid;
        ok = mailbox_pvt_set(box, done, g.res_count, seen, err);
        free(done);
    }
    const struct mailbox_pvt *p = ok ? mailbox_pvt_get(box) : NULL;
    for (size_t i = 0; p != NULL && i < g.res_count; i++) {
        g.res[i].flags &= ~(uint32_t)MAIL_FLAG_SEEN;
        if (mailbox_pvt_has(p, g.res[i].uid))
            g.res[i].flags |= MAIL_FLAG_SEEN;
    }
    if (ok && results != NULL) {
        *results = g.res;
        *result_count = g.res_count;
        g.res = NULL;
    }
    if (ok && failed != NULL) {
        *failed = g.failed;
        *failed_count = g.failed_count;
        g.failed = NULL;
    }
    free(g.res);
    free(g.failed);
    return ok;
}

bool mailbox_update_flags(struct mailbox *box, const uint32_t *uids, size_t uid_count,
                          const struct mailbox_flags_update *upd,
                          struct mailbox_flags_result **results, size_t *result_count,
                          uint32_t **failed, size_t *failed_count, struct petrel_error *err)
{
    struct mail_storage *st = box_storage(box);
    if (results != NULL) {
        *results = NULL;
        *result_count = 0;
    }
    if (failed != NULL) {
        *failed = NULL;
        *failed_count = 0;
    }
    HOOKS_BEFORE(st, flags, box, uids, uid_count, upd, err);
    if (mailbox_pvt_active(box))
        return pvt_update_flags(box, uids, uid_count, upd, results, result_count, failed,
                                failed_count, err);
    return st->v->update_flags(box, uids, uid_count, upd, results, result_count, failed,
                               failed_count, err);
}

bool mailbox_set_flags(struct mailbox *box, uint32_t uid, uint32_t flags,
                       const char *const *keywords, struct petrel_error *err)
{
    struct mail_storage *st = box_storage(box);
    const struct mailbox_flags_update upd = {
        .mode = MAILBOX_FLAGS_REPLACE, .flags = flags, .keywords = keywords};
    HOOKS_BEFORE(st, flags, box, &uid, 1, &upd, err);
    return st->v->set_flags(box, uid, flags, keywords, err);
}
