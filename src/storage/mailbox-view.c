/* The storage API's session views (mail-storage.h "a session's view"):
 * the driver makes and syncs a view; every lookup (sequence numbers,
 * entries, keyword names, status) reads the snapshot the driver keeps in
 * its struct mailbox_view_common, so FETCH and SEARCH over many messages
 * make no call into the driver per message. */
#include "storage/mail-storage-private.h"

#include "core/bsearch-insert.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const struct mail_storage_vfuncs *view_v(const struct mailbox_view *view)
{
    return mailbox_common(mailbox_view_common(view)->box)->user->storage->v;
}

struct mailbox_view *mailbox_view_new(struct mailbox *box, struct petrel_error *err)
{
    return mailbox_common(box)->user->storage->v->view_new(box, err);
}

void mailbox_view_free(struct mailbox_view *view)
{
    if (view != NULL)
        view_v(view)->view_free(view);
}

bool mailbox_view_sync(struct mailbox_view *view, struct mailbox_view_changes *changes,
                       struct petrel_error *err)
{
    return view_v(view)->view_sync(view, true, changes, err);
}

bool mailbox_view_catch_up(struct mailbox_view *view, struct mailbox_view_changes *changes,
                           struct petrel_error *err)
{
    return view_v(view)->view_sync(view, false, changes, err);
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
