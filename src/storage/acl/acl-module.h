/* The ACL storage module: RFC 4314 rights checked on the storage hooks,
 * once for every front end (IMAP, POP3, LMTP), from the folders'
 * dovecot-acl files (acl-store.h). Registered at start-up when
 * mail.acl.enabled is true (docs/acl.md, docs/configuration.md).
 *
 * Who asks is the session's user (mail_user_get_session: its name and
 * userdb groups); the owner of a folder in their personal namespace has
 * every right unless an "owner" entry says otherwise. The admin plane's
 * users (mail_user_get) pass every check, as document 1 says. A folder
 * without l is refused exactly as a missing one (NOT_FOUND); one with l
 * but without the right asked for with PERMISSION "Permission denied".
 *
 * Which right each hook asks (RFC 4314 section 4):
 *   open for READ r, for SAVE i, for POST p (the owner's i will do)
 *   save: APPEND/COPY/MOVE into i (p for a POST handle); COPY from r;
 *         MOVE from t and e
 *   expunge e; flags: \Seen s, \Deleted t, anything else w
 *   create k on the nearest existing parent (the namespace root for a
 *   top-level folder); delete x; rename x on the old name and k on the
 *   new name's parent.
 * A new folder gets a copy of its parent's (or the root's) ACL file. */
#ifndef PETREL_STORAGE_ACL_ACL_MODULE_H
#define PETREL_STORAGE_ACL_ACL_MODULE_H

#include "storage/acl/acl-list.h"
#include "storage/mail-storage-module.h"

/* Register with the process's struct mail_acl_config (mail.acl) as ctx. */
extern const struct mail_storage_module acl_storage_module;

/* The identity the module checks `user` as, on a folder of `ns` (owner of
 * a personal namespace). Borrows from `user`. */
void acl_user_identity(const struct mail_user *user, const struct namespace_config *ns,
                       struct acl_identity *out);

/* Whether `id` (an entry of the ACL of a folder of `ns`) matches `user`:
 * a change to it changes the user's own rights. */
bool acl_id_matches_user(const struct acl_id *id, const struct mail_user *user,
                         const struct namespace_config *ns);

/* The folder whose ACL a new folder `name` inherits: the nearest existing
 * ancestor, else the namespace root (""), NUL-terminated in `out`. */
void acl_parent_of(struct mail_user *user, const struct namespace_config *ns, const char *name,
                   struct buf *out);

#endif
