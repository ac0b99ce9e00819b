/* The mail store every front end shares (operator API, IMAP, POP3, LMTP):
 * users, namespaces, folders and messages over Maildir++ with the fileindex.
 *
 * Layout of a namespace root (the expanded `location`):
 *   <root>/{cur,new,tmp}                INBOX
 *   <root>/.<L1>.<L2>/{cur,new,tmp}     folder L1/L2 (levels in modified UTF-7)
 *   <folder>/maildirfolder              marks a Maildir++ subfolder
 *   <folder>/dovecot-uidlist            file name <-> UID (Dovecot v3)
 *   <folder>/dovecot-keywords           keyword letters
 *   <folder>/petrel.index*              the fileindex
 *   <root>/subscriptions                subscriptions (Dovecot v2)
 *   <root>/petrel-special-use           per-user special-use overrides
 *
 * Folder names on this API are UTF-8 with the namespace's separator; the
 * personal namespace has INBOX. Every function validates names and users
 * (no "..", no '/' in a user, ...) before building a path.
 *
 * Errors: PETREL_ERR_NOT_FOUND (no such folder / namespace), _EXISTS,
 * _INVALID (bad name, INBOX rename), _UNSUPPORTED, _IO. Ownership: the
 * storage owns users it hands out (cached per name); mailboxes are owned by
 * the caller and closed with mailbox_close(). */
#ifndef PETREL_STORAGE_MAIL_STORAGE_H
#define PETREL_STORAGE_MAIL_STORAGE_H

#include "core/error.h"
#include "core/metrics.h"
#include "storage/namespace.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mail_storage;
struct mail_user;
struct mailbox;

struct mail_storage *mail_storage_new(const struct mail_config *cfg,
                                      struct metrics_registry *metrics);
void mail_storage_free(struct mail_storage *storage);
const struct mail_config *mail_storage_config(const struct mail_storage *storage);

/* The user (validated name, resolved home). Owned by the storage. */
struct mail_user *mail_user_get(struct mail_storage *storage, const char *username,
                                struct petrel_error *err);
const char *mail_user_name(const struct mail_user *user);
struct mail_storage *mail_user_storage(const struct mail_user *user);
const char *mail_user_home(const struct mail_user *user);
/* The resolved root directory of namespace `ns` for this user. */
bool mail_user_namespace_root(const struct mail_user *user, const struct namespace_config *ns,
                              struct buf *out, struct petrel_error *err);
/* Namespace by slug; NOT_FOUND "namespace not configured: <slug>". */
const struct namespace_config *mail_user_namespace(const struct mail_user *user,
                                                   const char *slug, struct petrel_error *err);

/* ---------- folders ---------- */

/* Every folder of the namespace (INBOX first for personal, then sorted). */
bool mail_folder_list(struct mail_user *user, const struct namespace_config *ns, char ***names,
                      size_t *count, struct petrel_error *err);
void mail_folder_list_free(char **names, size_t count);
bool mail_folder_exists(struct mail_user *user, const struct namespace_config *ns,
                        const char *name);
/* Creates the folder (GUID and UIDVALIDITY stamped now). EXISTS when present. */
bool mail_folder_create(struct mail_user *user, const struct namespace_config *ns,
                        const char *name, struct petrel_error *err);
/* Removes the folder with its messages, index and ACL file (children stay).
 * INBOX cannot be deleted (INVALID). */
bool mail_folder_delete(struct mail_user *user, const struct namespace_config *ns,
                        const char *name, struct petrel_error *err);
/* Renames within a namespace, children too; GUID kept. INBOX refused. */
bool mail_folder_rename(struct mail_user *user, const struct namespace_config *ns,
                        const char *old_name, const char *new_name, struct petrel_error *err);

/* ---------- one folder ---------- */

struct mailbox *mailbox_open(struct mail_user *user, const struct namespace_config *ns,
                             const char *name, struct petrel_error *err);
void mailbox_close(struct mailbox *box);
const char *mailbox_name(const struct mailbox *box);

struct mailbox_info {
    uint8_t guid[16];
    uint32_t uid_validity;
    uint32_t next_uid;
    uint64_t highest_modseq;
    uint32_t messages;
    uint32_t unseen;
    uint64_t size_bytes;    /* stats: sum of physical sizes */
    uint64_t on_disk_count; /* stats: message files found on disk */
};
/* Fills the info; with `stats` also counts files on disk. */
bool mailbox_get_info(struct mailbox *box, bool stats, struct mailbox_info *info,
                      struct petrel_error *err);
/* GUID as 32 lower-case hex characters (+ NUL). */
void mailbox_guid_hex(const uint8_t guid[16], char out[33]);

struct mailbox_message {
    uint32_t uid;
    uint32_t flags;
    uint64_t modseq;
    uint64_t size;
    uint64_t vsize;
    int64_t internal_date;
    const char *filename; /* current file name on disk (with :2,flags) */
    const char *const *keywords;
    size_t keyword_count;
};
/* Calls `fn` for every message in UID order (up to `limit`, 0 = all);
 * *truncated tells whether there were more. */
bool mailbox_foreach(struct mailbox *box, size_t limit,
                     void (*fn)(const struct mailbox_message *msg, void *ctx), void *ctx,
                     bool *truncated, struct petrel_error *err);

/* Saves a message (bytes as given, LF or CRLF). `keywords` NULL-terminated or
 * NULL. internal_date 0 = now. The file is durable (per mail.fsync) before
 * this returns. */
bool mailbox_append(struct mailbox *box, const void *data, size_t len, uint32_t flags,
                    const char *const *keywords, int64_t internal_date, uint32_t *uid_out,
                    struct petrel_error *err);
/* Expunges \Deleted messages (only `uids` when given). Per-message failures
 * are logged and skipped; *expunged (caller frees) lists what went. */
bool mailbox_expunge(struct mailbox *box, const uint32_t *uids, size_t uid_count,
                     uint32_t **expunged, size_t *expunged_count, struct petrel_error *err);
/* Replaces the flags of one message. */
bool mailbox_set_flags(struct mailbox *box, uint32_t uid, uint32_t flags,
                       const char *const *keywords, struct petrel_error *err);

/* ---------- index maintenance ---------- */

struct mailbox_rebuild_stats {
    uint64_t scanned;
    uint64_t uids_preserved;
    uint64_t uids_assigned;
    uint64_t orphans_dropped;
};
/* Regenerates the index from the files on disk under the folder lock: UIDs
 * known for a file name are kept, new files get fresh UIDs; flags come from
 * the file names. */
bool mailbox_index_rebuild(struct mailbox *box, struct mailbox_rebuild_stats *stats,
                           struct petrel_error *err);
bool mailbox_index_optimize(struct mailbox *box, struct petrel_error *err);
bool mailbox_cache_purge(struct mailbox *box, uint64_t *carried, uint64_t *reclaimed,
                         struct petrel_error *err);

#endif
