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
 * _INVALID (bad name, INBOX rename), _UNSUPPORTED, _IO, and whatever a
 * storage module refuses with (_OVER_QUOTA, _PERMISSION, ...:
 * storage/mail-storage-module.h). Ownership: the
 * storage owns users it hands out (cached per name); mailboxes are owned by
 * the caller and closed with mailbox_close(). */
#ifndef PETREL_STORAGE_MAIL_STORAGE_H
#define PETREL_STORAGE_MAIL_STORAGE_H

#include "core/error.h"
#include "core/metrics.h"
#include "storage/mail-flags.h"
#include "storage/namespace.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct mail_storage;
struct mail_user;
struct mailbox;

struct mail_storage *mail_storage_new(const struct mail_config *cfg,
                                      struct metrics_registry *metrics);
/* Another handle on the same configuration for another thread (each thread
 * uses its own handle); it shares the parent's source of unique file names,
 * so the parent must outlive it. */
struct mail_storage *mail_storage_new_sibling(struct mail_storage *parent,
                                              struct metrics_registry *metrics);
void mail_storage_free(struct mail_storage *storage);
const struct mail_config *mail_storage_config(const struct mail_storage *storage);

/* The user (validated name, resolved home). Owned by the storage. */
struct mail_user *mail_user_get(struct mail_storage *storage, const char *username,
                                struct petrel_error *err);
/* A holder that keeps the user past the current call (an IMAP session)
 * takes a reference; the storage evicts only unreferenced users from its
 * cache. The storage still frees every user in mail_storage_free(). */
void mail_user_ref(struct mail_user *user);
void mail_user_unref(struct mail_user *user);
const char *mail_user_name(const struct mail_user *user);
struct mail_storage *mail_user_storage(const struct mail_user *user);
const char *mail_user_home(const struct mail_user *user);
/* The user of a logged-in session (IMAP, POP3, LMTP): the same owner as
 * mail_user_get() but held apart from the admin plane's, because storage
 * modules check a session's rights (ACLs) and let the admin plane pass
 * (document 1). `groups` (NULL-terminated or NULL) are the userdb's, for
 * ACL group= entries; each login sets them again (the userdb's latest). */
struct mail_user *mail_user_get_session(struct mail_storage *storage, const char *username,
                                        const char *const *groups, struct petrel_error *err);
/* Whether the user is a session's (rights are checked) and its groups. */
bool mail_user_is_session(const struct mail_user *user);
const char *const *mail_user_groups(const struct mail_user *user, size_t *count);
/* The resolved root directory of namespace `ns` for this user. */
bool mail_user_namespace_root(const struct mail_user *user, const struct namespace_config *ns,
                              struct buf *out, struct petrel_error *err);
/* Namespace by slug; NOT_FOUND "namespace not configured: <slug>". */
const struct namespace_config *mail_user_namespace(const struct mail_user *user, const char *slug,
                                                   struct petrel_error *err);

/* ---------- folders ---------- */

/* Every folder of the namespace (INBOX first for personal, then sorted). */
bool mail_folder_list(struct mail_user *user, const struct namespace_config *ns, char ***names,
                      size_t *count, struct petrel_error *err);
void mail_folder_list_free(char **names, size_t count);
bool mail_folder_exists(struct mail_user *user, const struct namespace_config *ns,
                        const char *name);
/* Creates the folder (GUID and UIDVALIDITY stamped now). EXISTS when present. */
bool mail_folder_create(struct mail_user *user, const struct namespace_config *ns, const char *name,
                        struct petrel_error *err);
/* What a creator may ask for besides the name. */
struct mail_folder_create_params {
    /* An RFC 6154 attribute for the new folder (personal namespace only),
     * NULL for none. */
    const char *special_use;
    /* When the special use cannot be given: false (RFC 6154 3, IMAP
     * CREATE (USE ...)) the folder is not created, or removed again, and
     * the call fails; true (the operator API) the folder stays, the call
     * succeeds and special_use_error says why. An attribute asked for in
     * another namespace is then ignored. */
    bool special_use_optional;
    /* Out: the special use was refused (the call's error, or with
     * special_use_optional the message here). */
    bool special_use_failed;
    char special_use_error[512];
};
/* Whether saving messages of `size` bytes in total (the largest
 * `max_size`) into folder `name` could succeed now, asked before their
 * bytes arrive (an IMAP APPEND's literal, before the continuation): false
 * with the refusal a save would get (a quota's OVER_QUOTA and its text)
 * when a storage module already knows it cannot. True promises nothing:
 * the save is checked again. */
bool mail_save_test(struct mail_user *user, const struct namespace_config *ns, const char *name,
                    uint64_t size, uint64_t max_size, struct petrel_error *err);
/* Whether any storage module answers mail_save_test (else it is always
 * true, and the caller can spare itself resolving the folder). */
bool mail_save_test_wanted(const struct mail_user *user);
/* mail_folder_create() with `params` (see above). */
bool mail_folder_create_with(struct mail_user *user, const struct namespace_config *ns,
                             const char *name, struct mail_folder_create_params *params,
                             struct petrel_error *err);
/* Removes the folder with its messages, index and ACL file (children stay).
 * INBOX cannot be deleted (INVALID). */
bool mail_folder_delete(struct mail_user *user, const struct namespace_config *ns, const char *name,
                        struct petrel_error *err);
/* Renames within a namespace, children too; GUID kept. INBOX refused. */
bool mail_folder_rename(struct mail_user *user, const struct namespace_config *ns,
                        const char *old_name, const char *new_name, struct petrel_error *err);

/* The folder's own directory (its messages, index and files such as
 * dovecot-acl live there; INBOX's is the namespace root's in maildir). */
bool mail_folder_dir(struct mail_user *user, const struct namespace_config *ns, const char *name,
                     struct buf *out, struct petrel_error *err);

/* ---------- access rights (storage/acl/acl-rights.h bits) ---------- */

/* The rights the storage modules give the user on a folder, as RFC 4314
 * bits (ACL_LOOKUP, ACL_READ, ...): every right (ACL_ALL_RIGHTS) when no
 * module restricts (ACLs off, the admin plane). A folder without
 * ACL_LOOKUP is one the user must not learn exists. `name` "" is the
 * namespace root. For other modules (METADATA's shared entries) and the
 * front ends (IMAP MYRIGHTS, LIST). Cheap: a stat per call when nothing
 * changed. */
uint32_t mail_folder_my_rights(struct mail_user *user, const struct namespace_config *ns,
                               const char *name);
/* The same for an open handle, cached in it (re-checked against the ACL
 * file at most every mail.acl.cache_secs). */
uint32_t mailbox_my_rights(struct mailbox *box);
/* Rights worked out for `user` (by name and in its handles) are stale: an
 * ACL was changed through this user (IMAP SETACL), so its next check reads
 * the files again instead of waiting for mail.acl.cache_secs. */
void mail_user_rights_changed(struct mail_user *user);

/* ---------- one folder ---------- */

/* What a folder is opened for: the right an ACL asks of the opener. */
enum mailbox_open_purpose {
    MAILBOX_OPEN_READ, /* SELECT, EXAMINE, STATUS, reading (RFC 4314 r) */
    MAILBOX_OPEN_SAVE, /* APPEND, COPY or MOVE into (i) */
    MAILBOX_OPEN_POST, /* delivery, LMTP (p; the owner's i will do) */
};

/* mailbox_open_for(..., MAILBOX_OPEN_READ). */
struct mailbox *mailbox_open(struct mail_user *user, const struct namespace_config *ns,
                             const char *name, struct petrel_error *err);
/* Opens for `purpose`: a module may refuse (PERMISSION; NOT_FOUND, as for
 * a missing folder, when the user may not even see it). The handle keeps
 * the purpose: its saves are checked for the same right. */
struct mailbox *mailbox_open_for(struct mail_user *user, const struct namespace_config *ns,
                                 const char *name, enum mailbox_open_purpose purpose,
                                 struct petrel_error *err);
void mailbox_close(struct mailbox *box);
const char *mailbox_name(const struct mailbox *box);
/* The user whose folder this is (the handle holds a reference to it). */
struct mail_user *mailbox_user(const struct mailbox *box);
/* Saves into this handle are inbound deliveries (LMTP): storage modules
 * see mail_save_info.delivery (a quota then allows its grace). */
void mailbox_set_delivery(struct mailbox *box, bool delivery);
/* Bytes the open handle holds in memory (its index view, the loaded
 * dovecot-uidlist): what keeping it open costs. An estimate; O(1). */
size_t mailbox_memory_bytes(const struct mailbox *box);
/* True when `box` is the folder `name` (as mailbox_open() takes it) of `ns`
 * and that folder is still the directory the handle opened: false once it
 * was deleted, renamed or replaced meanwhile (the handle keeps working on
 * its own directory; a caller wanting the folder of that name opens anew). */
bool mailbox_is(const struct mailbox *box, const struct namespace_config *ns, const char *name);
/* True when the folder could not be written at its last sync (a read-only
 * maildir): the handle then holds what it found in memory only, and every
 * change is refused with PERMISSION. */
bool mailbox_is_read_only(const struct mailbox *box);
/* Brings a handle that stays open between operations in line with the disk
 * (other programs' deliveries and renames, e.g. Dovecot's), as opening it
 * again would: cheap when the directories did not change. */
bool mailbox_sync(struct mailbox *box, struct petrel_error *err);

struct mailbox_info {
    uint8_t guid[16];
    uint32_t uid_validity;
    uint32_t next_uid;
    uint64_t highest_modseq;
    uint32_t messages;
    uint32_t unseen;
    uint32_t recent;        /* at or above the \Recent mark (mailbox_recent_claim) */
    uint64_t size_bytes;    /* stats: sum of physical sizes */
    uint64_t on_disk_count; /* stats: message files found on disk */
};
/* \Recent (RFC 3501 2.3.2). The folder keeps a mark: the first UID no
 * read-write session has been told of (absent: 1, so each message of a
 * folder Petrel has not served yet is recent once, as with Dovecot).
 * mailbox_recent_claim() is for a read-write session about to report new
 * messages: under the folder lock it reads the mark into *first, moves it
 * to the index's next UID and gives that in *until, so the messages with
 * UIDs in [*first, *until) are recent for this caller and for no other
 * session. mailbox_recent_peek() only reads the mark (EXAMINE: recent
 * messages are shown but stay recent for the next session). */
bool mailbox_recent_claim(struct mailbox *box, uint32_t *first, uint32_t *until,
                          struct petrel_error *err);
uint32_t mailbox_recent_peek(struct mailbox *box);
/* The folder's UIDVALIDITY as the handle last read it, without looking at
 * the disk: after a mailbox_append, the one the new UID belongs to. */
uint32_t mailbox_handle_uid_validity(const struct mailbox *box);
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
/* Saving a message that arrived in pieces (a large IMAP APPEND literal,
 * LMTP DATA) without holding it in memory: the front end writes the bytes
 * as they come into a spool file, then saves from it.
 *
 * mail_user_spool_open(): an unnamed file (O_TMPFILE, read-write, 0600) in
 * the tmp/ of the user's INBOX (created if missing); it has no name, so a
 * crash or a disconnect (close) leaves nothing behind. -1 with `err`. */
int mail_user_spool_open(struct mail_user *user, struct petrel_error *err);
/* mailbox_append() of the bytes `prefix` (may be NULL with 0) followed by
 * `len` bytes of the file `fd` from `offset` (not moved; the caller keeps
 * and closes `fd`). When the file is exactly the message and still unnamed
 * (a spool file from above, no prefix) and sits on the folder's file
 * system, it becomes the message by a hard link into cur/ (no copy);
 * otherwise the bytes are copied in the kernel (copy_file_range, a reflink
 * where possible). Such a linked file must not be written again: the
 * caller only closes it. INVALID when the file is shorter than `len`. */
bool mailbox_append_file(struct mailbox *box, const void *prefix, size_t prefix_len, int fd,
                         uint64_t offset, uint64_t len, uint32_t flags, const char *const *keywords,
                         int64_t internal_date, uint32_t *uid_out, struct petrel_error *err);
/* Takes out again messages the caller appended to `box` a moment ago (a
 * MULTIAPPEND that failed part way, RFC 3502 all or nothing): marked
 * \Deleted and expunged without asking the storage modules (what they let
 * in may always go again), which are told (expunged hook). Per-message
 * failures are logged and skipped, as by mailbox_expunge(). */
bool mailbox_append_undo(struct mailbox *box, const uint32_t *uids, size_t uid_count,
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

/* ---------- reading one message (IMAP FETCH, POP3 RETR) ---------- */

/* How the stored bytes end their lines. IMAP sends CRLF: a CRLF message
 * goes out as stored, an LF one needs conversion (vsize is its size then). */
enum mailbox_eol {
    MAILBOX_EOL_CRLF,  /* no bare LF (vsize == size): every line, if any, ends in CRLF */
    MAILBOX_EOL_LF,    /* every line ends in a bare LF */
    MAILBOX_EOL_MIXED, /* both */
};

struct mailbox_message_data {
    uint32_t uid;
    const char *data; /* the message as stored, `size` bytes (not NUL-terminated) */
    size_t size;      /* physical size */
    uint64_t vsize;   /* size with CRLF line endings (RFC822.SIZE) */
    int64_t internal_date;
    enum mailbox_eol eol;
};
/* The bytes of message `uid`: mapped read-only (large files) or read into
 * memory (small ones). A flag change by another process renames the file
 * under us: the current name is looked up again (index refresh, then the
 * files in cur/ by base name), a few times. NOT_FOUND when the message was
 * expunged (also by another process since the caller's last view sync).
 * The data stays valid until mailbox_message_release(), even when the
 * message is expunged or the mailbox closed meanwhile. */
struct mailbox_message_data *mailbox_message_open(struct mailbox *box, uint32_t uid,
                                                  struct petrel_error *err);
void mailbox_message_release(struct mailbox_message_data *msg);
/* The file of message `uid` opened read-only (found as mailbox_message_open
 * finds it), for a caller that hands the bytes on without reading them
 * (sendfile); *size is the file's size now. The caller closes the
 * descriptor. -1 with `err` set (NOT_FOUND when expunged) otherwise. */
int mailbox_message_open_file(struct mailbox *box, uint32_t uid, uint64_t *size,
                              struct petrel_error *err);
/* Physical size and vsize from the index without opening the file;
 * NOT_FOUND when the index no longer holds `uid`. */
bool mailbox_message_sizes(struct mailbox *box, uint32_t uid, uint64_t *size, uint64_t *vsize,
                           struct petrel_error *err);

/* ---------- flag changes with modseq (IMAP STORE, RFC 7162 CONDSTORE) ---------- */

enum mailbox_flags_mode {
    MAILBOX_FLAGS_REPLACE, /* FLAGS */
    MAILBOX_FLAGS_ADD,     /* +FLAGS */
    MAILBOX_FLAGS_REMOVE,  /* -FLAGS */
};

struct mailbox_flags_update {
    enum mailbox_flags_mode mode;
    uint32_t flags;              /* MAIL_FLAG_* bits */
    const char *const *keywords; /* names, NULL-terminated, or NULL */
    uint64_t unchanged_since;    /* UNCHANGEDSINCE; 0 = no test */
};

/* The state of one message after an update (also when nothing changed). */
struct mailbox_flags_result {
    uint32_t uid;
    uint32_t flags;
    uint32_t keywords; /* bit i = mailbox_keyword_name(box, i) */
    uint64_t modseq;
};

/* Applies `upd` to `uids` (any order, duplicates ignored) in one index
 * transaction. Keywords are created in the folder as needed for REPLACE and
 * ADD (CONFLICT when all MAILBOX_MAX_KEYWORDS are taken, INVALID for a bad
 * name); REMOVE never creates one. UIDs unknown to the index (expunged) are
 * skipped silently. A message whose modseq is above unchanged_since is left
 * alone and listed in *failed (RFC 7162 MODIFIED). *results (ascending UIDs)
 * holds every message that was looked at and not failed, with its new
 * modseq. Both arrays are the caller's (free()); either pointer may be NULL
 * when not wanted. */
bool mailbox_update_flags(struct mailbox *box, const uint32_t *uids, size_t uid_count,
                          const struct mailbox_flags_update *upd,
                          struct mailbox_flags_result **results, size_t *result_count,
                          uint32_t **failed, size_t *failed_count, struct petrel_error *err);
/* Name of keyword `idx` as the mailbox last read dovecot-keywords, or NULL.
 * Valid until the next call that reads or writes keywords on `box`. */
const char *mailbox_keyword_name(const struct mailbox *box, unsigned idx);

/* ---------- copy and move (IMAP COPY/MOVE with COPYUID) ---------- */

/* Copies `uids` (in the order given) from `src` into `dst` (which may be the
 * same folder). A file is hard-linked into dst when both sit on one file
 * system, else copied and made durable per mail.fsync. Internal dates are
 * kept; with `keep_flags` flags and keywords are too (keywords mapped by name,
 * created in dst as needed), else the copies have none. New UIDs are
 * assigned in order in one dst transaction: (*new_uids)[i] is the copy of
 * uids[i], 0 when uids[i] no longer exists in src (skipped). *new_uids is
 * the caller's (free()). On failure nothing was added to dst. */
bool mailbox_copy(struct mailbox *src, const uint32_t *uids, size_t uid_count, struct mailbox *dst,
                  bool keep_flags, uint32_t **new_uids, struct petrel_error *err);
/* Copy, then expunge the copied messages from `src` (\Deleted is set on
 * them first). A crash in between leaves the messages in both folders,
 * never in neither. */
bool mailbox_move(struct mailbox *src, const uint32_t *uids, size_t uid_count, struct mailbox *dst,
                  uint32_t **new_uids, struct petrel_error *err);

/* ---------- a session's view of the folder (IMAP SELECT) ---------- */

/* A snapshot of the folder as one session sees it: messages in sequence
 * order (ascending UIDs) with their flags and modseqs. It changes only in
 * mailbox_view_sync() (and mailbox_view_note_flags() for the session's own
 * STORE), so sequence numbers stay stable across FETCH/STORE/SEARCH even
 * when other processes expunge meanwhile; reading such a message then fails
 * with NOT_FOUND for that message alone. \Recent is not kept (IMAP4rev2). */
struct mailbox_view;

struct mailbox_view_entry {
    uint32_t uid;
    uint32_t flags;
    uint32_t keywords; /* bit i = mailbox_view_keyword_name(view, i) */
    uint64_t modseq;
    uint64_t size;
    uint64_t vsize;
    int64_t internal_date;
};

struct mailbox_view_status {
    uint32_t uid_validity;
    uint32_t uid_next;
    uint64_t highest_modseq;
    uint32_t messages;
    uint32_t unseen;
    uint32_t first_unseen_seq; /* 0 when every message is \Seen */
    bool keywords_creatable;   /* PERMANENTFLAGS may list \* */
};

/* Takes the first snapshot. `box` must outlive the view. */
struct mailbox_view *mailbox_view_new(struct mailbox *box, struct petrel_error *err);
void mailbox_view_free(struct mailbox_view *view);
size_t mailbox_view_count(const struct mailbox_view *view);
/* Entry at sequence number `seq` (1-based), NULL when out of range. */
const struct mailbox_view_entry *mailbox_view_at(const struct mailbox_view *view, uint32_t seq);
/* Sequence number of `uid`, 0 when not in the view. */
uint32_t mailbox_view_seq(const struct mailbox_view *view, uint32_t uid);
/* The same, trying sequence number `hint` first (a caller walking UIDs in
 * ascending order passes the previous answer plus one: O(1) per message
 * for a contiguous set instead of a search). */
uint32_t mailbox_view_seq_hint(const struct mailbox_view *view, uint32_t uid, uint32_t hint);
/* Keyword names as of the last sync, NULL for unused slots. */
const char *mailbox_view_keyword_name(const struct mailbox_view *view, unsigned idx);
void mailbox_view_get_status(const struct mailbox_view *view, struct mailbox_view_status *out);

struct mailbox_view_changes {
    /* Expunged messages as sequence numbers of the old view, in descending
     * order: sent in this order as untagged EXPUNGEs, no response renumbers
     * a later one (each removal only shifts higher numbers). */
    uint32_t *expunged_seqs;
    uint32_t *expunged_uids; /* the same messages, ascending (VANISHED) */
    size_t expunged_count;
    uint32_t exists;  /* message count after the sync (EXISTS) */
    size_t new_count; /* messages added since the last sync */
    /* Sequence numbers (new view, ascending) of older messages whose flags
     * or modseq changed: one untagged FETCH (FLAGS MODSEQ) each. */
    uint32_t *changed_seqs;
    size_t changed_count;
    bool keywords_changed;    /* the FLAGS list is to be sent again */
    bool uidvalidity_changed; /* the view is void: the server must close it */
};
/* Refreshes from the disk and the index and reports the difference since
 * the last sync (or the creation). The server chooses when: never in the
 * middle of a FETCH, STORE or SEARCH. */
bool mailbox_view_sync(struct mailbox_view *view, struct mailbox_view_changes *changes,
                       struct petrel_error *err);
/* The same without looking at the disk: takes in what the view's handle
 * holds already, i.e. the session's own APPENDs and EXPUNGEs made through
 * it (and whatever those commits took in under the lock). For when the
 * folder's watch says nobody else changed anything; O(1) when nothing did. */
bool mailbox_view_catch_up(struct mailbox_view *view, struct mailbox_view_changes *changes,
                           struct petrel_error *err);
void mailbox_view_changes_free(struct mailbox_view_changes *changes);
/* Takes the session's own STORE results into the view at once (the server
 * answers them itself), so the next sync does not report them again. True
 * when the STORE created keywords: send FLAGS before the FETCH responses. */
bool mailbox_view_note_flags(struct mailbox_view *view, const struct mailbox_flags_result *results,
                             size_t count);

/* ---------- change notification (IMAP IDLE) ---------- */

struct event_base;
struct mailbox_watch;

/* Calls `fn` on the libevent loop soon after the folder changes on disk
 * (new/ or cur/ entries, the index log, dovecot-uidlist or -keywords),
 * whoever changed it: inotify where available (a burst of events becomes
 * one call after MAILBOX_WATCH_COALESCE_MS), else a poll of the directory
 * and log times every MAILBOX_WATCH_POLL_MS. The callback only says
 * "something changed": the server then syncs its view. The watch keeps
 * its own copy of the folder path; `box` may be closed before the watch. */
#define MAILBOX_WATCH_COALESCE_MS 50
#define MAILBOX_WATCH_POLL_MS 1000
struct mailbox_watch_hub;
/* What the watches of one event loop share: one inotify instance (the
 * kernel allows 128 per user by default). With `native` false (or without
 * inotify) every watch polls. Free it after every watch made from it. */
struct mailbox_watch_hub *mailbox_watch_hub_new(struct event_base *base, bool native);
void mailbox_watch_hub_free(struct mailbox_watch_hub *hub);
struct mailbox_watch *mailbox_watch_new(struct mailbox_watch_hub *hub, struct mailbox *box,
                                        void (*fn)(void *ctx), void *ctx, struct petrel_error *err);
/* The same with inotify only: NULL when the folder cannot be watched that
 * way (no inotify, a limit reached), instead of a polling watch. */
struct mailbox_watch *mailbox_watch_new_native(struct mailbox_watch_hub *hub, struct mailbox *box,
                                               void (*fn)(void *ctx), void *ctx);
/* Whether the folder may have changed since the previous call (the first
 * call, and every call once a watched directory is gone, say yes; a
 * polling watch always says yes), and forgets the answer. The hub's queued
 * events are read first, so a change whose writer has returned from its
 * system call (another session's, another process's) is never missed: a
 * "no" means a view sync would find nothing new beyond what the handle
 * holds already (the session's own changes: mailbox_view_catch_up). Does
 * not run callbacks. */
bool mailbox_watch_take_changed(struct mailbox_watch *watch);
/* Whether the watch uses inotify (false: polling). */
bool mailbox_watch_is_native(const struct mailbox_watch *watch);
/* Whether a watched directory went (the folder was deleted or replaced):
 * such a watch hears nothing more and should be made again. */
bool mailbox_watch_lost(struct mailbox_watch *watch);
void mailbox_watch_free(struct mailbox_watch *watch);

/* ---------- cached message data (IMAP BODYSTRUCTURE, ENVELOPE, headers) ---------- */

/* Per-message blobs stored by field name ([A-Za-z0-9._-], 1..64 bytes; up
 * to 1 MiB less 8 bytes each) in the index cache, so a second FETCH need not read the
 * message file. A value answers only for the message it was stored for:
 * the cache goes with the index identity (cache_reset_id), UIDs are never
 * reused, and each value carries a tag of the message's file name that is
 * checked on lookup. NULL when absent or when `uid` is not in the index;
 * the data stays valid until the next cache call on `box`. */
const void *mailbox_cache_lookup(struct mailbox *box, uint32_t uid, const char *field, size_t *len);
/* Stores a value (replacing an earlier one). NOT_FOUND when `uid` is not
 * in the index. A full cache drops the value silently (an optimisation). */
bool mailbox_cache_store(struct mailbox *box, uint32_t uid, const char *field, const void *data,
                         size_t len, struct petrel_error *err);
/* Like mailbox_cache_store, but queued in `box` (its own lookups see the
 * value at once) and written with the others by mailbox_cache_flush: one
 * lock and one write for a FETCH over many uncached messages. Other
 * handles see queued values only after the flush; mailbox_close flushes. */
bool mailbox_cache_queue(struct mailbox *box, uint32_t uid, const char *field, const void *data,
                         size_t len, struct petrel_error *err);
/* Writes what mailbox_cache_queue queued (nothing queued: no I/O). */
bool mailbox_cache_flush(struct mailbox *box, struct petrel_error *err);

/* ---------- usage (quota, storage/quota/quota-usage.h) ---------- */

struct mail_folder_usage {
    uint64_t messages;
    uint64_t bytes; /* physical sizes */
};
struct fileindex_usage_cache; /* storage/fileindex/fileindex.h */
/* The folder's aggregate from its index without loading the messages'
 * records (O(1) in the number of messages), through `cache` when not NULL
 * (a caller that asks often; never stale). A folder whose index does not
 * exist yet is opened once (which builds the index from the files).
 * NOT_FOUND when the folder does not exist. */
bool mail_folder_usage(struct mail_user *user, const struct namespace_config *ns,
                       const char *name, struct fileindex_usage_cache *cache,
                       struct mail_folder_usage *out, struct petrel_error *err);
/* Recomputes the folder's aggregate from its records' sizes and writes it
 * (for an aggregate suspected wrong; the index heals itself anyway). */
bool mailbox_usage_recalc(struct mailbox *box, struct mail_folder_usage *out,
                          struct petrel_error *err);

#endif
