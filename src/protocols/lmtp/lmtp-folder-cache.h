/* The folders one LMTP delivery thread keeps open between deliveries.
 *
 * Opening a folder reads its whole index and (for the first append) its
 * dovecot-uidlist: for a large INBOX that costs far more than the delivery
 * itself. A delivery thread keeps its most recently used folders open and
 * only syncs a kept handle before appending (cheap when the directories did
 * not change; a rescan when another program changed them, as an open
 * would do).
 *
 * Ownership: the cache owns its handles (and through them a reference to
 * their users); a handle it returns stays valid until the next call on the
 * cache. Single-threaded: one cache per delivery thread, used only with
 * that thread's mail storage. */
#ifndef PETREL_PROTOCOLS_LMTP_LMTP_FOLDER_CACHE_H
#define PETREL_PROTOCOLS_LMTP_LMTP_FOLDER_CACHE_H

#include "core/error.h"
#include "storage/mail-storage.h"

#include <stddef.h>

struct lmtp_folder_cache;

/* At most `capacity` folders (0: none kept; every get opens, every put
 * closes). */
struct lmtp_folder_cache *lmtp_folder_cache_new(size_t capacity);
void lmtp_folder_cache_free(struct lmtp_folder_cache *cache);

/* Folder `name` of `user`'s namespace `ns`, open and synced with the disk:
 * a kept handle, or a new one. NULL with err as mailbox_open() or
 * mailbox_sync() set it. Hand it back with lmtp_folder_cache_put(). */
struct mailbox *lmtp_folder_cache_get(struct lmtp_folder_cache *cache, struct mail_user *user,
                                      const struct namespace_config *ns, const char *name,
                                      struct petrel_error *err);
/* Returns a handle from lmtp_folder_cache_get(): kept (the least recently
 * used one closed when full) when `healthy`, else closed, so that a handle
 * that failed an append (its folder deleted or renamed meanwhile) is not
 * used again. */
void lmtp_folder_cache_put(struct lmtp_folder_cache *cache, struct mailbox *box, bool healthy);

#endif
