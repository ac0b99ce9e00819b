/* mail-storage.h over Maildir++: storage, users and folder operations. */
#include "storage/maildir/maildir-private.h"

#include "core/fs-util.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "storage/mailbox-name.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define COMPONENT "storage"

static void *maildir_storage_init(struct mail_storage *storage, struct mail_storage *parent)
{
    struct maildir_storage *ms = xcalloc(1, sizeof(*ms));
    maildir_name_source_init(&ms->own_names);
    ms->names = &ms->own_names;
    if (parent != NULL) {
        const struct maildir_storage *pm = parent->driver;
        ms->names = pm->names;
    }
    return ms;
}

static void maildir_storage_deinit(void *driver)
{
    free(driver);
}

int maildir_spool_open(struct mail_user *user, struct petrel_error *err)
{
    const struct namespace_config *ns = mail_user_namespace(user, "personal", err);
    if (ns == NULL)
        return -1;
    struct buf dir = {0};
    int fd = -1;
    if (mail_user_namespace_root(user, ns, &dir, err) && maildir_make_dirs(dir.data, true, err)) {
        buf_append_str(&dir, "/tmp");
        bool linkable;
        fd = fs_tmpfile_open(dir.data, &linkable, err);
    }
    buf_free(&dir);
    return fd;
}

bool maildir_is_inbox(const struct namespace_config *ns, const char *name)
{
    return namespace_has_inbox(ns) && mailbox_name_is_inbox(name);
}

bool maildir_folder_dir(struct mail_user *user, const struct namespace_config *ns, const char *name,
                        struct buf *out, struct petrel_error *err)
{
    if (!maildir_is_inbox(ns, name) && !mailbox_name_validate(name, ns->separator, err))
        return false;
    if (!mail_user_namespace_root(user, ns, out, err))
        return false;
    if (maildir_is_inbox(ns, name))
        return true;
    size_t start = out->len + 1;
    buf_append_str(out, "/.");
    const char *p = name;
    for (;;) {
        const char *sep = strchr(p, ns->separator);
        size_t len = sep != NULL ? (size_t)(sep - p) : strlen(p);
        char *level = xstrndup(p, len);
        bool ok = mailbox_name_to_mutf7(level, out);
        free(level);
        if (!ok)
            return petrel_error_set(err, PETREL_ERR_INVALID, "folder name is not valid UTF-8");
        if (sep == NULL)
            break;
        buf_append_char(out, '.');
        p = sep + 1;
    }
    /* Every level lives in one directory name (".L1.L2"). */
    if (out->len - start > NAME_MAX)
        return petrel_error_set(err, PETREL_ERR_INVALID,
                                "folder name too long: its directory name exceeds %d bytes",
                                NAME_MAX);
    return true;
}

bool maildir_make_dirs(const char *dir, bool is_root, struct petrel_error *err)
{
    static const char *const subdirs[] = {"cur", "new", "tmp"};
    struct buf path = {0};
    /* Usually all there already (every open of INBOX comes here): a stat
     * each instead of a failing mkdir per ancestor of each. */
    bool present = true;
    struct stat st;
    for (size_t i = 0; present && i < 3; i++) {
        buf_reset(&path);
        buf_printf(&path, "%s/%s", dir, subdirs[i]);
        present = stat(path.data, &st) == 0 && S_ISDIR(st.st_mode);
    }
    if (present && !is_root) {
        buf_reset(&path);
        buf_printf(&path, "%s/maildirfolder", dir);
        present = stat(path.data, &st) == 0;
    }
    if (present) {
        buf_free(&path);
        return true;
    }
    bool ok = fs_mkdir_p(dir, 0700, err);
    for (size_t i = 0; ok && i < 3; i++) {
        buf_reset(&path);
        buf_printf(&path, "%s/%s", dir, subdirs[i]);
        ok = fs_mkdir_p(path.data, 0700, err);
    }
    if (ok && !is_root) {
        buf_reset(&path);
        buf_printf(&path, "%s/maildirfolder", dir);
        int fd = open(path.data, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        if (fd < 0)
            ok = petrel_error_set_errno(err, errno, "cannot create %s: %s", path.data,
                                        strerror(errno));
        else
            close(fd);
    }
    buf_free(&path);
    return ok;
}

static bool is_dir(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

/* ---------- listing ---------- */

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* ".L1.L2" -> "L1<sep>L2" in UTF-8; false for names that are not folders. */
static bool decode_dir_name(const char *dname, char separator, struct buf *out)
{
    if (dname[0] != '.' || dname[1] == '\0' || dname[1] == '.' || dname[1] == '#')
        return false;
    const char *p = dname + 1;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t len = dot != NULL ? (size_t)(dot - p) : strlen(p);
        if (len == 0)
            return false;
        char *level = xstrndup(p, len);
        bool ok = mailbox_name_from_mutf7(level, out);
        free(level);
        if (!ok)
            return false;
        if (dot == NULL)
            return true;
        buf_append_char(out, separator);
        p = dot + 1;
    }
}

bool maildir_folder_list(struct mail_user *user, const struct namespace_config *ns, char ***names,
                         size_t *count, struct petrel_error *err)
{
    struct buf root = {0};
    if (!mail_user_namespace_root(user, ns, &root, err)) {
        buf_free(&root);
        return false;
    }
    char **list = NULL;
    size_t n = 0;
    size_t cap = 0;
    DIR *dir = opendir(root.data);
    if (dir == NULL && errno != ENOENT) {
        petrel_error_set_errno(err, errno, "cannot list %s: %s", root.data, strerror(errno));
        buf_free(&root);
        return false;
    }
    struct buf name = {0};
    struct buf path = {0};
    while (dir != NULL) {
        struct dirent *de = readdir(dir);
        if (de == NULL)
            break;
        buf_reset(&name);
        if (!decode_dir_name(de->d_name, ns->separator, &name))
            continue;
        /* The directory entry's type spares a stat per folder (quota
         * sums list folders on every check); links and file systems that
         * do not fill it in are looked at. */
        if (de->d_type != DT_DIR) {
            if (de->d_type != DT_UNKNOWN && de->d_type != DT_LNK)
                continue;
            buf_reset(&path);
            buf_printf(&path, "%s/%s", root.data, de->d_name);
            if (!is_dir(path.data))
                continue;
        }
        struct petrel_error verr;
        if (!mailbox_name_validate(name.data, ns->separator, &verr)) {
            log_debug(COMPONENT, "skipping folder directory", "dir=%s reason=\"%s\"", de->d_name,
                      verr.message);
            continue;
        }
        list = xgrow(list, &cap, n + 1, sizeof(*list));
        list[n++] = buf_steal(&name);
    }
    /* Another user's INBOX (a shared namespace's instance) is there when
     * their mail directory is; one's own always is. */
    bool inbox = ns->type == NAMESPACE_PERSONAL || (namespace_has_inbox(ns) && dir != NULL);
    if (dir != NULL)
        closedir(dir);
    buf_free(&name);
    buf_free(&path);
    buf_free(&root);
    if (n > 1)
        qsort(list, n, sizeof(*list), cmp_names);
    if (inbox) {
        list = xgrow(list, &cap, n + 1, sizeof(*list));
        memmove(list + 1, list, n * sizeof(*list));
        list[0] = xstrdup("INBOX");
        n++;
    }
    *names = list;
    *count = n;
    return true;
}

bool maildir_folder_exists(struct mail_user *user, const struct namespace_config *ns,
                           const char *name)
{
    if (maildir_is_inbox(ns, name) && ns->type == NAMESPACE_PERSONAL)
        return true;
    struct buf dir = {0};
    bool exists = maildir_folder_dir(user, ns, name, &dir, NULL) && is_dir(dir.data);
    buf_free(&dir);
    return exists;
}

/* ---------- create / delete / rename ---------- */

static bool maildir_folder_create(struct mail_user *user, const struct namespace_config *ns,
                                  const char *name, struct petrel_error *err)
{
    if (maildir_is_inbox(ns, name))
        return petrel_error_set(err, PETREL_ERR_EXISTS, "folder already exists: INBOX");
    struct buf dir = {0};
    struct buf root = {0};
    bool ok = maildir_folder_dir(user, ns, name, &dir, err) &&
              mail_user_namespace_root(user, ns, &root, err) && fs_mkdir_p(root.data, 0700, err);
    if (ok) {
        if (mkdir(dir.data, 0700) != 0) {
            if (errno == EEXIST)
                ok = petrel_error_set(err, PETREL_ERR_EXISTS, "folder already exists: %s", name);
            else
                ok = petrel_error_set_errno(err, errno, "cannot create %s: %s", dir.data,
                                            strerror(errno));
        } else {
            ok = maildir_make_dirs(dir.data, false, err);
            /* The index is built through a handle like any other, closed
             * at once: its identity (GUID, UIDVALIDITY) is stamped now. */
            int dir_fd = -1;
            struct stat st;
            if (ok) {
                dir_fd = open(dir.data, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
                if (dir_fd < 0 || fstat(dir_fd, &st) != 0)
                    ok = petrel_error_set_errno(err, errno, "cannot open %s: %s", dir.data,
                                                strerror(errno));
            }
            if (ok) {
                struct mailbox *box =
                    maildir_mailbox_alloc(user, ns, name, xstrdup(dir.data), dir_fd, &st);
                dir_fd = -1;
                ok = maildir_index_init(box, err);
                mailbox_close(box);
            }
            if (dir_fd >= 0)
                close(dir_fd);
            if (ok)
                ok = fs_fsync_dir(root.data, err);
        }
    }
    if (ok)
        log_info(COMPONENT, "folder created", "user=%s namespace=%s folder=%s", user->name,
                 ns->slug, dir.data + root.len + 1);
    buf_free(&dir);
    buf_free(&root);
    return ok;
}

static bool maildir_folder_delete(struct mail_user *user, const struct namespace_config *ns,
                                  const char *name, struct petrel_error *err)
{
    if (maildir_is_inbox(ns, name))
        return petrel_error_set(err, PETREL_ERR_INVALID, "INBOX cannot be deleted");
    struct buf dir = {0};
    if (!maildir_folder_dir(user, ns, name, &dir, err)) {
        buf_free(&dir);
        return false;
    }
    if (!is_dir(dir.data)) {
        buf_free(&dir);
        return petrel_error_set(err, PETREL_ERR_NOT_FOUND, "folder not found: %s", name);
    }
    /* Move it out of the listing first, so a crash mid-removal leaves no
     * half-deleted folder visible; then remove the tree. */
    char *root = fs_dirname(dir.data);
    unsigned char rnd[8];
    RAND_bytes(rnd, sizeof(rnd));
    char *doomed = xasprintf("%s/.#deleted-%02x%02x%02x%02x%02x%02x%02x%02x", root, rnd[0], rnd[1],
                             rnd[2], rnd[3], rnd[4], rnd[5], rnd[6], rnd[7]);
    bool ok = true;
    if (rename(dir.data, doomed) != 0) {
        ok = petrel_error_set(err, errno == ENOENT ? PETREL_ERR_NOT_FOUND : PETREL_ERR_IO,
                              "cannot delete %s: %s", name, strerror(errno));
    } else {
        fs_fsync_dir(root, NULL);
        struct petrel_error rm_err;
        if (!fs_remove_tree(doomed, &rm_err))
            log_warn(COMPONENT, "folder removal incomplete", "path=%s error=\"%s\"", doomed,
                     rm_err.message);
        log_info(COMPONENT, "folder deleted", "user=%s namespace=%s folder_dir=%s", user->name,
                 ns->slug, dir.data + strlen(root) + 1);
    }
    free(doomed);
    free(root);
    buf_free(&dir);
    return ok;
}

static bool maildir_folder_rename(struct mail_user *user, const struct namespace_config *ns,
                                  const char *old_name, const char *new_name,
                                  struct petrel_error *err)
{
    if (maildir_is_inbox(ns, old_name))
        return petrel_error_set(err, PETREL_ERR_INVALID, "INBOX cannot be renamed");
    if (maildir_is_inbox(ns, new_name))
        return petrel_error_set(err, PETREL_ERR_EXISTS, "folder already exists: INBOX");
    struct buf old_dir = {0};
    struct buf new_dir = {0};
    struct buf root = {0};
    bool ok = maildir_folder_dir(user, ns, old_name, &old_dir, err) &&
              maildir_folder_dir(user, ns, new_name, &new_dir, err) &&
              mail_user_namespace_root(user, ns, &root, err);
    if (ok && !is_dir(old_dir.data))
        ok = petrel_error_set(err, PETREL_ERR_NOT_FOUND, "folder not found: %s", old_name);
    if (ok && is_dir(new_dir.data))
        ok = petrel_error_set(err, PETREL_ERR_EXISTS, "folder already exists: %s", new_name);
    /* A folder cannot move below itself. */
    size_t old_len = strlen(old_name);
    if (ok && strncmp(new_name, old_name, old_len) == 0 && new_name[old_len] == ns->separator)
        ok = petrel_error_set(err, PETREL_ERR_INVALID, "cannot move a folder into itself");
    if (!ok)
        goto out;
    /* Children first collected (".Old.*"), then the folder, then children. */
    const char *old_base = old_dir.data + root.len + 1; /* ".Old" */
    const char *new_base = new_dir.data + root.len + 1;
    size_t old_base_len = strlen(old_base);
    char **children = NULL;
    size_t nchildren = 0;
    size_t cap = 0;
    DIR *d = opendir(root.data);
    while (d != NULL) {
        struct dirent *de = readdir(d);
        if (de == NULL)
            break;
        if (strncmp(de->d_name, old_base, old_base_len) == 0 && de->d_name[old_base_len] == '.') {
            children = xgrow(children, &cap, nchildren + 1, sizeof(*children));
            children[nchildren++] = xstrdup(de->d_name + old_base_len);
        }
    }
    if (d != NULL)
        closedir(d);
    struct buf from = {0};
    struct buf to = {0};
    for (size_t i = 0; ok && i < nchildren; i++) {
        buf_reset(&to);
        buf_printf(&to, "%s/%s%s", root.data, new_base, children[i]);
        if (is_dir(to.data))
            ok = petrel_error_set(err, PETREL_ERR_EXISTS, "a child of %s already exists", new_name);
    }
    if (ok && rename(old_dir.data, new_dir.data) != 0)
        ok = petrel_error_set_errno(err, errno, "rename %s: %s", old_name, strerror(errno));
    for (size_t i = 0; ok && i < nchildren; i++) {
        buf_reset(&from);
        buf_reset(&to);
        buf_printf(&from, "%s/%s%s", root.data, old_base, children[i]);
        buf_printf(&to, "%s/%s%s", root.data, new_base, children[i]);
        if (rename(from.data, to.data) != 0)
            log_error(COMPONENT, "child folder not renamed", "from=%s error=\"%s\"", from.data,
                      strerror(errno));
    }
    if (ok)
        fs_fsync_dir(root.data, NULL);
    for (size_t i = 0; i < nchildren; i++)
        free(children[i]);
    free(children);
    buf_free(&from);
    buf_free(&to);
out:
    buf_free(&old_dir);
    buf_free(&new_dir);
    buf_free(&root);
    return ok;
}

const struct mail_storage_vfuncs maildir_storage_vfuncs = {
    .scheme = "maildir",
    .storage_init = maildir_storage_init,
    .storage_deinit = maildir_storage_deinit,
    .folder_create = maildir_folder_create,
    .folder_delete = maildir_folder_delete,
    .folder_rename = maildir_folder_rename,
    .mailbox_open = maildir_mailbox_open,
    .append = maildir_append,
    .append_file = maildir_append_file,
    .copy = maildir_copy,
    .move = maildir_move,
    .expunge = maildir_expunge,
    .update_flags = maildir_update_flags,
    .set_flags = maildir_set_flags,
    .message_open = maildir_message_open,
    .message_open_file = maildir_message_open_file,
    .message_sizes = maildir_message_sizes,
    .keyword_name = maildir_keyword_name,
    .cache_lookup = maildir_cache_lookup,
    .cache_store = maildir_cache_store,
    .cache_flush = maildir_cache_flush,
    .view_new = maildir_view_new,
    .view_free = maildir_view_free,
    .view_sync = maildir_view_sync,
    .view_note_flags = maildir_view_note_flags,
    .folder_list = maildir_folder_list,
    .folder_exists = maildir_folder_exists,
    .folder_usage = maildir_folder_usage,
    .spool_open = maildir_spool_open,
    .mailbox_close = maildir_mailbox_close,
    .is_read_only = maildir_is_read_only,
    .memory_bytes = maildir_memory_bytes,
    .mailbox_is = maildir_mailbox_is,
    .mailbox_sync = maildir_mailbox_sync,
    .handle_uid_validity = maildir_handle_uid_validity,
    .get_info = maildir_get_info,
    .foreach = maildir_foreach,
    .recent_claim = maildir_recent_claim,
    .recent_peek = maildir_recent_peek,
    .index_rebuild = maildir_index_rebuild,
    .index_optimize = maildir_index_optimize,
    .cache_purge = maildir_cache_purge,
    .usage_recalc = maildir_usage_recalc,
    .watch_hub_new = maildir_watch_hub_new,
    .watch_hub_free = maildir_watch_hub_free,
    .watch_new = maildir_watch_new,
    .watch_take_changed = maildir_watch_take_changed,
    .watch_is_native = maildir_watch_is_native,
    .watch_lost = maildir_watch_lost,
    .watch_free = maildir_watch_free,
    .folder_dir = maildir_folder_dir,
};
