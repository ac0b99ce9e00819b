/* mail-storage.h over Maildir++: flag changes for a set of messages with
 * modseqs (mailbox_update_flags, IMAP STORE with RFC 7162 UNCHANGEDSINCE).
 *
 * All of it happens in one index transaction under the folder lock: the
 * modseq test sees the state the change is applied to, and another
 * process's STORE on the same messages waits. Each message's file is
 * renamed to its new flag letters before the index commits (a crash
 * between the two is healed by the next sync: the file name wins). */
#include "storage/maildir/maildir-private.h"

#include "core/fs-util.h"
#include "core/xalloc.h"
#include "storage/maildir/maildir-filename.h"

#include <stdlib.h>
#include <string.h>

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a;
    uint32_t y = *(const uint32_t *)b;
    return (x > y) - (x < y);
}

/* Sorted, without duplicates, in a fresh array. */
static uint32_t *unique_sorted(const uint32_t *uids, size_t count, size_t *out_count)
{
    uint32_t *u = xcalloc(count + 1, sizeof(*u));
    if (count > 0)
        memcpy(u, uids, count * sizeof(*u));
    qsort(u, count, sizeof(*u), cmp_u32);
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        if (n == 0 || u[n - 1] != u[i])
            u[n++] = u[i];
    }
    *out_count = n;
    return u;
}

/* The keyword mask the update names. REMOVE only looks names up: taking a
 * keyword away must not create it. */
static bool update_mask(struct mailbox *box, const struct mailbox_flags_update *upd, uint32_t *mask,
                        struct petrel_error *err)
{
    *mask = 0;
    if (upd->keywords == NULL || upd->keywords[0] == NULL)
        return true;
    if (upd->mode != MAILBOX_FLAGS_REMOVE)
        return maildir_resolve_keywords(box, upd->keywords, mask, err);
    for (size_t i = 0; upd->keywords[i] != NULL; i++) {
        int idx = maildir_keywords_find(&box->keywords, upd->keywords[i]);
        if (idx >= 0)
            *mask |= 1u << idx;
    }
    return true;
}

static void apply_mode(enum mailbox_flags_mode mode, uint32_t set_flags, uint32_t set_kw,
                       uint32_t *flags, uint32_t *keywords)
{
    switch (mode) {
    case MAILBOX_FLAGS_REPLACE:
        *flags = set_flags;
        *keywords = set_kw;
        break;
    case MAILBOX_FLAGS_ADD:
        *flags |= set_flags;
        *keywords |= set_kw;
        break;
    case MAILBOX_FLAGS_REMOVE:
        *flags &= ~set_flags;
        *keywords &= ~set_kw;
        break;
    }
}

/* Renames the message's file to its new flags. The name the index gives
 * can be stale (another program renamed it without the index knowing):
 * then the file is found by its base name. False when the file is gone. */
static bool rename_message(struct mailbox *box, const struct fileindex_record *r, uint32_t flags,
                           uint32_t keywords, bool expect, struct buf *from, struct buf *to)
{
    maildir_disk_name(r->filename, r->flags, r->keywords, from);
    maildir_disk_name(r->filename, flags, keywords, to);
    struct petrel_error rerr;
    if (maildir_rename_in_cur(box, "cur", from->data, to->data, &rerr)) {
        if (expect)
            maildir_watch_expect_rename(box, from->data, to->data);
        return true;
    }
    if (rerr.code != PETREL_ERR_NOT_FOUND)
        return false;
    /* Not maildir_message_fd(): it refreshes the index, which must not
     * move under an open transaction. */
    struct buf name = {0};
    bool ok = maildir_find_in_cur(box, r->filename, &name) &&
              maildir_rename_in_cur(box, "cur", name.data, to->data, &rerr);
    if (ok && expect)
        maildir_watch_expect_rename(box, name.data, to->data);
    buf_free(&name);
    return ok;
}

bool maildir_update_flags(struct mailbox *box, const uint32_t *uids, size_t uid_count,
                          const struct mailbox_flags_update *upd,
                          struct mailbox_flags_result **results, size_t *result_count,
                          uint32_t **failed, size_t *failed_count, struct petrel_error *err)
{
    if (results != NULL) {
        *results = NULL;
        *result_count = 0;
    }
    if (failed != NULL) {
        *failed = NULL;
        *failed_count = 0;
    }
    if ((upd->flags & ~MAIL_FLAG_ALL) != 0)
        return petrel_error_set(err, PETREL_ERR_INVALID, "unknown flag bits");
    if (!maildir_ensure_synced(box, err))
        return false;
    size_t n = 0;
    uint32_t *want = unique_sorted(uids, uid_count, &n);
    struct fileindex_txn *txn = fileindex_begin(box->index, err);
    uint32_t mask = 0;
    if (txn == NULL || !update_mask(box, upd, &mask, err)) {
        if (txn != NULL)
            fileindex_txn_rollback(txn);
        free(want);
        return false;
    }
    uint32_t *done = xcalloc(n + 1, sizeof(*done));
    size_t done_count = 0;
    uint32_t *refused = xcalloc(n + 1, sizeof(*refused));
    size_t refused_count = 0;
    struct buf from = {0};
    struct buf to = {0};
    bool lost = false;
    bool renamed = false;
    struct maildir_cur_change *change = maildir_cur_change_begin(box);
    for (size_t i = 0; i < n; i++) {
        const struct fileindex_record *r = fileindex_lookup_uid(box->index, want[i]);
        if (r == NULL)
            continue; /* expunged */
        if (upd->unchanged_since != 0 && r->modseq > upd->unchanged_since) {
            refused[refused_count++] = r->uid;
            continue;
        }
        uint32_t flags = r->flags;
        uint32_t keywords = r->keywords;
        apply_mode(upd->mode, upd->flags, mask, &flags, &keywords);
        if (flags != r->flags || keywords != r->keywords) {
            /* A caller taking results puts them into its view itself, so
             * its watch need not report these renames (see
             * maildir_watch_expect_rename). */
            if (!rename_message(box, r, flags, keywords, results != NULL, &from, &to)) {
                lost = true; /* expunged meanwhile: the next sync drops it */
                continue;
            }
            renamed = true;
            fileindex_txn_set_flags(txn, r->uid, flags, keywords);
        }
        done[done_count++] = r->uid;
    }
    maildir_cur_change_end(box, change, lost);
    buf_free(&from);
    buf_free(&to);
    free(want);
    bool ok = true;
    if (renamed && maildir_flag_renames_need_fsync(box)) {
        ok = maildir_fsync_sub(box, "cur", err);
    }
    if (ok) {
        maildir_cur_change_commit_on(txn, change);
        ok = fileindex_txn_commit(txn, err);
    } else {
        /* The renamed files now name flags the index does not: the next
         * sync takes them from the names. */
        fileindex_txn_rollback(txn);
    }
    maildir_cur_change_drop(change);
    if (!ok)
        maildir_watch_distrust(box); /* renamed files the view does not know */
    if (ok && results != NULL) {
        /* The committed view holds the new modseqs. */
        struct mailbox_flags_result *res = xcalloc(done_count + 1, sizeof(*res));
        size_t res_count = 0;
        for (size_t i = 0; i < done_count; i++) {
            const struct fileindex_record *r = fileindex_lookup_uid(box->index, done[i]);
            if (r == NULL)
                continue;
            res[res_count++] = (struct mailbox_flags_result){
                .uid = r->uid, .flags = r->flags, .keywords = r->keywords, .modseq = r->modseq};
        }
        *results = res;
        *result_count = res_count;
    }
    if (ok && failed != NULL) {
        *failed = refused;
        *failed_count = refused_count;
        refused = NULL;
    }
    free(refused);
    free(done);
    return ok;
}
