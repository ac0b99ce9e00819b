/* Folder usage from the fileindex aggregate (mail-storage.h "usage"). */
#include "storage/maildir/maildir-private.h"

#include "core/buf.h"

#include <errno.h>
#include <unistd.h>

bool maildir_folder_usage(struct mail_user *user, const struct namespace_config *ns,
                          const char *name, struct fileindex_usage_cache *cache,
                          struct mail_folder_usage *out, struct petrel_error *err)
{
    struct buf dir = {0};
    bool ok = maildir_folder_dir(user, ns, name, &dir, err);
    struct fileindex_usage u;
    struct petrel_error rerr;
    petrel_error_clear(&rerr);
    if (ok && fileindex_read_usage_cached(cache, buf_cstr(&dir), &user->storage->index_settings, &u,
                                          &rerr)) {
        out->messages = u.messages;
        out->bytes = u.bytes;
        buf_free(&dir);
        return true;
    }
    if (ok && rerr.code == PETREL_ERR_NOT_FOUND && access(buf_cstr(&dir), F_OK) != 0 &&
        errno == ENOENT) {
        /* No folder on disk at all (INBOX of a user who never got mail):
         * empty, and nothing is created for asking. */
        buf_free(&dir);
        out->messages = 0;
        out->bytes = 0;
        return true;
    }
    buf_free(&dir);
    if (!ok)
        return false;
    /* No readable index (never opened by Petrel, or damaged): open the
     * folder as any session would, which builds or rebuilds it. */
    struct mailbox *box = mailbox_open(user, ns, name, err);
    if (box == NULL)
        return false;
    ok = maildir_ensure_synced(box, err) && fileindex_refresh(box->index, err);
    if (ok) {
        fileindex_get_usage(box->index, &u);
        out->messages = u.messages;
        out->bytes = u.bytes;
    }
    mailbox_close(box);
    return ok;
}

bool maildir_usage_recalc(struct mailbox *box, struct mail_folder_usage *out,
                          struct petrel_error *err)
{
    struct fileindex_usage u;
    if (!maildir_ensure_synced(box, err) || !fileindex_usage_recalc(box->index, &u, err))
        return false;
    if (out != NULL) {
        out->messages = u.messages;
        out->bytes = u.bytes;
    }
    return true;
}
