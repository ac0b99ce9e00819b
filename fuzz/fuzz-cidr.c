/* libFuzzer target: the small address parsers used by configuration.
 * Input: text (made NUL-terminated; an embedded NUL simply ends it).
 *   cidr_parse(): a parsed network formats back to text that parses to the
 *   same network, and its own address matches it (IPv4 also via ::ffff:a.b.c.d).
 *   cidr_list_parse(): the input split at commas.
 *   net_endpoint_parse(): configured addresses ("host:port", "[v6]:port",
 *   "unix:/p", host names); a literal one formats and parses back
 *   (net_addr_parse_numeric) to the same sockaddr, a host name is never
 *   taken by the numeric parser nor an inet_aton() shorthand. Nothing is
 *   looked up. */
#include "net/cidr.h"
#include "net/endpoint.h"
#include "net/sockaddr.h"

#include <arpa/inet.h>
#include <assert.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_cidr(const char *text)
{
    struct cidr c;
    struct petrel_error err;
    memset(&err, 0, sizeof(err));
    if (!cidr_parse(text, &c, &err)) {
        assert(err.code == PETREL_ERR_INVALID && err.message[0] != '\0');
        return;
    }
    assert(c.family == AF_INET || c.family == AF_INET6);
    assert(c.prefix <= (c.family == AF_INET ? 32u : 128u));

    char back[64];
    cidr_format(&c, back, sizeof(back));
    struct cidr c2;
    bool ok = cidr_parse(back, &c2, &err);
    assert(ok);
    assert(c2.family == c.family && c2.prefix == c.prefix);
    assert(memcmp(c2.addr, c.addr, sizeof(c.addr)) == 0);

    /* The network's own address is inside the network. */
    if (c.family == AF_INET) {
        struct sockaddr_in sin;
        memset(&sin, 0, sizeof(sin));
        sin.sin_family = AF_INET;
        memcpy(&sin.sin_addr, c.addr, 4);
        assert(cidr_match(&c, (struct sockaddr *)&sin));
        struct sockaddr_in6 mapped;
        memset(&mapped, 0, sizeof(mapped));
        mapped.sin6_family = AF_INET6;
        mapped.sin6_addr.s6_addr[10] = 0xff;
        mapped.sin6_addr.s6_addr[11] = 0xff;
        memcpy(&mapped.sin6_addr.s6_addr[12], c.addr, 4);
        assert(cidr_match(&c, (struct sockaddr *)&mapped));
    } else {
        struct sockaddr_in6 sin6;
        memset(&sin6, 0, sizeof(sin6));
        sin6.sin6_family = AF_INET6;
        memcpy(&sin6.sin6_addr, c.addr, 16);
        assert(cidr_match(&c, (struct sockaddr *)&sin6));
    }
    struct cidr_list one = {&c, 1};
    struct sockaddr_un sun;
    memset(&sun, 0, sizeof(sun));
    sun.sun_family = AF_UNIX;
    assert(!cidr_list_match(&one, (struct sockaddr *)&sun));
    assert(!cidr_match(&c, NULL));
}

static void check_list(const char *text)
{
    /* Split at commas into a NULL-terminated list of at most 16 entries. */
    char *copy = strdup(text);
    const char *items[17];
    size_t n = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok != NULL && n < 16;
         tok = strtok_r(NULL, ",", &save))
        items[n++] = tok;
    items[n] = NULL;
    struct cidr_list list;
    struct petrel_error err;
    if (cidr_list_parse(items, &list, &err)) {
        assert(list.count == n);
        struct sockaddr_in lo;
        memset(&lo, 0, sizeof(lo));
        lo.sin_family = AF_INET;
        lo.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        (void)cidr_list_match(&list, (struct sockaddr *)&lo);
        for (size_t i = 0; i < list.count; i++) {
            char out[64];
            cidr_format(&list.items[i], out, sizeof(out));
        }
        cidr_list_free(&list);
        assert(list.items == NULL && list.count == 0);
    } else {
        assert(list.items == NULL && list.count == 0);
    }
    free(copy);
}

static void check_addr(const char *text)
{
    struct net_endpoint ep;
    struct petrel_error err;
    memset(&err, 0, sizeof(err));
    unsigned flags = NET_ENDPOINT_UNIX_OK | NET_ENDPOINT_ANY_OK | NET_ENDPOINT_PORT_OPTIONAL;
    if (!net_endpoint_parse(text, flags, 143, &ep, &err)) {
        assert(err.code == PETREL_ERR_INVALID && err.message[0] != '\0');
        struct net_addr n;
        assert(!net_addr_parse_numeric(text, &n, &err));
        return;
    }
    assert(strlen(ep.host) <= NET_HOST_MAX);
    if (!ep.literal) { /* a host name: kept as text, never looked up here */
        assert(ep.kind == NET_ENDPOINT_INET && ep.host[0] != '\0');
        /* one meaning everywhere: a name getaddrinfo() would read as an
         * IPv4 address (127.1, 0x7f.1) is refused, not kept as a name */
        struct in_addr legacy;
        assert(inet_aton(ep.host, &legacy) == 0);
        struct net_addr n;
        assert(!net_addr_parse_numeric(text, &n, &err));
        return;
    }
    const struct net_addr *a = &ep.addr;
    int family = a->ss.ss_family;
    assert(family == AF_INET || family == AF_INET6 || family == AF_UNIX);
    assert(a->len > 0 && a->len <= sizeof(a->ss));
    char back[sizeof(struct sockaddr_un) + 16];
    net_addr_format((const struct sockaddr *)&a->ss, back, sizeof(back));
    struct net_addr b;
    bool ok = net_addr_parse_numeric(back, &b, &err);
    assert(ok);
    assert(b.len == a->len && memcmp(&a->ss, &b.ss, a->len) == 0);
    char ip[INET6_ADDRSTRLEN];
    net_addr_format_ip((const struct sockaddr *)&a->ss, ip, sizeof(ip));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    check_cidr(text);
    check_list(text);
    check_addr(text);
    free(text);
    return 0;
}
