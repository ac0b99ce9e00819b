/* Storage modules: the rules every front end obeys (special use now;
 * quota, ACLs and metadata next), written once in the storage instead of
 * in IMAP, POP3, LMTP and the operator API. Dovecot wraps its mailbox
 * vfuncs with plugins for the same purpose; here a module is a table of
 * hooks that the storage calls around each operation of the driver.
 *
 * Order: modules are called in the order they were registered for the
 * hooks before an operation ("may it happen?") and in the reverse order
 * for the hooks after it ("it happened"), so a module registered later
 * sits inside one registered earlier, as nested wrappers would. The storage
 * registers its own modules (special use) first, in mail_storage_new();
 * the process's top-level context adds the others at start-up, before it
 * makes sibling handles (siblings take the parent's list). Nothing is
 * registered later: the list is read without a lock by every thread.
 *
 * Vetoes: a hook before an operation returns false with `err` set to say
 * no. Nothing has been written then: no file, no index record, no byte of
 * a message. The error's code is what the client is told, mapped once per
 * front end (docs/storage.md "How a storage module plugs in"); for
 * OVER_QUOTA the message is the reply's text too (IMAP and LMTP):
 *   PETREL_ERR_OVER_QUOTA   IMAP NO [OVERQUOTA], LMTP 452 4.2.2, HTTP 507
 *   PETREL_ERR_PERMISSION   IMAP NO [NOPERM],    LMTP 550 5.7.1, HTTP 403
 *   PETREL_ERR_LIMIT        IMAP NO [LIMIT],     LMTP 552 5.3.4, HTTP 409
 *   PETREL_ERR_UNAVAILABLE  IMAP NO [UNAVAILABLE], LMTP 451 4.3.2, HTTP 503
 * and the other codes as the storage's own errors are mapped.
 *
 * A module that says no must set `err` (the front end replies from it).
 *
 * Hooks after an operation cannot undo it (the change is committed); a
 * failure there is the module's to log. Exception: folder_created may fail
 * when the folder's creation asked for something of that module (a special
 * use) that it could not give; the storage then removes the folder again
 * and tells folder_deleted to the modules already told folder_created
 * (see mail_folder_create_params).
 *
 * Handles live on: IMAP keeps the selected folder open, LMTP caches open
 * folders between deliveries. mailbox_open runs when a handle is made, so
 * a rule for each operation (an ACL right to post, to expunge) belongs in
 * that operation's hook, not only in mailbox_open.
 *
 * What a module does not see as an operation of its own: the source side
 * of a MOVE is part of the save (kind MOVE; its messages leave `src`
 * without flags/expunge hooks), and mailbox_append_undo() (a MULTIAPPEND
 * failing part way takes out what it had saved) asks no module, only
 * tells the expunged hook.
 *
 * Every hook may be NULL. Hooks run on the caller's thread: a module's
 * `ctx` is shared by every thread and must be read-only after start-up or
 * locked by the module. */
#ifndef PETREL_STORAGE_MAIL_STORAGE_MODULE_H
#define PETREL_STORAGE_MAIL_STORAGE_MODULE_H

#include "storage/mail-storage.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How the messages of a save arrive in their folder. */
enum mail_save_kind {
    MAIL_SAVE_APPEND, /* new bytes: IMAP APPEND, LMTP delivery, the API's mail/append */
    MAIL_SAVE_COPY,   /* copies of messages of `src` (IMAP COPY) */
    MAIL_SAVE_MOVE,   /* moved from `src`, which loses them (IMAP MOVE) */
};

struct mail_save_info {
    enum mail_save_kind kind;
    struct mailbox *dst;
    struct mailbox *src; /* COPY and MOVE; NULL for APPEND */
    size_t count;        /* messages */
    uint64_t size;       /* their physical bytes in total (what a quota counts) */
    uint64_t max_size;   /* the largest one's bytes (what a per-message cap checks) */
    bool delivery;       /* an inbound delivery (LMTP): a quota adds its grace */
};

struct mail_storage_module {
    const char *name;

    /* Folders. `params` says what the creator asked for besides the name
     * (never NULL). */
    bool (*folder_create)(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                          const char *name, struct mail_folder_create_params *params,
                          struct petrel_error *err);
    bool (*folder_created)(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                           const char *name, struct mail_folder_create_params *params,
                           struct petrel_error *err);
    bool (*folder_delete)(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                          const char *name, struct petrel_error *err);
    void (*folder_deleted)(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                           const char *name);
    bool (*folder_rename)(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                          const char *old_name, const char *new_name, struct petrel_error *err);
    void (*folder_renamed)(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                           const char *old_name, const char *new_name);

    /* Opening a folder (every front end's first step to its messages). */
    bool (*mailbox_open)(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                         const char *name, struct petrel_error *err);

    /* Saving: before any byte is written, with the size known. */
    bool (*save)(void *ctx, const struct mail_save_info *info, struct petrel_error *err);
    /* Asked before a save's bytes arrive (mail_save_test: an IMAP APPEND's
     * announced literal): whether saving `size` bytes in total, the largest
     * message `max_size`, into folder `name` could succeed now. No holds
     * nothing and refuses as `save` would; yes promises nothing. */
    bool (*save_test)(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                      const char *name, uint64_t size, uint64_t max_size, struct petrel_error *err);
    /* After the commit: uids[i] is the new message i (0 for a source
     * message that was gone by then, COPY/MOVE). */
    void (*saved)(void *ctx, const struct mail_save_info *info, const uint32_t *uids, size_t count);
    /* The save this module said yes to did not happen (a module after it
     * said no, or the driver failed): what `save` held for it (a quota's
     * reservation) goes back. Exactly one of saved/save_aborted follows
     * every save that returned true. */
    void (*save_aborted)(void *ctx, const struct mail_save_info *info);

    /* Expunging \Deleted messages (`uids` NULL: all of them). */
    bool (*expunge)(void *ctx, struct mailbox *box, const uint32_t *uids, size_t uid_count,
                    struct petrel_error *err);
    void (*expunged)(void *ctx, struct mailbox *box, const uint32_t *uids, size_t count);

    /* Changing flags or keywords of `uids` as `upd` says (a single
     * replacement, mailbox_set_flags, comes as MAILBOX_FLAGS_REPLACE). */
    bool (*flags)(void *ctx, struct mailbox *box, const uint32_t *uids, size_t uid_count,
                  const struct mailbox_flags_update *upd, struct petrel_error *err);

    /* The last holder of `user` on this storage handle let go of it
     * (mail_user_unref brought its references to 0: an IMAP or POP3
     * session ended). */
    void (*user_released)(void *ctx, struct mail_user *user);
    /* Opening for a purpose (mailbox_open_for; mailbox_open is READ),
     * after the mailbox_open hooks. A folder the user may not see is
     * refused as missing (NOT_FOUND), one they may see but not use so with
     * PERMISSION. */
    bool (*mailbox_open_for)(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                             const char *name, enum mailbox_open_purpose purpose,
                             struct petrel_error *err);

    /* The rights this module leaves the user on a folder (RFC 4314 bits,
     * storage/acl/acl-rights.h; ACL_ALL_RIGHTS for "no objection"); `box`
     * is the open handle when there is one (a module may cache in it),
     * else NULL. mail_folder_my_rights() and mailbox_my_rights() give the
     * intersection over the modules. Never fails: a module that cannot
     * tell (an unreadable ACL file) answers with the rights it is sure of,
     * none at worst. */
    uint32_t (*folder_rights)(void *ctx, struct mail_user *user, const struct namespace_config *ns,
                              const char *name, struct mailbox *box);
};

/* How many modules one storage takes (the storage's own included). */
#define MAIL_STORAGE_MAX_MODULES 8

/* Adds `module` (with its context) at the end of the storage's list. At
 * start-up only, from the top-level context, before any sibling handle is
 * made. False (LIMIT) when the list is full. */
bool mail_storage_module_register(struct mail_storage *storage,
                                  const struct mail_storage_module *module, void *ctx,
                                  struct petrel_error *err);

/* The context `name` was registered with on this storage (siblings share
 * it), NULL when no module of that name is there: how a front end reaches
 * a module's own API (the quota's GETQUOTA). */
void *mail_storage_module_ctx(const struct mail_storage *storage, const char *name);

#endif
