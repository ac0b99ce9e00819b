/* Endpoints: the one parser of the network addresses petrel.yaml and the
 * command line name, for listeners and for the services a component dials
 * (docs/configuration.md, "Addresses"). The text is one of
 *
 *   unix:/path/to/socket     a Unix socket (when the caller allows it)
 *   host:port                host: an IPv4 address or a host name
 *   [ipv6]:port              an IPv6 address, in brackets
 *   :port, *:port            every address (listeners only)
 *   host, [ipv6]             when the caller gives a default port
 *
 * A host name is letters, digits, '-', '_' and '.' (at most 253 bytes); it
 * is kept as text here and resolved by net_endpoint_resolve() (blocking:
 * configuration time, the command line) or net/resolve.h (on an event loop,
 * at every connect). Parsing alone never looks a name up. */
#ifndef PETREL_NET_ENDPOINT_H
#define PETREL_NET_ENDPOINT_H

#include "core/error.h"
#include "net/sockaddr.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define NET_HOST_MAX 253

enum net_endpoint_kind {
    NET_ENDPOINT_INET, /* host and port */
    NET_ENDPOINT_UNIX, /* a Unix socket path */
};

struct net_endpoint {
    enum net_endpoint_kind kind;
    /* INET: an IP address (no brackets) or a host name; "" for every
     * address. UNIX: empty. */
    char host[NET_HOST_MAX + 1];
    uint16_t port;
    /* True when `addr` already holds the address: a Unix socket, an IP
     * address or every address. False for a host name. */
    bool literal;
    struct net_addr addr;
};

/* What the caller accepts beyond host:port, as flags. */
enum {
    NET_ENDPOINT_UNIX_OK = 1 << 0,       /* unix:/path */
    NET_ENDPOINT_ANY_OK = 1 << 1,        /* ":port" / "*:port" / "0.0.0.0:port" */
    NET_ENDPOINT_PORT_OPTIONAL = 1 << 2, /* "host" alone: default_port */
    NET_ENDPOINT_NAME_REJECT = 1 << 3,   /* IP addresses only, no host names */
    NET_ENDPOINT_PORT_NONZERO = 1 << 4,  /* port 0 is an error */
};

/* Parses `text` as described above into *out. False with a message naming
 * `text` in err ("invalid address 'x' (expected host:port)", "invalid port
 * in 'x'", ...) when it is not an endpoint the flags allow. */
bool net_endpoint_parse(const char *text, unsigned flags, uint16_t default_port,
                        struct net_endpoint *out, struct petrel_error *err);

/* The address of `ep`: `ep->addr` for a literal, else the host name looked
 * up with getaddrinfo(3), which BLOCKS (/etc/hosts, DNS): call it at
 * configuration time or from a command-line tool, never on a serving event
 * loop. Of several addresses the first IPv4 one is taken, else the first
 * IPv6 one (net_addr_pick). False with "cannot resolve 'name': reason". */
bool net_endpoint_resolve(const struct net_endpoint *ep, struct net_addr *out,
                          struct petrel_error *err);

/* An address given as an IP address (or unix:/path, or every address),
 * never looked up: for text that arrives while serving (a peer's address,
 * a client's ip=), where a lookup would block the loop. */
bool net_addr_parse_numeric(const char *text, struct net_addr *out, struct petrel_error *err);

/* The address to use of a lookup's answer: the first IPv4 one (a server
 * bound to 127.0.0.1 is the common case for "localhost"), else the first
 * IPv6 one, with `port` set. False when it holds neither. */
struct addrinfo;
bool net_addr_pick(const struct addrinfo *list, uint16_t port, struct net_addr *out);

#endif
