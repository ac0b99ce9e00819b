/* mail-storage.h over Maildir++: a session's view of a folder
 * (mailbox_view_*, the IMAP selected state).
 *
 * The view is a private copy of the index records (UID, flags, keywords,
 * modseq, sizes, date) and of the keyword names, so nothing another process
 * does reaches it before mailbox_view_sync(). A sync brings the index up to
 * date (a directory scan first when cur/ or new/ changed behind Petrel's
 * back) and walks old and new records side by side, both in ascending UID
 * order: records only in the old view were expunged, records in both with a
 * different modseq or flags changed, records above the old highest UID are
 * new. */
#include "storage/maildir/maildir-private.h"

#include "core/xalloc.h"
#include "storage/maildir/maildir-filename.h"

#include <stdlib.h>
#include <string.h>

struct mailbox_view {
    struct mailbox_view_common c; /* first: the snapshot (mail-storage-private.h) */
    /* The index as the last full walk saw it (see index_unchanged). */
    struct fileindex_header walked;
    size_t walked_count;
};

static struct mailbox_view_entry entry_of(const struct fileindex_record *r)
{
    return (struct mailbox_view_entry){
        .uid = r->uid,
        .flags = r->flags,
        .keywords = r->keywords,
        .modseq = r->modseq,
        .size = r->size,
        .vsize = r->vsize,
        .internal_date = r->internal_date,
    };
}

/* Whether every keyword the index's records carry has a name already.
 * dovecot-keywords only ever gains names (an index, once given, keeps its
 * name), and a name reaches the file before any record uses it, so while
 * this holds the file has nothing the view needs. */
static bool keywords_all_named(struct mailbox *box)
{
    uint32_t used = 0;
    size_t n = fileindex_count(box->index);
    for (size_t i = 0; i < n; i++)
        used |= fileindex_record_at(box->index, i)->keywords;
    for (unsigned k = 0; k < 26 && used != 0; k++) {
        if ((used & (1u << k)) != 0 && box->keywords.names[k] == NULL)
            return false;
    }
    return true;
}

/* Re-reads dovecot-keywords into the mailbox (another process may have
 * added names) when the index moved on and carries a keyword without a
 * name; keeps the old list when the file cannot be read. Names another
 * process defined but no message carries yet show from the next SELECT. */
static bool reload_keywords(struct mailbox *box, struct petrel_error *err)
{
    const struct fileindex_header *now = fileindex_get_header(box->index);
    if (box->keywords_seen.ok && memcmp(now, &box->keywords_seen.hdr, sizeof(*now)) == 0)
        return true;
    if (box->keywords_seen.ok && keywords_all_named(box)) {
        box->keywords_seen.hdr = *now;
        return true;
    }
    struct maildir_keywords fresh;
    char *path = xasprintf("%s/%s", box->dir, MAILDIR_KEYWORDS);
    bool ok = maildir_keywords_read(box->dir_fd, path, &fresh, err);
    free(path);
    if (!ok)
        return false;
    maildir_keywords_free(&box->keywords);
    box->keywords = fresh;
    box->keywords_seen.ok = true;
    box->keywords_seen.hdr = *now;
    return true;
}

/* Takes the mailbox's keyword names into the view; true when any differs. */
static bool adopt_keyword_names(struct mailbox_view *view)
{
    bool changed = false;
    for (unsigned k = 0; k < MAILBOX_MAX_KEYWORDS; k++) {
        const char *now = view->c.box->keywords.names[k];
        char *had = view->c.keyword_names[k];
        if ((now == NULL) == (had == NULL) && (now == NULL || strcmp(now, had) == 0))
            continue;
        free(had);
        view->c.keyword_names[k] = now != NULL ? xstrdup(now) : NULL;
        changed = true;
    }
    return changed;
}

static void adopt_header(struct mailbox_view *view)
{
    const struct fileindex_header *h = fileindex_get_header(view->c.box->index);
    view->c.uid_validity = h->uid_validity;
    view->c.uid_next = h->next_uid;
    view->c.highest_modseq = h->highest_modseq;
}

/* The index as the last full walk saw it: records and header. */
static void note_walked(struct mailbox_view *view)
{
    view->walked = *fileindex_get_header(view->c.box->index);
    view->walked_count = fileindex_count(view->c.box->index);
}

/* Whether the index holds the same records as at the last full walk, so
 * walking it again would change nothing in the view: every change to what
 * the view keeps moves the header or the count. An append raises next_uid,
 * a flag change gets a modseq above highest_modseq, an expunge lowers the
 * count, and a rebuild (replace_all) or a fold writes a base with a new
 * lineage. O(1): a NOOP on an unchanged folder no longer costs O(messages). */
static bool index_unchanged(const struct mailbox_view *view)
{
    const struct fileindex *fi = view->c.box->index;
    const struct fileindex_header *h = fileindex_get_header(fi);
    const struct fileindex_header *w = &view->walked;
    return fileindex_count(fi) == view->walked_count && h->uid_validity == w->uid_validity &&
           h->next_uid == w->next_uid && h->highest_modseq == w->highest_modseq &&
           h->lineage == w->lineage && h->cache_reset_id == w->cache_reset_id &&
           memcmp(h->guid, w->guid, sizeof(h->guid)) == 0;
}

/* The index as it is now, with the view's identity and keywords. */
static bool refresh_box(struct mailbox *box, struct petrel_error *err)
{
    return maildir_ensure_synced(box, err) && maildir_sync(box, false, err) &&
           fileindex_refresh(box->index, err) && reload_keywords(box, err);
}

static void push_entry(struct mailbox_view_entry **arr, size_t *count, size_t *cap,
                       struct mailbox_view_entry e)
{
    *arr = xgrow(*arr, cap, *count + 1, sizeof(**arr));
    (*arr)[(*count)++] = e;
}

static void snapshot_all(struct mailbox_view *view)
{
    struct fileindex *fi = view->c.box->index;
    size_t n = fileindex_count(fi);
    /* One allocation for the whole snapshot (SELECT), not a chain of
     * reallocations while it fills. */
    if (n > 0)
        view->c.entries = xgrow(view->c.entries, &view->c.cap, n, sizeof(*view->c.entries));
    view->c.count = 0;
    for (size_t i = 0; i < n; i++)
        view->c.entries[view->c.count++] = entry_of(fileindex_record_at(fi, i));
    adopt_header(view);
    note_walked(view);
    adopt_keyword_names(view);
}

struct mailbox_view *maildir_view_new(struct mailbox *box, struct petrel_error *err)
{
    if (!refresh_box(box, err))
        return NULL;
    struct mailbox_view *view = xcalloc(1, sizeof(*view));
    view->c.box = box;
    snapshot_all(view);
    maildir_watch_view_synced(box);
    return view;
}

void maildir_view_free(struct mailbox_view *view)
{
    if (view == NULL)
        return;
    for (unsigned k = 0; k < MAILBOX_MAX_KEYWORDS; k++)
        free(view->c.keyword_names[k]);
    free(view->c.entries);
    free(view);
}

static void append_u32(uint32_t **arr, size_t *count, size_t *cap, uint32_t v)
{
    *arr = xgrow(*arr, cap, *count + 1, sizeof(**arr));
    (*arr)[(*count)++] = v;
}

/* The difference between the view and the handle's index, taken into the
 * view; with `refresh` the handle is brought up to date with the disk
 * first. */
bool maildir_view_sync(struct mailbox_view *view, bool refresh,
                       struct mailbox_view_changes *changes, struct petrel_error *err)
{
    memset(changes, 0, sizeof(*changes));
    struct mailbox *box = view->c.box;
    if (refresh && !maildir_dir_current(box)) {
        /* Deleted, renamed or replaced: the handle still works on the old
         * directory, but the folder of this name is another one now. */
        changes->uidvalidity_changed = true;
        changes->exists = (uint32_t)view->c.count;
        return true;
    }
    if (refresh && !refresh_box(box, err))
        return false;
    struct fileindex *fi = box->index;
    if (fileindex_get_header(fi)->uid_validity != view->c.uid_validity) {
        /* Other UIDs: nothing of the old view can be related to them. */
        snapshot_all(view);
        changes->uidvalidity_changed = true;
        changes->exists = (uint32_t)view->c.count;
        maildir_watch_view_synced(box);
        return true;
    }
    if (index_unchanged(view)) {
        /* Nothing to report but the keyword names (dovecot-keywords is
         * not part of the index). The view already equals the index; our
         * own STOREs went in through mailbox_view_note_flags, which leaves
         * `walked` behind, so they take the walk below once. */
        adopt_header(view);
        changes->keywords_changed = adopt_keyword_names(view);
        changes->exists = (uint32_t)view->c.count;
        maildir_watch_view_synced(box);
        return true;
    }
    uint32_t old_max = view->c.count > 0 ? view->c.entries[view->c.count - 1].uid : 0;
    size_t n = fileindex_count(fi);
    /* The new view holds at most the index's records: one allocation. */
    size_t next_cap = n > 0 ? n : 1;
    struct mailbox_view_entry *next = xmalloc(next_cap * sizeof(*next));
    size_t next_count = 0;
    size_t expunged_cap = 0;
    size_t changed_cap = 0;
    size_t uids_cap = 0;
    size_t seqs_count = 0;
    size_t o = 0; /* old view */
    size_t i = 0; /* index */
    while (o < view->c.count || i < n) {
        const struct fileindex_record *r = i < n ? fileindex_record_at(fi, i) : NULL;
        const struct mailbox_view_entry *old = o < view->c.count ? &view->c.entries[o] : NULL;
        if (old != NULL && (r == NULL || old->uid < r->uid)) {
            append_u32(&changes->expunged_uids, &changes->expunged_count, &uids_cap, old->uid);
            append_u32(&changes->expunged_seqs, &seqs_count, &expunged_cap, (uint32_t)(o + 1));
            o++;
            continue;
        }
        if (old != NULL && old->uid == r->uid) {
            struct mailbox_view_entry e = entry_of(r);
            if (e.modseq != old->modseq || e.flags != old->flags || e.keywords != old->keywords)
                append_u32(&changes->changed_seqs, &changes->changed_count, &changed_cap,
                           (uint32_t)(next_count + 1));
            push_entry(&next, &next_count, &next_cap, e);
            o++;
            i++;
            continue;
        }
        /* Only in the index. Above the old highest UID: new. Below it (an
         * index rebuild took a UID from a foreign dovecot-uidlist) it
         * cannot be inserted without renumbering: the next SELECT shows it. */
        if (r->uid > old_max) {
            push_entry(&next, &next_count, &next_cap, entry_of(r));
            changes->new_count++;
        }
        i++;
    }
    /* Descending: each EXPUNGE only renumbers the messages above it. */
    for (size_t a = 0, b = seqs_count; a + 1 < b; a++, b--) {
        uint32_t t = changes->expunged_seqs[a];
        changes->expunged_seqs[a] = changes->expunged_seqs[b - 1];
        changes->expunged_seqs[b - 1] = t;
    }
    free(view->c.entries);
    view->c.entries = next;
    view->c.count = next_count;
    view->c.cap = next_cap;
    adopt_header(view);
    note_walked(view);
    changes->keywords_changed = adopt_keyword_names(view);
    changes->exists = (uint32_t)view->c.count;
    maildir_watch_view_synced(box);
    return true;
}

bool maildir_view_note_flags(struct mailbox_view *view, const struct mailbox_flags_result *results,
                             size_t count)
{
    for (size_t i = 0; i < count; i++) {
        uint32_t seq = mailbox_view_seq(view, results[i].uid);
        if (seq == 0)
            continue;
        struct mailbox_view_entry *e = &view->c.entries[seq - 1];
        e->flags = results[i].flags;
        e->keywords = results[i].keywords;
        e->modseq = results[i].modseq;
        if (results[i].modseq > view->c.highest_modseq)
            view->c.highest_modseq = results[i].modseq;
    }
    return adopt_keyword_names(view);
}
