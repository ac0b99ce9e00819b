/* Internals shared by the Maildir++ implementation of mail-storage.h. */
#ifndef PETREL_STORAGE_MAILDIR_PRIVATE_H
#define PETREL_STORAGE_MAILDIR_PRIVATE_H

#include "core/buf.h"
#include "storage/fileindex/fileindex.h"
#include "storage/mail-storage-private.h"
#include "storage/maildir/maildir-filename.h"
#include "storage/maildir/maildir-keywords.h"
#include "storage/maildir/maildir-uidlist.h"

#include <dirent.h>
#include <sys/stat.h>
#include <time.h>

/* The index counts unseen messages by the storage's \Seen bit. */
_Static_assert(FILEINDEX_SEEN_BIT == MAIL_FLAG_SEEN, "fileindex unseen bit is \\Seen");

#define MAILDIR_UIDLIST "dovecot-uidlist"
#define MAILDIR_KEYWORDS "dovecot-keywords"
#define MAILDIR_SYNC_STAMP "petrel-maildir-sync"
#define MAILDIR_SPECIAL_USE "petrel-special-use"
#define MAILDIR_ACL "dovecot-acl"

/* The driver's state of one storage handle (storage->driver). */
struct maildir_storage {
    /* New file names: this handle's own source, or (a sibling) the one of
     * the storage it was made from, so names stay unique in the process. */
    struct maildir_name_source *names;
    struct maildir_name_source own_names;
};

/* The source of new file names for messages of `box`. */
struct maildir_name_source *maildir_names(const struct mailbox *box);

struct mailbox {
    struct mailbox_common common; /* user, namespace, name: first (mail-storage-private.h) */
    char *dir;
    /* `dir`, open for the handle's life (-1 until then). Files are reached
     * relative to it: one path component to look up instead of the whole
     * path, and a handle whose folder is renamed keeps working on its own
     * directory rather than on whatever takes the old name. */
    int dir_fd;
    uint64_t dir_dev; /* dir_fd's directory, to tell whether `dir` still names it */
    uint64_t dir_ino;
    struct fileindex *index;
    struct maildir_keywords keywords;
    /* The index header the keyword names were last read against. A new
     * keyword reaches dovecot-keywords before any index record uses it
     * (ours are written under the folder lock first; another server's
     * show up as renamed files, which the sync turns into index changes),
     * so while the header is unchanged the file need not be read again. */
    struct {
        bool ok;
        struct fileindex_header hdr;
    } keywords_seen;
    struct uidlist uidlist; /* loaded lazily for appends */
    bool uidlist_loaded;
    /* dovecot-uidlist kept open for appends (-1: none) and which file it
     * is; used only while the path still names that file (see
     * uidlist_note_append). */
    int uidlist_fd;
    uint64_t uidlist_fd_dev;
    uint64_t uidlist_fd_ino;
    /* petrel-maildir-sync kept open for writing (-1: none); reopened when
     * it was unlinked. */
    int stamp_fd;
    /* petrel-recent kept open (-1: not yet, or it does not exist); petreld
     * rewrites it in place, and a claim opens it again when something else
     * replaced it (maildir-recent.c). */
    int recent_fd;
    uint64_t recent_fd_dev;
    uint64_t recent_fd_ino;
    /* The inotify watch of the session that works through this handle (the
     * newest one made on it; NULL when none): the events of its own flag
     * renames are not reported to it (maildir_watch_expect_rename). */
    struct mailbox_watch *own_watch;
    bool synced; /* the sync opening owes was done (see mailbox_open) */
    /* The folder is read-only to this process (its index log cannot be
     * written): the last sync kept what it found in this handle's index
     * view only, moved nothing from new/ and wrote no dovecot-uidlist. */
    bool read_only;
    /* cur/ and new/ as this process last saw the sync stamp vouch for them:
     * while they stay so, the stamp file need not be read again. */
    struct {
        bool ok;
        struct timespec cur;
        struct timespec nw;
        unsigned long long ino;
    } stamp_seen;
    struct buf path; /* scratch for file paths */
    int journaled;   /* the folder's file system journals metadata: 1, 0 unknown, -1 no */
};

/* The driver's entry points (maildir_storage_vfuncs): the storage API
 * (mail-storage.c) calls them after the modules' hooks. */
struct mailbox *maildir_mailbox_open(struct mail_user *user, const struct namespace_config *ns,
                                     const char *name, struct petrel_error *err);
bool maildir_append(struct mailbox *box, const void *data, size_t len, uint32_t flags,
                    const char *const *keywords, int64_t internal_date, uint32_t *uid_out,
                    struct petrel_error *err);
bool maildir_append_file(struct mailbox *box, const void *prefix, size_t prefix_len, int fd,
                         uint64_t offset, uint64_t len, uint32_t flags, const char *const *keywords,
                         int64_t internal_date, uint32_t *uid_out, struct petrel_error *err);
bool maildir_copy(struct mailbox *src, const uint32_t *uids, size_t uid_count, struct mailbox *dst,
                  bool keep_flags, uint32_t **new_uids, struct petrel_error *err);
bool maildir_move(struct mailbox *src, const uint32_t *uids, size_t uid_count, struct mailbox *dst,
                  uint32_t **new_uids, struct petrel_error *err);
bool maildir_expunge(struct mailbox *box, const uint32_t *uids, size_t uid_count,
                     uint32_t **expunged, size_t *expunged_count, struct petrel_error *err);
bool maildir_update_flags(struct mailbox *box, const uint32_t *uids, size_t uid_count,
                          const struct mailbox_flags_update *upd,
                          struct mailbox_flags_result **results, size_t *result_count,
                          uint32_t **failed, size_t *failed_count, struct petrel_error *err);
bool maildir_set_flags(struct mailbox *box, uint32_t uid, uint32_t flags,
                       const char *const *keywords, struct petrel_error *err);
struct mailbox_message_data *maildir_message_open(struct mailbox *box, uint32_t uid,
                                                  struct petrel_error *err);
int maildir_message_open_file(struct mailbox *box, uint32_t uid, uint64_t *size,
                              struct petrel_error *err);
bool maildir_message_sizes(struct mailbox *box, uint32_t uid, uint64_t *size, uint64_t *vsize,
                           struct petrel_error *err);
const char *maildir_keyword_name(const struct mailbox *box, unsigned idx);
const void *maildir_cache_lookup(struct mailbox *box, uint32_t uid, const char *field, size_t *len);
bool maildir_cache_store(struct mailbox *box, uint32_t uid, const char *field, const void *data,
                         size_t len, bool queue, struct petrel_error *err);
bool maildir_cache_flush(struct mailbox *box, struct petrel_error *err);
struct mailbox_view *maildir_view_new(struct mailbox *box, struct petrel_error *err);
void maildir_view_free(struct mailbox_view *view);
bool maildir_view_sync(struct mailbox_view *view, bool refresh,
                       struct mailbox_view_changes *changes, struct petrel_error *err);
bool maildir_view_note_flags(struct mailbox_view *view, const struct mailbox_flags_result *results,
                             size_t count);
bool maildir_folder_list(struct mail_user *user, const struct namespace_config *ns, char ***names,
                         size_t *count, struct petrel_error *err);
bool maildir_folder_exists(struct mail_user *user, const struct namespace_config *ns,
                           const char *name);
bool maildir_folder_usage(struct mail_user *user, const struct namespace_config *ns,
                          const char *name, struct fileindex_usage_cache *cache,
                          struct mail_folder_usage *out, struct petrel_error *err);
int maildir_spool_open(struct mail_user *user, struct petrel_error *err);
void maildir_mailbox_close(struct mailbox *box);
bool maildir_is_read_only(const struct mailbox *box);
size_t maildir_memory_bytes(const struct mailbox *box);
bool maildir_mailbox_is(const struct mailbox *box, const struct namespace_config *ns,
                        const char *name);
bool maildir_mailbox_sync(struct mailbox *box, struct petrel_error *err);
uint32_t maildir_handle_uid_validity(const struct mailbox *box);
bool maildir_get_info(struct mailbox *box, bool stats, struct mailbox_info *info,
                      struct petrel_error *err);
bool maildir_foreach(struct mailbox *box, size_t limit,
                     void (*fn)(const struct mailbox_message *msg, void *ctx), void *ctx,
                     bool *truncated, struct petrel_error *err);
bool maildir_recent_claim(struct mailbox *box, uint32_t *first, uint32_t *until,
                          struct petrel_error *err);
uint32_t maildir_recent_peek(struct mailbox *box);
/* Unmaps and closes what the handle holds of petrel-recent (at close). */
void maildir_recent_release(struct mailbox *box);
bool maildir_index_rebuild(struct mailbox *box, struct mailbox_rebuild_stats *stats,
                           struct petrel_error *err);
bool maildir_index_optimize(struct mailbox *box, struct petrel_error *err);
bool maildir_cache_purge(struct mailbox *box, uint64_t *carried, uint64_t *reclaimed,
                         struct petrel_error *err);
bool maildir_usage_recalc(struct mailbox *box, struct mail_folder_usage *out,
                          struct petrel_error *err);
void *maildir_watch_hub_new(struct event_base *base, bool native);
void maildir_watch_hub_free(void *hub);
struct mailbox_watch *maildir_watch_new(void *hub, struct mailbox *box, void (*fn)(void *ctx),
                                        void *ctx, bool native_only, struct petrel_error *err);
bool maildir_watch_take_changed(struct mailbox_watch *watch);
bool maildir_watch_is_native(const struct mailbox_watch *watch);
bool maildir_watch_lost(struct mailbox_watch *watch);
void maildir_watch_free(struct mailbox_watch *watch);
/* A handle on the folder directory `dir` (taken), open as `dir_fd` (taken),
 * without its index yet (mailbox_open and folder creation build on it). */
struct mailbox *maildir_mailbox_alloc(struct mail_user *user, const struct namespace_config *ns,
                                      const char *name, char *dir, int dir_fd,
                                      const struct stat *dir_st);

/* The folder's directory: the namespace root for INBOX, else root/.L1.L2
 * with each level in modified UTF-7. Validates the name. */
bool maildir_folder_dir(struct mail_user *user, const struct namespace_config *ns, const char *name,
                        struct buf *out, struct petrel_error *err);
/* The name relative to box->dir_fd of `path`, which is box->dir followed by
 * "/" and that name (as every path built for the folder is). */
const char *maildir_rel(const struct mailbox *box, const char *path);
/* Whether box->dir still names the directory the handle holds: false once
 * the folder was deleted, renamed or replaced (one stat of the path; the
 * held descriptor keeps the old inode number from being reused). */
bool maildir_dir_current(const struct mailbox *box);
/* Opens box->dir's subdirectory `sub` for reading; NULL with errno set. */
DIR *maildir_opendir_sub(struct mailbox *box, const char *sub);
/* fsyncs box->dir's subdirectory `sub`. */
bool maildir_fsync_sub(struct mailbox *box, const char *sub, struct petrel_error *err);
/* True for INBOX of the personal namespace. */
bool maildir_is_inbox(const struct namespace_config *ns, const char *name);
/* Creates cur/new/tmp (and maildirfolder unless `is_root`) under dir. */
bool maildir_make_dirs(const char *dir, bool is_root, struct petrel_error *err);
/* A UIDVALIDITY for a new folder of box's namespace: the time, or one
 * above the last value handed out there when that is not below it
 * (maildir-uidvalidity.c). */
uint32_t maildir_uid_validity_next(struct mailbox *box);
/* Creates the folder's index (identity from an existing dovecot-uidlist when
 * there is one) and syncs it with the files on disk. */
bool maildir_index_init(struct mailbox *box, struct petrel_error *err);
/* Scans cur/ and new/ and brings the index and uidlist in line when the
 * directories changed since the last sync (always when `force`). */
bool maildir_sync(struct mailbox *box, bool force, struct petrel_error *err);

/* ---------- shared with the IMAP-facing files (maildir-mailbox.c) ---------- */

/* The sync mailbox_open leaves to the first operation. */
bool maildir_ensure_synced(struct mailbox *box, struct petrel_error *err);
/* Messages of the handle's index with a UID at or above the \Recent mark
 * (maildir-recent.c): STATUS RECENT. */
uint32_t maildir_recent_count(struct mailbox *box);
bool maildir_fsync_enabled(const struct mailbox *box);
/* Whether links, renames and unlinks in cur/ need a directory fsync of
 * their own before the index commit that records them: mail.fsync is not
 * "never" and the file system's journal does not carry them with that
 * commit's fsync (ext4 made without one; XFS and ext3/ext4 with an active
 * journal commit every earlier metadata change with it). */
bool maildir_cur_changes_need_fsync(struct mailbox *box);
/* Whether flag renames in cur/ must be made durable by a directory fsync
 * of their own before the index commit that records them: mail.fsync
 * always on a file system whose journal does not carry them with that
 * commit (ext4 made without one). Else a power loss can keep the index's
 * new flags and lose the rename, and the next scan, which takes a file's
 * name for what another program did, puts the old flags back. */
bool maildir_flag_renames_need_fsync(struct mailbox *box);
/* "<base>:2,<flags>" into out (reset first). */
void maildir_disk_name(const char *base, uint32_t flags, uint32_t keywords, struct buf *out);
/* Under the folder lock: the keyword mask of `names`, re-reading
 * dovecot-keywords and adding missing names to it. */
bool maildir_resolve_keywords(struct mailbox *box, const char *const *names, uint32_t *mask,
                              struct petrel_error *err);
/* Renames <from_sub>/<from> to cur/<to>; NOT_FOUND when the source is gone. */
bool maildir_rename_in_cur(struct mailbox *box, const char *from_sub, const char *from,
                           const char *to, struct petrel_error *err);
/* Petrel's own change to cur/ under the folder lock keeps the sync stamp
 * current (see "sync stamp" in maildir-mailbox.c): begin before the first
 * rename, end right after the last one, commit_on(txn) just before the
 * index commit (the stamp is written if and when it succeeds, before the
 * folder lock is released), drop (free) after the commit or on failure.
 * `lost` = a file vanished meanwhile (rescan later). */
struct maildir_cur_change;
struct maildir_cur_change *maildir_cur_change_begin(struct mailbox *box);
void maildir_cur_change_end(struct mailbox *box, struct maildir_cur_change *change, bool lost);
void maildir_cur_change_commit_on(struct fileindex_txn *txn, struct maildir_cur_change *change);
void maildir_cur_change_drop(struct maildir_cur_change *change);

/* Inside an open transaction: rewrites dovecot-uidlist for the index plus
 * `added` (ascending UIDs above the view's), and forgets the loaded copy. */
bool maildir_uidlist_write_added(struct mailbox *box, const struct fileindex_record *added,
                                 size_t added_count, struct petrel_error *err);

/* The current file of message `uid` in cur/, opened read-only: the name the
 * index gives, else (renamed by a concurrent flag change) after a refresh,
 * retried, and finally any file in cur/ with the record's base name. *rec
 * is a copy of the record (its filename pointer is not kept); `path` gets
 * the file's path. -1 with NOT_FOUND when the message is gone. */
int maildir_message_fd(struct mailbox *box, uint32_t uid, struct fileindex_record *rec,
                       struct buf *path, struct petrel_error *err);
/* The name of the file in cur/ whose base name is `base` (whatever its
 * flags), into `name`; false when there is none. */
bool maildir_find_in_cur(struct mailbox *box, const char *base, struct buf *name);

/* ---------- own changes and the watch (maildir-watch.c) ---------- */

/* A change to cur/<name> just made through `box` that causes the inotify
 * event `mask` (IN_CREATE: an append's link; IN_DELETE: an expunge;
 * IN_MOVED_FROM/IN_MOVED_TO: a flag rename): box->own_watch takes that
 * event as its own and does not report it, and takes index log growth as
 * its own while the log has no more than `box` applied. The session's view
 * takes such changes from the handle (mailbox_view_note_flags,
 * mailbox_view_catch_up). Any other event still reports a change. */
void maildir_watch_expect(struct mailbox *box, uint32_t mask, const char *name);
/* A flag rename cur/<from> -> cur/<to>: its two events (see above). */
void maildir_watch_expect_rename(struct mailbox *box, const char *from, const char *to);
/* A line appended to dovecot-uidlist through `box`: its IN_MODIFY. */
void maildir_watch_expect_uidlist(struct mailbox *box);
/* A change through `box` failed half way: box->own_watch reports a change
 * at its next question whatever the events say. */
void maildir_watch_distrust(struct mailbox *box);
/* The view over `box` was synced: what the handle holds now is in it. */
void maildir_watch_view_synced(struct mailbox *box);
/* `box` closes: its watch no longer refers to it. */
void maildir_watch_forget_box(struct mailbox *box);

#endif
