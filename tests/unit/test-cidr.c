/* Unit tests for net/cidr.h: parsing, prefix edges, IPv4-mapped peers and lists. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "net/cidr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

/* A peer address as the server sees it. */
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
    } else if (inet_pton(AF_INET6, ip, &sin6->sin6_addr) == 1) {
        sin6->sin6_family = AF_INET6;
        sin6->sin6_port = htons(40000);
    } else {
        fail_msg("bad test address %s", ip);
    }
    return (const struct sockaddr *)&p->ss;
}

static bool matches(const char *net, const char *ip)
{
    struct cidr c;
    struct petrel_error err;
    if (!cidr_parse(net, &c, &err))
        fail_msg("cidr_parse(%s): %s", net, err.message);
    struct peer p;
    return cidr_match(&c, peer_of(&p, ip));
}

static void assert_formats_as(const char *text, const char *expected)
{
    struct cidr c;
    struct petrel_error err;
    assert_true(cidr_parse(text, &c, &err));
    char out[64];
    cidr_format(&c, out, sizeof(out));
    assert_string_equal(out, expected);
}

static void assert_rejected(const char *text)
{
    struct cidr c;
    struct petrel_error err = {0};
    if (cidr_parse(text, &c, &err))
        fail_msg("'%s' was accepted", text);
    assert_int_equal(err.code, PETREL_ERR_INVALID);
    assert_non_null(strstr(err.message, text));
}

static void test_ipv4_network_parses_with_family_and_prefix(void **state)
{
    struct cidr c;
    struct petrel_error err;
    assert_true(cidr_parse("10.0.0.0/8", &c, &err));
    assert_int_equal(c.family, AF_INET);
    assert_int_equal(c.prefix, 8);
    assert_int_equal(c.addr[0], 10);
    assert_int_equal(c.addr[1], 0);
    assert_formats_as("192.168.1.0/24", "192.168.1.0/24");
}

static void test_ipv6_network_parses_with_family_and_prefix(void **state)
{
    struct cidr c;
    struct petrel_error err;
    assert_true(cidr_parse("fd00::/8", &c, &err));
    assert_int_equal(c.family, AF_INET6);
    assert_int_equal(c.prefix, 8);
    assert_int_equal(c.addr[0], 0xfd);
    assert_formats_as("2001:db8::/32", "2001:db8::/32");
}

static void test_bare_address_is_a_host_route(void **state)
{
    assert_formats_as("127.0.0.1", "127.0.0.1/32");
    assert_formats_as("::1", "::1/128");
    assert_true(matches("127.0.0.1", "127.0.0.1"));
    assert_false(matches("127.0.0.1", "127.0.0.2"));
    assert_true(matches("::1", "::1"));
    assert_false(matches("::1", "::2"));
}

static void test_prefix_zero_matches_every_address_of_its_family(void **state)
{
    assert_formats_as("0.0.0.0/0", "0.0.0.0/0");
    assert_formats_as("::/0", "::/0");
    assert_true(matches("0.0.0.0/0", "1.2.3.4"));
    assert_true(matches("0.0.0.0/0", "255.255.255.255"));
    assert_true(matches("::/0", "2001:db8::1"));
    assert_true(matches("::/0", "::1"));
    /* ::/0 contains ::ffff:0:0/96, so IPv4 peers match it whether they arrive on
     * an IPv4 socket or mapped on a dual-stack one. */
    assert_true(matches("::/0", "8.8.8.8"));
    assert_true(matches("::/0", "::ffff:8.8.8.8"));
}

static void test_full_length_prefixes_match_exactly_one_address(void **state)
{
    assert_true(matches("192.0.2.7/32", "192.0.2.7"));
    assert_false(matches("192.0.2.7/32", "192.0.2.6"));
    assert_false(matches("192.0.2.7/32", "192.0.2.8"));
    assert_true(matches("2001:db8::7/128", "2001:db8::7"));
    assert_false(matches("2001:db8::7/128", "2001:db8::6"));
}

static void test_prefix_not_on_byte_boundary(void **state)
{
    assert_true(matches("10.0.0.0/9", "10.127.255.255"));
    assert_false(matches("10.0.0.0/9", "10.128.0.0"));
    assert_true(matches("192.0.2.0/25", "192.0.2.127"));
    assert_false(matches("192.0.2.0/25", "192.0.2.128"));
    assert_true(matches("2001:db8::/33", "2001:db8:7fff::1"));
    assert_false(matches("2001:db8::/33", "2001:db8:8000::1"));
    assert_true(matches("10.0.0.0/31", "10.0.0.1"));
    assert_false(matches("10.0.0.0/31", "10.0.0.2"));
}

static void test_prefix_longer_than_address_is_rejected(void **state)
{
    assert_rejected("10.0.0.0/33");
    assert_rejected("::/129");
    assert_rejected("10.0.0.0/4294967328"); /* wraps to 32 as unsigned */
}

static void test_host_bits_beyond_prefix_are_rejected(void **state)
{
    assert_rejected("10.0.0.1/8");
    assert_rejected("10.1.0.0/8");
    assert_rejected("192.0.2.128/24");
    assert_rejected("192.0.2.1/31");
    assert_rejected("1.0.0.0/0");
    assert_rejected("2001:db8::1/64");
    assert_rejected("::1/127");
    assert_rejected("8000::/0");
    struct petrel_error err;
    struct cidr c;
    assert_false(cidr_parse("10.0.0.1/8", &c, &err));
    assert_non_null(strstr(err.message, "host bits"));
}

static void test_malformed_text_is_rejected(void **state)
{
    assert_rejected("");
    assert_rejected("/8");
    assert_rejected("10.0.0.0/");
    assert_rejected("10.0.0.0/-1");
    assert_rejected("10.0.0.0/+8");
    assert_rejected("10.0.0.0/8x");
    assert_rejected("10.0.0.0/8/8");
    assert_rejected("10.0.0.0/ 8");
    assert_rejected("10.0.0/8");
    assert_rejected("256.0.0.0/8");
    assert_rejected("10.0.0.0.0/8");
    assert_rejected("localhost");
    assert_rejected("example.com/24");
    assert_rejected("::g/128");
    assert_rejected("1:2:3:4:5:6:7:8:9/128");
    assert_rejected(" 10.0.0.0/8");
    assert_rejected("10.0.0.0/8 ");
    /* Longer than any address text. */
    assert_rejected("1111:2222:3333:4444:5555:6666:7777:8888:9999/128");
}

static void test_error_names_the_bad_entry(void **state)
{
    struct cidr c;
    struct petrel_error err = {0};
    assert_false(cidr_parse("10.0.0.0/40", &c, &err));
    assert_non_null(strstr(err.message, "10.0.0.0/40"));
    assert_false(cidr_parse("nonsense", &c, &err));
    assert_non_null(strstr(err.message, "nonsense"));
}

static void test_ipv4_mapped_peer_matches_ipv4_entry(void **state)
{
    assert_true(matches("10.0.0.0/8", "::ffff:10.1.2.3"));
    assert_false(matches("10.0.0.0/8", "::ffff:11.1.2.3"));
    assert_true(matches("127.0.0.1", "::ffff:127.0.0.1"));
    assert_true(matches("0.0.0.0/0", "::ffff:203.0.113.9"));
    /* Only the ::ffff:0:0/96 form is an IPv4 peer: not IPv4-compatible or other v6. */
    assert_false(matches("10.0.0.0/8", "::10.1.2.3"));
    assert_false(matches("10.0.0.0/8", "64:ff9b::10.1.2.3"));
    assert_false(matches("0.0.0.0/0", "2001:db8::1"));
}

static void test_ipv4_peer_matches_mapped_ipv6_entry(void **state)
{
    assert_true(matches("::ffff:10.0.0.0/104", "10.20.30.40"));
    assert_false(matches("::ffff:10.0.0.0/104", "11.20.30.40"));
    assert_true(matches("::ffff:10.0.0.0/104", "::ffff:10.20.30.40"));
    /* A native IPv6 network never matches a native IPv4 peer. */
    assert_false(matches("2001:db8::/32", "10.0.0.1"));
}

static void test_native_ipv6_does_not_match_ipv4_entry(void **state)
{
    assert_false(matches("0.0.0.0/0", "::1"));
    assert_false(matches("127.0.0.1", "::1"));
}

static void test_non_ip_peer_never_matches(void **state)
{
    struct cidr c;
    struct petrel_error err;
    assert_true(cidr_parse("0.0.0.0/0", &c, &err));
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    ss.ss_family = AF_UNIX;
    assert_false(cidr_match(&c, (const struct sockaddr *)&ss));
    assert_false(cidr_match(&c, NULL));
}

static void test_list_matches_when_any_entry_matches(void **state)
{
    const char *const texts[] = {"10.0.0.0/8", "192.168.0.0/16", "::1", "fd00::/8", NULL};
    struct cidr_list list;
    struct petrel_error err;
    assert_true(cidr_list_parse(texts, &list, &err));
    assert_int_equal(list.count, 4);
    struct peer p;
    assert_true(cidr_list_match(&list, peer_of(&p, "10.9.9.9")));
    assert_true(cidr_list_match(&list, peer_of(&p, "192.168.255.1")));
    assert_true(cidr_list_match(&list, peer_of(&p, "::1")));
    assert_true(cidr_list_match(&list, peer_of(&p, "fdab::1")));
    assert_true(cidr_list_match(&list, peer_of(&p, "::ffff:192.168.0.1")));
    assert_false(cidr_list_match(&list, peer_of(&p, "172.16.0.1")));
    assert_false(cidr_list_match(&list, peer_of(&p, "fe80::1")));
    assert_false(cidr_list_match(&list, peer_of(&p, "127.0.0.1")));
    char text[64];
    cidr_format(&list.items[3], text, sizeof(text));
    assert_string_equal(text, "fd00::/8");
    cidr_list_free(&list);
    assert_null(list.items);
    assert_int_equal(list.count, 0);
}

static void test_empty_list_matches_nothing(void **state)
{
    struct cidr_list list;
    struct petrel_error err;
    const char *const none[] = {NULL};
    assert_true(cidr_list_parse(none, &list, &err));
    assert_int_equal(list.count, 0);
    struct peer p;
    assert_false(cidr_list_match(&list, peer_of(&p, "127.0.0.1")));
    assert_false(cidr_list_match(&list, peer_of(&p, "::1")));
    cidr_list_free(&list);

    assert_true(cidr_list_parse(NULL, &list, &err));
    assert_int_equal(list.count, 0);
    assert_false(cidr_list_match(&list, peer_of(&p, "10.0.0.1")));
    cidr_list_free(&list);
}

static void test_list_with_bad_entry_fails_and_names_it(void **state)
{
    const char *const texts[] = {"10.0.0.0/8", "10.0.0.1/8", "::1", NULL};
    struct cidr_list list = {(struct cidr *)&list, 99}; /* garbage in: must be reset */
    struct petrel_error err = {0};
    assert_false(cidr_list_parse(texts, &list, &err));
    assert_null(list.items);
    assert_int_equal(list.count, 0);
    assert_non_null(strstr(err.message, "10.0.0.1/8"));
    cidr_list_free(&list); /* safe on the emptied list */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ipv4_network_parses_with_family_and_prefix),
        cmocka_unit_test(test_ipv6_network_parses_with_family_and_prefix),
        cmocka_unit_test(test_bare_address_is_a_host_route),
        cmocka_unit_test(test_prefix_zero_matches_every_address_of_its_family),
        cmocka_unit_test(test_full_length_prefixes_match_exactly_one_address),
        cmocka_unit_test(test_prefix_not_on_byte_boundary),
        cmocka_unit_test(test_prefix_longer_than_address_is_rejected),
        cmocka_unit_test(test_host_bits_beyond_prefix_are_rejected),
        cmocka_unit_test(test_malformed_text_is_rejected),
        cmocka_unit_test(test_error_names_the_bad_entry),
        cmocka_unit_test(test_ipv4_mapped_peer_matches_ipv4_entry),
        cmocka_unit_test(test_ipv4_peer_matches_mapped_ipv6_entry),
        cmocka_unit_test(test_native_ipv6_does_not_match_ipv4_entry),
        cmocka_unit_test(test_non_ip_peer_never_matches),
        cmocka_unit_test(test_list_matches_when_any_entry_matches),
        cmocka_unit_test(test_empty_list_matches_nothing),
        cmocka_unit_test(test_list_with_bad_entry_fails_and_names_it),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
