/* Internals shared by the Maildir++ implementation of mail-storage.h. */
#ifndef PETREL_STORAGE_MAILDIR_PRIVATE_H
#define PETREL_STORAGE_MAILDIR_PRIVATE_H

#include "core/buf.h"
#include "storage/fileindex/fileindex.h"
#include "storage/mail-storage.h"
#include "storage/maildir/maildir-keywords.h"
#include "storage/maildir/maildir-uidlist.h"

#define MAILDIR_UIDLIST "dovecot-uidlist"
#define MAILDIR_KEYWORDS "dovecot-keywords"
#define MAILDIR_SYNC_STAMP "petrel-maildir-sync"
#define MAILDIR_SPECIAL_USE "petrel-special-use"
#define MAILDIR_ACL "dovecot-acl"

struct mail_storage {
    struct mail_config cfg; /* borrowed copy of pointers: owned by the configuration */
    struct metrics_registry *metrics;
    struct fileindex_settings index_settings;
    struct mail_user **users;
    size_t user_count;
    size_t user_cap;
    uint64_t save_counter; /* makes new maildir file names unique in the process */
};

struct mail_user {
    struct mail_storage *storage;
    char *name;
    char *home;
};

struct mailbox {
    struct mail_user *user;
    const struct namespace_config *ns;
    char *name;
    char *dir;
    struct fileindex *index;
    struct maildir_keywords keywords;
    struct uidlist uidlist; /* loaded lazily for appends */
    bool uidlist_loaded;
    bool synced;     /* the sync opening owes was done (see mailbox_open) */
    struct buf path; /* scratch for file paths */
};

/* The folder's directory: the namespace root for INBOX, else root/.L1.L2
 * with each level in modified UTF-7. Validates the name. */
bool maildir_folder_dir(struct mail_user *user, const struct namespace_config *ns,
                        const char *name, struct buf *out, struct petrel_error *err);
/* True for INBOX of the personal namespace. */
bool maildir_is_inbox(const struct namespace_config *ns, const char *name);
/* Creates cur/new/tmp (and maildirfolder unless `is_root`) under dir. */
bool maildir_make_dirs(const char *dir, bool is_root, struct petrel_error *err);
/* Creates the folder's index (identity from an existing dovecot-uidlist when
 * there is one) and syncs it with the files on disk. */
bool maildir_index_init(struct mailbox *box, struct petrel_error *err);
/* Scans cur/ and new/ and brings the index and uidlist in line when the
 * directories changed since the last sync (always when `force`). */
bool maildir_sync(struct mailbox *box, bool force, struct petrel_error *err);

#endif
