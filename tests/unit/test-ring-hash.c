/* Director consistent hashing (services/director/ring-hash.c): user hashes,
 * points and routes against vectors Python's hashlib computed from the rule
 * of DECISIONS.md (tests/unit/ring-vectors.py, run by meson at build time;
 * the file's path is argv[1]); tie-breaking, wrap-around, vhost weights,
 * minimal remapping and tag isolation. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "core/xalloc.h"
#include "services/director/director-state.h"
#include "services/director/ring-hash.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------- the vectors file ---------- */

struct vec_backend {
    char ip[64];
    unsigned port;
    char tag[32];
    uint32_t vhosts;
    bool up;
};

struct vec_set {
    char name[16];
    struct vec_backend backends[16];
    size_t count;
};

/* Splits a line at TABs in place; returns the field count. */
static size_t split(char *line, char **fields, size_t max)
{
    size_t n = 0;
    fields[n++] = line;
    for (char *p = line; *p != '\0' && n < max; p++) {
        if (*p == '\t') {
            *p = '\0';
            fields[n++] = p + 1;
        }
    }
    return n;
}

static size_t unhex(const char *hex, char *out, size_t size)
{
    size_t n = strlen(hex) / 2;
    assert_true(n < size);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        assert_int_equal(sscanf(hex + 2 * i, "%2x", &v), 1);
        out[i] = (char)v;
    }
    out[n] = '\0';
    return n;
}

static FILE *open_vectors(void **state)
{
    const char *path = *state;
    assert_non_null(path);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        fail_msg("cannot open the vectors file %s", path);
    return f;
}

static void test_user_hashes(void **state)
{
    FILE *f = open_vectors(state);
    char line[4096];
    size_t checked = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        char *fl[8];
        if (split(line, fl, 8) != 3 || strcmp(fl[0], "U") != 0)
            continue;
        char user[1024];
        size_t len = unhex(fl[1], user, sizeof(user));
        uint32_t want = (uint32_t)strtoul(fl[2], NULL, 10);
        assert_int_equal(ring_hash_user(user, len), want);
        checked++;
    }
    fclose(f);
    assert_true(checked >= 3000);
}

static void test_points(void **state)
{
    FILE *f = open_vectors(state);
    char line[4096];
    size_t checked = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        char *fl[8];
        if (split(line, fl, 8) != 4 || strcmp(fl[0], "P") != 0)
            continue;
        uint32_t i = (uint32_t)strtoul(fl[2], NULL, 10);
        assert_int_equal(ring_hash_point(fl[1], i), (uint32_t)strtoul(fl[3], NULL, 10));
        checked++;
    }
    fclose(f);
    assert_true(checked > 200);
}

/* Builds the ring of a set's backends that are up (as director-state does). */
static void build_set_ring(struct ring_hash *ring, const struct vec_set *set, uint32_t **points)
{
    struct ring_member members[16];
    size_t m = 0;
    for (size_t i = 0; i < set->count; i++) {
        const struct vec_backend *b = &set->backends[i];
        points[i] = xcalloc(b->vhosts + 1, sizeof(uint32_t));
        ring_hash_points(b->ip, b->vhosts, points[i]);
        if (!b->up)
            continue;
        members[m] = (struct ring_member){.ip = b->ip,
                                          .port = b->port,
                                          .tag = b->tag,
                                          .points = points[i],
                                          .count = b->vhosts,
                                          .owner = (void *)b};
        m++;
    }
    ring_hash_build(ring, members, m);
}

static struct director_state *set_state(const struct vec_set *set)
{
    struct director_state_config cfg = {.self = "127.0.0.1:9102",
                                        .user_expire_ms = 60000,
                                        .kill_timeout_ms = 1000,
                                        .max_users = 1000,
                                        .max_backends = 64,
                                        .max_vhosts = 1000,
                                        .max_username = 1000,
                                        .max_tag = 64};
    struct director_state *st = director_state_new(&cfg, NULL, NULL);
    for (size_t i = 0; i < set->count; i++) {
        const struct vec_backend *b = &set->backends[i];
        assert_true(director_state_backend_add(st, b->ip, b->port, b->tag, b->vhosts, NULL, NULL));
        if (!b->up)
            assert_true(director_state_backend_set_state(st, b->ip, RING_STATE_FLUSH, NULL, NULL));
    }
    return st;
}

/* Each route of the vectors, through the bare ring and through the whole
 * director state (read-only lookups). */
static void test_routes(void **state)
{
    FILE *f = open_vectors(state);
    char line[4096];
    struct vec_set set = {0};
    struct ring_hash *ring = ring_hash_new();
    uint32_t *points[16] = {0};
    struct director_state *st = NULL;
    size_t checked = 0, nowhere = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        char *fl[8];
        size_t n = split(line, fl, 8);
        if (strcmp(fl[0], "S") == 0) {
            memset(&set, 0, sizeof(set));
            snprintf(set.name, sizeof(set.name), "%s", fl[1]);
            continue;
        }
        if (strcmp(fl[0], "B") == 0 && n == 7) {
            assert_string_equal(fl[1], set.name);
            struct vec_backend *b = &set.backends[set.count++];
            snprintf(b->ip, sizeof(b->ip), "%s", fl[2]);
            b->port = (unsigned)atoi(fl[3]);
            snprintf(b->tag, sizeof(b->tag), "%s", fl[4]);
            b->vhosts = (uint32_t)atoi(fl[5]);
            b->up = strcmp(fl[6], "up") == 0;
            continue;
        }
        if (strcmp(fl[0], "R") != 0 || n != 5)
            continue;
        if (st == NULL) { /* the first route of a set: its backends are complete */
            for (size_t i = 0; i < 16; i++) {
                free(points[i]);
                points[i] = NULL;
            }
            build_set_ring(ring, &set, points);
            st = set_state(&set);
        }
        char user[1024];
        size_t len = unhex(fl[3], user, sizeof(user));
        const char *tag = fl[2];
        const struct vec_backend *b = ring_hash_lookup(ring, tag, ring_hash_user(user, len));
        struct director_lookup res;
        director_state_lookup(st, user, len, tag, false, &res);
        if (strcmp(fl[4], "-") == 0) {
            assert_null(b);
            assert_int_equal(res.outcome, RING_OUTCOME_NO_BACKENDS);
            nowhere++;
        } else {
            assert_non_null(b);
            assert_string_equal(b->ip, fl[4]);
            assert_int_equal(res.outcome, RING_OUTCOME_ASSIGNED);
            assert_string_equal(res.backend->ip, fl[4]);
        }
        checked++;
        /* The next line may start another set. */
        int c = fgetc(f);
        if (c != EOF)
            ungetc(c, f);
        if (c == 'S' || c == EOF) {
            director_state_free(st);
            st = NULL;
        }
    }
    fclose(f);
    director_state_free(st);
    for (size_t i = 0; i < 16; i++)
        free(points[i]);
    ring_hash_free(ring);
    assert_true(checked >= 7000);
    assert_true(nowhere > 0 && nowhere < checked);
}

/* ---------- properties ---------- */

static void test_ties_go_to_smaller_address(void **state)
{
    (void)state;
    uint32_t pa[] = {100, 500}, pb[] = {100, 300}, pc[] = {100};
    int a, b, c;
    struct ring_member m[3] = {
        {.ip = "10.0.0.9", .port = 143, .tag = "", .points = pa, .count = 2, .owner = &a},
        {.ip = "10.0.0.10", .port = 143, .tag = "", .points = pb, .count = 2, .owner = &b},
        {.ip = "10.0.0.10", .port = 110, .tag = "", .points = pc, .count = 1, .owner = &c},
    };
    /* Any insertion order: 10.0.0.9 < 10.0.0.10 by address (not by text),
     * and port 110 < 143 for the same address. */
    struct ring_member orders[2][3] = {{m[0], m[1], m[2]}, {m[2], m[1], m[0]}};
    for (int o = 0; o < 2; o++) {
        struct ring_hash *ring = ring_hash_new();
        ring_hash_build(ring, orders[o], 3);
        assert_ptr_equal(ring_hash_lookup(ring, "", 50), &a);
        assert_ptr_equal(ring_hash_lookup(ring, "", 100), &a);
        assert_ptr_equal(ring_hash_lookup(ring, "", 101), &b); /* 300 */
        assert_ptr_equal(ring_hash_lookup(ring, "", 400), &a); /* 500 */
        assert_ptr_equal(ring_hash_lookup(ring, "", 501), &a); /* wraps to 100 */
        assert_ptr_equal(ring_hash_lookup(ring, "", UINT32_MAX), &a);
        assert_int_equal(ring_hash_point_count(ring, ""), 5);
        ring_hash_free(ring);
    }
    uint32_t p4[] = {7}, p6[] = {7};
    int v4, v6;
    struct ring_member mixed[2] = {
        {.ip = "::1", .port = 1, .tag = "", .points = p6, .count = 1, .owner = &v6},
        {.ip = "255.255.255.255", .port = 1, .tag = "", .points = p4, .count = 1, .owner = &v4},
    };
    struct ring_hash *ring = ring_hash_new();
    ring_hash_build(ring, mixed, 2);
    assert_ptr_equal(ring_hash_lookup(ring, "", 7), &v4); /* IPv4 before IPv6 */
    ring_hash_free(ring);
}

static void test_user_hash_rules(void **state)
{
    (void)state;
    assert_int_equal(ring_hash_user("Demo", 4), ring_hash_user("demo", 4));
    assert_int_equal(ring_hash_user("USER@EXAMPLE.COM", 16),
                     ring_hash_user("user@example.com", 16));
    /* Only ASCII is lower-cased: 'Ä' (UTF-8 C3 84) stays as it is. */
    assert_int_not_equal(ring_hash_user("\xc3\x84", 2), ring_hash_user("\xc3\xa4", 2));
    /* A long name hashes in blocks: same result as one piece. */
    char big[1000];
    memset(big, 'Q', sizeof(big));
    char low[1000];
    memset(low, 'q', sizeof(low));
    assert_int_equal(ring_hash_user(big, sizeof(big)), ring_hash_user(low, sizeof(low)));
    assert_int_not_equal(ring_hash_user("a", 1), 0);
}

static void test_empty_and_unknown_tags(void **state)
{
    (void)state;
    struct ring_hash *ring = ring_hash_new();
    assert_null(ring_hash_lookup(ring, "", 1));
    ring_hash_build(ring, NULL, 0);
    assert_null(ring_hash_lookup(ring, "", 1));
    uint32_t pts[] = {5};
    int owner;
    struct ring_member m = {
        .ip = "10.0.0.1", .port = 1, .tag = "x", .points = pts, .count = 1, .owner = &owner};
    ring_hash_build(ring, &m, 1);
    assert_null(ring_hash_lookup(ring, "", 1));
    assert_null(ring_hash_lookup(ring, "y", 1));
    assert_ptr_equal(ring_hash_lookup(ring, "x", 1), &owner);
    /* vhosts 0: a member without points routes nobody */
    m.count = 0;
    ring_hash_build(ring, &m, 1);
    assert_null(ring_hash_lookup(ring, "x", 1));
    ring_hash_free(ring);
}

struct triple {
    char ip[3][32];
    uint32_t *points[3];
    struct ring_hash *ring;
};

/* 100,000 users spread over 100 rings of three backends with vhosts
 * 100/200/300. One ring alone deviates from its weights by about
 * 1/sqrt(vhosts) (the Dovecot rule's granularity, docs/director.md); over
 * many rings the shares must come to 1:2:3 within ±3%. */
static void test_vhost_weights(void **state)
{
    (void)state;
    enum { RINGS = 100, USERS = 100000 };
    static const uint32_t weights[3] = {100, 200, 300};
    struct triple *t = xcalloc(RINGS, sizeof(*t));
    for (int r = 0; r < RINGS; r++) {
        struct ring_member m[3];
        for (int k = 0; k < 3; k++) {
            snprintf(t[r].ip[k], sizeof(t[r].ip[k]), "10.%d.0.%d", r, k + 1);
            t[r].points[k] = xcalloc(weights[k], sizeof(uint32_t));
            ring_hash_points(t[r].ip[k], weights[k], t[r].points[k]);
            m[k] = (struct ring_member){.ip = t[r].ip[k],
                                        .port = 143,
                                        .tag = "",
                                        .points = t[r].points[k],
                                        .count = weights[k],
                                        .owner = (void *)(intptr_t)(k + 1)};
        }
        t[r].ring = ring_hash_new();
        ring_hash_build(t[r].ring, m, 3);
    }
    size_t count[3] = {0};
    for (int n = 0; n < USERS; n++) {
        char user[64];
        int len = snprintf(user, sizeof(user), "user%d@example.com", n);
        intptr_t k =
            (intptr_t)ring_hash_lookup(t[n % RINGS].ring, "", ring_hash_user(user, (size_t)len));
        assert_true(k >= 1 && k <= 3);
        count[k - 1]++;
    }
    for (int k = 0; k < 3; k++) {
        double share = (double)count[k] / USERS;
        double want = weights[k] / 600.0;
        double off = share / want - 1;
        if (off < -0.03 || off > 0.03)
            fail_msg("vhosts %u: share %.4f, expected %.4f (off by %.1f%%)", weights[k], share,
                     want, off * 100);
    }
    for (int r = 0; r < RINGS; r++) {
        for (int k = 0; k < 3; k++)
            free(t[r].points[k]);
        ring_hash_free(t[r].ring);
    }
    free(t);
}

/* Adding an 11th backend to 10 equal ones moves about 1/11 of the users,
 * all of them to the new backend; removing it moves exactly those back. */
static void test_minimal_remapping(void **state)
{
    (void)state;
    enum { N = 11, USERS = 50000 };
    char ips[N][32];
    uint32_t *points[N];
    struct ring_member m[N];
    for (int i = 0; i < N; i++) {
        snprintf(ips[i], sizeof(ips[i]), "192.168.%d.%d", i / 4, 10 + i);
        points[i] = xcalloc(100, sizeof(uint32_t));
        ring_hash_points(ips[i], 100, points[i]);
        m[i] = (struct ring_member){.ip = ips[i],
                                    .port = 143,
                                    .tag = "",
                                    .points = points[i],
                                    .count = 100,
                                    .owner = (void *)(intptr_t)(i + 1)};
    }
    struct ring_hash *before = ring_hash_new(), *after = ring_hash_new();
    ring_hash_build(before, m, N - 1);
    ring_hash_build(after, m, N);
    size_t moved = 0;
    for (int n = 0; n < USERS; n++) {
        char user[64];
        int len = snprintf(user, sizeof(user), "mover%d", n);
        uint32_t h = ring_hash_user(user, (size_t)len);
        intptr_t a = (intptr_t)ring_hash_lookup(before, "", h);
        intptr_t b = (intptr_t)ring_hash_lookup(after, "", h);
        if (a != b) {
            assert_int_equal(b, N); /* only ever to the new backend */
            moved++;
        }
    }
    double frac = (double)moved / USERS;
    if (frac < 0.5 / N || frac > 2.0 / N)
        fail_msg("%.3f of the users moved, expected about %.3f", frac, 1.0 / N);
    ring_hash_free(before);
    ring_hash_free(after);
    for (int i = 0; i < N; i++)
        free(points[i]);
}

/* Tagged users land only on their tag's backends; untagged users never on
 * tagged backends; a tag without backends routes nobody. */
static void test_tag_isolation(void **state)
{
    (void)state;
    static const char *const ips[] = {"10.1.0.1", "10.1.0.2", "10.2.0.1", "10.2.0.2", "10.3.0.1"};
    static const char *const tags[] = {"blue", "blue", "green", "green", ""};
    uint32_t *points[5];
    struct ring_member m[5];
    for (int i = 0; i < 5; i++) {
        points[i] = xcalloc(100, sizeof(uint32_t));
        ring_hash_points(ips[i], 100, points[i]);
        m[i] = (struct ring_member){.ip = ips[i],
                                    .port = 143,
                                    .tag = tags[i],
                                    .points = points[i],
                                    .count = 100,
                                    .owner = (void *)(intptr_t)(i + 1)};
    }
    struct ring_hash *ring = ring_hash_new();
    ring_hash_build(ring, m, 5);
    size_t seen[5] = {0};
    for (int n = 0; n < 20000; n++) {
        char user[64];
        int len = snprintf(user, sizeof(user), "tagged%d", n);
        uint32_t h = ring_hash_user(user, (size_t)len);
        intptr_t blue = (intptr_t)ring_hash_lookup(ring, "blue", h);
        intptr_t green = (intptr_t)ring_hash_lookup(ring, "green", h);
        intptr_t none = (intptr_t)ring_hash_lookup(ring, "", h);
        assert_true(blue == 1 || blue == 2);
        assert_true(green == 3 || green == 4);
        assert_int_equal(none, 5);
        assert_null(ring_hash_lookup(ring, "red", h));
        seen[blue - 1]++;
        seen[green - 1]++;
    }
    for (int i = 0; i < 4; i++)
        assert_true(seen[i] > 5000); /* both backends of a tag take users */
    ring_hash_free(ring);
    for (int i = 0; i < 5; i++)
        free(points[i]);
}

int main(int argc, char **argv)
{
    void *vectors = argc > 1 ? argv[1] : NULL;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_prestate(test_user_hashes, vectors),
        cmocka_unit_test_prestate(test_points, vectors),
        cmocka_unit_test_prestate(test_routes, vectors),
        cmocka_unit_test(test_ties_go_to_smaller_address),
        cmocka_unit_test(test_user_hash_rules),
        cmocka_unit_test(test_empty_and_unknown_tags),
        cmocka_unit_test(test_vhost_weights),
        cmocka_unit_test(test_minimal_remapping),
        cmocka_unit_test(test_tag_isolation),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
