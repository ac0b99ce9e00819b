/* A folder's ACL on disk: the dovecot-acl file in the folder's directory
 * (the namespace root's in the root directory, which maildir shares with
 * INBOX, as Dovecot does), read whole and replaced whole.
 *
 * Changes go through acl_store_update(): read, change, write under an
 * exclusive flock on "petrel-acl.lock" beside the file, the new file
 * written to a temporary name and renamed over the old one, so a reader
 * never sees half a file and two writers never lose each other's change.
 * (Dovecot takes a dot-lock "dovecot-acl.lock" for the same; Petrel's lock
 * has its own name so that a Petrel lock file is never taken by Dovecot
 * for a live lock of its own.) */
#ifndef PETREL_STORAGE_ACL_ACL_STORE_H
#define PETREL_STORAGE_ACL_ACL_STORE_H

#include "core/buf.h"
#include "core/error.h"
#include "storage/acl/acl-list.h"
#include "storage/mail-storage.h"

#include <stdbool.h>
#include <stdint.h>

#define ACL_STORE_FILE "dovecot-acl"
#define ACL_STORE_LOCK "petrel-acl.lock"

/* The directory holding the ACL of folder `name` of `ns` ("" for the
 * namespace root). */
bool acl_store_dir(struct mail_user *user, const struct namespace_config *ns, const char *name,
                   struct buf *out, struct petrel_error *err);

/* What a file looked like when read: its inode, size and change time (0:
 * no file). Equal stamps mean the same content. */
uint64_t acl_store_stamp_of(const char *dir);

/* Reads the ACL in `dir` into `list`: 1 read, 0 no file (list empty), -1
 * on a file that cannot be read or is not valid (`err` says why: IO, or
 * INVALID "line N: ..."; the list is then empty). *stamp (may be NULL) is
 * the state read. */
int acl_store_read(const char *dir, struct acl_list *list, uint64_t *stamp,
                   struct petrel_error *err);

/* Writes `list` as the ACL in `dir` (an empty list removes the file). */
bool acl_store_write(const char *dir, const struct acl_list *list, struct petrel_error *err);

/* Under the lock: reads the ACL in `dir` (none: an empty list), lets
 * `change` alter it (false: leave it, the call fails with what `change`
 * put in `err`), writes it back when it changed. */
bool acl_store_update(const char *dir,
                      bool (*change)(struct acl_list *list, void *ctx, struct petrel_error *err),
                      void *ctx, struct petrel_error *err);

/* One identifier's change, as SETACL/DELETEACL and the API's acl/set and
 * acl/delete make it: its entry removed, or its rights set, added or taken
 * away (`mode`). */
struct acl_change {
    struct acl_id id;
    uint32_t rights;
    enum acl_modify mode;
    bool remove;
};

/* acl_store_update() with one change. */
bool acl_store_change(const char *dir, const struct acl_change *change, struct petrel_error *err);

/* ---------- by folder, with the namespace's ACL list index ---------- */

/* acl_store_update() on the ACL of folder `name` ("" the root) of `ns` of
 * `owner` (the user whose namespace holds it), and, still under the
 * folder's ACL lock, the folder's rows in the namespace's ACL list index
 * (acl-list-index.h) set to what the file now holds, which syncs the
 * sharing registry. The rows are written even when the file did not change,
 * so a write repairs an index that had gone stale. A folder whose ACL is
 * the root's file (INBOX in Maildir++) has its rows under both names. The
 * index failing to be written is logged, not failed: the file is the
 * authority and acl/rebuild reseeds the index from it. */
bool acl_store_update_folder(struct mail_user *owner, const struct namespace_config *ns,
                             const char *name,
                             bool (*change)(struct acl_list *list, void *ctx,
                                            struct petrel_error *err),
                             void *ctx, struct petrel_error *err);

/* acl_store_update_folder() with one change. */
bool acl_store_change_folder(struct mail_user *owner, const struct namespace_config *ns,
                             const char *name, const struct acl_change *change,
                             struct petrel_error *err);

/* acl_store_update_folder() replacing the whole list (inheritance at
 * creation, acl/set). */
bool acl_store_write_folder(struct mail_user *owner, const struct namespace_config *ns,
                            const char *name, const struct acl_list *list,
                            struct petrel_error *err);

#endif
