/* The endpoint parser (endpoint.h). */
#include "net/endpoint.h"

#include "core/slice.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>

static bool fail(struct petrel_error *err, const char *text, const char *why)
{
    return petrel_error_set(err, PETREL_ERR_INVALID, "invalid address '%s'%s%s%s", text,
                            *why != '\0' ? " (" : "", why, *why != '\0' ? ")" : "");
}

/* RFC 1123 host names, plus '_' (seen in internal zones): labels of
 * letters, digits and '-', joined by dots. */
static bool valid_host_name(const char *h)
{
    size_t len = strlen(h);
    if (len == 0 || len > NET_HOST_MAX || h[0] == '.' || h[0] == '-')
        return false;
    char prev = '.';
    for (const char *p = h; *p != '\0'; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '_' || c == '.';
        if (!ok || (c == '.' && prev == '.'))
            return false;
        prev = c;
    }
    return true;
}

static void set_inet(struct net_endpoint *out, int family, const void *ip, uint16_t port)
{
    if (family == AF_INET) {
        struct sockaddr_in *sin = (struct sockaddr_in *)&out->addr.ss;
        sin->sin_family = AF_INET;
        memcpy(&sin->sin_addr, ip, sizeof(sin->sin_addr));
        sin->sin_port = htons(port);
        out->addr.len = sizeof(*sin);
    } else {
        struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&out->addr.ss;
        sin6->sin6_family = AF_INET6;
        memcpy(&sin6->sin6_addr, ip, sizeof(sin6->sin6_addr));
        sin6->sin6_port = htons(port);
        out->addr.len = sizeof(*sin6);
    }
    out->literal = true;
}

static bool parse_unix(const char *text, unsigned flags, struct net_endpoint *out,
                       struct petrel_error *err)
{
    const char *path = text + 5;
    struct sockaddr_un *sun = (struct sockaddr_un *)&out->addr.ss;
    if ((flags & NET_ENDPOINT_UNIX_OK) == 0)
        return fail(err, text, "a Unix socket is not allowed here: use host:port");
    if (*path == '\0' || strlen(path) >= sizeof(sun->sun_path))
        return petrel_error_set(err, PETREL_ERR_INVALID, "invalid unix socket path '%s'", text);
    out->kind = NET_ENDPOINT_UNIX;
    sun->sun_family = AF_UNIX;
    memcpy(sun->sun_path, path, strlen(path) + 1);
    out->addr.len = (socklen_t)sizeof(*sun);
    out->literal = true;
    return true;
}

bool net_endpoint_parse(const char *text, unsigned flags, uint16_t default_port,
                        struct net_endpoint *out, struct petrel_error *err)
{
    memset(out, 0, sizeof(*out));
    if (strncmp(text, "unix:", 5) == 0)
        return parse_unix(text, flags, out, err);
    out->kind = NET_ENDPOINT_INET;
    const char *host = text;
    size_t host_len;
    const char *port_text = NULL;
    bool bracketed = text[0] == '[';
    if (bracketed) {
        const char *close = strchr(text, ']');
        if (close == NULL || (close[1] != ':' && close[1] != '\0'))
            return fail(err, text, "expected [ipv6]:port");
        host = text + 1;
        host_len = (size_t)(close - host);
        if (close[1] == ':')
            port_text = close + 2;
    } else {
        const char *colon = strrchr(text, ':');
        if (colon != NULL && strchr(text, ':') != colon)
            return fail(err, text, "write IPv6 in brackets: [addr]:port");
        host_len = colon != NULL ? (size_t)(colon - text) : strlen(text);
        if (colon != NULL)
            port_text = colon + 1;
    }
    if (host_len > NET_HOST_MAX)
        return fail(err, text, "host name longer than 253 bytes");
    memcpy(out->host, host, host_len);
    out->host[host_len] = '\0';

    uint64_t port = default_port;
    if (port_text == NULL) {
        if ((flags & NET_ENDPOINT_PORT_OPTIONAL) == 0 || host_len == 0)
            return fail(err, text, "expected host:port");
    } else if (!str_parse_u64(port_text, 65535, &port)) {
        return petrel_error_set(err, PETREL_ERR_INVALID, "invalid port in '%s'", text);
    }
    if (port == 0 && (flags & NET_ENDPOINT_PORT_NONZERO) != 0)
        return petrel_error_set(err, PETREL_ERR_INVALID, "invalid port in '%s' (1 to 65535)", text);
    out->port = (uint16_t)port;

    unsigned char ip[sizeof(struct in6_addr)];
    if (bracketed) {
        if (inet_pton(AF_INET6, out->host, ip) != 1)
            return fail(err, text, "[...] holds an IPv6 address");
        set_inet(out, AF_INET6, ip, out->port);
        return true;
    }
    if (out->host[0] == '\0' || strcmp(out->host, "*") == 0) {
        if ((flags & NET_ENDPOINT_ANY_OK) == 0)
            return fail(err, text, "a host is needed: host:port");
        out->host[0] = '\0';
        struct in_addr any = {.s_addr = htonl(INADDR_ANY)};
        set_inet(out, AF_INET, &any, out->port);
        return true;
    }
    if (inet_pton(AF_INET, out->host, ip) == 1) {
        set_inet(out, AF_INET, ip, out->port);
        return true;
    }
    /* inet_aton's shorthands (127.1, 10.0.1, 0x7f.1, 2130706433) are not
     * host names: getaddrinfo() takes them as addresses, the evdns dial
     * path asks DNS for them. One meaning everywhere: the four decimals.
     * A leading zero is octal there (010 = 8), so it is refused too. */
    struct in_addr legacy;
    if (inet_aton(out->host, &legacy) != 0)
        return fail(err, text,
                    "write an IPv4 address as four decimal numbers without leading zeros: "
                    "a.b.c.d");
    if ((flags & NET_ENDPOINT_NAME_REJECT) != 0)
        return fail(err, text, "expected an IP address, not a host name");
    if (!valid_host_name(out->host))
        return fail(err, text, "expected host:port, [ipv6]:port or unix:/path");
    return true;
}

bool net_addr_parse_numeric(const char *text, struct net_addr *out, struct petrel_error *err)
{
    struct net_endpoint ep;
    if (!net_endpoint_parse(text,
                            NET_ENDPOINT_UNIX_OK | NET_ENDPOINT_ANY_OK | NET_ENDPOINT_NAME_REJECT,
                            0, &ep, err))
        return false;
    *out = ep.addr;
    return true;
}

bool net_addr_pick(const struct addrinfo *list, uint16_t port, struct net_addr *out)
{
    const struct addrinfo *pick = NULL;
    for (const struct addrinfo *a = list; a != NULL; a = a->ai_next) {
        if (a->ai_family == AF_INET) {
            pick = a;
            break;
        }
        if (pick == NULL && a->ai_family == AF_INET6)
            pick = a;
    }
    if (pick == NULL || pick->ai_addrlen > sizeof(out->ss))
        return false;
    memset(out, 0, sizeof(*out));
    memcpy(&out->ss, pick->ai_addr, pick->ai_addrlen);
    out->len = (socklen_t)pick->ai_addrlen;
    if (pick->ai_family == AF_INET)
        ((struct sockaddr_in *)&out->ss)->sin_port = htons(port);
    else
        ((struct sockaddr_in6 *)&out->ss)->sin6_port = htons(port);
    return true;
}

bool net_endpoint_resolve(const struct net_endpoint *ep, struct net_addr *out,
                          struct petrel_error *err)
{
    if (ep->literal) {
        *out = ep->addr;
        return true;
    }
    struct addrinfo hints;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    struct addrinfo *list = NULL;
    int rc = getaddrinfo(ep->host, NULL, &hints, &list);
    if (rc != 0)
        return petrel_error_set(err, PETREL_ERR_INVALID, "cannot resolve '%s': %s", ep->host,
                                gai_strerror(rc));
    bool ok = net_addr_pick(list, ep->port, out);
    freeaddrinfo(list);
    if (!ok)
        return petrel_error_set(err, PETREL_ERR_INVALID,
                                "cannot resolve '%s': no IPv4 or IPv6 address", ep->host);
    return true;
}
