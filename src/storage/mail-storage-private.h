/* Inside the storage: what the storage API (mail-storage.c) and its drivers
 * share. Front ends never include this (tests/unit/check-storage-includes.py):
 * they see mail-storage.h and, to write a module, mail-storage-module.h.
 *
 * A driver (maildir/ now; sdbox and mdbox to come as siblings) fills a
 * struct mail_storage_vfuncs and is listed in mail_storage_drivers[]
 * (mail-storage.c), chosen by the scheme of the personal namespace's
 * `location` ("maildir:..."). Every call of mail-storage.h reaches the
 * driver through the table: the hooked ones (mail-storage.c) after the
 * modules' hooks, so no driver and no front end carries a module's rule;
 * the rest as they are (mail-folder.c, mailbox.c, mailbox-message.c,
 * mailbox-view.c, mailbox-watch.c). Each driver's struct mailbox starts
 * with a struct mailbox_common, through which the storage API finds the
 * user (and so the driver and the modules) of a handle without knowing the
 * rest; views and watches likewise start with their _common parts. Every
 * entry is required. */
#ifndef PETREL_STORAGE_MAIL_STORAGE_PRIVATE_H
#define PETREL_STORAGE_MAIL_STORAGE_PRIVATE_H

#include "storage/fileindex/fileindex.h"
#include "storage/mail-storage-module.h"
#include "storage/mail-storage.h"

struct mail_storage_vfuncs {
    const char *scheme; /* the `location` prefix before ':' */
    /* Driver state for a new handle (storage->driver); `parent` is the
     * handle a sibling is made from, NULL for a first one. */
    void *(*storage_init)(struct mail_storage *storage, struct mail_storage *parent);
    void (*storage_deinit)(void *driver);

    /* Folders: names validated by the driver, INBOX rules included. */
    bool (*folder_create)(struct mail_user *user, const struct namespace_config *ns,
                          const char *name, struct petrel_error *err);
    bool (*folder_delete)(struct mail_user *user, const struct namespace_config *ns,
                          const char *name, struct petrel_error *err);
    bool (*folder_rename)(struct mail_user *user, const struct namespace_config *ns,
                          const char *old_name, const char *new_name, struct petrel_error *err);

    struct mailbox *(*mailbox_open)(struct mail_user *user, const struct namespace_config *ns,
                                    const char *name, struct petrel_error *err);

    /* The write paths, with the contracts of their mail-storage.h names. */
    bool (*append)(struct mailbox *box, const void *data, size_t len, uint32_t flags,
                   const char *const *keywords, int64_t internal_date, uint32_t *uid_out,
                   struct petrel_error *err);
    bool (*append_file)(struct mailbox *box, const void *prefix, size_t prefix_len, int fd,
                        uint64_t offset, uint64_t len, uint32_t flags, const char *const *keywords,
                        int64_t internal_date, uint32_t *uid_out, struct petrel_error *err);
    bool (*copy)(struct mailbox *src, const uint32_t *uids, size_t uid_count, struct mailbox *dst,
                 bool keep_flags, uint32_t **new_uids, struct petrel_error *err);
    bool (*move)(struct mailbox *src, const uint32_t *uids, size_t uid_count, struct mailbox *dst,
                 uint32_t **new_uids, struct petrel_error *err);
    bool (*expunge)(struct mailbox *box, const uint32_t *uids, size_t uid_count,
                    uint32_t **expunged, size_t *expunged_count, struct petrel_error *err);
    bool (*update_flags)(struct mailbox *box, const uint32_t *uids, size_t uid_count,
                         const struct mailbox_flags_update *upd,
                         struct mailbox_flags_result **results, size_t *result_count,
                         uint32_t **failed, size_t *failed_count, struct petrel_error *err);
    bool (*set_flags)(struct mailbox *box, uint32_t uid, uint32_t flags,
                      const char *const *keywords, struct petrel_error *err);

    /* Reading messages and their cached data (no module hooks these). A
     * driver builds the data it hands out with mailbox_message_data_load()
     * (so mailbox_message_release() needs no driver). */
    struct mailbox_message_data *(*message_open)(struct mailbox *box, uint32_t uid,
                                                 struct petrel_error *err);
    int (*message_open_file)(struct mailbox *box, uint32_t uid, uint64_t *size,
                             struct petrel_error *err);
    bool (*message_sizes)(struct mailbox *box, uint32_t uid, uint64_t *size, uint64_t *vsize,
                          struct petrel_error *err);
    const char *(*keyword_name)(const struct mailbox *box, unsigned idx);
    const void *(*cache_lookup)(struct mailbox *box, uint32_t uid, const char *field, size_t *len);
    bool (*cache_store)(struct mailbox *box, uint32_t uid, const char *field, const void *data,
                        size_t len, bool queue, struct petrel_error *err);
    bool (*cache_flush)(struct mailbox *box, struct petrel_error *err);

    /* A session's view (mail-storage.h): the driver makes and syncs it
     * (from the disk when `refresh`, else from what the handle holds);
     * the storage API answers the lookups from its struct
     * mailbox_view_common without a call. */
    struct mailbox_view *(*view_new)(struct mailbox *box, struct petrel_error *err);
    void (*view_free)(struct mailbox_view *view);
    bool (*view_sync)(struct mailbox_view *view, bool refresh, struct mailbox_view_changes *changes,
                      struct petrel_error *err);
    bool (*view_note_flags)(struct mailbox_view *view, const struct mailbox_flags_result *results,
                            size_t count);

    /* Folders and the user's spool, unhooked (mail-folder.c). */
    bool (*folder_list)(struct mail_user *user, const struct namespace_config *ns, char ***names,
                        size_t *count, struct petrel_error *err);
    bool (*folder_exists)(struct mail_user *user, const struct namespace_config *ns,
                          const char *name);
    bool (*folder_usage)(struct mail_user *user, const struct namespace_config *ns,
                         const char *name, struct fileindex_usage_cache *cache,
                         struct mail_folder_usage *out, struct petrel_error *err);
    int (*spool_open)(struct mail_user *user, struct petrel_error *err);

    /* One open folder, unhooked (mailbox.c); mailbox_close never gets NULL. */
    void (*mailbox_close)(struct mailbox *box);
    bool (*is_read_only)(const struct mailbox *box);
    size_t (*memory_bytes)(const struct mailbox *box);
    bool (*mailbox_is)(const struct mailbox *box, const struct namespace_config *ns,
                       const char *name);
    bool (*mailbox_sync)(struct mailbox *box, struct petrel_error *err);
    uint32_t (*handle_uid_validity)(const struct mailbox *box);
    bool (*get_info)(struct mailbox *box, bool stats, struct mailbox_info *info,
                     struct petrel_error *err);
    bool (*foreach)(struct mailbox *box, size_t limit,
                    void (*fn)(const struct mailbox_message *msg, void *ctx), void *ctx,
                    bool *truncated, struct petrel_error *err);
    bool (*recent_claim)(struct mailbox *box, uint32_t *first, uint32_t *until,
                         struct petrel_error *err);
    uint32_t (*recent_peek)(struct mailbox *box);
    bool (*index_rebuild)(struct mailbox *box, struct mailbox_rebuild_stats *stats,
                          struct petrel_error *err);
    bool (*index_optimize)(struct mailbox *box, struct petrel_error *err);
    bool (*cache_purge)(struct mailbox *box, uint64_t *carried, uint64_t *reclaimed,
                        struct petrel_error *err);
    bool (*usage_recalc)(struct mailbox *box, struct mail_folder_usage *out,
                         struct petrel_error *err);

    /* Change notification (mailbox-watch.c): the driver's share of a hub
     * (made on its first watch there), and its watches, whose struct
     * starts with a struct mailbox_watch_common. With `native_only` a
     * watch that cannot use the kernel's notification is NULL. */
    void *(*watch_hub_new)(struct event_base *base, bool native);
    void (*watch_hub_free)(void *hub);
    struct mailbox_watch *(*watch_new)(void *hub, struct mailbox *box, void (*fn)(void *ctx),
                                       void *ctx, bool native_only, struct petrel_error *err);
    bool (*watch_take_changed)(struct mailbox_watch *watch);
    bool (*watch_is_native)(const struct mailbox_watch *watch);
    bool (*watch_lost)(struct mailbox_watch *watch);
    void (*watch_free)(struct mailbox_watch *watch);
    /* The folder's own directory, where files about it live beside its
     * messages (dovecot-acl): mail_folder_dir(). */
    bool (*folder_dir)(struct mail_user *user, const struct namespace_config *ns, const char *name,
                       struct buf *out, struct petrel_error *err);
};

/* For a driver's message_open: the `size` bytes of the open file `fd`
 * (not closed), mapped when large, else read; `what` names it in errors.
 * The index's sizes are trusted when the file still has `indexed_size`
 * bytes, else the vsize is measured. The caller sets uid and
 * internal_date; mailbox_message_release() frees the result. */
struct mailbox_message_data *mailbox_message_data_load(int fd, size_t size, const char *what,
                                                       uint64_t indexed_size,
                                                       uint64_t indexed_vsize,
                                                       struct petrel_error *err);

/* The size of `size` bytes with every bare LF made CRLF (RFC822.SIZE). */
uint64_t mailbox_message_vsize(const char *data, size_t size);

/* The drivers there are (mail-storage.c picks one by scheme). */
extern const struct mail_storage_vfuncs maildir_storage_vfuncs;
/* The listed driver whose scheme starts `location` ("<scheme>:..."), or
 * NULL: what the configuration accepts. */
const struct mail_storage_vfuncs *mail_storage_driver_find(const char *location);
/* Listed driver `i` (0, 1, ...), NULL past the last. */
const struct mail_storage_vfuncs *mail_storage_driver_at(size_t i);

struct mail_storage_module_entry {
    const struct mail_storage_module *module;
    void *ctx;
};

struct mail_storage {
    const struct mail_storage_vfuncs *v;
    void *driver;           /* the driver's state for this handle */
    struct mail_config cfg; /* borrowed copy of pointers: owned by the configuration */
    struct metrics_registry *metrics;
    struct fileindex_settings index_settings;
    struct mail_storage_module_entry modules[MAIL_STORAGE_MAX_MODULES];
    size_t module_count;
    bool save_hooks; /* some module has a save hook: sizes are worth adding up */
    struct mail_user **users;
    size_t user_count;
    size_t user_cap;
    /* METADATA's dict (storage/metadata/metadata-store.c): the configured
     * one (shared by siblings, used as is by the main handle only), the
     * loop of a sibling and its own instance on that loop */
    struct dict *attr_proto;
    bool attr_main;
    struct event_base *attr_base;
    struct dict *attr_dict;
    /* Instances of per-owner shared namespaces made on this handle
     * (storage/shared-namespace.h), kept until the handle is freed. */
    struct namespace_config **shared_ns;
    size_t shared_ns_count;
    size_t shared_ns_cap;
    /* The sharing registry's dict (storage/acl/acl-registry.c), the same
     * way: configured one, main or not, a sibling's loop and instance */
    struct dict *acl_reg_proto;
    bool acl_reg_main;
    struct event_base *acl_reg_base;
    struct dict *acl_reg_dict;
};

struct mail_user {
    struct mail_storage *storage;
    char *name;
    char *home;
    unsigned refs; /* long-lived holders (sessions): never evicted while > 0 */
    /* The userdb's quota rules and the quota module's state for this user
     * on this handle (quota-module.h); NULL until a front end sets them. */
    struct quota_user *quota;
    /* A logged-in user (mail_user_get_session): storage modules check its
     * rights (ACLs). The admin plane's users (mail_user_get) are not
     * sessions and pass every check (document 1). Cached apart by this. */
    bool session;
    char **groups; /* the userdb's groups (ACL group= entries), NULL-terminated */
    size_t group_count;
    /* Rights a module (ACLs) worked out for folders by name (LIST, open,
     * STATUS), kept for mail.acl.cache_secs; allocated on first use. A
     * change of `rights_gen` (mail_user_rights_changed) voids these and
     * the handles' caches. */
    struct mail_user_rights *rights;
    size_t rights_next; /* the slot to reuse next (round robin) */
    uint64_t rights_gen;
    /* Each namespace's root for this user (index as storage->cfg's
     * namespaces; NULL: expanded on each call, which reports the error),
     * worked out once: mail_user_namespace_root runs for every folder of
     * every quota check. */
    char **ns_roots;
    size_t ns_root_count;
};

#define MAIL_USER_RIGHTS_CACHED 32
struct mail_user_rights {
    const struct namespace_config *ns;
    char *name; /* NULL: free slot */
    uint32_t rights;
    int64_t checked_ms;
    uint64_t gen;
};

/* What a storage module (ACLs) keeps about one handle: the rights it
 * worked out, and when and against which file state. */
struct mailbox_rights_cache {
    bool valid;
    uint32_t rights;
    int64_t checked_ms; /* monotonic */
    uint64_t stamp;     /* of the ACL file it read (inode, size, mtime) */
    uint64_t gen;       /* the user's rights_gen it was worked out under */
    bool stamped;       /* `stamp` known (false: taken from the user's cache by name) */
};

/* The first member of every driver's struct mailbox. */
struct mailbox_common {
    struct mail_user *user;
    const struct namespace_config *ns;
    char *name; /* as opened ("INBOX" for the inbox) */
    enum mailbox_open_purpose purpose; /* set by mailbox_open_for() */
    struct mailbox_rights_cache rights;
    bool delivery; /* saves here are inbound deliveries (mailbox_set_delivery) */
    /* the reader's private \Seen (mailbox-pvt.h), once read */
    struct mailbox_pvt *pvt;
};

/* The first member of every driver's struct mailbox_view: the snapshot
 * itself (mailbox_view_* in mail-storage.h), kept by the driver, read by
 * the storage API (mailbox-view.c) without a call per message. */
struct mailbox_view_common {
    struct mailbox *box;
    struct mailbox_view_entry *entries; /* ascending UIDs */
    size_t count;
    size_t cap;
    char *keyword_names[MAILBOX_MAX_KEYWORDS];
    uint32_t uid_validity;
    uint32_t uid_next;
    uint64_t highest_modseq;
    /* Private \Seen (mailbox-pvt.h): the entries show the reader's; this
     * bitmap (by sequence, pvt_shared_count entries) keeps the folder's
     * own, given back to the driver before its next sync. NULL: none. */
    uint8_t *pvt_shared;
    size_t pvt_shared_count;
};

static inline struct mailbox_view_common *mailbox_view_common(const struct mailbox_view *view)
{
    return (struct mailbox_view_common *)(void *)view;
}

/* The first member of every driver's struct mailbox_watch (set by the
 * storage API). */
struct mailbox_watch_common {
    const struct mail_storage_vfuncs *v;
};

static inline struct mailbox_common *mailbox_common(const struct mailbox *box)
{
    return (struct mailbox_common *)(void *)box;
}

#endif
