/* The folders one LMTP delivery thread keeps open between deliveries.
 *
 * Opening a folder reads its whole index and (for the first append) its
 * dovecot-uidlist: for a large INBOX that costs far more than the delivery
 * itself. A delivery thread keeps its most recently used folders open and
 * only syncs a kept handle before appending (cheap when the directories did
 * not change; a rescan when another program changed them, as an open
 * would do).
 *
 * What it keeps is bounded three ways (docs/lmtp.md#open-folders): a count
 * (each open folder holds a few descriptors), bytes (mailbox_memory_bytes
 * of every kept handle together; a folder larger than the whole budget is
 * not kept at all), and time (lmtp_folder_cache_expire closes what was not
 * used for a while, so an idle server holds no folder open).
 *
 * Ownership: the cache owns its handles (and through them a reference to
 * their users); a handle it returns stays valid until the next call on the
 * cache. Single-threaded: one cache per delivery thread, used only with
 * that thread's mail storage (or by another thread that holds that
 * thread's lock, see lmtp-server.c). */
#ifndef PETREL_PROTOCOLS_LMTP_LMTP_FOLDER_CACHE_H
#define PETREL_PROTOCOLS_LMTP_LMTP_FOLDER_CACHE_H

#include "core/error.h"
#include "storage/mail-storage.h"

#include <stddef.h>
#include <stdint.h>

struct lmtp_folder_cache;

/* At most `max_folders` folders (0: none kept; every get opens, every put
 * closes) holding at most `max_bytes` together (0: none kept). */
struct lmtp_folder_cache *lmtp_folder_cache_new(size_t max_folders, size_t max_bytes);
void lmtp_folder_cache_free(struct lmtp_folder_cache *cache);

/* Folder `name` of `user`'s namespace `ns`, open and synced with the disk:
 * a kept handle, or a new one. NULL with err as mailbox_open() or
 * mailbox_sync() set it. Hand it back with lmtp_folder_cache_put(). */
struct mailbox *lmtp_folder_cache_get(struct lmtp_folder_cache *cache, struct mail_user *user,
                                      const struct namespace_config *ns, const char *name,
                                      struct petrel_error *err);
/* Returns a handle from lmtp_folder_cache_get(): kept as the most recently
 * used when `healthy` and it fits, closing the least recently used ones
 * until the count and the bytes are within the limits; closed when not
 * `healthy`, so that a handle that failed an append (its folder deleted or
 * renamed meanwhile) is not used again. */
void lmtp_folder_cache_put(struct lmtp_folder_cache *cache, struct mailbox *box, bool healthy);

/* Closes the folders last handed back `idle_ms` or more milliseconds ago
 * (0: all). Returns how many were closed. */
size_t lmtp_folder_cache_expire(struct lmtp_folder_cache *cache, int64_t idle_ms);

/* Folders kept, and their bytes as counted when they were handed back. */
size_t lmtp_folder_cache_count(const struct lmtp_folder_cache *cache);
size_t lmtp_folder_cache_bytes(const struct lmtp_folder_cache *cache);

#endif
