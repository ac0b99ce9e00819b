/* A user's quota usage: the sum of the folder aggregates of the personal
 * namespace (document 3: usage is computed from the index on demand; no
 * stored counter is the source of truth). Cost: one directory listing of
 * the namespace plus, per folder, the index's base header and log (no
 * message is looked at). Folders a rule marks `ignore` are skipped. Runs
 * on the caller's thread with the caller's storage handle. */
#ifndef PETREL_STORAGE_QUOTA_USAGE_H
#define PETREL_STORAGE_QUOTA_USAGE_H

#include "core/error.h"
#include "storage/mail-storage.h"
#include "storage/quota/quota-limits.h"
#include "storage/quota/quota-rule.h"

#include <stdbool.h>

/* A cache of folder aggregates for a long-lived reader (quota-status),
 * holding at most `folders` folders; checked against the index files on
 * each use, so never stale. The storage API's name for the fileindex's
 * cache, so that callers outside the storage need not reach into it. */
struct fileindex_usage_cache *quota_usage_cache_new(size_t folders);
void quota_usage_cache_free(struct fileindex_usage_cache *cache);

/* The user's folder names kept between sums by one reader (a quota check
 * on every save): listed again only when the namespace root directory is
 * not the one listed (device, inode, modification and change times, by
 * stat), since creating, deleting or renaming a folder changes the root's
 * entries and so its times, and a delivery does not (it writes below
 * tmp/, new/ and cur/ and appends to files in the root). A root modified
 * less than QUOTA_FOLDER_LIST_SETTLE seconds before it was listed is not
 * kept: a later change within the same timestamp would not show. One
 * user, one thread. */
#define QUOTA_FOLDER_LIST_SETTLE 2
struct quota_folder_list;
struct quota_folder_list *quota_folder_list_new(void);
void quota_folder_list_free(struct quota_folder_list *list);
/* Listings of the root made through `list` (the rest were reused). */
uint64_t quota_folder_list_listings(const struct quota_folder_list *list);

/* Sums the user's folders into *out, through `cache` when not NULL
 * (fileindex_usage_cache: never stale). A folder that disappears while
 * being counted is skipped; any other failure (IO, damage that cannot be
 * rebuilt) fails the whole sum: callers that enforce fail open on it. */
bool quota_usage_get(struct mail_user *user, const struct quota_rules *rules,
                     struct fileindex_usage_cache *cache, struct quota_usage *out,
                     struct petrel_error *err);
/* quota_usage_get with the folder names from `list` (may be NULL: listed
 * each time). */
bool quota_usage_get_listed(struct mail_user *user, const struct quota_rules *rules,
                            struct quota_folder_list *list, struct fileindex_usage_cache *cache,
                            struct quota_usage *out, struct petrel_error *err);
/* As quota_usage_get after rebuilding each folder's aggregate from its
 * records (API quota/recalc). */
bool quota_usage_recalc(struct mail_user *user, const struct quota_rules *rules,
                        struct quota_usage *out, struct petrel_error *err);

#endif
