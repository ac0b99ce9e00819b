/* Unit tests for net/endpoint.h: the one parser of configured addresses
 * (host:port, [v6]:port, IPv4, unix:/path, host names), its flags, its
 * messages, the blocking resolve of a name and the address pick. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "net/endpoint.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/un.h>

#define ALL (NET_ENDPOINT_UNIX_OK | NET_ENDPOINT_ANY_OK)

static struct net_endpoint parse_ok(const char *text, unsigned flags, uint16_t def)
{
    struct net_endpoint ep;
    struct petrel_error err;
    if (!net_endpoint_parse(text, flags, def, &ep, &err))
        fail_msg("'%s' rejected: %s", text, err.message);
    return ep;
}

static void expect_error(const char *text, unsigned flags, const char *message)
{
    struct net_endpoint ep;
    struct petrel_error err;
    assert_false(net_endpoint_parse(text, flags, 0, &ep, &err));
    assert_string_equal(err.message, message);
}

static void ip_of(const struct net_endpoint *ep, char *dst, size_t size)
{
    net_addr_format((const struct sockaddr *)&ep->addr.ss, dst, size);
}

static void test_ipv4_and_port(void **state)
{
    (void)state;
    struct net_endpoint ep = parse_ok("192.0.2.7:143", 0, 0);
    assert_int_equal(ep.kind, NET_ENDPOINT_INET);
    assert_true(ep.literal);
    assert_string_equal(ep.host, "192.0.2.7");
    assert_int_equal(ep.port, 143);
    char text[64];
    ip_of(&ep, text, sizeof(text));
    assert_string_equal(text, "192.0.2.7:143");
}

static void test_bracketed_ipv6(void **state)
{
    (void)state;
    struct net_endpoint ep = parse_ok("[2001:db8::1]:993", 0, 0);
    assert_true(ep.literal);
    assert_int_equal(ep.addr.ss.ss_family, AF_INET6);
    assert_string_equal(ep.host, "2001:db8::1");
    char text[64];
    ip_of(&ep, text, sizeof(text));
    assert_string_equal(text, "[2001:db8::1]:993");
}

static void test_host_name_is_kept_as_text(void **state)
{
    (void)state;
    struct net_endpoint ep = parse_ok("mail-1.example.org:10200", 0, 0);
    assert_false(ep.literal);
    assert_string_equal(ep.host, "mail-1.example.org");
    assert_int_equal(ep.port, 10200);
    ep = parse_ok("redis_primary", NET_ENDPOINT_PORT_OPTIONAL, 6379);
    assert_string_equal(ep.host, "redis_primary");
    assert_int_equal(ep.port, 6379);
}

static void test_unix_socket(void **state)
{
    (void)state;
    struct net_endpoint ep = parse_ok("unix:/run/petrel/auth.sock", ALL, 0);
    assert_int_equal(ep.kind, NET_ENDPOINT_UNIX);
    assert_true(ep.literal);
    assert_string_equal(((struct sockaddr_un *)&ep.addr.ss)->sun_path, "/run/petrel/auth.sock");
    expect_error("unix:/x", 0,
                 "invalid address 'unix:/x' (a Unix socket is not allowed here: use host:port)");
    expect_error("unix:", ALL, "invalid unix socket path 'unix:'");
    char long_path[200] = "unix:/";
    memset(long_path + 6, 'a', 150);
    long_path[156] = '\0';
    struct net_endpoint e2;
    assert_false(net_endpoint_parse(long_path, ALL, 0, &e2, NULL));
}

static void test_every_address(void **state)
{
    (void)state;
    struct net_endpoint ep = parse_ok(":9105", ALL, 0);
    assert_true(ep.literal);
    assert_string_equal(ep.host, "");
    char text[64];
    ip_of(&ep, text, sizeof(text));
    assert_string_equal(text, "0.0.0.0:9105");
    ep = parse_ok("*:9105", ALL, 0);
    assert_string_equal(ep.host, "");
    expect_error(":9105", 0, "invalid address ':9105' (a host is needed: host:port)");
}

static void test_ports(void **state)
{
    (void)state;
    assert_int_equal(parse_ok("127.0.0.1:0", ALL, 0).port, 0);
    assert_int_equal(parse_ok("127.0.0.1:65535", 0, 0).port, 65535);
    expect_error(":70000", ALL, "invalid port in ':70000'");
    expect_error("127.0.0.1:", 0, "invalid port in '127.0.0.1:'");
    expect_error("127.0.0.1:8x", 0, "invalid port in '127.0.0.1:8x'");
    expect_error("127.0.0.1:0", NET_ENDPOINT_PORT_NONZERO,
                 "invalid port in '127.0.0.1:0' (1 to 65535)");
    expect_error("nowhere", 0, "invalid address 'nowhere' (expected host:port)");
    expect_error("", NET_ENDPOINT_PORT_OPTIONAL, "invalid address '' (expected host:port)");
    /* The default port is not a way around PORT_NONZERO. */
    struct net_endpoint ep;
    assert_false(net_endpoint_parse("h", NET_ENDPOINT_PORT_OPTIONAL | NET_ENDPOINT_PORT_NONZERO, 0,
                                    &ep, NULL));
}

static void test_malformed(void **state)
{
    (void)state;
    expect_error("::1:143", 0, "invalid address '::1:143' (write IPv6 in brackets: [addr]:port)");
    expect_error("[::1:143", 0, "invalid address '[::1:143' (expected [ipv6]:port)");
    expect_error("[::1]143", 0, "invalid address '[::1]143' (expected [ipv6]:port)");
    expect_error("[mail.example.org]:143", 0,
                 "invalid address '[mail.example.org]:143' ([...] holds an IPv6 address)");
    const char *bad_names[] = {"mail example:1", "-lead:1",     ".dot:1", "a..b:1",
                               "x/y:1",          "h\xc3\xa9:1", "a;b:1",  NULL};
    for (size_t i = 0; bad_names[i] != NULL; i++) {
        struct net_endpoint ep;
        struct petrel_error err;
        assert_false(net_endpoint_parse(bad_names[i], ALL, 0, &ep, &err));
        assert_non_null(strstr(err.message, "expected host:port, [ipv6]:port or unix:/path"));
    }
    char long_host[300];
    memset(long_host, 'a', 260);
    memcpy(long_host + 260, ":1", 3);
    struct net_endpoint ep;
    struct petrel_error err;
    assert_false(net_endpoint_parse(long_host, ALL, 0, &ep, &err));
    assert_non_null(strstr(err.message, "longer than 253 bytes"));
}

/* inet_aton's shorthands would listen (getaddrinfo reads them as
 * addresses) but not dial (evdns asks DNS): refused everywhere. */
static void test_ipv4_shorthands_rejected(void **state)
{
    (void)state;
    const char *shorthands[] = {"127.1:143",      "10.0.1:143",     "0x7f.1:143",
                                "2130706433:143", "0177.0.0.1:143", "127.0.0.0x1:143",
                                "10.0.0.010:143", "1.2.3.04:143",   NULL};
    for (size_t i = 0; shorthands[i] != NULL; i++) {
        struct net_endpoint ep;
        struct petrel_error err;
        assert_false(net_endpoint_parse(shorthands[i], ALL, 0, &ep, &err));
        assert_non_null(strstr(err.message, "write an IPv4 address as four decimal numbers"));
    }
    /* Digits in a name's labels are fine when the name is not a number. */
    assert_false(parse_ok("mx1.example.org:25", 0, 0).literal);
    assert_false(parse_ok("1.example:25", 0, 0).literal);
    assert_false(parse_ok("123abc:25", 0, 0).literal);
    assert_false(parse_ok("1e100.net:25", 0, 0).literal);
    assert_false(parse_ok("08.example:25", 0, 0).literal);
}

static void test_names_rejected_where_asked(void **state)
{
    (void)state;
    expect_error("mail.example.org:1", NET_ENDPOINT_NAME_REJECT,
                 "invalid address 'mail.example.org:1' (expected an IP address, not a host name)");
    struct net_addr addr;
    struct petrel_error err;
    assert_true(net_addr_parse_numeric("10.1.2.3:4", &addr, &err));
    assert_false(net_addr_parse_numeric("localhost:4", &addr, &err));
}

static void test_resolve_literal_and_localhost(void **state)
{
    (void)state;
    struct net_addr addr;
    struct petrel_error err;
    struct net_endpoint ep = parse_ok("[::1]:25", 0, 0);
    assert_true(net_endpoint_resolve(&ep, &addr, &err));
    assert_int_equal(addr.ss.ss_family, AF_INET6);
    /* /etc/hosts: localhost is 127.0.0.1 (IPv4 picked before ::1). */
    ep = parse_ok("localhost:2525", 0, 0);
    assert_true(net_endpoint_resolve(&ep, &addr, &err));
    char text[64];
    net_addr_format((const struct sockaddr *)&addr.ss, text, sizeof(text));
    assert_string_equal(text, "127.0.0.1:2525");
    assert_true(net_addr_parse("localhost:0", &addr, &err));
    assert_int_equal(addr.ss.ss_family, AF_INET);
}

static void test_resolve_unknown_name_fails(void **state)
{
    (void)state;
    struct net_addr addr;
    struct petrel_error err;
    /* .invalid never resolves (RFC 6761). */
    struct net_endpoint ep = parse_ok("no-such-host.invalid:25", 0, 0);
    assert_false(net_endpoint_resolve(&ep, &addr, &err));
    assert_non_null(strstr(err.message, "cannot resolve 'no-such-host.invalid': "));
}

static void test_pick_prefers_ipv4(void **state)
{
    (void)state;
    struct sockaddr_in6 v6 = {.sin6_family = AF_INET6};
    inet_pton(AF_INET6, "2001:db8::5", &v6.sin6_addr);
    struct sockaddr_in v4 = {.sin_family = AF_INET};
    inet_pton(AF_INET, "192.0.2.5", &v4.sin_addr);
    struct addrinfo second = {
        .ai_family = AF_INET, .ai_addrlen = sizeof(v4), .ai_addr = (struct sockaddr *)&v4};
    struct addrinfo first = {.ai_family = AF_INET6,
                             .ai_addrlen = sizeof(v6),
                             .ai_addr = (struct sockaddr *)&v6,
                             .ai_next = &second};
    struct net_addr out;
    char text[64];
    assert_true(net_addr_pick(&first, 110, &out));
    net_addr_format((const struct sockaddr *)&out.ss, text, sizeof(text));
    assert_string_equal(text, "192.0.2.5:110");
    first.ai_next = NULL;
    assert_true(net_addr_pick(&first, 110, &out));
    net_addr_format((const struct sockaddr *)&out.ss, text, sizeof(text));
    assert_string_equal(text, "[2001:db8::5]:110");
    assert_false(net_addr_pick(NULL, 110, &out));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ipv4_and_port),
        cmocka_unit_test(test_bracketed_ipv6),
        cmocka_unit_test(test_host_name_is_kept_as_text),
        cmocka_unit_test(test_unix_socket),
        cmocka_unit_test(test_every_address),
        cmocka_unit_test(test_ports),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_ipv4_shorthands_rejected),
        cmocka_unit_test(test_names_rejected_where_asked),
        cmocka_unit_test(test_resolve_literal_and_localhost),
        cmocka_unit_test(test_resolve_unknown_name_fails),
        cmocka_unit_test(test_pick_prefers_ipv4),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
