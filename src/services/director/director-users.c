/* The user table (director-users.h): an open-addressing hash table keyed by
 * the user hash, linear probing with backward-shift deletion, load kept at
 * most 1/2; plus the expiry list of records without sessions.
 *
 * User hashes are MD5 prefixes of names a client chooses, so a client could
 * search for names whose hashes share their low bits and pile them into one
 * probe run. Slots are therefore chosen by a mix of the hash with a random
 * per-table seed, which such a client cannot know. */
#include "services/director/director-users.h"

#include "core/dlist.h"
#include "core/xalloc.h"

#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#define MIN_SLOTS 64

struct director_users {
    struct director_user **slots;
    size_t mask; /* slot count - 1 (a power of two) */
    size_t count;
    size_t max;
    int64_t expire_ms;
    uint32_t seed;
    struct director_user *exp_head, *exp_tail; /* oldest deadline first */
};

struct director_users *director_users_new(int64_t expire_ms, size_t max_users)
{
    struct director_users *users = xcalloc(1, sizeof(*users));
    users->slots = xcalloc(MIN_SLOTS, sizeof(*users->slots));
    users->mask = MIN_SLOTS - 1;
    users->max = max_users;
    users->expire_ms = expire_ms;
    if (getrandom(&users->seed, sizeof(users->seed), GRND_NONBLOCK) != sizeof(users->seed))
        users->seed = (uint32_t)time(NULL) ^ (uint32_t)(uintptr_t)users;
    return users;
}

void director_users_free(struct director_users *users)
{
    if (users == NULL)
        return;
    for (size_t i = 0; i <= users->mask; i++)
        free(users->slots[i]);
    free(users->slots);
    free(users);
}

size_t director_users_count(const struct director_users *users)
{
    return users->count;
}

int64_t director_users_expire_ms(const struct director_users *users)
{
    return users->expire_ms;
}

/* ---------- the expiry list ---------- */

static void exp_unlink(struct director_users *users, struct director_user *u)
{
    if (!u->on_expiry_list)
        return;
    DLIST_REMOVE_AT(users->exp_head, users->exp_tail, u, exp_prev, exp_next);
    u->on_expiry_list = false;
}

static void exp_append(struct director_users *users, struct director_user *u)
{
    DLIST_APPEND_AT(users->exp_head, users->exp_tail, u, exp_prev, exp_next);
    u->on_expiry_list = true;
}

/* ---------- the hash table ---------- */

/* The home slot: murmur3's 32-bit finaliser over the seeded hash. */
static size_t home_of(const struct director_users *users, uint32_t hash)
{
    uint32_t h = hash ^ users->seed;
    h ^= h >> 16;
    h *= 0x85ebca6bu;
    h ^= h >> 13;
    h *= 0xc2b2ae35u;
    h ^= h >> 16;
    return h & users->mask;
}

static size_t slot_of(const struct director_users *users, uint32_t hash)
{
    size_t i = home_of(users, hash);
    while (users->slots[i] != NULL && users->slots[i]->hash != hash)
        i = (i + 1) & users->mask;
    return i;
}

static void grow(struct director_users *users)
{
    size_t old_size = users->mask + 1;
    struct director_user **old = users->slots;
    users->slots = xcalloc(old_size * 2, sizeof(*users->slots));
    users->mask = old_size * 2 - 1;
    for (size_t i = 0; i < old_size; i++) {
        if (old[i] != NULL)
            users->slots[slot_of(users, old[i]->hash)] = old[i];
    }
    free(old);
}

/* Removes the record in slot i; later records of the probe run shift back
 * so every lookup still finds them without tombstones. */
static void remove_slot(struct director_users *users, size_t i)
{
    free(users->slots[i]);
    users->slots[i] = NULL;
    users->count--;
    size_t j = i;
    for (;;) {
        j = (j + 1) & users->mask;
        struct director_user *u = users->slots[j];
        if (u == NULL)
            return;
        size_t home = home_of(users, u->hash);
        /* u may move to the hole at i unless its home lies cyclically in (i, j]. */
        bool stays = (i <= j) ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            users->slots[i] = u;
            users->slots[j] = NULL;
            i = j;
        }
    }
}

static void remove_user(struct director_users *users, struct director_user *u)
{
    exp_unlink(users, u);
    remove_slot(users, slot_of(users, u->hash));
}

struct director_user *director_users_find(const struct director_users *users, uint32_t hash)
{
    return users->slots[slot_of(users, hash)];
}

struct director_user *director_users_get(struct director_users *users, uint32_t hash,
                                         int64_t now_ms)
{
    size_t i = slot_of(users, hash);
    if (users->slots[i] != NULL)
        return users->slots[i];
    if (users->count >= users->max)
        return NULL;
    if ((users->count + 1) * 2 > users->mask + 1) {
        grow(users);
        i = slot_of(users, hash);
    }
    struct director_user *u = xcalloc(1, sizeof(*u));
    u->hash = hash;
    users->slots[i] = u;
    users->count++;
    director_users_refresh(users, u, now_ms);
    return u;
}

bool director_user_expired(const struct director_user *u, int64_t now_ms)
{
    return u->sessions == 0 && u->expires_at_ms <= now_ms;
}

/* ---------- mappings and sessions ---------- */

void director_users_refresh(struct director_users *users, struct director_user *u, int64_t now_ms)
{
    u->expires_at_ms = now_ms + users->expire_ms;
    if (u->sessions == 0) {
        exp_unlink(users, u);
        exp_append(users, u);
    }
}

void director_users_map(struct director_users *users, struct director_user *u,
                        struct director_backend *backend, bool weak, int64_t now_ms)
{
    u->backend = backend;
    u->weak = weak;
    director_users_refresh(users, u, now_ms);
}

void director_users_session_added(struct director_users *users, struct director_user *u)
{
    if (u->sessions++ == 0)
        exp_unlink(users, u);
}

void director_users_session_removed(struct director_users *users, struct director_user *u,
                                    int64_t now_ms)
{
    if (u->sessions == 0)
        return;
    if (--u->sessions == 0) {
        if (u->backend == NULL) {
            remove_user(users, u); /* nothing left to remember */
            return;
        }
        director_users_refresh(users, u, now_ms);
    }
}

void director_users_unmap(struct director_users *users, struct director_user *u)
{
    u->backend = NULL;
    u->weak = false;
    u->killing_until_ms = 0;
    if (u->sessions == 0)
        remove_user(users, u);
}

size_t director_users_unmap_backend(struct director_users *users,
                                    const struct director_backend *backend)
{
    size_t n = 0;
    /* Removal shifts records back into earlier slots: rescan a slot after
     * a removal instead of stepping past it. */
    for (size_t i = 0; i <= users->mask;) {
        struct director_user *u = users->slots[i];
        if (u != NULL && u->backend == backend) {
            n++;
            bool had_sessions = u->sessions > 0;
            director_users_unmap(users, u);
            if (!had_sessions)
                continue; /* slot i now holds another record (or none) */
        }
        i++;
    }
    return n;
}

size_t director_users_expire(struct director_users *users, int64_t now_ms)
{
    size_t n = 0;
    while (users->exp_head != NULL && users->exp_head->expires_at_ms <= now_ms) {
        remove_user(users, users->exp_head);
        n++;
    }
    return n;
}

static int user_cmp(const void *a, const void *b)
{
    uint32_t x = (*(struct director_user *const *)a)->hash;
    uint32_t y = (*(struct director_user *const *)b)->hash;
    return x < y ? -1 : x > y ? 1 : 0;
}

void director_users_foreach_mapped(const struct director_users *users, int64_t now_ms,
                                   void (*fn)(const struct director_user *u, void *ctx), void *ctx)
{
    struct director_user **list = xcalloc(users->count + 1, sizeof(*list));
    size_t n = 0;
    for (size_t i = 0; i <= users->mask; i++) {
        struct director_user *u = users->slots[i];
        if (u != NULL && u->backend != NULL && !director_user_expired(u, now_ms))
            list[n++] = u;
    }
    qsort(list, n, sizeof(*list), user_cmp);
    for (size_t i = 0; i < n; i++)
        fn(list[i], ctx);
    free(list);
}
