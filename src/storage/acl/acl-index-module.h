/* The storage module that keeps each namespace's ACL list index
 * (acl-list-index.h) in step with folder deletes and renames, for every
 * front end and the admin plane (document 1: a delete removes "the
 * namespace-wide list entries pointing at it", a rename rewrites them).
 * The folder's own dovecot-acl file goes or moves with its directory; here
 * only the index rows follow: a deleted folder's rows go (its children,
 * which Maildir++ keeps, keep theirs), a renamed folder's rows and those of
 * the children that moved with it take the new names. A namespace without
 * an index is left without one. Registered at start-up whether or not
 * ACLs are enabled, since the API writes ACL files either way. */
#ifndef PETREL_STORAGE_ACL_ACL_INDEX_MODULE_H
#define PETREL_STORAGE_ACL_ACL_INDEX_MODULE_H

#include "storage/mail-storage-module.h"

/* No context (NULL). */
extern const struct mail_storage_module acl_index_module;

#endif
