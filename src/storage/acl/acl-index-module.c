/* ACL list index rows follow folder deletes and renames (see
 * acl-index-module.h). */
#include "storage/acl/acl-index-module.h"

#include "core/log.h"
#include "storage/acl/acl-list-index.h"
#include "storage/shared-namespace.h"

#include <string.h>
#include <sys/stat.h>

#define COMPONENT "acl"

/* Whether the namespace has an index at all: most users never share, and
 * their deletes and renames should not make one (nor its lock file). */
static bool has_index(struct mail_user *user, const struct namespace_config *ns)
{
    struct buf path = {0};
    struct petrel_error err;
    bool found = false;
    if (mail_user_namespace_root(user, ns, &path, &err)) {
        buf_append_str(&path, "/" ACL_LIST_INDEX_FILE);
        buf_append_char(&path, '\0');
        struct stat st;
        found = lstat(path.data, &st) == 0;
    }
    buf_free(&path);
    return found;
}

static bool remove_rows(struct acl_index *idx, void *ctx, struct petrel_error *err)
{
    (void)err;
    acl_list_index_remove_folder(idx, ctx, 0);
    return true;
}

static void module_folder_deleted(void *ctx, struct mail_user *reached_by,
                                  const struct namespace_config *reached_ns, const char *name)
{
    (void)ctx;
    /* A reader's DELETE of shared/bob/X is bob's: his index and his
     * registry rows (which a write through the shared instance would not
     * sync), as his own DELETE would. */
    struct mail_user *user;
    const struct namespace_config *ns;
    mail_namespace_acl_holder(reached_by, reached_ns, &user, &ns);
    if (!has_index(user, ns))
        return;
    struct petrel_error err;
    petrel_error_clear(&err);
    if (!acl_list_index_update(user, ns, remove_rows, (void *)name, &err))
        log_error(COMPONENT, "ACL list index rows of a deleted folder not removed",
                  "user=%s folder=%s error=\"%s\"", mail_user_name(user), name, err.message);
}

struct rename {
    const char *old_name;
    const char *new_name;
    char sep;
};

static bool rename_rows(struct acl_index *idx, void *ctx, struct petrel_error *err)
{
    (void)err;
    const struct rename *r = ctx;
    acl_list_index_rename_folder(idx, r->old_name, r->new_name, r->sep);
    return true;
}

static void module_folder_renamed(void *ctx, struct mail_user *reached_by,
                                  const struct namespace_config *reached_ns, const char *old_name,
                                  const char *new_name)
{
    (void)ctx;
    struct mail_user *user; /* the owner, as for a delete */
    const struct namespace_config *ns;
    mail_namespace_acl_holder(reached_by, reached_ns, &user, &ns);
    if (!has_index(user, ns))
        return;
    struct rename r = {.old_name = old_name, .new_name = new_name, .sep = ns->separator};
    struct petrel_error err;
    petrel_error_clear(&err);
    if (!acl_list_index_update(user, ns, rename_rows, &r, &err))
        log_error(COMPONENT, "ACL list index rows of a renamed folder not rewritten",
                  "user=%s from=%s to=%s error=\"%s\"", mail_user_name(user), old_name, new_name,
                  err.message);
}

const struct mail_storage_module acl_index_module = {
    .name = "acl-index",
    .folder_deleted = module_folder_deleted,
    .folder_renamed = module_folder_renamed,
};
