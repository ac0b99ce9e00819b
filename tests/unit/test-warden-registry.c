/* Unit tests for services/warden/warden-registry.h and warden-penalty.h:
 * sessions by owner, user and service; listing order and filters; counts
 * by protocol and user; reaping when an owner detaches and when an
 * instance says HELLO with a new boot id; stale owners; the session limit;
 * and the penalty table's decay, canonical addresses and eviction. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/buf.h"
#include "services/warden/warden-penalty.h"
#include "services/warden/warden-registry.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void add(struct warden_registry *reg, struct warden_owner *o, const char *id,
                const char *user, const char *service, int64_t at)
{
    struct warden_session_info s = {
        .id = id, .user = user, .ip = "192.0.2.1", .service = service, .connected_at = at};
    struct petrel_error err;
    if (!warden_registry_connect(reg, o, &s, &err))
        fail_msg("connect %s: %s", id, err.message);
}

static void collect(const struct warden_session_info *s, void *ctx)
{
    struct buf *b = ctx;
    buf_printf(b, "%s/%s/%s/%lld ", s->user, s->service, s->id, (long long)s->connected_at);
}

static void expect_list(struct warden_registry *reg, const char *service, const char *user,
                        const char *expected)
{
    struct buf b = {0};
    size_t n = warden_registry_list(reg, service, user, collect, &b);
    if (strcmp(buf_cstr(&b), expected) != 0)
        fail_msg("list(%s, %s) = '%s', expected '%s'", service ? service : "*", user ? user : "*",
                 buf_cstr(&b), expected);
    size_t spaces = 0;
    for (const char *p = buf_cstr(&b); *p != '\0'; p++)
        spaces += *p == ' ';
    assert_int_equal(n, spaces);
    buf_free(&b);
}

static void collect_count(const char *key, uint64_t count, void *ctx)
{
    buf_printf(ctx, "%s=%llu ", key, (unsigned long long)count);
}

static void expect_count(struct warden_registry *reg, enum warden_count_by by, const char *service,
                         const char *user, uint64_t total, const char *groups)
{
    struct buf b = {0};
    uint64_t n = warden_registry_count(reg, by, service, user, collect_count, &b);
    assert_int_equal(n, total);
    if (strcmp(buf_cstr(&b), groups) != 0)
        fail_msg("count groups '%s', expected '%s'", buf_cstr(&b), groups);
    buf_free(&b);
}

static void test_list_and_count(void **state)
{
    (void)state;
    struct warden_registry *reg = warden_registry_new(100);
    size_t reaped = 99;
    struct warden_owner *imap = warden_registry_attach(reg, "imap@h:143", "b1", &reaped);
    assert_int_equal(reaped, 0);
    struct warden_owner *pop = warden_registry_attach(reg, "pop3@h:110", "b2", NULL);
    add(reg, imap, "b1-2", "bob", "imap", 20);
    add(reg, imap, "b1-1", "alice", "imap", 30);
    add(reg, pop, "b2-1", "alice", "pop3", 10);
    add(reg, imap, "b1-3", "alice", "imap", 10);
    assert_int_equal(warden_registry_sessions(reg), 4);

    /* Sorted by user, then connected_at, then id. */
    expect_list(reg, NULL, NULL,
                "alice/imap/b1-3/10 alice/pop3/b2-1/10 alice/imap/b1-1/30 bob/imap/b1-2/20 ");
    expect_list(reg, "imap", NULL, "alice/imap/b1-3/10 alice/imap/b1-1/30 bob/imap/b1-2/20 ");
    expect_list(reg, "pop3", "alice", "alice/pop3/b2-1/10 ");
    expect_list(reg, "lmtp", NULL, "");
    expect_list(reg, NULL, "carol", "");
    expect_list(reg, "smtp", NULL, ""); /* unknown service: nothing matches */

    expect_count(reg, WARDEN_BY_NONE, NULL, NULL, 4, "");
    expect_count(reg, WARDEN_BY_NONE, "imap", NULL, 3, "");
    expect_count(reg, WARDEN_BY_NONE, "imap", "alice", 2, "");
    expect_count(reg, WARDEN_BY_NONE, NULL, "nobody", 0, "");
    expect_count(reg, WARDEN_BY_PROTOCOL, NULL, NULL, 4, "imap=3 pop3=1 ");
    expect_count(reg, WARDEN_BY_PROTOCOL, NULL, "bob", 1, "imap=1 ");
    expect_count(reg, WARDEN_BY_PROTOCOL, "pop3", NULL, 1, "pop3=1 ");
    expect_count(reg, WARDEN_BY_USER, NULL, NULL, 4, "alice=3 bob=1 ");
    expect_count(reg, WARDEN_BY_USER, "imap", NULL, 3, "alice=2 bob=1 ");
    expect_count(reg, WARDEN_BY_USER, "pop3", NULL, 1, "alice=1 ");
    expect_count(reg, WARDEN_BY_USER, NULL, "bob", 1, "bob=1 ");

    /* DISCONNECT: once found, then not. */
    assert_true(warden_registry_disconnect(reg, "b1-2"));
    assert_false(warden_registry_disconnect(reg, "b1-2"));
    expect_count(reg, WARDEN_BY_USER, NULL, NULL, 3, "alice=3 ");
    assert_int_equal(warden_owner_sessions(imap), 2);

    /* An owner's sessions go when it detaches; the other owner's stay. */
    assert_int_equal(warden_registry_detach(reg, imap), 2);
    expect_list(reg, NULL, NULL, "alice/pop3/b2-1/10 ");
    warden_registry_free(reg); /* frees the pop3 owner and its session */
}

static void test_reconnect_takes_over(void **state)
{
    (void)state;
    struct warden_registry *reg = warden_registry_new(100);
    struct warden_owner *old = warden_registry_attach(reg, "imap@h:143", "boot", NULL);
    add(reg, old, "boot-1", "alice", "imap", 1);
    add(reg, old, "boot-2", "bob", "imap", 2);
    /* The same process reconnects (the old connection is not closed yet)
     * and re-sends its sessions: they move to the new owner, updated. */
    size_t reaped = 99;
    struct warden_owner *fresh = warden_registry_attach(reg, "imap@h:143", "boot", &reaped);
    assert_int_equal(reaped, 0);
    add(reg, fresh, "boot-1", "alice2", "pop3", 5);
    assert_int_equal(warden_owner_sessions(old), 1);
    assert_int_equal(warden_owner_sessions(fresh), 1);
    expect_list(reg, NULL, NULL, "alice2/pop3/boot-1/5 bob/imap/boot-2/2 ");
    /* The old connection closing takes only what it still owns. */
    assert_int_equal(warden_registry_detach(reg, old), 1);
    expect_list(reg, NULL, NULL, "alice2/pop3/boot-1/5 ");

    /* Another instance cannot take an id over. */
    struct warden_owner *other = warden_registry_attach(reg, "pop3@h:110", "x", NULL);
    struct warden_session_info s = {
        .id = "boot-1", .user = "eve", .ip = "", .service = "pop3", .connected_at = 1};
    struct petrel_error err;
    assert_false(warden_registry_connect(reg, other, &s, &err));
    assert_int_equal(err.code, PETREL_ERR_CONFLICT);
    assert_non_null(strstr(err.message, "another instance"));
    warden_registry_detach(reg, other);
    warden_registry_detach(reg, fresh);
    assert_int_equal(warden_registry_sessions(reg), 0);
    warden_registry_free(reg);
}

static void test_restart_reaps_stale(void **state)
{
    (void)state;
    struct warden_registry *reg = warden_registry_new(100);
    struct warden_owner *a = warden_registry_attach(reg, "imap@h:143", "boot-a", NULL);
    struct warden_owner *a2 = warden_registry_attach(reg, "imap@h:143", "boot-a", NULL);
    struct warden_owner *p = warden_registry_attach(reg, "pop3@h:110", "boot-p", NULL);
    add(reg, a, "a-1", "alice", "imap", 1);
    add(reg, a2, "a-2", "alice", "imap", 2);
    add(reg, p, "p-1", "alice", "pop3", 3);
    /* The imap process restarted (killed without its connections being
     * seen to close): HELLO with a new boot id reaps both old owners'
     * sessions, not the pop3 instance's. */
    size_t reaped = 0;
    struct warden_owner *b = warden_registry_attach(reg, "imap@h:143", "boot-b", &reaped);
    assert_int_equal(reaped, 2);
    expect_list(reg, NULL, NULL, "alice/pop3/p-1/3 ");
    /* The stale owners cannot register any more. */
    struct warden_session_info s = {
        .id = "a-3", .user = "alice", .ip = "", .service = "imap", .connected_at = 4};
    struct petrel_error err;
    assert_false(warden_registry_connect(reg, a, &s, &err));
    assert_int_equal(err.code, PETREL_ERR_CONFLICT);
    assert_non_null(strstr(err.message, "newer boot id"));
    s.id = "b-1";
    assert_true(warden_registry_connect(reg, b, &s, &err));
    assert_int_equal(warden_registry_detach(reg, a), 0);
    assert_int_equal(warden_registry_detach(reg, a2), 0);
    assert_int_equal(warden_registry_detach(reg, b), 1);
    /* With no owner left the instance is forgotten: a later HELLO with
     * yet another boot id reaps nothing. */
    b = warden_registry_attach(reg, "imap@h:143", "boot-c", &reaped);
    assert_int_equal(reaped, 0);
    warden_registry_detach(reg, b);
    warden_registry_detach(reg, p);
    warden_registry_free(reg);
}

static void test_session_limit(void **state)
{
    (void)state;
    struct warden_registry *reg = warden_registry_new(2);
    struct warden_owner *o = warden_registry_attach(reg, "i", "b", NULL);
    add(reg, o, "s1", "u", "imap", 1);
    add(reg, o, "s2", "u", "imap", 1);
    struct warden_session_info s = {
        .id = "s3", .user = "u", .ip = "", .service = "imap", .connected_at = 1};
    struct petrel_error err;
    assert_false(warden_registry_connect(reg, o, &s, &err));
    assert_int_equal(err.code, PETREL_ERR_UNAVAILABLE);
    assert_non_null(strstr(err.message, "max_sessions 2"));
    /* Updating an existing id is not a new session. */
    s.id = "s2";
    assert_true(warden_registry_connect(reg, o, &s, &err));
    assert_true(warden_registry_disconnect(reg, "s1"));
    s.id = "s3";
    assert_true(warden_registry_connect(reg, o, &s, &err));
    assert_int_equal(warden_registry_sessions(reg), 2);
    warden_registry_free(reg);
}

static void count_visit(const struct warden_session_info *s, void *ctx)
{
    (void)s;
    (*(size_t *)ctx)++;
}

static void test_many_sessions(void **state)
{
    (void)state;
    /* 20,000 sessions over 1,000 users and two owners: counts stay exact
     * through removals in every order. */
    struct warden_registry *reg = warden_registry_new(1000000);
    struct warden_owner *o[2] = {warden_registry_attach(reg, "i1", "b", NULL),
                                 warden_registry_attach(reg, "i2", "b", NULL)};
    char id[32], user[32];
    for (int i = 0; i < 20000; i++) {
        snprintf(id, sizeof(id), "s%d", i);
        snprintf(user, sizeof(user), "user%03d", i % 1000);
        add(reg, o[i % 2], id, user, warden_services[i % 4], i);
    }
    assert_int_equal(warden_registry_count(reg, WARDEN_BY_NONE, NULL, NULL, NULL, NULL), 20000);
    assert_int_equal(warden_registry_count(reg, WARDEN_BY_NONE, "lmtp", NULL, NULL, NULL), 5000);
    assert_int_equal(warden_registry_count(reg, WARDEN_BY_NONE, NULL, "user007", NULL, NULL), 20);
    for (int i = 0; i < 20000; i += 3) {
        snprintf(id, sizeof(id), "s%d", i);
        assert_true(warden_registry_disconnect(reg, id));
    }
    size_t left = warden_registry_sessions(reg);
    assert_int_equal(left, 20000 - 6667);
    size_t listed = 0;
    assert_int_equal(warden_registry_list(reg, NULL, NULL, count_visit, &listed), left);
    assert_int_equal(listed, left);
    size_t gone = warden_registry_detach(reg, o[0]);
    assert_int_equal(warden_registry_sessions(reg), left - gone);
    assert_int_equal(warden_registry_count(reg, WARDEN_BY_PROTOCOL, NULL, NULL, NULL, NULL),
                     left - gone);
    warden_registry_free(reg);
}

/* ---------- penalties ---------- */

static void test_penalty_decay(void **state)
{
    (void)state;
    struct warden_penalty_config cfg = {.decay_ms = 1000, .max_ips = 10};
    struct warden_penalty *p = warden_penalty_new(&cfg);
    enum warden_penalty_lookup how;
    assert_int_equal(warden_penalty_get(p, "10.0.0.1", 0, &how), 0);
    assert_int_equal(how, WARDEN_PENALTY_MISS);
    assert_int_equal(warden_penalty_inc(p, "10.0.0.1", 100), 1);
    assert_int_equal(warden_penalty_inc(p, "10.0.0.1", 900), 2);
    assert_int_equal(warden_penalty_get(p, "10.0.0.1", 1899, &how), 2);
    assert_int_equal(how, WARDEN_PENALTY_HIT);
    /* A quiet decay period after the last failure: gone. */
    assert_int_equal(warden_penalty_get(p, "10.0.0.1", 1900, &how), 0);
    assert_int_equal(how, WARDEN_PENALTY_EXPIRED);
    assert_int_equal(warden_penalty_get(p, "10.0.0.1", 1900, &how), 0);
    assert_int_equal(how, WARDEN_PENALTY_MISS);
    /* An increment after decay starts again at 1. */
    assert_int_equal(warden_penalty_inc(p, "10.0.0.2", 0), 1);
    assert_int_equal(warden_penalty_inc(p, "10.0.0.2", 5000), 1);
    /* Canonical addresses: one entry for every spelling. */
    assert_int_equal(warden_penalty_inc(p, "2001:db8::1", 5000), 1);
    assert_int_equal(warden_penalty_inc(p, "2001:0db8:0:0::1", 5000), 2);
    assert_int_equal(warden_penalty_inc(p, "::ffff:10.0.0.2", 5000), 2);
    assert_int_equal(warden_penalty_get(p, "10.0.0.2", 5000, &how), 2);
    /* The count stops growing at its cap. */
    for (int i = 0; i < WARDEN_PENALTY_MAX_FAILURES + 10; i++)
        warden_penalty_inc(p, "10.9.9.9", 6000);
    assert_int_equal(warden_penalty_get(p, "10.9.9.9", 6000, NULL), WARDEN_PENALTY_MAX_FAILURES);
    warden_penalty_free(p);
}

static void test_penalty_eviction(void **state)
{
    (void)state;
    struct warden_penalty_config cfg = {.decay_ms = 10000, .max_ips = 3};
    struct warden_penalty *p = warden_penalty_new(&cfg);
    warden_penalty_inc(p, "10.0.0.1", 0);
    warden_penalty_inc(p, "10.0.0.2", 10);
    warden_penalty_inc(p, "10.0.0.3", 20);
    warden_penalty_inc(p, "10.0.0.1", 30); /* now the freshest */
    warden_penalty_inc(p, "10.0.0.4", 40); /* full: the stalest (.2) goes */
    assert_int_equal(warden_penalty_entries(p), 3);
    assert_int_equal(warden_penalty_get(p, "10.0.0.2", 50, NULL), 0);
    assert_int_equal(warden_penalty_get(p, "10.0.0.1", 50, NULL), 2);
    assert_int_equal(warden_penalty_get(p, "10.0.0.3", 50, NULL), 1);
    /* Decayed entries make room first, however many there are. */
    warden_penalty_inc(p, "10.0.0.5", 10035);
    assert_int_equal(warden_penalty_entries(p), 2);
    assert_int_equal(warden_penalty_get(p, "10.0.0.4", 10035, NULL), 1);
    /* A flood of addresses never grows the table past its limit. */
    char ip[32];
    for (int i = 0; i < 10000; i++) {
        snprintf(ip, sizeof(ip), "10.1.%d.%d", i / 256, i % 256);
        warden_penalty_inc(p, ip, 20000 + i);
        assert_true(warden_penalty_entries(p) <= 3);
    }
    assert_int_equal(warden_penalty_get(p, "10.1.39.15", 30000, NULL), 1);
    warden_penalty_free(p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_list_and_count),      cmocka_unit_test(test_reconnect_takes_over),
        cmocka_unit_test(test_restart_reaps_stale), cmocka_unit_test(test_session_limit),
        cmocka_unit_test(test_many_sessions),       cmocka_unit_test(test_penalty_decay),
        cmocka_unit_test(test_penalty_eviction),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
