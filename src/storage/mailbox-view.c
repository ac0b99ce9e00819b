/* The storage API's session views (mail-storage.h "a session's view"):
 * the driver makes and syncs a view; every lookup (sequence numbers,
 * entries, keyword names, status) reads the snapshot the driver keeps in
 * its struct mailbox_view_common, so FETCH and SEARCH over many messages
 * make no call into the driver per message. */
#include "storage/mail-storage-private.h"

#include "core/bsearch-insert.h"
#include "core/xalloc.h"
#include "storage/mailbox-pvt.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const struct mail_storage_vfuncs *view_v(const struct mailbox_view *view)
{
    return mailbox_common(mailbox_view_common(view)->box)->user->storage->v;
}

/* A reader with private \Seen (mailbox-pvt.h): the entries show the
 * reader's \Seen; the folder's own is kept aside for the driver. */
static void pvt_overlay(struct mailbox_view *view)
{
    struct mailbox_view_common *c = mailbox_view_common(view);
    free(c->pvt_shared);
    c->pvt_shared = NULL;
    c->pvt_shared_count = 0;
    if (!mailbox_pvt_active(c->box))
        return;
    const struct mailbox_pvt *p = mailbox_pvt_get(c->box);
    if (p == NULL)
        return;
    c->pvt_shared = xcalloc(c->count / 8 + 1, 1);
    c->pvt_shared_count = c->count;
    for (size_t i = 0; i < c->count; i++) {
        struct mailbox_view_entry *e = &c->entries[i];
        if ((e->flags & MAIL_FLAG_SEEN) != 0)
            c->pvt_shared[i / 8] |= (uint8_t)(1u << (i % 8));
        e->flags &= ~(uint32_t)MAIL_FLAG_SEEN;
        if (mailbox_pvt_has(p, e->uid))
            e->flags |= MAIL_FLAG_SEEN;
    }
}

/* Gives the driver back the folder's own \Seen before it compares its
 * snapshot with the index (else each private difference would look like
 * a change at every sync). */
static void pvt_restore(struct mailbox_view *view)
{
    struct mailbox_view_common *c = mailbox_view_common(view);
    if (c->pvt_shared == NULL || c->pvt_shared_count != c->count)
        return;
    for (size_t i = 0; i < c->count; i++) {
        struct mailbox_view_entry *e = &c->entries[i];
        e->flags &= ~(uint32_t)MAIL_FLAG_SEEN;
        if ((c->pvt_shared[i / 8] & (1u << (i % 8))) != 0)
            e->flags |= MAIL_FLAG_SEEN;
    }
}

struct mailbox_view *mailbox_view_new(struct mailbox *box, struct petrel_error *err)
{
    struct mailbox_view *view = mailbox_common(box)->user->storage->v->view_new(box, err);
    if (view != NULL)
        pvt_overlay(view);
    return view;
}

void mailbox_view_free(struct mailbox_view *view)
{
    if (view == NULL)
        return;
    free(mailbox_view_common(view)->pvt_shared);
    mailbox_view_common(view)->pvt_shared = NULL;
    view_v(view)->view_free(view);
}

static bool view_sync(struct mailbox_view *view, bool refresh, struct mailbox_view_changes *changes,
                      struct petrel_error *err)
{
    pvt_restore(view);
    bool ok = view_v(view)->view_sync(view, refresh, changes, err);
    pvt_overlay(view);
    return ok;
}

bool mailbox_view_sync(struct mailbox_view *view, struct mailbox_view_changes *changes,
                       struct petrel_error *err)
{
    return view_sync(view, true, changes, err);
}

bool mailbox_view_catch_up(struct mailbox_view *view, struct mailbox_view_changes *changes,
                           struct petrel_error *err)
{
    return view_sync(view, false, changes, err);
}

bool mailbox_view_note_flags(struct mailbox_view *view, const struct mailbox_flags_result *results,
                             size_t count)
{
    return view_v(view)->view_note_flags(view, results, count);
}

void mailbox_view_changes_free(struct mailbox_view_changes *changes)
{
    free(changes->expunged_seqs);
    free(changes->expunged_uids);
    free(changes->changed_seqs);
    memset(changes, 0, sizeof(*changes));
}

/* ---------- lookups in the snapshot ---------- */

size_t mailbox_view_count(const struct mailbox_view *view)
{
    return mailbox_view_common(view)->count;
}

const struct mailbox_view_entry *mailbox_view_at(const struct mailbox_view *view, uint32_t seq)
{
    const struct mailbox_view_common *c = mailbox_view_common(view);
    return seq >= 1 && seq <= c->count ? &c->entries[seq - 1] : NULL;
}

uint32_t mailbox_view_seq(const struct mailbox_view *view, uint32_t uid)
{
    const struct mailbox_view_common *c = mailbox_view_common(view);
    size_t lo = bsearch_u32_lower(c->entries, c->count, sizeof(*c->entries),
                                  offsetof(struct mailbox_view_entry, uid), uid);
    return lo < c->count && c->entries[lo].uid == uid ? (uint32_t)(lo + 1) : 0;
}

uint32_t mailbox_view_seq_hint(const struct mailbox_view *view, uint32_t uid, uint32_t hint)
{
    const struct mailbox_view_common *c = mailbox_view_common(view);
    if (hint >= 1 && hint <= c->count && c->entries[hint - 1].uid == uid)
        return hint;
    return mailbox_view_seq(view, uid);
}

const char *mailbox_view_keyword_name(const struct mailbox_view *view, unsigned idx)
{
    return idx < MAILBOX_MAX_KEYWORDS ? mailbox_view_common(view)->keyword_names[idx] : NULL;
}

void mailbox_view_get_status(const struct mailbox_view *view, struct mailbox_view_status *out)
{
    const struct mailbox_view_common *c = mailbox_view_common(view);
    memset(out, 0, sizeof(*out));
    out->uid_validity = c->uid_validity;
    out->uid_next = c->uid_next;
    out->highest_modseq = c->highest_modseq;
    out->messages = (uint32_t)c->count;
    for (size_t i = 0; i < c->count; i++) {
        if ((c->entries[i].flags & MAIL_FLAG_SEEN) != 0)
            continue;
        out->unseen++;
        if (out->first_unseen_seq == 0)
            out->first_unseen_seq = (uint32_t)(i + 1);
    }
    for (unsigned k = 0; k < MAILBOX_MAX_KEYWORDS; k++) {
        if (c->keyword_names[k] == NULL)
            out->keywords_creatable = true;
    }
}
