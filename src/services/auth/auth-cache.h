/* The auth result cache: per username, a positive entry (the user's record
 * and a keyed digest of the last password that verified) or a negative one
 * (no such user), each with its own TTL, inside a byte limit with
 * least-recently-used eviction. Single-threaded (event loop only). Time is
 * passed in (monotonic milliseconds) so tests control it. */
#ifndef PETREL_SERVICES_AUTH_CACHE_H
#define PETREL_SERVICES_AUTH_CACHE_H

#include "clients/auth/userdb.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct auth_cache_config {
    size_t max_bytes;         /* 0 disables the cache */
    int64_t ttl_ms;           /* positive entries */
    int64_t negative_ttl_ms;  /* "no such user" entries; 0 = not cached */
};

enum auth_cache_result {
    AUTH_CACHE_MISS,          /* nothing cached */
    AUTH_CACHE_EXPIRED,       /* an entry was there but too old (removed) */
    AUTH_CACHE_HIT,           /* positive entry; password matched when one was given */
    AUTH_CACHE_HIT_NEGATIVE,  /* user known not to exist */
    AUTH_CACHE_PWD_MISMATCH,  /* positive entry, but the password digest differs
                                 (or no password was cached yet): re-verify */
};

struct auth_cache;

struct auth_cache *auth_cache_new(const struct auth_cache_config *cfg);
void auth_cache_free(struct auth_cache *c);

/* Looks `username` up. With `password` non-NULL the cached digest must
 * match it for a HIT. On HIT *entry borrows the cached record (valid until
 * the next call that changes the cache). */
enum auth_cache_result auth_cache_lookup(struct auth_cache *c, const char *username,
                                         const char *password, int64_t now_ms,
                                         const struct userdb_entry **entry);

/* Stores a positive entry (cloned; its `password` field is not kept). With
 * `verified_password` non-NULL, remembers its keyed digest for later
 * password checks. Replaces what was there. */
void auth_cache_put(struct auth_cache *c, const struct userdb_entry *entry,
                    const char *verified_password, int64_t now_ms);
/* Stores a negative entry. */
void auth_cache_put_negative(struct auth_cache *c, const char *username, int64_t now_ms);
/* Drops one user's entry (password changed, operator flush). */
void auth_cache_remove(struct auth_cache *c, const char *username);
void auth_cache_clear(struct auth_cache *c);

size_t auth_cache_entries(const struct auth_cache *c);
size_t auth_cache_bytes(const struct auth_cache *c);
size_t auth_cache_max_bytes(const struct auth_cache *c);

#endif
