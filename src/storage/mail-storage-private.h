/* Inside the storage: what the storage API (mail-storage.c) and its drivers
 * share. Front ends never include this (tests/unit/check-storage-includes.py):
 * they see mail-storage.h and, to write a module, mail-storage-module.h.
 *
 * A driver (maildir/ now; sdbox and mdbox to come as siblings) fills a
 * struct mail_storage_vfuncs and is listed in mail_storage_drivers[]
 * (mail-storage.c), chosen by the scheme of the personal namespace's
 * `location` ("maildir:..."). The storage API runs the modules' hooks
 * around each call it passes to the driver, so no driver and no front end
 * carries a module's rule. Each driver's struct mailbox starts with a
 * struct mailbox_common, through which the storage API finds the user (and
 * so the driver and the modules) of a handle without knowing the rest. */
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
};

/* The drivers there are (mail-storage.c picks one by scheme). */
extern const struct mail_storage_vfuncs maildir_storage_vfuncs;

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
};

struct mail_user {
    struct mail_storage *storage;
    char *name;
    char *home;
    unsigned refs; /* long-lived holders (sessions): never evicted while > 0 */
};

/* The first member of every driver's struct mailbox. */
struct mailbox_common {
    struct mail_user *user;
    const struct namespace_config *ns;
    char *name; /* as opened ("INBOX" for the inbox) */
};

static inline struct mailbox_common *mailbox_common(const struct mailbox *box)
{
    return (struct mailbox_common *)(void *)box;
}

#endif
