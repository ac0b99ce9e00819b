/* Shared namespaces per owner (docs/acl.md "Shared and public
 * namespaces"): a configured shared namespace whose prefix is
 * "<head>%u<sep>" ("shared/%u/", Dovecot's prefix=shared/%%u/) stands for
 * one namespace per other user. "shared/bob/Work" is folder "Work" of
 * bob's instance: prefix "shared/bob/", its location expanded with bob's
 * name and home, so every storage call on it reaches bob's files while the
 * session's user (the reader) is the one whose rights the ACL module
 * checks. Instances are made on first use and kept by the storage handle
 * until it is freed, so a pointer to one stays valid for the handle's
 * life (mailbox handles and rights caches hold such pointers). */
#ifndef PETREL_STORAGE_SHARED_NAMESPACE_H
#define PETREL_STORAGE_SHARED_NAMESPACE_H

#include "core/error.h"
#include "storage/mail-storage.h"

/* Instances one storage handle keeps at most (owners a thread has
 * touched); beyond, LIMIT. */
#define SHARED_NAMESPACE_MAX 65536

/* The instance of template `tmpl` for `owner` on the user's storage
 * handle. NOT_FOUND for an owner that is no valid user name or is `user`
 * itself (their own folders are in the personal namespace). */
const struct namespace_config *mail_shared_namespace(struct mail_user *user,
                                                     const struct namespace_config *tmpl,
                                                     const char *owner, struct petrel_error *err);

/* The namespace a full folder name (UTF-8, with its prefix) belongs to:
 * the longest prefix that matches; for a per-owner template the owner's
 * instance. *rest points into `full_name` after the (instance's) prefix.
 * NOT_FOUND when no namespace holds the name, or the name stops at a
 * template's owner level ("shared/bob") or names no valid owner. */
const struct namespace_config *mail_namespace_resolve(struct mail_user *user, const char *full_name,
                                                      const char **rest, struct petrel_error *err);

/* The root of an instance (namespace_root for mail-storage.c): the
 * template's location with the owner's name and home. */
bool mail_shared_namespace_root(const struct mail_storage *storage,
                                const struct namespace_config *ns, struct buf *out,
                                struct petrel_error *err);

/* Who holds the ACL list index and sharing-registry rows of the folders
 * of `ns` as `user` reaches them: for an instance of a per-owner shared
 * namespace whose location is the personal namespace's, the owner (an
 * admin-plane user: no rights are checked for it) and the owner's personal
 * namespace, whose folders are the same files; otherwise `user` and `ns`.
 * So a reader's SETACL (with a) on shared/bob/X updates bob's index and
 * bob's registry rows, as bob's own would. */
void mail_namespace_acl_holder(struct mail_user *user, const struct namespace_config *ns,
                               struct mail_user **holder,
                               const struct namespace_config **holder_ns);

/* Frees the instances (mail_storage_free). */
void mail_shared_namespaces_free(struct mail_storage *storage);

#endif
