/* Socket addresses: parsing an endpoint into one (net/endpoint.h),
 * formatting, and listening sockets. */
#ifndef PETREL_NET_SOCKADDR_H
#define PETREL_NET_SOCKADDR_H

#include "core/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>

struct net_addr {
    struct sockaddr_storage ss;
    socklen_t len;
};

/* The address of a listener or a command-line target: net_endpoint_parse()
 * of "host:port", "[v6]:port", ":port" (every address) or "unix:/path",
 * then net_endpoint_resolve(), which BLOCKS on a host name (configuration
 * time and command-line tools only; a client on an event loop uses
 * net/dial.h). */
bool net_addr_parse(const char *text, struct net_addr *out, struct petrel_error *err);
/* "ip:port" / "[ip6]:port" / "unix:/path". */
void net_addr_format(const struct sockaddr *sa, char *dst, size_t size);
/* Only the IP part ("127.0.0.1", "::1"); "unix" for Unix sockets. */
void net_addr_format_ip(const struct sockaddr *sa, char *dst, size_t size);

/* Creates a non-blocking listening socket (SO_REUSEADDR, and SO_REUSEPORT
 * when `reuse_port`). Unix sockets: a stale socket file is replaced. Returns
 * the fd or -1 with "cannot listen on <addr>: <reason>" in err. */
int net_listen(const char *text, bool reuse_port, struct petrel_error *err);
/* The address a listening socket is actually bound to (port 0 resolved). */
void net_bound_address(int fd, char *dst, size_t size);

#endif
