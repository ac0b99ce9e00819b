/* The ACL list index of one namespace of one owner: a row (folder,
 * identifier, rights) for every entry of every folder of the namespace that
 * has a dovecot-acl file, and for the namespace root (folder ""). LIST in a
 * shared namespace reads it to learn which of an owner's folders someone may
 * see without opening every folder's file (document 1 "ACL", docs/acl.md).
 *
 * On disk: "petrel-acl-index" at the namespace root in the owner's mail
 * directory, beside Dovecot's "dovecot-acl-list" (which holds only the
 * names of folders with non-owner lookup rights and is not written here):
 *
 *     PETREL-ACL-INDEX 1
 *     <folder> TAB <identifier> TAB <rights> LF
 *
 * Folder names are escaped: "\\" for a backslash, "\t", "\n", "\r", and
 * "\xHH" (two lower-case hex digits) for every other byte below 0x20 and
 * 0x7f; nothing else is escaped, so UTF-8 names stay readable. An empty
 * folder field is the root. Identifiers are the dovecot-acl file's
 * ("user=bob", "-group=staff"), rights the real letters in canonical order.
 * Rows are sorted by folder (bytes of the unescaped name), then as the ACL
 * file sorts identifiers; a folder's rows are exactly its file's entries.
 * Anything else in the file makes it unreadable as a whole (as a
 * dovecot-acl file): a reader then sees no rows and an error.
 *
 * Writes: acl_list_index_update() reads, changes and writes the index under
 * an exclusive flock on "petrel-acl-index.lock" at the namespace root; the
 * new index is written to a temporary name (fsynced unless mail.fsync is
 * never) and renamed over the old one, so a reader never sees half an index
 * and a crash leaves the old or the new one. Every write of a folder's dovecot-acl file takes this
 * lock inside its own (acl-store.h): the folder's lock first, then the namespace's. After each
 * write that changed the index, the owner's rows in the owner-discovery registry are synced
 * (acl-registry.h). */
#ifndef PETREL_STORAGE_ACL_ACL_LIST_INDEX_H
#define PETREL_STORAGE_ACL_ACL_LIST_INDEX_H

#include "core/buf.h"
#include "core/error.h"
#include "storage/acl/acl-list.h"
#include "storage/mail-storage.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define ACL_LIST_INDEX_FILE "petrel-acl-index"
#define ACL_LIST_INDEX_LOCK "petrel-acl-index.lock"
#define ACL_LIST_INDEX_HEADER "PETREL-ACL-INDEX 1"
/* Largest index read (a namespace of 100,000 folders with a few entries
 * each fits). */
#define ACL_LIST_INDEX_MAX (64 * 1024 * 1024)

struct acl_index_row {
    char *folder; /* "" for the namespace root */
    struct acl_entry entry;
};

/* Rows sorted by folder, then identifier; at most one row per (folder,
 * identifier), none without rights. */
struct acl_index {
    struct acl_index_row *rows;
    size_t count;
    size_t cap;
};

/* ---------- the text form (pure; fuzzed by fuzz-acl-list-index) ---------- */

/* Parses an index file into `idx` (emptied first). False with "line N: ..."
 * in `why` (a caller's buffer of `why_size` bytes) when the text is not a
 * valid index; `idx` is then empty. */
bool acl_list_index_parse(const char *data, size_t len, struct acl_index *idx, char *why,
                          size_t why_size);

/* Appends the file text of `idx` (the header, then one line per row). */
void acl_list_index_format(const struct acl_index *idx, struct buf *out);

/* ---------- rows in memory ---------- */

/* The rows of `folder` become the entries of `list` (none: the folder's
 * rows go). Returns whether the index changed. */
bool acl_list_index_set_folder(struct acl_index *idx, const char *folder,
                               const struct acl_list *list);

/* Removes the rows of `folder` and, when `sep` is not 0, of every folder
 * below it ("a" takes "a<sep>b" too). Returns whether any went. */
bool acl_list_index_remove_folder(struct acl_index *idx, const char *folder, char sep);

/* The rows of `old_name` and of every folder below it (`sep`) now name
 * `new_name` and the folders below that; rows already at the new names are
 * dropped first (a rename replaces nothing that exists, so they were
 * stale). Returns whether the index changed. */
bool acl_list_index_rename_folder(struct acl_index *idx, const char *old_name, const char *new_name,
                                  char sep);

/* The entries indexed for `folder`, into `out` (emptied first). Returns
 * whether the folder has any row. */
bool acl_list_index_folder(const struct acl_index *idx, const char *folder, struct acl_list *out);

/* Whether two indexes hold the same rows. */
bool acl_list_index_equal(const struct acl_index *a, const struct acl_index *b);

void acl_list_index_clear(struct acl_index *idx);
void acl_list_index_free(struct acl_index *idx);

/* ---------- on disk ---------- */

/* Reads the index of `ns` of `owner`: 1 read, 0 no index (`idx` empty), -1
 * when it cannot be read or is not valid (`err` says why; `idx` empty). */
int acl_list_index_read(struct mail_user *owner, const struct namespace_config *ns,
                        struct acl_index *idx, struct petrel_error *err);

/* The index file of `ns` of `owner` (NUL-terminated in `out`). */
bool acl_list_index_path(struct mail_user *owner, const struct namespace_config *ns,
                         struct buf *out, struct petrel_error *err);

/* Reads the index file at `path` (as acl_list_index_read()). */
int acl_list_index_read_file(const char *path, struct acl_index *idx, struct petrel_error *err);

/* Under the namespace's index lock: reads the index (none or an unreadable
 * one: empty, so a change rewrites it whole), lets `change` alter it (false:
 * nothing is written and the call fails with what `change` put in `err`),
 * writes it back when it changed and then, still under the lock, starts the
 * sync of the owner's registry rows (acl_registry_sync_owner).
 * The namespace root directory must exist (NOT_FOUND otherwise). */
bool acl_list_index_update(struct mail_user *owner, const struct namespace_config *ns,
                           bool (*change)(struct acl_index *idx, void *ctx,
                                          struct petrel_error *err),
                           void *ctx, struct petrel_error *err);

/* acl_list_index_update() with the rows of `folder` set to `list`. */
bool acl_list_index_write_folder(struct mail_user *owner, const struct namespace_config *ns,
                                 const char *folder, const struct acl_list *list,
                                 struct petrel_error *err);

/* ---------- what LIST reads ---------- */

/* Calls `visit` for every folder (never the root) of `ns` of `owner` whose
 * indexed rows give `who` the lookup right, in index order, with the rights
 * those rows give (acl_list_rights() over the folder's rows, the owner rule
 * not applied: `who` is someone else). Reads the index alone, never a
 * folder's file. A missing index has no folders: 0. Returns the number of
 * folders visited, or -1 when the index cannot be read (`err`). */
int acl_list_index_visible(struct mail_user *owner, const struct namespace_config *ns,
                           const struct acl_identity *who,
                           void (*visit)(void *arg, const char *folder, uint32_t rights), void *arg,
                           struct petrel_error *err);

/* An index kept between reads (a session's LIST of a shared namespace
 * asking the same owners again): re-read only when the file changed. */
struct acl_index_snapshot {
    struct acl_index idx;
    uint64_t stamp; /* inode, size, mtime of the file read; 0: none read yet */
    bool present;   /* the file existed when last looked at */
};

/* Brings `snap` up to date with the index of `ns` of `owner`: one `stat`,
 * and a read only when the file is not the one read last (inode, size or
 * modification time differ; an index is always replaced by rename, so a
 * change gives a new inode). 1 when an index is there, 0 none (rows
 * empty), -1 when it cannot be read (`err`; rows empty). */
int acl_list_index_refresh(struct mail_user *owner, const struct namespace_config *ns,
                           struct acl_index_snapshot *snap, struct petrel_error *err);
void acl_list_index_snapshot_free(struct acl_index_snapshot *snap);

/* The same over an index in memory (for a caller that read it once). */
size_t acl_list_index_visible_in(const struct acl_index *idx, const struct acl_identity *who,
                                 void (*visit)(void *arg, const char *folder, uint32_t rights),
                                 void *arg);

#endif
