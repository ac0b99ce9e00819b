/* The director's user table (services/director/director-users.c): records
 * by hash, expiry after the last refresh or session, weak mappings,
 * unmapping a backend's users, the size limit, and the hash table under
 * many inserts and removals. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/xalloc.h"
#include "services/director/director-users.h"

#include <stdlib.h>
#include <string.h>

#define EXPIRE 60000

/* Stand-ins for backends: the table only compares the pointers. */
static struct director_backend *backend_a(void)
{
    return (struct director_backend *)(uintptr_t)0x1000;
}

static struct director_backend *backend_b(void)
{
    return (struct director_backend *)(uintptr_t)0x2000;
}

static void test_map_and_expire(void **state)
{
    (void)state;
    struct director_users *users = director_users_new(EXPIRE, 100);
    struct director_user *u = director_users_get(users, 42, 1000);
    assert_non_null(u);
    assert_ptr_equal(director_users_get(users, 42, 2000), u); /* same record */
    director_users_map(users, u, backend_a(), false, 1000);
    assert_int_equal(u->expires_at_ms, 1000 + EXPIRE);
    assert_ptr_equal(director_users_find(users, 42), u);
    assert_null(director_users_find(users, 43));
    assert_false(director_user_expired(u, 1000 + EXPIRE - 1));
    assert_true(director_user_expired(u, 1000 + EXPIRE));

    assert_int_equal(director_users_expire(users, 1000 + EXPIRE - 1), 0);
    assert_int_equal(director_users_count(users), 1);
    director_users_refresh(users, u, 5000); /* a lookup later: the deadline moves */
    assert_int_equal(director_users_expire(users, 1000 + EXPIRE), 0);
    assert_int_equal(director_users_expire(users, 5000 + EXPIRE), 1);
    assert_null(director_users_find(users, 42));
    assert_int_equal(director_users_count(users), 0);
    director_users_free(users);
}

static void test_sessions_keep_a_mapping(void **state)
{
    (void)state;
    struct director_users *users = director_users_new(EXPIRE, 100);
    struct director_user *u = director_users_get(users, 7, 0);
    director_users_map(users, u, backend_a(), false, 0);
    director_users_session_added(users, u);
    director_users_session_added(users, u);
    /* Sessions: never expires, however long. */
    assert_false(director_user_expired(u, 100 * EXPIRE));
    assert_int_equal(director_users_expire(users, 100 * EXPIRE), 0);
    director_users_session_removed(users, u, 200 * EXPIRE);
    assert_int_equal(director_users_expire(users, 300 * EXPIRE), 0); /* one left */
    director_users_session_removed(users, u, 300 * EXPIRE);
    /* The last session's end starts the clock. */
    assert_int_equal(u->expires_at_ms, 300 * EXPIRE + EXPIRE);
    assert_int_equal(director_users_expire(users, 300 * EXPIRE + EXPIRE - 1), 0);
    assert_int_equal(director_users_expire(users, 300 * EXPIRE + EXPIRE), 1);
    director_users_free(users);
}

static void test_weak_mapping_expires(void **state)
{
    (void)state;
    struct director_users *users = director_users_new(EXPIRE, 100);
    struct director_user *strong = director_users_get(users, 1, 0);
    director_users_map(users, strong, backend_a(), false, 0);
    struct director_user *weak = director_users_get(users, 2, 10);
    director_users_map(users, weak, backend_b(), true, 10);
    weak->killing_until_ms = 2000;
    assert_true(weak->weak);
    /* A weak mapping is a mapping: it expires like any other, in order. */
    assert_int_equal(director_users_expire(users, EXPIRE), 1);
    assert_null(director_users_find(users, 1));
    assert_ptr_equal(director_users_find(users, 2), weak);
    assert_int_equal(director_users_expire(users, EXPIRE + 10), 1);
    assert_null(director_users_find(users, 2));
    director_users_free(users);
}

struct seen {
    uint32_t hashes[16];
    size_t count;
};

static void collect(const struct director_user *u, void *ctx)
{
    struct seen *s = ctx;
    s->hashes[s->count++] = u->hash;
}

static void test_unmap_backend_and_listing(void **state)
{
    (void)state;
    struct director_users *users = director_users_new(EXPIRE, 100);
    uint32_t hashes[] = {900, 5, 77, 300, 64 + 5, 128 + 5}; /* 5, 69, 133 share low bits */
    for (size_t i = 0; i < 6; i++) {
        struct director_user *u = director_users_get(users, hashes[i], 0);
        director_users_map(users, u, i % 2 == 0 ? backend_a() : backend_b(), false, 0);
    }
    /* One of backend_a's users has a session: its record stays, unmapped. */
    struct director_user *busy = director_users_find(users, 77);
    director_users_session_added(users, busy);
    struct director_user *session_only = director_users_get(users, 12345, 0);
    director_users_session_added(users, session_only); /* no mapping at all */

    struct seen s = {0};
    director_users_foreach_mapped(users, 0, collect, &s);
    assert_int_equal(s.count, 6);
    for (size_t i = 1; i < s.count; i++)
        assert_true(s.hashes[i - 1] < s.hashes[i]); /* hash order */

    assert_int_equal(director_users_unmap_backend(users, backend_a()), 3);
    assert_null(director_users_find(users, 900));
    assert_null(director_users_find(users, 69));
    assert_ptr_equal(director_users_find(users, 77), busy);
    assert_null(busy->backend);
    for (size_t i = 1; i < 6; i += 2)
        assert_non_null(director_users_find(users, hashes[i]));
    memset(&s, 0, sizeof(s));
    director_users_foreach_mapped(users, 0, collect, &s);
    assert_int_equal(s.count, 3);
    /* The unmapped record goes with its last session. */
    director_users_session_removed(users, busy, 10);
    assert_null(director_users_find(users, 77));
    director_users_free(users);
}

static void test_limit(void **state)
{
    (void)state;
    struct director_users *users = director_users_new(EXPIRE, 3);
    assert_non_null(director_users_get(users, 1, 0));
    assert_non_null(director_users_get(users, 2, 0));
    assert_non_null(director_users_get(users, 3, 0));
    assert_null(director_users_get(users, 4, 0));     /* full */
    assert_non_null(director_users_get(users, 2, 0)); /* an existing one is fine */
    assert_int_equal(director_users_expire(users, EXPIRE), 3);
    assert_non_null(director_users_get(users, 4, EXPIRE));
    director_users_free(users);
}

/* Many records with clustered hashes, removed in an interleaved order:
 * every survivor must stay findable (backward-shift deletion). */
static void test_table_stress(void **state)
{
    (void)state;
    enum { N = 60000 };
    struct director_users *users = director_users_new(EXPIRE, N);
    uint32_t *h = xcalloc(N, sizeof(uint32_t));
    uint32_t x = 2463534242u;
    for (int i = 0; i < N; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        h[i] = (i % 3 == 0) ? (x & 0xffff0000u) | 7u : x | 1u; /* a third share their low bits */
        struct director_user *u = director_users_get(users, h[i], i);
        if (u->backend == NULL)
            director_users_map(users, u, backend_a(), false, i); /* duplicates: same record */
    }
    size_t before = director_users_count(users);
    /* Records of even i expire first (refreshed earlier)... */
    for (int i = 1; i < N; i += 2)
        director_users_refresh(users, director_users_find(users, h[i]), 10 * N);
    size_t gone = director_users_expire(users, N + EXPIRE);
    assert_true(gone > 0 && gone < before);
    for (int i = 1; i < N; i += 2)
        assert_non_null(director_users_find(users, h[i]));
    assert_int_equal(director_users_count(users), before - gone);
    assert_int_equal(director_users_expire(users, 10 * N + EXPIRE), before - gone);
    assert_int_equal(director_users_count(users), 0);
    free(h);
    director_users_free(users);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_map_and_expire),
        cmocka_unit_test(test_sessions_keep_a_mapping),
        cmocka_unit_test(test_weak_mapping_expires),
        cmocka_unit_test(test_unmap_backend_and_listing),
        cmocka_unit_test(test_limit),
        cmocka_unit_test(test_table_stress),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
