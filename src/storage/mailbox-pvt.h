/* Private \Seen (Dovecot's INDEXPVT) for readers of shared and public
 * folders: a namespace with `index_private` keeps, for each reader
 * (a session's user) of each of its folders, the UIDs that reader has
 * seen, in a file under the reader's own directory, so two readers of one
 * folder do not mark each other's mail read and the folder's own \Seen
 * (the owner's) is never changed through them. Only \Seen is private,
 * as Dovecot keeps it (its private flags mask is \Seen); the right to keep
 * it is still the ACL's `s`.
 *
 * File: <index_private expanded for the reader>/<owner or namespace
 * slug>/<folder GUID>.seen, replaced whole (write to a temporary name,
 * rename); changes read-change-write under an exclusive flock on
 * <folder GUID>.lock beside it, so two sessions of one reader lose no
 * change. The GUID names the folder, so a rename keeps the state and no
 * folder name becomes a path. Layout (little-endian):
 *     "PVTSEEN1"  u32 uidvalidity  u32 count  count x u32 UIDs ascending
 * A file of another UIDVALIDITY, or one that is not valid, counts as no
 * message seen (and is logged when invalid). */
#ifndef PETREL_STORAGE_MAILBOX_PVT_H
#define PETREL_STORAGE_MAILBOX_PVT_H

#include "core/error.h"
#include "storage/mail-storage.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MAILBOX_PVT_MAGIC "PVTSEEN1"
/* Largest file read: 16 M UIDs. */
#define MAILBOX_PVT_MAX_BYTES (64u * 1024 * 1024)

/* A reader's seen set of one folder as last read. */
struct mailbox_pvt {
    char *path; /* the .seen file */
    char *lock; /* the .lock file */
    uint32_t uid_validity;
    uint32_t *uids; /* ascending */
    size_t count;
    size_t cap;
    uint64_t stamp; /* of the file read (0: none) */
};

/* Parses a file's bytes (pure; fuzzed by fuzz-pvt-seen). False with a
 * reason in `err` when not valid; *uids is then NULL. The UIDs must be
 * strictly ascending and non-zero. */
bool mailbox_pvt_parse(const void *data, size_t len, uint32_t *uid_validity, uint32_t **uids,
                       size_t *count, struct petrel_error *err);

/* Whether `box` keeps \Seen privately: a session's user on a folder of a
 * shared or public namespace with `index_private`. */
bool mailbox_pvt_active(const struct mailbox *box);

/* The handle's private set, read (or re-read when the file changed since:
 * one stat) now; NULL when not active or on an error (logged: then the
 * folder's own \Seen shows). Owned by the handle. */
struct mailbox_pvt *mailbox_pvt_get(struct mailbox *box);

/* Whether `uid` is seen in `p`. */
bool mailbox_pvt_has(const struct mailbox_pvt *p, uint32_t uid);

/* Marks `uids` seen (`seen`) or not, under the lock. */
bool mailbox_pvt_set(struct mailbox *box, const uint32_t *uids, size_t count, bool seen,
                     struct petrel_error *err);

void mailbox_pvt_free(struct mailbox_pvt *p);

#endif
