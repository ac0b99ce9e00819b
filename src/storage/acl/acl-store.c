/* dovecot-acl files on disk (see acl-store.h). */
#include "storage/acl/acl-store.h"

#include "core/fs-util.h"
#include "core/log.h"
#include "storage/acl/acl-file.h"
#include "storage/acl/acl-list-index.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

bool acl_store_dir(struct mail_user *user, const struct namespace_config *ns, const char *name,
                   struct buf *out, struct petrel_error *err)
{
    if (name[0] == '\0')
        return mail_user_namespace_root(user, ns, out, err);
    return mail_folder_dir(user, ns, name, out, err);
}

static void file_path(const char *dir, const char *file, struct buf *out)
{
    buf_append_str(out, dir);
    buf_append_char(out, '/');
    buf_append_str(out, file);
    buf_append_char(out, '\0');
}

static uint64_t stamp(const struct stat *st)
{
    /* FNV-1a over what changes when the file is replaced or written. */
    const uint64_t parts[] = {(uint64_t)st->st_ino, (uint64_t)st->st_size,
                              (uint64_t)st->st_mtim.tv_sec, (uint64_t)st->st_mtim.tv_nsec,
                              (uint64_t)st->st_ctim.tv_nsec};
    uint64_t h = 14695981039346656037ull;
    for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++) {
        h ^= parts[i];
        h *= 1099511628211ull;
    }
    return h != 0 ? h : 1;
}

uint64_t acl_store_stamp_of(const char *dir)
{
    struct buf path = {0};
    file_path(dir, ACL_STORE_FILE, &path);
    struct stat st;
    uint64_t s = stat(path.data, &st) == 0 ? stamp(&st) : 0;
    buf_free(&path);
    return s;
}

int acl_store_read(const char *dir, struct acl_list *list, uint64_t *stamp_out,
                   struct petrel_error *err)
{
    acl_list_clear(list);
    if (stamp_out != NULL)
        *stamp_out = 0;
    struct buf path = {0};
    file_path(dir, ACL_STORE_FILE, &path);
    struct stat st;
    char *data = NULL;
    size_t got = 0;
    int ret = fs_read_regular_file(path.data, "ACL file", ACL_FILE_MAX, &data, &got, &st, err);
    if (ret == 1) {
        char why[128];
        if (acl_file_parse(data, got, list, why, sizeof(why))) {
            if (stamp_out != NULL)
                *stamp_out = stamp(&st);
        } else {
            petrel_error_set(err, PETREL_ERR_INVALID, "%s: %s", path.data, why);
            ret = -1;
        }
    }
    free(data);
    buf_free(&path);
    return ret;
}

bool acl_store_write(const char *dir, const struct acl_list *list, struct petrel_error *err)
{
    struct buf path = {0};
    file_path(dir, ACL_STORE_FILE, &path);
    bool ok;
    if (list->count == 0) {
        ok = unlink(path.data) == 0 || errno == ENOENT ||
             petrel_error_set_errno(err, errno, "cannot remove the ACL file");
    } else {
        struct buf text = {0};
        acl_file_format(list, &text);
        ok = fs_write_atomic(path.data, text.data, text.len, true, err);
        buf_free(&text);
    }
    buf_free(&path);
    return ok;
}

/* What runs under the folder's lock after its file was (maybe) written:
 * the index rows, from the list the file holds now. */
struct after_write {
    struct mail_user *owner;
    const struct namespace_config *ns;
    const char *name;
    const char *dir;
};

static void index_rows(const struct after_write *aw, const struct acl_list *list)
{
    struct petrel_error err;
    petrel_error_clear(&err);
    /* The root's file is INBOX's too where the two share a directory. */
    const char *alias = NULL;
    struct buf other = {0};
    if (aw->ns->type == NAMESPACE_PERSONAL) {
        const char *candidate = aw->name[0] == '\0' ? "INBOX" : "";
        if ((aw->name[0] == '\0' || strcmp(aw->name, "INBOX") == 0) &&
            acl_store_dir(aw->owner, aw->ns, candidate, &other, &err)) {
            buf_append_char(&other, '\0');
            if (strcmp(other.data, aw->dir) == 0)
                alias = candidate;
        }
    }
    buf_free(&other);
    if (!acl_list_index_write_folder(aw->owner, aw->ns, aw->name, list, &err) ||
        (alias != NULL && !acl_list_index_write_folder(aw->owner, aw->ns, alias, list, &err)))
        log_error("acl", "ACL list index not written (acl/rebuild repairs it)",
                  "user=%s folder=%s error=\"%s\"", mail_user_name(aw->owner), aw->name,
                  err.message);
}

static bool update_locked(const char *dir,
                          bool (*change)(struct acl_list *list, void *ctx,
                                         struct petrel_error *err),
                          void *ctx, const struct after_write *aw, struct petrel_error *err)
{
    struct buf lock_path = {0};
    file_path(dir, ACL_STORE_LOCK, &lock_path);
    int fd = open(lock_path.data, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    buf_free(&lock_path);
    if (fd < 0)
        return errno == ENOENT ? petrel_error_set(err, PETREL_ERR_NOT_FOUND, "folder not found")
                               : petrel_error_set_errno(err, errno, "cannot open the ACL lock");
    while (flock(fd, LOCK_EX) != 0) {
        if (errno != EINTR) {
            int e = errno;
            close(fd);
            return petrel_error_set_errno(err, e, "cannot lock the ACL");
        }
    }
    struct acl_list list = {0};
    struct acl_list before = {0};
    bool ok = acl_store_read(dir, &list, NULL, err) >= 0;
    if (ok) {
        acl_list_copy(&before, &list);
        ok = change(&list, ctx, err);
    }
    if (ok && !acl_list_equal(&before, &list))
        ok = acl_store_write(dir, &list, err);
    if (ok && aw != NULL)
        index_rows(aw, &list);
    acl_list_free(&list);
    acl_list_free(&before);
    close(fd); /* releases the lock */
    return ok;
}

static bool apply_change(struct acl_list *list, void *ctx, struct petrel_error *err)
{
    (void)err;
    const struct acl_change *c = ctx;
    if (c->remove)
        acl_list_remove(list, &c->id);
    else
        acl_list_modify(list, &c->id, c->rights, c->mode);
    return true;
}

bool acl_store_change(const char *dir, const struct acl_change *change, struct petrel_error *err)
{
    return acl_store_update(dir, apply_change, (void *)change, err);
}

bool acl_store_update(const char *dir,
                      bool (*change)(struct acl_list *list, void *ctx, struct petrel_error *err),
                      void *ctx, struct petrel_error *err)
{
    return update_locked(dir, change, ctx, NULL, err);
}

bool acl_store_update_folder(struct mail_user *owner, const struct namespace_config *ns,
                             const char *name,
                             bool (*change)(struct acl_list *list, void *ctx,
                                            struct petrel_error *err),
                             void *ctx, struct petrel_error *err)
{
    struct buf dir = {0};
    if (!acl_store_dir(owner, ns, name, &dir, err)) {
        buf_free(&dir);
        return false;
    }
    buf_append_char(&dir, '\0');
    struct after_write aw = {.owner = owner, .ns = ns, .name = name, .dir = dir.data};
    bool ok = update_locked(dir.data, change, ctx, &aw, err);
    buf_free(&dir);
    return ok;
}

bool acl_store_change_folder(struct mail_user *owner, const struct namespace_config *ns,
                             const char *name, const struct acl_change *change,
                             struct petrel_error *err)
{
    return acl_store_update_folder(owner, ns, name, apply_change, (void *)change, err);
}

static bool replace_all(struct acl_list *list, void *ctx, struct petrel_error *err)
{
    (void)err;
    acl_list_copy(list, ctx);
    return true;
}

bool acl_store_write_folder(struct mail_user *owner, const struct namespace_config *ns,
                            const char *name, const struct acl_list *list, struct petrel_error *err)
{
    return acl_store_update_folder(owner, ns, name, replace_all, (void *)list, err);
}
