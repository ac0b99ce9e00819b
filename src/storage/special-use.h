/* RFC 6154 special-use attributes of the personal namespace: defaults from
 * `mail.special_use`, per-user overrides in "<root>/petrel-special-use"
 * (lines "<folder>\t<attr>", UTF-8 names; written temp + fsync + rename
 * under a lock file). An override wins over a default for the same folder;
 * an override with an empty attribute hides a default. */
#ifndef PETREL_STORAGE_SPECIAL_USE_H
#define PETREL_STORAGE_SPECIAL_USE_H

#include "core/error.h"
#include "storage/mail-storage.h"

#include <stdbool.h>
#include <stddef.h>

enum special_use_source { SPECIAL_USE_OVERRIDE, SPECIAL_USE_DEFAULT, SPECIAL_USE_NONE };

struct special_use_entry {
    char *folder;
    char *attr; /* "" = explicitly none */
};

struct special_use_list {
    struct special_use_entry *entries;
    size_t count;
    size_t cap;
};

/* True for one of the RFC 6154 attributes (\All \Archive \Drafts \Flagged
 * \Important \Junk \Sent \Trash). */
bool special_use_attr_valid(const char *attr);
/* The canonical spelling of `attr` compared without case (IMAP atoms), or
 * NULL when it is none of them. */
const char *special_use_attr_canonical(const char *attr);
/* Whether folders of `ns` carry special-use attributes: the personal
 * namespace only. */
bool special_use_namespace(struct mail_user *user, const struct namespace_config *ns);

/* The storage module (registered first by mail_storage_new): sets the
 * attribute a folder is created with (mail_folder_create_params), and
 * moves and drops overrides with their folders. Front ends do not call
 * special_use_folder_renamed/_deleted themselves. */
struct mail_storage_module;
extern const struct mail_storage_module special_use_module;
/* The user's overrides. */
bool special_use_read(struct mail_user *user, struct special_use_list *out,
                      struct petrel_error *err);
/* The attribute in force for `folder` and where it comes from ("" for none). */
bool special_use_get(struct mail_user *user, const char *folder, const char **attr,
                     enum special_use_source *source, struct special_use_list *scratch,
                     struct petrel_error *err);
/* The same from overrides read already (special_use_read), for a caller
 * asking about many folders at once (IMAP LIST); `source` may be NULL. */
const char *special_use_in_force(struct mail_user *user, const struct special_use_list *overrides,
                                 const char *folder, enum special_use_source *source);
/* Sets (attr non-NULL) or removes (attr NULL) the override for `folder`. */
bool special_use_set(struct mail_user *user, const char *folder, const char *attr,
                     struct petrel_error *err);
/* Follows a folder rename / delete (children included). */
bool special_use_folder_renamed(struct mail_user *user, const char *old_name, const char *new_name,
                                char separator, struct petrel_error *err);
bool special_use_folder_deleted(struct mail_user *user, const char *name, struct petrel_error *err);
const char *special_use_source_name(enum special_use_source source);
void special_use_list_free(struct special_use_list *list);

#endif
