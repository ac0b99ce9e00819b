/* The owner-discovery registry: which owners have shared a folder with
 * whom, in the dict named by mail.acl.sharing_map (document 1's
 * `acl_sharing_map`), in Dovecot's `acl_shared_dict` key layout so that a
 * registry written by either is read by the other:
 *
 *     shared/shared-boxes/user/<to-user>/<owner>   = "1"
 *     shared/shared-boxes/group/<group>/<owner>    = "1"
 *     shared/shared-boxes/anyone/<owner>           = "1"
 *
 * An owner has a key for an identifier when some folder (not the namespace
 * root) of the owner's index (acl-list-index.h) has a positive entry with
 * the lookup right for it. As in Dovecot: `authenticated` is written as
 * `anyone` (they are not told apart here), `group-override=` as `group/`,
 * `owner` and the owner's own `user=` entry are not written (nobody
 * discovers themselves), negative entries are not projected (a hint that
 * over-reports is checked against the index at LIST; one that
 * under-reports would hide a share). Names with a '/' cannot be keys and
 * are skipped.
 *
 * A hint, not the authority: LIST in a shared namespace reads the owners
 * from here, then each owner's index for what is visible.
 *
 * Threads and loops, as METADATA's dict (metadata-store.h): the main
 * storage handle uses the configured dict (opened on the main loop, where
 * the API runs); a sibling on another loop (an IMAP worker) gets that loop
 * with acl_registry_storage_bind_loop() and opens an instance of its own on
 * first use. Every call below completes through a callback from the
 * handle's loop (at once for the file and SQLite drivers, later for Redis
 * and PostgreSQL), exactly once. No call blocks a loop. */
#ifndef PETREL_STORAGE_ACL_ACL_REGISTRY_H
#define PETREL_STORAGE_ACL_ACL_REGISTRY_H

#include "core/error.h"
#include "storage/acl/acl-list-index.h"
#include "storage/acl/acl-list.h"
#include "storage/mail-storage.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>

struct dict;

#define ACL_REGISTRY_PREFIX "shared/shared-boxes/"

/* ---------- the dict of a storage handle ---------- */

/* Names the registry's dict for the process's main storage, before any
 * sibling is made; siblings inherit it. NULL: no registry. */
void acl_registry_storage_set_dict(struct mail_storage *storage, struct dict *dict);
/* The sibling `storage` runs on `base`: its dict is an instance of its own,
 * made here (main thread, while the configuration's registry exists) and
 * opened on first use on that loop's thread. */
void acl_registry_storage_bind_loop(struct mail_storage *storage, struct event_base *base);
/* The dict for this handle's loop; NULL with UNSUPPORTED when
 * mail.acl.sharing_map is not configured, UNAVAILABLE when the instance
 * cannot be opened or the handle belongs to no loop (a delivery thread). */
struct dict *acl_registry_dict(struct mail_storage *storage, struct petrel_error *err);
/* Whether mail.acl.sharing_map names a dict for this handle. */
bool acl_registry_configured(const struct mail_storage *storage);
/* Frees the handle's own instance (mail_storage_free calls it). */
void acl_registry_storage_free(struct mail_storage *storage);

/* ---------- keys (pure) ---------- */

/* The registry identifiers ("anyone", "user/bob", "group/staff") that the
 * rows of `idx` give `owner`'s folders, sorted, each once, into `out`
 * (NULL-terminated array of `*count` strings; free with
 * acl_registry_ids_free). */
void acl_registry_ids_of(const struct acl_index *idx, const char *owner, char ***out,
                         size_t *count);
void acl_registry_ids_free(char **ids, size_t count);

/* ---------- lookup ---------- */

/* Owners sorted, each once; valid only during the callback. ok false with
 * `error` on a dict failure (owners then empty). */
typedef void acl_registry_owners_cb(bool ok, const char *error, const char *const *owners,
                                    size_t count, void *ctx);

/* The owners `who` may discover: those with a key for "anyone" (which
 * `authenticated` grants are written as), for "user/<who->user>" and for
 * "group/<g>" of each of `who->groups`. A NULL `who->user` (nobody logged
 * in) looks up "anyone" alone. `who` is copied. */
void acl_registry_owners(struct dict *dict, const struct acl_identity *who,
                         acl_registry_owners_cb *cb, void *ctx);

/* ---------- writing ---------- */

/* ok false with `error`; `rows` the keys the owner has after the sync. */
typedef void acl_registry_done_cb(bool ok, const char *error, size_t rows, void *ctx);

/* Makes `owner`'s keys exactly acl_registry_ids_of(`idx`): the registry is
 * iterated for the owner's current keys (as Dovecot does), then one
 * transaction adds the missing and removes the others. `idx` is read at
 * once. What acl/registry/rebuild runs. */
void acl_registry_sync(struct dict *dict, const char *owner, const struct acl_index *idx,
                       acl_registry_done_cb *cb, void *ctx);

/* What acl_list_index_update() calls after each write that changed the
 * index, under its lock: one transaction on the dict of `owner`'s storage
 * handle that sets the keys `after` gives and unsets those only `before`
 * gave (no walk of the registry, so a user's SETACL costs a few keys
 * whatever the registry's size); for a personal namespace only (other
 * namespaces have no owner to discover), nothing without a registry.
 * Transactions of one loop commit in order; two loops changing one owner
 * at the same moment may commit out of order, and a failure is logged:
 * acl/registry/rebuild (acl_registry_sync) repairs either. */
void acl_registry_sync_owner(struct mail_user *owner, const struct namespace_config *ns,
                             const struct acl_index *before, const struct acl_index *after);

#endif
