/* The director state (services/director/director-state.c): backend
 * changes and what observers hear (origin, sequence, local or remote),
 * lookups and their outcomes, stickiness and expiry on a driven clock,
 * flush, moves with killing, kicks, session counting and the backend-set
 * hash. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "services/director/director-state.h"
#include "services/director/ring-hash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct fixture {
    int64_t now_ms;
    struct director_state *st;
    /* what the observer heard */
    int backend_events;
    enum ring_change last_change;
    char last_ip[64];
    bool last_local;
    char last_origin[64];
    uint64_t last_seq;
    int moved, kicked;
    char last_user[64];
    struct director_observer obs;
};

static int64_t clock_fn(void *ctx)
{
    return ((struct fixture *)ctx)->now_ms;
}

static void on_backend(const struct director_backend *b, enum ring_change change,
                       const struct director_change *from, void *ctx)
{
    struct fixture *f = ctx;
    f->backend_events++;
    f->last_change = change;
    snprintf(f->last_ip, sizeof(f->last_ip), "%s", b->ip);
    f->last_local = from->local;
    snprintf(f->last_origin, sizeof(f->last_origin), "%s", from->origin);
    f->last_seq = from->seq;
}

static void on_moved(const char *user, uint32_t hash, const struct director_backend *to,
                     const struct director_change *from, void *ctx)
{
    struct fixture *f = ctx;
    f->moved++;
    assert_int_equal(hash, ring_hash_user(user, strlen(user)));
    snprintf(f->last_user, sizeof(f->last_user), "%s", user);
    snprintf(f->last_ip, sizeof(f->last_ip), "%s", to->ip);
    f->last_seq = from->seq;
}

static void on_kicked(const char *user, uint32_t hash, const struct director_change *from,
                      void *ctx)
{
    struct fixture *f = ctx;
    (void)hash;
    f->kicked++;
    snprintf(f->last_user, sizeof(f->last_user), "%s", user);
    f->last_seq = from->seq;
}

static int setup(void **state)
{
    struct fixture *f = calloc(1, sizeof(*f));
    f->now_ms = 1700000000000;
    struct director_state_config cfg = {.self = "10.0.0.100:9102",
                                        .user_expire_ms = 60000,
                                        .kill_timeout_ms = 2000,
                                        .max_users = 1000,
                                        .max_backends = 4,
                                        .max_vhosts = 500,
                                        .max_username = 64,
                                        .max_tag = 8};
    f->st = director_state_new(&cfg, clock_fn, f);
    f->obs = (struct director_observer){
        .backend_changed = on_backend, .user_moved = on_moved, .user_kicked = on_kicked, .ctx = f};
    director_state_subscribe(f->st, &f->obs);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fixture *f = *state;
    director_state_free(f->st);
    free(f);
    return 0;
}

static void lookup(struct fixture *f, const char *user, const char *tag, bool record,
                   struct director_lookup *res)
{
    director_state_lookup(f->st, user, strlen(user), tag, record, res);
}

static void test_backend_changes_are_announced(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    assert_true(director_state_backend_add(f->st, "10.0.0.1", 143, "", 100, NULL, &err));
    assert_int_equal(f->backend_events, 1);
    assert_int_equal(f->last_change, RING_CHANGE_UP);
    assert_true(f->last_local);
    assert_string_equal(f->last_origin, "10.0.0.100:9102");
    assert_int_equal(f->last_seq, 1);

    assert_false(director_state_backend_add(f->st, "10.0.0.1", 993, "", 100, NULL, &err));
    assert_int_equal(err.code, PETREL_ERR_EXISTS);
    assert_false(director_state_backend_add(f->st, "10.0.0.300", 143, "", 100, NULL, &err));
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    assert_false(director_state_backend_add(f->st, "10.0.0.2", 143, "", 501, NULL, &err));
    assert_int_equal(err.code, PETREL_ERR_INVALID); /* max_vhosts */
    assert_false(director_state_backend_add(f->st, "10.0.0.2", 143, "123456789", 1, NULL, &err));
    assert_int_equal(err.code, PETREL_ERR_INVALID); /* max_tag */
    assert_int_equal(f->backend_events, 1);

    /* down, a repeated down (nothing to announce), up */
    f->now_ms += 5000;
    assert_true(director_state_backend_set_state(f->st, "10.0.0.1", RING_STATE_FLUSH, NULL, &err));
    assert_int_equal(f->last_change, RING_CHANGE_FLUSH);
    assert_int_equal(f->last_seq, 2);
    const struct director_backend *b =
        director_backends_find(director_state_backends(f->st), "10.0.0.1");
    assert_int_equal(b->last_updown_change, f->now_ms / 1000);
    assert_true(director_state_backend_set_state(f->st, "10.0.0.1", RING_STATE_FLUSH, NULL, &err));
    assert_int_equal(f->backend_events, 2);
    assert_true(director_state_backend_set_state(f->st, "10.0.0.1", RING_STATE_UP, NULL, &err));
    assert_int_equal(f->last_change, RING_CHANGE_UP);
    assert_true(director_state_backend_set_vhosts(f->st, "10.0.0.1", 50, NULL, &err));
    assert_int_equal(f->last_change, RING_CHANGE_UP); /* vhosts: the current state again */
    assert_int_equal(b->vhosts, 50);
    assert_int_equal(f->backend_events, 4);
    assert_true(director_state_backend_set_vhosts(f->st, "10.0.0.1", 50, NULL, &err));
    assert_int_equal(f->backend_events, 4);

    assert_false(director_state_backend_set_state(f->st, "10.9.9.9", RING_STATE_UP, NULL, &err));
    assert_int_equal(err.code, PETREL_ERR_NOT_FOUND);
    assert_false(director_state_backend_remove(f->st, "10.9.9.9", NULL, &err));
    assert_int_equal(err.code, PETREL_ERR_NOT_FOUND);
    assert_true(director_state_backend_remove(f->st, "10.0.0.1", NULL, &err));
    assert_int_equal(f->last_change, RING_CHANGE_DOWN);
    assert_int_equal(director_backends_count(director_state_backends(f->st)), 0);
    /* any spelling of an address finds the backend */
    assert_true(director_state_backend_add(f->st, "FD00:0::0001", 143, "", 1, NULL, &err));
    assert_non_null(director_backends_find(director_state_backends(f->st), "fd00::1"));
    assert_true(director_state_backend_remove(f->st, "fd00:0:0:0:0:0:0:1", NULL, &err));
    assert_int_equal(director_state_local_seq(f->st), f->last_seq);
}

static void test_backend_limit(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    for (int i = 1; i <= 4; i++) {
        char ip[32];
        snprintf(ip, sizeof(ip), "10.0.1.%d", i);
        assert_true(director_state_backend_add(f->st, ip, 143, "", 10, NULL, &err));
    }
    assert_false(director_state_backend_add(f->st, "10.0.1.5", 143, "", 10, NULL, &err));
    assert_int_equal(err.code, PETREL_ERR_CONFLICT);
}

static void test_remote_ring_change(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    struct director_change from = {.local = false, .origin = "10.0.0.200:9102", .seq = 41};
    struct ring_host h = {
        .ip = "10.0.0.7", .port = 143, .tag = "blue", .vhosts = 20, .last_updown_change = 123};
    assert_true(director_state_apply_ring_change(f->st, RING_CHANGE_FLUSH, &h, &from, &err));
    assert_int_equal(f->backend_events, 1);
    assert_false(f->last_local);
    assert_string_equal(f->last_origin, "10.0.0.200:9102");
    assert_int_equal(f->last_seq, 41);
    assert_int_equal(director_state_local_seq(f->st), 0); /* not ours */
    const struct director_backend *b =
        director_backends_find(director_state_backends(f->st), "10.0.0.7");
    assert_int_equal(b->state, RING_STATE_FLUSH);
    assert_int_equal(b->last_updown_change, 123);
    /* The same change again: idempotent, nothing announced. */
    assert_true(director_state_apply_ring_change(f->st, RING_CHANGE_FLUSH, &h, &from, &err));
    assert_int_equal(f->backend_events, 1);
    h.vhosts = 30;
    h.tag = "green";
    from.seq = 42;
    assert_true(director_state_apply_ring_change(f->st, RING_CHANGE_UP, &h, &from, &err));
    assert_int_equal(b->vhosts, 30);
    assert_string_equal(b->tag, "green");
    assert_int_equal(b->state, RING_STATE_UP);
    struct director_lookup res;
    lookup(f, "someone", "green", false, &res);
    assert_int_equal(res.outcome, RING_OUTCOME_ASSIGNED);
    from.seq = 43;
    assert_true(director_state_apply_ring_change(f->st, RING_CHANGE_DOWN, &h, &from, &err));
    assert_int_equal(f->last_change, RING_CHANGE_DOWN);
    assert_true(director_state_apply_ring_change(f->st, RING_CHANGE_DOWN, &h, &from, &err));
    assert_int_equal(f->backend_events, 3);
}

static void test_lookup_outcomes(void **state)
{
    struct fixture *f = *state;
    struct director_lookup res;
    lookup(f, "demo", "", true, &res);
    assert_int_equal(res.outcome, RING_OUTCOME_NO_BACKENDS);
    lookup(f, "", "", true, &res);
    assert_int_equal(res.outcome, RING_OUTCOME_BAD_REQUEST);
    char longname[100];
    memset(longname, 'x', 65);
    longname[65] = '\0';
    lookup(f, longname, "", true, &res);
    assert_int_equal(res.outcome, RING_OUTCOME_BAD_REQUEST);
    assert_string_equal(res.error, "username too long");
    lookup(f, "demo", "123456789", true, &res);
    assert_int_equal(res.outcome, RING_OUTCOME_BAD_REQUEST);

    assert_true(director_state_backend_add(f->st, "10.0.0.1", 143, "", 100, NULL, NULL));
    assert_true(director_state_backend_add(f->st, "10.0.0.2", 143, "", 100, NULL, NULL));
    lookup(f, "demo", "", false, &res); /* read-only: nothing recorded */
    assert_int_equal(res.outcome, RING_OUTCOME_ASSIGNED);
    lookup(f, "demo", "", true, &res);
    assert_int_equal(res.outcome, RING_OUTCOME_ASSIGNED);
    const struct director_backend *first = res.backend;
    lookup(f, "DEMO", "", true, &res); /* case-insensitive names */
    assert_int_equal(res.outcome, RING_OUTCOME_STICKY);
    assert_ptr_equal(res.backend, first);
    assert_int_equal(res.hash, ring_hash_user("demo", 4));
    assert_int_equal(director_users_count(director_state_users(f->st)), 1);
}

/* A mapping outlives a hash change (more vhosts elsewhere) until it
 * expires user_expire after its last use. */
static void test_sticky_until_expiry(void **state)
{
    struct fixture *f = *state;
    assert_true(director_state_backend_add(f->st, "10.0.0.1", 143, "", 100, NULL, NULL));
    struct director_lookup res;
    /* With one backend, alice goes there; then the ring changes under her. */
    lookup(f, "alice", "", true, &res);
    assert_string_equal(res.backend->ip, "10.0.0.1");
    assert_true(director_state_backend_add(f->st, "10.0.0.2", 143, "", 500, NULL, NULL));
    assert_true(director_state_backend_set_vhosts(f->st, "10.0.0.1", 0, NULL, NULL));
    /* The ring can no longer choose 10.0.0.1, but alice's mapping holds. */
    f->now_ms += 59000;
    lookup(f, "alice", "", true, &res);
    assert_int_equal(res.outcome, RING_OUTCOME_STICKY);
    assert_string_equal(res.backend->ip, "10.0.0.1");
    f->now_ms += 59000; /* refreshed by that lookup: still there */
    lookup(f, "alice", "", false, &res);
    assert_int_equal(res.outcome, RING_OUTCOME_STICKY);
    f->now_ms += 1001; /* 60 s after the last recorded lookup */
    lookup(f, "alice", "", false, &res);
    assert_int_equal(res.outcome, RING_OUTCOME_ASSIGNED);
    assert_string_equal(res.backend->ip, "10.0.0.2");
    assert_int_equal(director_state_expire(f->st), 1);
    assert_int_equal(director_users_count(director_state_users(f->st)), 0);
}

static void test_down_and_flush(void **state)
{
    struct fixture *f = *state;
    assert_true(director_state_backend_add(f->st, "10.0.0.1", 143, "", 100, NULL, NULL));
    assert_true(director_state_backend_add(f->st, "10.0.0.2", 143, "", 100, NULL, NULL));
    struct director_lookup res;
    char name[32];
    int mapped_to_1 = 0;
    for (int i = 0; i < 50; i++) {
        snprintf(name, sizeof(name), "u%d", i);
        lookup(f, name, "", true, &res);
        if (strcmp(res.backend->ip, "10.0.0.1") == 0)
            mapped_to_1++;
    }
    assert_true(mapped_to_1 > 0 && mapped_to_1 < 50);
    /* down: users of 10.0.0.1 are re-routed, but their mappings are kept */
    assert_true(director_state_backend_set_state(f->st, "10.0.0.1", RING_STATE_FLUSH, NULL, NULL));
    for (int i = 0; i < 50; i++) {
        snprintf(name, sizeof(name), "u%d", i);
        lookup(f, name, "", false, &res);
        assert_string_equal(res.backend->ip, "10.0.0.2");
    }
    assert_int_equal(director_users_count(director_state_users(f->st)), 50);
    assert_true(director_state_backend_set_state(f->st, "10.0.0.1", RING_STATE_UP, NULL, NULL));
    int back = 0;
    for (int i = 0; i < 50; i++) {
        snprintf(name, sizeof(name), "u%d", i);
        lookup(f, name, "", false, &res);
        back += res.outcome == RING_OUTCOME_STICKY && strcmp(res.backend->ip, "10.0.0.1") == 0;
    }
    assert_int_equal(back, mapped_to_1);
    /* flush: the mappings to it are dropped and counted */
    size_t flushed = 0;
    assert_true(director_state_backend_flush(f->st, "10.0.0.1", NULL, &flushed, NULL));
    assert_int_equal(flushed, (size_t)mapped_to_1);
    assert_int_equal(director_users_count(director_state_users(f->st)), 50 - mapped_to_1);
    const struct director_backend *b =
        director_backends_find(director_state_backends(f->st), "10.0.0.1");
    assert_int_equal(b->state, RING_STATE_FLUSH);
    /* with every backend down there is nowhere to go */
    assert_true(director_state_backend_set_state(f->st, "10.0.0.2", RING_STATE_FLUSH, NULL, NULL));
    lookup(f, "newcomer", "", true, &res);
    assert_int_equal(res.outcome, RING_OUTCOME_NO_BACKENDS);
}

static void test_move_and_killing(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    assert_true(director_state_backend_add(f->st, "10.0.0.1", 143, "", 100, NULL, NULL));
    assert_true(director_state_backend_add(f->st, "10.0.0.2", 993, "", 100, NULL, NULL));
    struct director_lookup res;
    lookup(f, "bob", "", true, &res);
    const char *from_ip = res.backend->ip;
    const char *to_ip = strcmp(from_ip, "10.0.0.1") == 0 ? "10.0.0.2" : "10.0.0.1";
    unsigned to_port = strcmp(to_ip, "10.0.0.1") == 0 ? 143 : 993;
    struct director_session *s =
        director_state_session_start(f->st, "bob", from_ip, RING_PROTO_IMAP, &err);
    assert_non_null(s);

    assert_false(director_state_user_move(f->st, "bob", "10.0.0.9", 0, NULL, &err));
    assert_int_equal(err.code, PETREL_ERR_NOT_FOUND);
    assert_false(director_state_user_move(f->st, "bob", to_ip, 1, NULL, &err));
    assert_int_equal(err.code, PETREL_ERR_NOT_FOUND); /* wrong port */
    assert_true(director_state_user_move(f->st, "Bob", to_ip, to_port, NULL, &err));
    assert_int_equal(f->moved, 1);
    assert_string_equal(f->last_user, "Bob");
    assert_string_equal(f->last_ip, to_ip);

    /* bob still has a session on the old backend: killing, weak */
    lookup(f, "bob", "", true, &res);
    assert_int_equal(res.outcome, RING_OUTCOME_KILLING);
    assert_true(res.retry_ms > 0 && res.retry_ms <= 2000);
    const struct director_user *u =
        director_users_find(director_state_users(f->st), ring_hash_user("bob", 3));
    assert_true(u->weak);
    /* the old session ends: the move is complete */
    director_state_session_end(f->st, s);
    assert_false(u->weak);
    lookup(f, "bob", "", true, &res);
    assert_int_equal(res.outcome, RING_OUTCOME_STICKY);
    assert_string_equal(res.backend->ip, to_ip);

    /* a move back with a session that never ends: killing until kill_timeout */
    s = director_state_session_start(f->st, "bob", to_ip, RING_PROTO_POP3, &err);
    assert_true(director_state_user_move(f->st, "bob", from_ip, 0, NULL, &err));
    lookup(f, "bob", "", true, &res);
    assert_int_equal(res.outcome, RING_OUTCOME_KILLING);
    f->now_ms += 2000;
    lookup(f, "bob", "", true, &res);
    assert_int_equal(res.outcome, RING_OUTCOME_STICKY);
    assert_string_equal(res.backend->ip, from_ip);
    director_state_session_end(f->st, s);

    /* moving to a flushed backend is refused */
    assert_true(director_state_backend_set_state(f->st, to_ip, RING_STATE_FLUSH, NULL, NULL));
    assert_false(director_state_user_move(f->st, "bob", to_ip, 0, NULL, &err));
    assert_int_equal(err.code, PETREL_ERR_CONFLICT);

    assert_true(director_state_user_kick(f->st, "carol", NULL, &err));
    assert_int_equal(f->kicked, 1);
    assert_string_equal(f->last_user, "carol");
    assert_false(director_state_user_kick(f->st, "", NULL, &err));
    assert_int_equal(err.code, PETREL_ERR_INVALID);
}

static void test_sessions(void **state)
{
    struct fixture *f = *state;
    struct petrel_error err;
    assert_true(director_state_backend_add(f->st, "10.0.0.1", 143, "", 100, NULL, NULL));
    assert_null(director_state_session_start(f->st, "x", "10.0.0.9", RING_PROTO_IMAP, &err));
    assert_int_equal(err.code, PETREL_ERR_NOT_FOUND);
    struct director_session *a =
        director_state_session_start(f->st, "x", "10.0.0.1", RING_PROTO_IMAP, &err);
    struct director_session *b =
        director_state_session_start(f->st, "x", "10.0.0.1", RING_PROTO_IMAPS, &err);
    struct director_session *c =
        director_state_session_start(f->st, "y", "10.0.0.1", RING_PROTO_IMAP, &err);
    const struct director_backend *be =
        director_backends_find(director_state_backends(f->st), "10.0.0.1");
    assert_int_equal(be->sessions[RING_PROTO_IMAP], 2);
    assert_int_equal(be->sessions[RING_PROTO_IMAPS], 1);
    assert_int_equal(director_state_session_count(f->st), 3);
    /* a user with sessions does not expire, even long after */
    f->now_ms += 10 * 60000;
    assert_int_equal(director_state_expire(f->st), 0);
    struct director_lookup res;
    lookup(f, "x", "", false, &res);
    assert_int_equal(res.outcome, RING_OUTCOME_STICKY);
    director_state_session_end(f->st, a);
    assert_int_equal(be->sessions[RING_PROTO_IMAP], 1);
    /* removing the backend keeps the sessions, detached */
    assert_true(director_state_backend_remove(f->st, "10.0.0.1", NULL, NULL));
    assert_int_equal(director_state_session_count(f->st), 2);
    director_state_session_end(f->st, b);
    director_state_session_end(f->st, c);
    assert_int_equal(director_state_session_count(f->st), 0);
    assert_int_equal(director_users_count(director_state_users(f->st)), 0);
}

static void test_backend_set_hash(void **state)
{
    struct fixture *f = *state;
    void *gs = NULL;
    setup(&gs);
    struct fixture *g = gs;
    char h1[65], h2[65];
    director_state_backend_set_hash(f->st, h1);
    director_state_backend_set_hash(g->st, h2);
    assert_string_equal(h1, h2);
    assert_int_equal(strlen(h1), 64);
    /* the same set added in another order */
    assert_true(director_state_backend_add(f->st, "10.0.0.1", 143, "a", 10, NULL, NULL));
    assert_true(director_state_backend_add(f->st, "fd00::1", 143, "", 20, NULL, NULL));
    assert_true(director_state_backend_add(f->st, "10.0.0.2", 993, "b", 30, NULL, NULL));
    assert_true(director_state_backend_add(g->st, "10.0.0.2", 993, "b", 30, NULL, NULL));
    assert_true(director_state_backend_add(g->st, "fd00:0::1", 143, "", 20, NULL, NULL));
    assert_true(director_state_backend_add(g->st, "10.0.0.1", 143, "a", 10, NULL, NULL));
    director_state_backend_set_hash(f->st, h1);
    director_state_backend_set_hash(g->st, h2);
    assert_string_equal(h1, h2);
    /* any routing field changes it */
    assert_true(director_state_backend_set_vhosts(g->st, "10.0.0.1", 11, NULL, NULL));
    director_state_backend_set_hash(g->st, h2);
    assert_string_not_equal(h1, h2);
    assert_true(director_state_backend_set_vhosts(g->st, "10.0.0.1", 10, NULL, NULL));
    director_state_backend_set_hash(g->st, h2);
    assert_string_equal(h1, h2);
    assert_true(director_state_backend_set_state(g->st, "10.0.0.1", RING_STATE_FLUSH, NULL, NULL));
    director_state_backend_set_hash(g->st, h2);
    assert_string_not_equal(h1, h2);
    teardown(&gs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_backend_changes_are_announced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_backend_limit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_remote_ring_change, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lookup_outcomes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sticky_until_expiry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_down_and_flush, setup, teardown),
        cmocka_unit_test_setup_teardown(test_move_and_killing, setup, teardown),
        cmocka_unit_test_setup_teardown(test_sessions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_backend_set_hash, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
