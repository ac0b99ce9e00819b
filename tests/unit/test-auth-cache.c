/* Unit tests for services/auth/auth-cache.h: hits with and without a
 * password, the mismatch path, TTL expiry of positive and negative entries,
 * replacing, removing and clearing, byte accounting with LRU eviction,
 * max_bytes 0, many users, and the cost of a HIT. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "services/auth/auth-cache.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TTL 60000
#define NEG_TTL 5000

static struct auth_cache *cache_with(size_t max_bytes, int64_t ttl, int64_t neg_ttl)
{
    struct auth_cache_config cfg = {
        .max_bytes = max_bytes, .ttl_ms = ttl, .negative_ttl_ms = neg_ttl};
    struct auth_cache *c = auth_cache_new(&cfg);
    assert_non_null(c);
    assert_int_equal(auth_cache_max_bytes(c), max_bytes);
    return c;
}

static struct userdb_entry *user(const char *name)
{
    struct userdb_entry *e = userdb_entry_new(name);
    char home[128];
    snprintf(home, sizeof(home), "/home/%s", name);
    assert_true(userdb_entry_set(e, "home", home, NULL));
    assert_true(userdb_entry_set(e, "uid", "1000", NULL));
    return e;
}

/* Puts `name` with `password` as the verified password. */
static void put_user(struct auth_cache *c, const char *name, const char *password, int64_t now)
{
    struct userdb_entry *e = user(name);
    auth_cache_put(c, e, password, now);
    userdb_entry_free(e);
}

static enum auth_cache_result look(struct auth_cache *c, const char *name, const char *password,
                                   int64_t now)
{
    const struct userdb_entry *entry = (const struct userdb_entry *)1;
    enum auth_cache_result r = auth_cache_lookup(c, name, password, now, &entry);
    if (r == AUTH_CACHE_HIT) {
        assert_non_null(entry);
        assert_string_equal(entry->username, name);
    } else {
        assert_null(entry);
    }
    return r;
}

static void test_hit_and_mismatch(void **state)
{
    (void)state;
    struct auth_cache *c = cache_with(1 << 20, TTL, NEG_TTL);
    assert_int_equal(look(c, "alice", "secret", 0), AUTH_CACHE_MISS);

    struct userdb_entry *e = user("alice");
    e->password = strdup("{PLAIN}secret");
    auth_cache_put(c, e, "secret", 1000);
    userdb_entry_free(e);

    const struct userdb_entry *got = NULL;
    assert_int_equal(auth_cache_lookup(c, "alice", "secret", 1001, &got), AUTH_CACHE_HIT);
    assert_string_equal(got->home, "/home/alice");
    assert_int_equal(got->uid, 1000);
    assert_null(got->password); /* the stored hash is not kept */
    assert_int_equal(look(c, "alice", NULL, 1002), AUTH_CACHE_HIT);
    assert_int_equal(look(c, "alice", "Secret", 1003), AUTH_CACHE_PWD_MISMATCH);
    assert_int_equal(look(c, "alice", "", 1003), AUTH_CACHE_PWD_MISMATCH);
    assert_int_equal(look(c, "alice", "secret\xff", 1003), AUTH_CACHE_PWD_MISMATCH);
    assert_int_equal(look(c, "Alice", "secret", 1004), AUTH_CACHE_MISS);
    assert_int_equal(look(c, "alic", "secret", 1004), AUTH_CACHE_MISS);
    assert_int_equal(look(c, "alicex", "secret", 1004), AUTH_CACHE_MISS);
    /* A mismatch leaves the entry in place. */
    assert_int_equal(look(c, "alice", "secret", 1005), AUTH_CACHE_HIT);
    /* NULL entry pointer is allowed. */
    assert_int_equal(auth_cache_lookup(c, "alice", "secret", 1006, NULL), AUTH_CACHE_HIT);

    /* Cached from a userdb lookup (no password verified yet): a password
     * given means the caller must verify. */
    put_user(c, "bob", NULL, 1000);
    assert_int_equal(look(c, "bob", NULL, 1001), AUTH_CACHE_HIT);
    assert_int_equal(look(c, "bob", "anything", 1001), AUTH_CACHE_PWD_MISMATCH);
    assert_int_equal(look(c, "bob", "", 1001), AUTH_CACHE_PWD_MISMATCH);

    /* An empty password is a password like any other. */
    put_user(c, "carol", "", 1000);
    assert_int_equal(look(c, "carol", "", 1001), AUTH_CACHE_HIT);
    assert_int_equal(look(c, "carol", "x", 1001), AUTH_CACHE_PWD_MISMATCH);
    auth_cache_free(c);
}

static void test_ttl_expiry(void **state)
{
    (void)state;
    struct auth_cache *c = cache_with(1 << 20, TTL, NEG_TTL);
    put_user(c, "alice", "secret", 1000);
    assert_int_equal(look(c, "alice", "secret", 1000 + TTL - 1), AUTH_CACHE_HIT);
    assert_int_equal(auth_cache_entries(c), 1);
    assert_int_equal(look(c, "alice", "secret", 1000 + TTL), AUTH_CACHE_EXPIRED);
    assert_int_equal(auth_cache_entries(c), 0);
    assert_int_equal(auth_cache_bytes(c), 0);
    assert_int_equal(look(c, "alice", "secret", 1000 + TTL), AUTH_CACHE_MISS);

    /* A lookup does not extend the TTL; a put starts a fresh one. */
    put_user(c, "bob", NULL, 0);
    assert_int_equal(look(c, "bob", NULL, TTL / 2), AUTH_CACHE_HIT);
    put_user(c, "bob", NULL, TTL / 2);
    assert_int_equal(look(c, "bob", NULL, TTL + 1), AUTH_CACHE_HIT);
    assert_int_equal(look(c, "bob", NULL, TTL / 2 + TTL), AUTH_CACHE_EXPIRED);
    auth_cache_free(c);

    /* A "forever" TTL does not overflow into the past. */
    c = cache_with(1 << 20, INT64_MAX, INT64_MAX);
    put_user(c, "alice", "secret", 1000);
    auth_cache_put_negative(c, "ghost", 1000);
    assert_int_equal(look(c, "alice", "secret", INT64_MAX - 1), AUTH_CACHE_HIT);
    assert_int_equal(look(c, "ghost", NULL, INT64_MAX - 1), AUTH_CACHE_HIT_NEGATIVE);
    auth_cache_free(c);

    /* ttl_ms 0: positive entries are not cached. */
    c = cache_with(1 << 20, 0, NEG_TTL);
    put_user(c, "alice", "secret", 1000);
    assert_int_equal(auth_cache_entries(c), 0);
    assert_int_equal(look(c, "alice", "secret", 1000), AUTH_CACHE_MISS);
    auth_cache_free(c);
}

static void test_negative_entries(void **state)
{
    (void)state;
    struct auth_cache *c = cache_with(1 << 20, TTL, NEG_TTL);
    auth_cache_put_negative(c, "ghost", 1000);
    assert_int_equal(auth_cache_entries(c), 1);
    assert_true(auth_cache_bytes(c) > strlen("ghost"));
    assert_int_equal(look(c, "ghost", NULL, 1001), AUTH_CACHE_HIT_NEGATIVE);
    assert_int_equal(look(c, "ghost", "password", 1001), AUTH_CACHE_HIT_NEGATIVE);
    assert_int_equal(look(c, "ghost", NULL, 1000 + NEG_TTL - 1), AUTH_CACHE_HIT_NEGATIVE);
    assert_int_equal(look(c, "ghost", NULL, 1000 + NEG_TTL), AUTH_CACHE_EXPIRED);
    assert_int_equal(look(c, "ghost", NULL, 1000 + NEG_TTL), AUTH_CACHE_MISS);
    assert_int_equal(auth_cache_entries(c), 0);
    assert_int_equal(auth_cache_bytes(c), 0);
    auth_cache_free(c);

    /* negative_ttl_ms 0: not cached, but a stale positive entry goes. */
    c = cache_with(1 << 20, TTL, 0);
    put_user(c, "alice", "secret", 1000);
    auth_cache_put_negative(c, "alice", 1001);
    auth_cache_put_negative(c, "ghost", 1001);
    assert_int_equal(auth_cache_entries(c), 0);
    assert_int_equal(look(c, "alice", "secret", 1002), AUTH_CACHE_MISS);
    assert_int_equal(look(c, "ghost", NULL, 1002), AUTH_CACHE_MISS);
    auth_cache_free(c);
}

static void test_replace(void **state)
{
    (void)state;
    struct auth_cache *c = cache_with(1 << 20, TTL, NEG_TTL);
    auth_cache_put_negative(c, "alice", 0);
    size_t negative_bytes = auth_cache_bytes(c);

    put_user(c, "alice", "old", 1);
    assert_int_equal(auth_cache_entries(c), 1);
    size_t positive_bytes = auth_cache_bytes(c);
    assert_true(positive_bytes > negative_bytes);
    assert_int_equal(look(c, "alice", "old", 2), AUTH_CACHE_HIT);

    /* The password changed and verified: the new digest replaces the old. */
    put_user(c, "alice", "new", 3);
    assert_int_equal(auth_cache_entries(c), 1);
    assert_int_equal(auth_cache_bytes(c), positive_bytes);
    assert_int_equal(look(c, "alice", "old", 4), AUTH_CACHE_PWD_MISMATCH);
    assert_int_equal(look(c, "alice", "new", 4), AUTH_CACHE_HIT);

    /* A record with different fields replaces the cached one. */
    struct userdb_entry *e = user("alice");
    assert_true(userdb_entry_set(e, "home", "/srv/mail/alice-moved-to-a-longer-path", NULL));
    auth_cache_put(c, e, "new", 5);
    userdb_entry_free(e);
    const struct userdb_entry *got = NULL;
    assert_int_equal(auth_cache_lookup(c, "alice", "new", 6, &got), AUTH_CACHE_HIT);
    assert_string_equal(got->home, "/srv/mail/alice-moved-to-a-longer-path");
    assert_true(auth_cache_bytes(c) > positive_bytes);

    /* A put without a password drops the digest. */
    put_user(c, "alice", NULL, 7);
    assert_int_equal(look(c, "alice", "new", 8), AUTH_CACHE_PWD_MISMATCH);
    assert_int_equal(look(c, "alice", NULL, 8), AUTH_CACHE_HIT);

    /* And the user can be gone again. */
    auth_cache_put_negative(c, "alice", 9);
    assert_int_equal(auth_cache_entries(c), 1);
    assert_int_equal(auth_cache_bytes(c), negative_bytes);
    assert_int_equal(look(c, "alice", "new", 10), AUTH_CACHE_HIT_NEGATIVE);
    auth_cache_free(c);
}

static void test_remove_and_clear(void **state)
{
    (void)state;
    struct auth_cache *c = cache_with(1 << 20, TTL, NEG_TTL);
    auth_cache_remove(c, "nobody");
    put_user(c, "alice", "a", 0);
    size_t one = auth_cache_bytes(c);
    put_user(c, "bobby", "b", 0); /* same length, same size */
    assert_int_equal(auth_cache_bytes(c), 2 * one);
    auth_cache_put_negative(c, "ghost", 0);
    assert_int_equal(auth_cache_entries(c), 3);
    size_t negative = auth_cache_bytes(c) - 2 * one;
    assert_true(negative > 0 && negative < one);

    auth_cache_remove(c, "alice");
    auth_cache_remove(c, "nobody");
    assert_int_equal(auth_cache_entries(c), 2);
    assert_int_equal(auth_cache_bytes(c), one + negative);
    assert_int_equal(look(c, "alice", "a", 1), AUTH_CACHE_MISS);
    assert_int_equal(look(c, "bobby", "b", 1), AUTH_CACHE_HIT);
    assert_int_equal(look(c, "ghost", NULL, 1), AUTH_CACHE_HIT_NEGATIVE);

    auth_cache_clear(c);
    assert_int_equal(auth_cache_entries(c), 0);
    assert_int_equal(auth_cache_bytes(c), 0);
    assert_int_equal(look(c, "bobby", "b", 1), AUTH_CACHE_MISS);
    assert_int_equal(look(c, "ghost", NULL, 1), AUTH_CACHE_MISS);

    /* Usable after clearing. */
    put_user(c, "alice", "a", 2);
    assert_int_equal(auth_cache_bytes(c), one);
    assert_int_equal(look(c, "alice", "a", 3), AUTH_CACHE_HIT);
    auth_cache_free(c);
    auth_cache_free(NULL);
}

static void test_byte_limit_evicts_lru(void **state)
{
    (void)state;
    /* Learn what one entry costs, then allow exactly three. */
    struct auth_cache *probe = cache_with(1 << 20, TTL, NEG_TTL);
    put_user(probe, "user1", "pw", 0);
    size_t one = auth_cache_bytes(probe);
    auth_cache_free(probe);
    assert_true(one > sizeof(struct userdb_entry));

    struct auth_cache *c = cache_with(3 * one, TTL, NEG_TTL);
    put_user(c, "user1", "pw", 0);
    put_user(c, "user2", "pw", 1);
    put_user(c, "user3", "pw", 2);
    assert_int_equal(auth_cache_entries(c), 3);
    assert_int_equal(auth_cache_bytes(c), 3 * one);

    /* The fourth pushes out the least recently used: user1. */
    put_user(c, "user4", "pw", 3);
    assert_int_equal(auth_cache_entries(c), 3);
    assert_true(auth_cache_bytes(c) <= auth_cache_max_bytes(c));
    assert_int_equal(look(c, "user1", "pw", 4), AUTH_CACHE_MISS);

    /* A lookup refreshes: user2 is used, so user3 is next to go. */
    assert_int_equal(look(c, "user2", "pw", 5), AUTH_CACHE_HIT);
    put_user(c, "user5", "pw", 6);
    assert_int_equal(look(c, "user3", "pw", 7), AUTH_CACHE_MISS);
    assert_int_equal(look(c, "user2", "pw", 7), AUTH_CACHE_HIT);
    assert_int_equal(look(c, "user4", "pw", 7), AUTH_CACHE_HIT);
    assert_int_equal(look(c, "user5", "pw", 7), AUTH_CACHE_HIT);

    /* So does a mismatching lookup (the entry is still in use). */
    assert_int_equal(look(c, "user2", "wrong", 8), AUTH_CACHE_PWD_MISMATCH);
    put_user(c, "user6", "pw", 9);
    assert_int_equal(look(c, "user4", "pw", 10), AUTH_CACHE_MISS);
    assert_int_equal(look(c, "user2", "pw", 10), AUTH_CACHE_HIT);

    /* Small negative entries fit several in the room of one positive. */
    auth_cache_put_negative(c, "ghost1", 11);
    auth_cache_put_negative(c, "ghost2", 11);
    assert_true(auth_cache_bytes(c) <= auth_cache_max_bytes(c));
    assert_int_equal(look(c, "ghost1", NULL, 12), AUTH_CACHE_HIT_NEGATIVE);
    assert_int_equal(look(c, "ghost2", NULL, 12), AUTH_CACHE_HIT_NEGATIVE);

    /* An entry that alone exceeds the limit is not cached (and does not
     * flush the others). */
    size_t before = auth_cache_entries(c);
    struct userdb_entry *big = user("big");
    char *home = malloc(USERDB_MAX_FIELD + 1);
    memset(home, 'h', USERDB_MAX_FIELD);
    home[USERDB_MAX_FIELD] = '\0';
    assert_true(userdb_entry_set(big, "home", home, NULL));
    free(home);
    assert_true(userdb_entry_bytes(big) > 3 * one);
    auth_cache_put(c, big, "pw", 13);
    userdb_entry_free(big);
    assert_int_equal(look(c, "big", "pw", 14), AUTH_CACHE_MISS);
    assert_int_equal(auth_cache_entries(c), before);
    auth_cache_free(c);
}

static void test_disabled(void **state)
{
    (void)state;
    struct auth_cache *c = cache_with(0, TTL, NEG_TTL);
    put_user(c, "alice", "secret", 0);
    auth_cache_put_negative(c, "ghost", 0);
    assert_int_equal(auth_cache_entries(c), 0);
    assert_int_equal(auth_cache_bytes(c), 0);
    assert_int_equal(look(c, "alice", "secret", 1), AUTH_CACHE_MISS);
    assert_int_equal(look(c, "alice", NULL, 1), AUTH_CACHE_MISS);
    assert_int_equal(look(c, "ghost", NULL, 1), AUTH_CACHE_MISS);
    auth_cache_remove(c, "alice");
    auth_cache_clear(c);
    auth_cache_free(c);
}

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void test_many_users(void **state)
{
    (void)state;
    enum { USERS = 20000 };
    struct auth_cache *c = cache_with((size_t)1 << 30, TTL, NEG_TTL);
    char name[32];
    for (int i = 0; i < USERS; i++) {
        snprintf(name, sizeof(name), "user%d@example.org", i);
        if (i % 4 == 0)
            auth_cache_put_negative(c, name, 0);
        else
            put_user(c, name, name, 0);
    }
    assert_int_equal(auth_cache_entries(c), USERS);
    for (int i = 0; i < USERS; i++) {
        snprintf(name, sizeof(name), "user%d@example.org", i);
        assert_int_equal(look(c, name, name, 1),
                         i % 4 == 0 ? AUTH_CACHE_HIT_NEGATIVE : AUTH_CACHE_HIT);
    }

    /* What a HIT with a password costs (the ≥50,000 VERIFY/s path). The
     * bound is loose: this runs under sanitizers and on busy CI machines. */
    enum { ROUNDS = 200000 };
    const struct userdb_entry *got = NULL;
    double start = now_seconds();
    int hits = 0;
    for (int i = 0; i < ROUNDS; i++) {
        snprintf(name, sizeof(name), "user%d@example.org", (i % (USERS / 4)) * 4 + 1);
        hits += auth_cache_lookup(c, name, name, 2, &got) == AUTH_CACHE_HIT;
    }
    double per_lookup_us = (now_seconds() - start) / ROUNDS * 1e6;
    print_message("auth cache HIT with password: %.3f us per lookup\n", per_lookup_us);
    assert_int_equal(hits, ROUNDS);
    assert_true(per_lookup_us < 20.0);

    auth_cache_clear(c);
    assert_int_equal(auth_cache_bytes(c), 0);
    auth_cache_free(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hit_and_mismatch), cmocka_unit_test(test_ttl_expiry),
        cmocka_unit_test(test_negative_entries), cmocka_unit_test(test_replace),
        cmocka_unit_test(test_remove_and_clear), cmocka_unit_test(test_byte_limit_evicts_lru),
        cmocka_unit_test(test_disabled),         cmocka_unit_test(test_many_users),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
