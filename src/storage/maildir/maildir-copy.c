/* mail-storage.h over Maildir++: copying and moving messages between
 * folders (mailbox_copy / mailbox_move, IMAP COPY and MOVE with COPYUID).
 *
 * Two phases, so the destination's lock is held only for the short part:
 *   1. without any lock: for each source message, a new file in dst/tmp/
 *      — a hard link to the source file when both folders share a file
 *      system (maildir files never change, so sharing the inode is safe and
 *      costs no data write), else a copy written and fsynced per mail.fsync;
 *   2. under dst's folder lock, in one index transaction: each tmp file is
 *      renamed into cur/ with its flags, cur/ is fsynced once, the messages
 *      get consecutive UIDs in the order given, dovecot-uidlist is written.
 * A failure before the commit removes what phase 2 put into cur/ (they are
 * copies: the source still has every message) and phase 1's tmp files. */
#include "storage/maildir/maildir-private.h"

#include "core/fs-util.h"
#include "core/log.h"
#include "core/xalloc.h"
#include "storage/maildir/maildir-filename.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#define COMPONENT "storage"
/* Tries to find a source file that a concurrent flag change renamed
 * between our lookup and the link. */
#define LINK_ATTEMPTS 3

struct staged_copy {
    size_t index; /* position in the caller's uids */
    char *tmp_path;
    char *base;
    char *cur_name; /* set once renamed into cur/ */
    struct fileindex_record rec;
    char **keywords; /* names, NULL-terminated; NULL for none */
};

static void staged_free(struct staged_copy *s)
{
    free(s->tmp_path);
    free(s->base);
    free(s->cur_name);
    if (s->keywords != NULL) {
        for (size_t i = 0; s->keywords[i] != NULL; i++)
            free(s->keywords[i]);
        free(s->keywords);
    }
}

/* The names of `mask` in `box` (re-reading dovecot-keywords once when a bit
 * has no name yet: another process added the keyword). Copies: resolving
 * them in the destination re-reads (and frees) that folder's names, and the
 * destination may be this very folder. */
static char **keyword_names(struct mailbox *box, uint32_t mask)
{
    if (mask == 0)
        return NULL;
    for (unsigned k = 0; k < MAILDIR_MAX_KEYWORDS; k++) {
        if ((mask & (1u << k)) != 0 && box->keywords.names[k] == NULL) {
            struct maildir_keywords fresh;
            char *path = xasprintf("%s/%s", box->dir, MAILDIR_KEYWORDS);
            if (maildir_keywords_read(box->dir_fd, path, &fresh, NULL)) {
                maildir_keywords_free(&box->keywords);
                box->keywords = fresh;
            }
            free(path);
            break;
        }
    }
    char **names = xcalloc(MAILDIR_MAX_KEYWORDS + 1, sizeof(*names));
    size_t n = 0;
    for (unsigned k = 0; k < MAILDIR_MAX_KEYWORDS; k++) {
        if ((mask & (1u << k)) != 0 && box->keywords.names[k] != NULL)
            names[n++] = xstrdup(box->keywords.names[k]);
    }
    return names;
}

static bool copy_bytes(int from, struct mailbox *dst, const char *to_path, bool durable,
                       struct petrel_error *err)
{
    int to = openat(dst->dir_fd, maildir_rel(dst, to_path), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC,
                    0600);
    if (to < 0)
        return petrel_error_set_errno(err, errno, "cannot create %s: %s", to_path, strerror(errno));
    char chunk[65536];
    uint64_t off = 0;
    bool ok = true;
    for (;;) {
        ssize_t r = pread(from, chunk, sizeof(chunk), (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            ok = petrel_error_set_errno(err, errno, "read: %s", strerror(errno));
            break;
        }
        if (r == 0)
            break;
        if (!fs_pwrite_all(to, chunk, (size_t)r, off)) {
            ok = petrel_error_set_errno(err, errno, "write %s: %s", to_path, strerror(errno));
            break;
        }
        off += (uint64_t)r;
    }
    if (ok && durable && fsync(to) != 0)
        ok = petrel_error_set_errno(err, errno, "fsync %s: %s", to_path, strerror(errno));
    if (close(to) != 0 && ok)
        ok = petrel_error_set_errno(err, errno, "close %s: %s", to_path, strerror(errno));
    if (!ok)
        unlinkat(dst->dir_fd, maildir_rel(dst, to_path), 0);
    return ok;
}

/* Phase 1 for one message: false with NOT_FOUND when it is gone from src. */
static bool stage_one(struct mailbox *src, uint32_t uid, struct mailbox *dst, bool keep_flags,
                      struct staged_copy *s, struct petrel_error *err)
{
    struct buf path = {0};
    bool ok = false;
    for (int attempt = 0; attempt < LINK_ATTEMPTS && !ok; attempt++) {
        int fd = maildir_message_fd(src, uid, &s->rec, &path, err);
        if (fd < 0)
            break;
        if (s->base == NULL) {
            struct buf base = {0};
            maildir_filename_new_base(maildir_names(dst), s->rec.size, s->rec.vsize, &base);
            s->base = buf_steal(&base);
            s->tmp_path = xasprintf("%s/tmp/%s", dst->dir, s->base);
        }
        if (linkat(src->dir_fd, maildir_rel(src, path.data), dst->dir_fd,
                   maildir_rel(dst, s->tmp_path), 0) == 0) {
            ok = true;
        } else if (errno == ENOENT) {
            /* renamed since the open: look it up again */
        } else {
            /* Another file system (EXDEV), or links not allowed here. */
            ok = copy_bytes(fd, dst, s->tmp_path, maildir_fsync_enabled(dst), err);
            if (ok && s->rec.internal_date > 0) {
                struct timespec ts[2] = {{(time_t)s->rec.internal_date, 0},
                                         {(time_t)s->rec.internal_date, 0}};
                utimensat(dst->dir_fd, maildir_rel(dst, s->tmp_path), ts, 0);
            }
            close(fd);
            if (!ok)
                break;
            continue;
        }
        close(fd);
        if (!ok && attempt + 1 == LINK_ATTEMPTS)
            petrel_error_set(err, PETREL_ERR_IO, "message UID %u keeps moving", uid);
    }
    buf_free(&path);
    if (!ok)
        return false;
    if (keep_flags) {
        s->keywords = keyword_names(src, s->rec.keywords);
    } else {
        s->rec.flags = 0;
    }
    s->rec.keywords = 0;
    s->rec.uid = 0;
    s->rec.filename = s->base;
    return true;
}

/* Phase 2: under dst's lock, into cur/ and the index. */
static bool commit_staged(struct mailbox *dst, struct staged_copy *staged, size_t count,
                          struct petrel_error *err)
{
    struct fileindex_txn *txn = fileindex_begin(dst->index, err);
    if (txn == NULL)
        return false;
    struct fileindex_record *added = xcalloc(count + 1, sizeof(*added));
    struct buf name = {0};
    struct maildir_cur_change *change = maildir_cur_change_begin(dst);
    bool ok = true;
    for (size_t i = 0; ok && i < count; i++) {
        struct staged_copy *s = &staged[i];
        uint32_t mask = 0;
        ok = maildir_resolve_keywords(dst, (const char *const *)s->keywords, &mask, err);
        if (!ok)
            break;
        s->rec.keywords = mask;
        maildir_disk_name(s->base, s->rec.flags, mask, &name);
        char *cur = xasprintf("%s/cur/%s", dst->dir, name.data);
        if (renameat(dst->dir_fd, maildir_rel(dst, s->tmp_path), dst->dir_fd,
                     maildir_rel(dst, cur)) != 0)
            ok = petrel_error_set_errno(err, errno, "rename into cur/: %s", strerror(errno));
        else
            s->cur_name = xstrdup(name.data);
        free(cur);
    }
    if (ok && maildir_cur_changes_need_fsync(dst)) {
        ok = maildir_fsync_sub(dst, "cur", err);
    }
    for (size_t i = 0; ok && i < count; i++) {
        added[i] = staged[i].rec;
        added[i].uid = fileindex_txn_append(txn, &staged[i].rec);
        if (added[i].uid == 0)
            ok = petrel_error_set(err, PETREL_ERR_IO, "the folder index cannot take more messages");
        staged[i].rec.uid = added[i].uid;
    }
    maildir_cur_change_end(dst, change, false);
    if (ok) {
        struct petrel_error uerr;
        if (!maildir_uidlist_write_added(dst, added, count, &uerr))
            log_warn(COMPONENT, "dovecot-uidlist not updated", "folder=%s error=\"%s\"", dst->dir,
                     uerr.message);
        /* From here a failure leaves the files in cur/ for the next sync:
         * whether the commit reached the disk is unknown, and a duplicate
         * is better than a loss. */
        maildir_cur_change_commit_on(txn, change);
        bool committed = fileindex_txn_commit(txn, err);
        maildir_cur_change_drop(change);
        if (!committed) {
            for (size_t i = 0; i < count; i++)
                staged[i].rec.uid = 0;
            ok = false;
        }
    } else {
        fileindex_txn_rollback(txn);
        maildir_cur_change_drop(change);
        for (size_t i = 0; i < count; i++) {
            if (staged[i].cur_name != NULL) {
                char *cur = xasprintf("%s/cur/%s", dst->dir, staged[i].cur_name);
                unlinkat(dst->dir_fd, maildir_rel(dst, cur), 0);
                free(cur);
            }
        }
    }
    buf_free(&name);
    free(added);
    return ok;
}

bool maildir_copy(struct mailbox *src, const uint32_t *uids, size_t uid_count, struct mailbox *dst,
                  bool keep_flags, uint32_t **new_uids, struct petrel_error *err)
{
    *new_uids = NULL;
    if (!maildir_ensure_synced(src, err) || !maildir_ensure_synced(dst, err) ||
        !fileindex_refresh(src->index, err))
        return false;
    struct staged_copy *staged = xcalloc(uid_count + 1, sizeof(*staged));
    size_t count = 0;
    bool ok = true;
    for (size_t i = 0; ok && i < uid_count; i++) {
        struct staged_copy *s = &staged[count];
        memset(s, 0, sizeof(*s));
        s->index = i;
        struct petrel_error serr;
        petrel_error_clear(&serr);
        if (stage_one(src, uids[i], dst, keep_flags, s, &serr)) {
            count++;
            continue;
        }
        if (s->tmp_path != NULL)
            unlinkat(dst->dir_fd, maildir_rel(dst, s->tmp_path), 0);
        staged_free(s);
        if (serr.code != PETREL_ERR_NOT_FOUND)
            ok = petrel_error_set(err, serr.code, "%s", serr.message);
        /* else: expunged from src, skipped (its slot in *new_uids is 0) */
    }
    if (ok && count > 0)
        ok = commit_staged(dst, staged, count, err);
    uint32_t *out = xcalloc(uid_count + 1, sizeof(*out));
    for (size_t i = 0; i < count; i++) {
        if (ok)
            out[staged[i].index] = staged[i].rec.uid;
        if (staged[i].cur_name == NULL)
            unlinkat(dst->dir_fd, maildir_rel(dst, staged[i].tmp_path), 0); /* never reached cur/ */
        staged_free(&staged[i]);
    }
    free(staged);
    if (!ok) {
        free(out);
        return false;
    }
    *new_uids = out;
    return true;
}

bool maildir_move(struct mailbox *src, const uint32_t *uids, size_t uid_count, struct mailbox *dst,
                  uint32_t **new_uids, struct petrel_error *err)
{
    if (!maildir_copy(src, uids, uid_count, dst, true, new_uids, err))
        return false;
    uint32_t *copied = xcalloc(uid_count + 1, sizeof(*copied));
    size_t copied_count = 0;
    for (size_t i = 0; i < uid_count; i++) {
        if ((*new_uids)[i] != 0)
            copied[copied_count++] = uids[i];
    }
    /* The copies are committed: from here a crash leaves duplicates. */
    const struct mailbox_flags_update deleted = {.mode = MAILBOX_FLAGS_ADD,
                                                 .flags = MAIL_FLAG_DELETED};
    uint32_t *expunged = NULL;
    size_t expunged_count = 0;
    bool ok =
        copied_count == 0 ||
        (maildir_update_flags(src, copied, copied_count, &deleted, NULL, NULL, NULL, NULL, err) &&
         maildir_expunge(src, copied, copied_count, &expunged, &expunged_count, err));
    free(expunged);
    free(copied);
    if (!ok) {
        /* The messages are in both folders; the caller reports the error
         * and the client sees them in both, never in neither. */
        free(*new_uids);
        *new_uids = NULL;
    }
    return ok;
}
