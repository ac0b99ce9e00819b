/* Unit tests for net/conn-limits.h: the per-address cap, release, the
 * exempt networks, IPv4-mapped peers and Unix-socket peers. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "net/conn-limits.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/un.h>

struct peer {
    struct sockaddr_storage ss;
};

static const struct sockaddr *peer_of(struct peer *p, const char *ip)
{
    memset(p, 0, sizeof(*p));
    struct sockaddr_in *sin = (struct sockaddr_in *)&p->ss;
    struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&p->ss;
    if (inet_pton(AF_INET, ip, &sin->sin_addr) == 1) {
        sin->sin_family = AF_INET;
        sin->sin_port = htons(40000);
    } else {
        assert_int_equal(inet_pton(AF_INET6, ip, &sin6->sin6_addr), 1);
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons(40001);
    }
    return (const struct sockaddr *)&p->ss;
}

static void test_cap_per_address_and_release(void **state)
{
    (void)state;
    struct conn_limits_config cfg = {.max_per_ip = 2, .exempt = NULL};
    struct conn_limits *lim = conn_limits_new(&cfg);
    struct peer a, b;
    assert_true(conn_limits_acquire(lim, peer_of(&a, "192.0.2.1")));
    assert_true(conn_limits_acquire(lim, peer_of(&a, "192.0.2.1")));
    assert_false(conn_limits_acquire(lim, peer_of(&a, "192.0.2.1")));
    /* Another address has its own count. */
    assert_true(conn_limits_acquire(lim, peer_of(&b, "192.0.2.2")));
    assert_int_equal(conn_limits_count(lim, peer_of(&a, "192.0.2.1")), 2);
    conn_limits_release(lim, peer_of(&a, "192.0.2.1"));
    assert_true(conn_limits_acquire(lim, peer_of(&a, "192.0.2.1")));
    conn_limits_release(lim, peer_of(&a, "192.0.2.1"));
    conn_limits_release(lim, peer_of(&a, "192.0.2.1"));
    conn_limits_release(lim, peer_of(&b, "192.0.2.2"));
    assert_int_equal(conn_limits_count(lim, peer_of(&a, "192.0.2.1")), 0);
    conn_limits_free(lim);
}

static void test_ipv4_mapped_is_the_same_client(void **state)
{
    (void)state;
    struct conn_limits_config cfg = {.max_per_ip = 1, .exempt = NULL};
    struct conn_limits *lim = conn_limits_new(&cfg);
    struct peer p;
    assert_true(conn_limits_acquire(lim, peer_of(&p, "198.51.100.7")));
    assert_false(conn_limits_acquire(lim, peer_of(&p, "::ffff:198.51.100.7")));
    conn_limits_release(lim, peer_of(&p, "::ffff:198.51.100.7"));
    assert_true(conn_limits_acquire(lim, peer_of(&p, "198.51.100.7")));
    conn_limits_release(lim, peer_of(&p, "198.51.100.7"));
    conn_limits_free(lim);
}

static void test_exempt_unix_and_no_cap_are_not_counted(void **state)
{
    (void)state;
    struct cidr_list exempt = {0};
    const char *const nets[] = {"10.0.0.0/8", NULL};
    struct petrel_error err;
    assert_true(cidr_list_parse(nets, &exempt, &err));
    struct conn_limits_config cfg = {.max_per_ip = 1, .exempt = &exempt};
    struct conn_limits *lim = conn_limits_new(&cfg);
    cidr_list_free(&exempt); /* copied */
    struct peer p;
    for (int i = 0; i < 5; i++)
        assert_true(conn_limits_acquire(lim, peer_of(&p, "10.1.2.3")));
    assert_int_equal(conn_limits_count(lim, peer_of(&p, "10.1.2.3")), 0);
    struct sockaddr_un un = {.sun_family = AF_UNIX};
    for (int i = 0; i < 5; i++)
        assert_true(conn_limits_acquire(lim, (const struct sockaddr *)&un));
    conn_limits_free(lim);

    struct conn_limits_config none = {.max_per_ip = 0, .exempt = NULL};
    lim = conn_limits_new(&none);
    for (int i = 0; i < 5; i++)
        assert_true(conn_limits_acquire(lim, peer_of(&p, "192.0.2.9")));
    conn_limits_free(lim);
    assert_true(conn_limits_acquire(NULL, peer_of(&p, "192.0.2.9")));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cap_per_address_and_release),
        cmocka_unit_test(test_ipv4_mapped_is_the_same_client),
        cmocka_unit_test(test_exempt_unix_and_no_cap_are_not_counted),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
