/* The director's user table: one record per user hash (the director never
 * stores usernames), holding the user's mapping to a backend and the number
 * of sessions login proxies report for the user.
 *
 * Expiry: a record with sessions never expires. When it has none, it
 * expires `expire_ms` after its last refresh (a lookup, the end of its last
 * session, a move). Records without sessions sit on an expiry list in
 * refresh order — every refresh sets now + expire_ms, which is never before
 * any other record's deadline — so expiring is popping from the head, O(1)
 * per record.
 *
 * A record's mapping is `backend` (NULL: none — a record may exist only for
 * its sessions after its backend was flushed). `weak` marks a mapping made
 * while its target was being decided (a move whose old sessions are still
 * being killed); `killing_until_ms` is that deadline.
 *
 * Times are unix milliseconds passed in by the caller (tests drive the
 * clock). The table owns its records; `backend` and `sessions_head` are the
 * caller's (never dereferenced here). */
#ifndef PETREL_SERVICES_DIRECTOR_USERS_H
#define PETREL_SERVICES_DIRECTOR_USERS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct director_backend;
struct director_session;

struct director_user {
    uint32_t hash;
    struct director_backend *backend; /* NULL: no mapping */
    bool weak;
    int64_t expires_at_ms;    /* valid while sessions == 0 */
    int64_t killing_until_ms; /* 0: not being moved */
    uint32_t sessions;
    struct director_session *sessions_head; /* the caller's list of this user's sessions */
    /* private: the expiry list */
    struct director_user *exp_prev, *exp_next;
    bool on_expiry_list;
};

struct director_users;

/* `max_users` bounds the records (mappings and session-only records). */
struct director_users *director_users_new(int64_t expire_ms, size_t max_users);
void director_users_free(struct director_users *users);

/* Records in the table (with or without a mapping). */
size_t director_users_count(const struct director_users *users);
int64_t director_users_expire_ms(const struct director_users *users);

/* The record for `hash`, or NULL. Expired records that were not swept yet
 * are still returned: check director_user_expired(). */
struct director_user *director_users_find(const struct director_users *users, uint32_t hash);

/* The record for `hash`, created (no mapping, refreshed at `now_ms`) when
 * absent; NULL when the table is full. */
struct director_user *director_users_get(struct director_users *users, uint32_t hash,
                                         int64_t now_ms);

/* True when `u` has no sessions and its deadline has passed. */
bool director_user_expired(const struct director_user *u, int64_t now_ms);

/* Maps `u` to `backend` (weak or not) and refreshes it. */
void director_users_map(struct director_users *users, struct director_user *u,
                        struct director_backend *backend, bool weak, int64_t now_ms);

/* Sets the deadline to now + expire (only matters while it has no sessions). */
void director_users_refresh(struct director_users *users, struct director_user *u, int64_t now_ms);

/* Session accounting: while sessions > 0 the record does not expire; the
 * last session's end refreshes it. */
void director_users_session_added(struct director_users *users, struct director_user *u);
void director_users_session_removed(struct director_users *users, struct director_user *u,
                                    int64_t now_ms);

/* Drops `u`'s mapping; the record itself goes when it has no sessions
 * (then `u` is freed: do not use it afterwards). */
void director_users_unmap(struct director_users *users, struct director_user *u);

/* Unmaps every record mapped to `backend`; returns how many. */
size_t director_users_unmap_backend(struct director_users *users,
                                    const struct director_backend *backend);

/* Frees every expired record; returns how many. */
size_t director_users_expire(struct director_users *users, int64_t now_ms);

/* Calls fn for every record with a mapping that has not expired, in hash
 * order. fn must not change the table. */
void director_users_foreach_mapped(const struct director_users *users, int64_t now_ms,
                                   void (*fn)(const struct director_user *u, void *ctx), void *ctx);

#endif
