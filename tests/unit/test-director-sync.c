/* Peer synchronisation logic of the director: per-origin watermarks
 * (director-watermarks), tombstones (director-tombstones), the
 * last-writer-wins order of backend views and the dedup/forward/apply path
 * of director_sync_receive (director-sync), the ring order and neighbours
 * (director-peers), the topology issues (director-topology), the state's
 * sequence base and user merge, and the USER handshake line (ring-protocol). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "services/director/director-config.h"
#include "services/director/director-peers.h"
#include "services/director/director-state.h"
#include "services/director/director-sync.h"
#include "services/director/director-tombstones.h"
#include "services/director/director-topology.h"
#include "services/director/director-watermarks.h"
#include "clients/ring/ring-protocol.h"

#include <event2/event.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------- watermarks ---------- */

static void test_watermarks_drop_duplicates_per_origin(void **state)
{
    (void)state;
    struct director_watermarks *wm = director_watermarks_new(2);
    assert_int_equal(director_watermarks_get(wm, "10.0.0.1:9102"), 0);
    assert_int_equal(director_watermarks_accept(wm, "10.0.0.1:9102", 5), DIRECTOR_WM_NEW);
    assert_int_equal(director_watermarks_accept(wm, "10.0.0.1:9102", 5), DIRECTOR_WM_DUPLICATE);
    assert_int_equal(director_watermarks_accept(wm, "10.0.0.1:9102", 3), DIRECTOR_WM_DUPLICATE);
    assert_int_equal(director_watermarks_accept(wm, "10.0.0.1:9102", 7), DIRECTOR_WM_NEW);
    assert_int_equal(director_watermarks_get(wm, "10.0.0.1:9102"), 7);
    /* another origin has its own sequence */
    assert_int_equal(director_watermarks_accept(wm, "10.0.0.2:9102", 1), DIRECTOR_WM_NEW);
    assert_int_equal(director_watermarks_get(wm, "10.0.0.2:9102"), 1);
    /* the limit: a third origin is refused and not recorded */
    assert_int_equal(director_watermarks_accept(wm, "10.0.0.3:9102", 1), DIRECTOR_WM_FULL);
    assert_int_equal(director_watermarks_get(wm, "10.0.0.3:9102"), 0);
    assert_int_equal(director_watermarks_count(wm), 2);
    director_watermarks_forget(wm, "10.0.0.1:9102");
    assert_int_equal(director_watermarks_accept(wm, "10.0.0.3:9102", 1), DIRECTOR_WM_NEW);
    assert_int_equal(director_watermarks_get(wm, "10.0.0.2:9102"), 1);
    /* a huge sequence number (a restarted director's time-based base) */
    assert_int_equal(director_watermarks_accept(wm, "10.0.0.2:9102", UINT64_MAX), DIRECTOR_WM_NEW);
    assert_int_equal(director_watermarks_accept(wm, "10.0.0.2:9102", UINT64_MAX),
                     DIRECTOR_WM_DUPLICATE);
    director_watermarks_free(wm);
}

/* ---------- tombstones ---------- */

static void test_tombstones_keep_their_age_and_clear(void **state)
{
    (void)state;
    struct director_tombstones *ts = director_tombstones_new(2);
    assert_true(director_tombstones_add(ts, "10.0.0.3:9102", 1000));
    assert_true(director_tombstones_add(ts, "10.0.0.2:9102", 2000));
    /* marked dead again: the first time counts (age keeps growing) */
    assert_true(director_tombstones_add(ts, "10.0.0.3:9102", 5000));
    assert_int_equal(director_tombstones_count(ts), 2);
    assert_string_equal(director_tombstones_at(ts, 0)->addr, "10.0.0.2:9102");
    assert_string_equal(director_tombstones_at(ts, 1)->addr, "10.0.0.3:9102");
    assert_int_equal(director_tombstones_at(ts, 1)->since_ms, 1000);
    assert_null(director_tombstones_at(ts, 2));
    /* full */
    assert_false(director_tombstones_add(ts, "10.0.0.4:9102", 1));
    assert_true(director_tombstones_has(ts, "10.0.0.2:9102"));
    assert_true(director_tombstones_clear(ts, "10.0.0.2:9102"));
    assert_false(director_tombstones_clear(ts, "10.0.0.2:9102"));
    assert_false(director_tombstones_has(ts, "10.0.0.2:9102"));
    assert_int_equal(director_tombstones_count(ts), 1);
    director_tombstones_free(ts);
}

/* ---------- last writer wins ---------- */

static void test_host_order_is_total_and_symmetric(void **state)
{
    (void)state;
    struct ring_host base = {.ip = "10.0.0.5",
                             .port = 143,
                             .tag = "",
                             .vhosts = 100,
                             .state = RING_STATE_UP,
                             .last_updown_change = 100};
    struct ring_host v[6];
    for (int i = 0; i < 6; i++)
        v[i] = base;
    v[1].last_updown_change = 101; /* newer wins */
    v[2].state = RING_STATE_FLUSH; /* same second: flush wins */
    v[3].vhosts = 200;             /* then the larger weight */
    v[4].port = 144;               /* then the port */
    v[5].tag = "blue";             /* then the tag */
    assert_int_equal(director_sync_host_cmp(&base, &v[0]), 0);
    for (int i = 1; i < 6; i++) {
        assert_true(director_sync_host_cmp(&v[i], &base) > 0);
        assert_true(director_sync_host_cmp(&base, &v[i]) < 0);
    }
    /* the timestamp dominates everything else */
    struct ring_host old_flush = v[2];
    old_flush.last_updown_change = 99;
    assert_true(director_sync_host_cmp(&base, &old_flush) > 0);
}

/* ---------- ring order ---------- */

static void test_neighbours_in_address_order(void **state)
{
    (void)state;
    const struct director_peer *l, *r;
    struct director_peers *p = director_peers_new("127.0.0.2:9102", 8);
    director_peers_neighbours(p, &l, &r);
    assert_null(l);
    assert_null(r);
    assert_true(director_peers_add(p, "127.0.0.3:9102", true, NULL));
    director_peers_neighbours(p, &l, &r); /* two members: both sides are the other */
    assert_string_equal(l->addr, "127.0.0.3:9102");
    assert_ptr_equal(l, r);
    assert_true(director_peers_add(p, "127.0.0.1:9102", true, NULL));
    assert_true(director_peers_add(p, "127.0.0.10:9102", true, NULL)); /* 10 > 3 numerically */
    assert_int_equal(director_peers_self_index(p), 1);
    director_peers_neighbours(p, &l, &r);
    assert_string_equal(l->addr, "127.0.0.1:9102");
    assert_string_equal(r->addr, "127.0.0.3:9102");
    director_peers_free(p);
    /* the first member's left wraps to the last */
    p = director_peers_new("127.0.0.1:9102", 8);
    assert_true(director_peers_add(p, "127.0.0.1:9103", true, NULL)); /* then by port */
    assert_true(director_peers_add(p, "127.0.0.9:9102", true, NULL));
    director_peers_neighbours(p, &l, &r);
    assert_string_equal(l->addr, "127.0.0.9:9102");
    assert_string_equal(r->addr, "127.0.0.1:9103");
    director_peers_free(p);
}

/* ---------- receiving peers' changes ---------- */

struct heard {
    int backend, moved, kicked;
    bool local;
    char origin[64];
    uint64_t seq;
};

static void on_backend(const struct director_backend *b, enum ring_change change,
                       const struct director_change *from, void *ctx)
{
    (void)b;
    (void)change;
    struct heard *h = ctx;
    h->backend++;
    h->local = from->local;
    snprintf(h->origin, sizeof(h->origin), "%s", from->origin);
    h->seq = from->seq;
}

static void on_moved(const char *user, uint32_t hash, const struct director_backend *to,
                     const struct director_change *from, void *ctx)
{
    (void)user;
    (void)hash;
    (void)to;
    (void)from;
    ((struct heard *)ctx)->moved++;
}

static void on_kicked(const char *user, uint32_t hash, const struct director_change *from,
                      void *ctx)
{
    (void)user;
    (void)hash;
    (void)from;
    ((struct heard *)ctx)->kicked++;
}

static struct director_state *new_state(const char *self)
{
    struct director_state_config sc = {.self = self,
                                       .user_expire_ms = 60000,
                                       .kill_timeout_ms = 2000,
                                       .max_users = 100,
                                       .max_backends = 100,
                                       .max_vhosts = 1000,
                                       .max_username = 255,
                                       .max_tag = 255};
    return director_state_new(&sc, NULL, NULL);
}

static struct ring_msg ring_change(enum ring_change change, const char *ip, int64_t t,
                                   const char *origin, uint64_t seq)
{
    struct ring_msg m = {.type = RING_MSG_RING_CHANGE};
    m.ring_change.change = change;
    m.ring_change.host =
        (struct ring_host){.ip = ip,
                           .port = 143,
                           .tag = "",
                           .vhosts = 100,
                           .state = change == RING_CHANGE_FLUSH ? RING_STATE_FLUSH : RING_STATE_UP,
                           .last_updown_change = t};
    m.ring_change.origin = origin;
    m.ring_change.seq = seq;
    return m;
}

static void test_receive_applies_once_per_origin_seq(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct director_config cfg;
    director_config_defaults(&cfg);
    struct director_state *st = new_state("127.0.0.1:9102");
    struct director_peers *peers = director_peers_new("127.0.0.1:9102", 8);
    struct director_sync *sync = director_sync_new(base, st, peers, &cfg, NULL);
    struct heard h = {0};
    struct director_observer obs = {
        .backend_changed = on_backend, .user_moved = on_moved, .user_kicked = on_kicked, .ctx = &h};
    director_state_subscribe(st, &obs);
    struct petrel_error err;

    struct ring_msg m = ring_change(RING_CHANGE_UP, "10.0.0.5", 100, "127.0.0.2:9102", 10);
    assert_true(director_sync_receive(sync, "127.0.0.2:9102", &m, &err));
    assert_int_equal(h.backend, 1);
    assert_false(h.local);
    assert_string_equal(h.origin, "127.0.0.2:9102");
    assert_int_equal(h.seq, 10);
    assert_int_equal(director_sync_watermark(sync, "127.0.0.2:9102"), 10);
    assert_non_null(director_backends_find(director_state_backends(st), "10.0.0.5"));

    /* the same change again (it went round the ring): dropped */
    m = ring_change(RING_CHANGE_FLUSH, "10.0.0.5", 200, "127.0.0.2:9102", 10);
    assert_true(director_sync_receive(sync, "127.0.0.3:9102", &m, &err));
    assert_int_equal(h.backend, 1);
    assert_int_equal(director_backends_find(director_state_backends(st), "10.0.0.5")->state,
                     RING_STATE_UP);
    /* an older one too */
    m.ring_change.seq = 9;
    assert_true(director_sync_receive(sync, "127.0.0.3:9102", &m, &err));
    assert_int_equal(h.backend, 1);
    /* the next one applies */
    m.ring_change.seq = 11;
    assert_true(director_sync_receive(sync, "127.0.0.3:9102", &m, &err));
    assert_int_equal(h.backend, 2);
    assert_int_equal(director_backends_find(director_state_backends(st), "10.0.0.5")->state,
                     RING_STATE_FLUSH);
    /* a change from another origin with a low seq is its own sequence */
    m = ring_change(RING_CHANGE_UP, "10.0.0.5", 300, "127.0.0.3:9102", 1);
    assert_true(director_sync_receive(sync, "127.0.0.3:9102", &m, &err));
    assert_int_equal(h.backend, 3);
    /* this director's own change coming back is dropped */
    m = ring_change(RING_CHANGE_DOWN, "10.0.0.5", 300, "127.0.0.1:9102", 999);
    assert_true(director_sync_receive(sync, "127.0.0.3:9102", &m, &err));
    assert_int_equal(h.backend, 3);
    assert_int_equal(director_sync_watermark(sync, "127.0.0.1:9102"), 0);

    /* USER-MOVED / USER-KICKED: deduplicated alike */
    struct ring_msg mv = {.type = RING_MSG_USER_MOVED};
    mv.user_moved.user = "alice";
    mv.user_moved.hash = 1;
    mv.user_moved.ip = "10.0.0.5";
    mv.user_moved.port = 143;
    mv.user_moved.origin = "127.0.0.2:9102";
    mv.user_moved.seq = 12;
    assert_true(director_sync_receive(sync, "127.0.0.2:9102", &mv, &err));
    assert_true(director_sync_receive(sync, "127.0.0.2:9102", &mv, &err));
    assert_int_equal(h.moved, 1);
    struct ring_msg k = {.type = RING_MSG_USER_KICKED};
    k.user_kicked.user = "alice";
    k.user_kicked.hash = 1;
    k.user_kicked.origin = "127.0.0.2:9102";
    k.user_kicked.seq = 13;
    assert_true(director_sync_receive(sync, "127.0.0.2:9102", &k, &err));
    assert_true(director_sync_receive(sync, "127.0.0.3:9102", &k, &err));
    assert_int_equal(h.kicked, 1);
    /* a move to a backend this director does not know: not applied,
     * reported, still counted as processed */
    mv.user_moved.ip = "10.9.9.9";
    mv.user_moved.seq = 14;
    assert_false(director_sync_receive(sync, "127.0.0.2:9102", &mv, &err));
    assert_int_equal(err.code, PETREL_ERR_NOT_FOUND);
    assert_int_equal(director_sync_watermark(sync, "127.0.0.2:9102"), 14);
    /* not a change */
    struct ring_msg ping = {.type = RING_MSG_PING};
    assert_false(director_sync_receive(sync, "127.0.0.2:9102", &ping, &err));

    /* alone: no links, no tombstones */
    struct director_link_info li;
    director_sync_link_info(sync, "127.0.0.2:9102", &li);
    assert_int_equal(li.role, DIRECTOR_ROLE_NONE);
    assert_int_equal(director_tombstones_count(director_sync_tombstones(sync)), 0);

    director_state_unsubscribe(st, &obs);
    director_sync_free(sync);
    director_peers_free(peers);
    director_state_free(st);
    director_config_free(&cfg);
    event_base_free(base);
}

static void test_origins_are_bounded(void **state)
{
    (void)state;
    struct event_base *base = event_base_new();
    struct director_config cfg;
    director_config_defaults(&cfg);
    struct director_state *st = new_state("127.0.0.1:9102");
    struct director_peers *peers = director_peers_new("127.0.0.1:9102", 8);
    struct director_sync *sync = director_sync_new(base, st, peers, &cfg, NULL);
    struct petrel_error err;
    char origin[64];
    for (int i = 0; i <= DIRECTOR_MAX_PEERS + 1; i++) {
        snprintf(origin, sizeof(origin), "10.1.%d.%d:9102", i / 200, i % 200 + 1);
        struct ring_msg m = ring_change(RING_CHANGE_UP, "10.0.0.5", 100, origin, 1);
        bool ok = director_sync_receive(sync, "127.0.0.2:9102", &m, &err);
        if (i <= DIRECTOR_MAX_PEERS)
            assert_true(ok);
        else {
            assert_false(ok);
            assert_int_equal(err.code, PETREL_ERR_UNAVAILABLE);
        }
    }
    director_sync_free(sync);
    director_peers_free(peers);
    director_state_free(st);
    director_config_free(&cfg);
    event_base_free(base);
}

/* ---------- state: sequence base, user merge ---------- */

static void test_seq_base_and_user_merge(void **state)
{
    (void)state;
    struct director_state *st = new_state("127.0.0.1:9102");
    director_state_set_seq_base(st, 1000000);
    assert_int_equal(director_state_local_seq(st), 0); /* nothing given yet */
    assert_true(director_state_backend_add(st, "10.0.0.5", 143, "", 100, NULL, NULL));
    assert_int_equal(director_state_local_seq(st), 1000001);
    int64_t now = director_state_now_ms(st) / 1000; /* merge takes seconds */
    /* unknown backend, wrong port: refused */
    assert_false(director_state_user_merge(st, 42, "10.0.0.6", 143, now + 60));
    assert_false(director_state_user_merge(st, 42, "10.0.0.5", 144, now + 60));
    /* expired on the peer: ignored; a far future (any int64) does not overflow */
    assert_true(director_state_user_merge(st, 43, "10.0.0.5", 143, INT64_MAX));
    assert_non_null(director_users_find(director_state_users(st), 43));
    assert_true(director_state_user_merge(st, 42, "10.0.0.5", 143, now - 1));
    assert_null(director_users_find(director_state_users(st), 42));
    assert_true(director_state_user_merge(st, 42, "10.0.0.5", 143, now + 60));
    const struct director_user *u = director_users_find(director_state_users(st), 42);
    assert_non_null(u);
    assert_string_equal(u->backend->ip, "10.0.0.5");
    /* a live mapping here is kept */
    assert_true(director_state_backend_add(st, "10.0.0.6", 143, "", 100, NULL, NULL));
    assert_true(director_state_user_merge(st, 42, "10.0.0.6", 143, now + 60));
    assert_string_equal(director_users_find(director_state_users(st), 42)->backend->ip, "10.0.0.5");
    director_state_free(st);
}

/* ---------- the USER handshake line ---------- */

static void test_user_line_round_trip_and_errors(void **state)
{
    (void)state;
    struct buf out = {0};
    struct ring_msg m = {.type = RING_MSG_USER};
    m.user.hash = 4000000000u;
    m.user.ip = "fd00::5";
    m.user.port = 143;
    m.user.expires_at = 1718000000;
    m.user.weak = true;
    ring_msg_write(&out, &m);
    assert_string_equal(out.data, "USER\t4000000000\tfd00::5\t143\t1718000000\t1\n");
    struct ring_line fields;
    struct ring_msg got;
    struct petrel_error err;
    assert_true(ring_msg_parse(out.data, out.len - 1, 8192, &fields, &got, &err));
    assert_int_equal(got.type, RING_MSG_USER);
    assert_int_equal(got.user.hash, 4000000000u);
    assert_string_equal(got.user.ip, "fd00::5");
    assert_int_equal(got.user.port, 143);
    assert_int_equal(got.user.expires_at, 1718000000);
    assert_true(got.user.weak);
    buf_free(&out);
    const char *bad[] = {
        "USER\t0\t10.0.0.1\t143\t1\t0",          /* hash 0 */
        "USER\t1\t10.0.0.1\t143\t1\t2",          /* weak not 0/1 */
        "USER\t1\tnot-an-ip\t143\t1\t0",         /* ip */
        "USER\t1\t10.0.0.1\t0\t1\t0",            /* port */
        "USER\t1\t10.0.0.1\t143\t-1\t0",         /* time */
        "USER\t1\t10.0.0.1\t143\t1",             /* missing field */
        "USER\t4294967296\t10.0.0.1\t143\t1\t0", /* hash over 32 bits */
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char line[128];
        snprintf(line, sizeof(line), "%s", bad[i]);
        assert_false(ring_msg_parse(line, strlen(line), 8192, &fields, &got, &err));
    }
}

/* ---------- topology ---------- */

static json_t *status(const char *self, const char *left, const char *right, const char *hash,
                      int size, const char *tomb, json_int_t own_seq, const char *other,
                      json_int_t other_seq)
{
    json_t *members = json_array();
    json_array_append_new(members, json_pack("{s:s, s:b, s:s?, s:s?, s:I}", "addr", self, "self", 1,
                                             "left", left, "right", right, "seq", own_seq));
    if (other != NULL)
        json_array_append_new(
            members, json_pack("{s:s, s:b, s:I}", "addr", other, "self", 0, "seq", other_seq));
    json_t *tombs = json_array();
    if (tomb != NULL)
        json_array_append_new(tombs, json_pack("{s:s, s:i}", "addr", tomb, "age_secs", 3));
    return json_pack("{s:s, s:i, s:o, s:o, s:s}", "self", self, "size", size, "members", members,
                     "tombstones", tombs, "backendSetHash", hash);
}

static json_t *reachable(const char *addr, json_t *st)
{
    return json_pack("{s:s, s:b, s:o}", "addr", addr, "reachable", 1, "status", st);
}

static int count_type(const json_t *issues, const char *type, const char *severity)
{
    int n = 0;
    size_t i;
    const json_t *it;
    json_array_foreach(issues, i, it)
    {
        if (strcmp(json_string_value(json_object_get(it, "type")), type) == 0) {
            assert_string_equal(json_string_value(json_object_get(it, "severity")), severity);
            n++;
        }
    }
    return n;
}

static void test_topology_issues(void **state)
{
    (void)state;
    const char *A = "127.0.0.1:1", *B = "127.0.0.2:1";
    /* agreeing pair: healthy, no issues */
    json_t *reps = json_array();
    json_array_append_new(reps, reachable(A, status(A, B, B, "h", 2, NULL, 5, B, 7)));
    json_array_append_new(reps, reachable(B, status(B, A, A, "h", 2, NULL, 7, A, 5)));
    json_t *issues = director_topology_issues(reps);
    assert_int_equal(json_array_size(issues), 0);
    assert_true(director_topology_healthy(issues));
    json_decref(issues);
    json_decref(reps);

    /* every error type at once, and a seq lag (warn) */
    const char *C = "127.0.0.3:1";
    reps = json_array();
    json_array_append_new(reps, reachable(A, status(A, C, B, "h1", 3, NULL, 5, B, 6)));
    json_array_append_new(reps, reachable(B, status(B, C, C, "h2", 2, C, 7, A, 5)));
    json_array_append_new(
        reps, json_pack("{s:s, s:b, s:s}", "addr", C, "reachable", 0, "error", "cannot connect"));
    issues = director_topology_issues(reps);
    assert_int_equal(count_type(issues, "peer-unreachable", "error"), 1);
    assert_int_equal(count_type(issues, "view-size-mismatch", "error"), 1);
    assert_int_equal(count_type(issues, "backend-set-divergence", "error"), 1);
    assert_int_equal(count_type(issues, "tombstone-divergence", "error"), 1);
    /* A says B is its right; B says C (not A) is its left */
    assert_int_equal(count_type(issues, "asymmetric-edge", "error"), 1);
    /* A has B's changes up to 6, B is at 7 */
    assert_int_equal(count_type(issues, "seq-lag", "warn"), 1);
    assert_false(director_topology_healthy(issues));
    json_decref(issues);
    json_decref(reps);

    /* a seq lag alone does not make the ring unhealthy */
    reps = json_array();
    json_array_append_new(reps, reachable(A, status(A, B, B, "h", 2, NULL, 5, B, 6)));
    json_array_append_new(reps, reachable(B, status(B, A, A, "h", 2, NULL, 7, A, 5)));
    issues = director_topology_issues(reps);
    assert_int_equal(json_array_size(issues), 1);
    assert_int_equal(count_type(issues, "seq-lag", "warn"), 1);
    assert_true(director_topology_healthy(issues));
    json_decref(issues);
    json_decref(reps);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_watermarks_drop_duplicates_per_origin),
        cmocka_unit_test(test_tombstones_keep_their_age_and_clear),
        cmocka_unit_test(test_host_order_is_total_and_symmetric),
        cmocka_unit_test(test_neighbours_in_address_order),
        cmocka_unit_test(test_receive_applies_once_per_origin_seq),
        cmocka_unit_test(test_origins_are_bounded),
        cmocka_unit_test(test_seq_base_and_user_merge),
        cmocka_unit_test(test_user_line_round_trip_and_errors),
        cmocka_unit_test(test_topology_issues),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
