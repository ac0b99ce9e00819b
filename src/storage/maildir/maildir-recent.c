/* \Recent for Maildir++ folders (see mailbox_recent_claim in
 * mail-storage.h). The mark — the first UID no read-write session has
 * been told of — lives in its own small file beside the index rather than
 * in the index header: it changes on most SELECTs, is harmless to lose (a
 * message is then recent once more), and so needs neither an index
 * transaction record nor an fsync. */
#include "storage/maildir/maildir-private.h"

#include "core/fs-util.h"

#include <stdio.h>
#include <stdlib.h>

#define MAILDIR_RECENT "petrel-recent"

/* The stored mark; 1 (every message recent once) when there is none or it
 * cannot be read. */
static uint32_t read_mark(const struct mailbox *box)
{
    char *data = NULL;
    size_t len = 0;
    struct petrel_error ignored;
    if (!fs_read_file_at(box->dir_fd, MAILDIR_RECENT, 32, &data, &len, &ignored))
        return 1;
    char *end = NULL;
    unsigned long v = strtoul(data, &end, 10);
    bool ok = end != data && (*end == '\n' || *end == '\0') && v >= 1 && v <= UINT32_MAX;
    free(data);
    return ok ? (uint32_t)v : 1;
}

uint32_t mailbox_recent_peek(struct mailbox *box)
{
    return read_mark(box);
}

bool mailbox_recent_claim(struct mailbox *box, uint32_t *first, uint32_t *until,
                          struct petrel_error *err)
{
    /* Nothing new since the mark as the handle last read the index (the
     * caller has just synced it): no lock needed, the common SELECT. */
    uint32_t seen_next = fileindex_get_header(box->index)->next_uid;
    uint32_t seen_mark = read_mark(box);
    if (seen_mark >= seen_next) {
        *first = *until = seen_mark;
        return true;
    }
    /* The folder lock orders claims: two sessions never both take a UID. */
    struct fileindex_txn *txn = fileindex_begin(box->index, err);
    if (txn == NULL)
        return false;
    uint32_t next = fileindex_get_header(box->index)->next_uid;
    uint32_t mark = read_mark(box);
    *first = mark;
    *until = next > mark ? next : mark;
    bool ok = true;
    if (next > mark) {
        char text[16];
        int n = snprintf(text, sizeof(text), "%u\n", (unsigned)next);
        ok = fs_write_atomic_at(box->dir_fd, MAILDIR_RECENT, text, (size_t)n, false, err);
    }
    fileindex_txn_rollback(txn);
    return ok;
}

uint32_t maildir_recent_count(struct mailbox *box)
{
    uint32_t mark = read_mark(box);
    size_t lo = 0, hi = fileindex_count(box->index);
    while (lo < hi) { /* first record with uid >= mark */
        size_t mid = lo + (hi - lo) / 2;
        if (fileindex_record_at(box->index, mid)->uid < mark)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (uint32_t)(fileindex_count(box->index) - lo);
}
