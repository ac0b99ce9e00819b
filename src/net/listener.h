/* A listening socket on a libevent loop, the one accept path of every
 * server (HTTP, line protocols, ring, IMAP/POP3, LMTP): the seed of the
 * connection toolkit.
 *
 * What it does at accept, before the owner sees the connection (so no byte
 * is read and no slot is taken for a refused client):
 *   1. the allow-list: a TCP peer outside `allowed` is refused (its
 *      `refuse_reply` written, best effort, then closed) unless
 *      `outsider_limits` is set, in which case it is admitted as an
 *      outsider under those (tighter) per-address limits; Unix-socket
 *      peers are governed by the socket's mode;
 *   2. the per-address cap (`limits`, net/conn-limits.h): over it the
 *      connection gets `per_ip_reply` and is closed;
 *   3. the owner's accept callback, which owns the descriptor and the
 *      count from then on (conn_limits_release() with the same limits when
 *      the connection closes: `outsider` says which).
 * Refusals are logged at most once a second per listener, with the number
 * left out since the last line.
 *
 * When accept() itself fails for want of resources (EMFILE, ENFILE,
 * ENOBUFS, ENOMEM) the listener stops accepting for 500 ms and then
 * resumes, as nginx does (ngx_event_accept.c: accept events off, a timer
 * of accept_mutex_delay) and HAProxy (the listener is limited until a
 * connection closes or a delay passes): no busy loop on a readable listen
 * socket and no log flood, one line per 10 s at most. Connections that
 * close meanwhile free descriptors; the pending ones wait in the kernel's
 * backlog. */
#ifndef PETREL_NET_LISTENER_H
#define PETREL_NET_LISTENER_H

#include "core/error.h"
#include "net/cidr.h"
#include "net/conn-limits.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <time.h>

struct net_listener;

/* A connection that passed the checks. `fd` is the owner's. */
struct net_accepted {
    evutil_socket_t fd;
    const struct sockaddr *peer; /* valid for the call only */
    int peer_len;
    bool outsider; /* outside `allowed`, counted in `outsider_limits` */
    bool tls;      /* an implicit-TLS listener (net_listener_config.tls) */
};

typedef void net_listener_accept_fn(void *arg, struct net_listener *l,
                                    const struct net_accepted *conn);

struct net_listener_config {
    const char *component;   /* log component: "imap", "backend-api" */
    const char *allowed_key; /* named in refusals: "lmtp.allowed_nets" */
    const char *limit_key;   /* named in refusals: "imap.max_connections_per_ip" */
    /* Borrowed, must outlive the listener. NULL: every peer; empty: no
     * TCP peer. */
    const struct cidr_list *allowed;
    struct conn_limits *limits;          /* borrowed; NULL: no per-address cap */
    struct conn_limits *outsider_limits; /* borrowed; NULL: outsiders are refused */
    const char *refuse_reply; /* written to a peer refused by the allow-list; may be NULL */
    const char *per_ip_reply; /* written to a peer over its cap; may be NULL */
    /* An implicit-TLS port: the peer expects a ServerHello, so no
     * plain-text reply is ever written to it (it would only see a protocol
     * error); refusals are a close. */
    bool tls;
    net_listener_accept_fn *accept;
    void *arg;
};

/* Takes the listening socket `fd` (closed on failure too) and starts
 * accepting on `base`. `cfg` is copied with its strings; `allowed` and the
 * limits are borrowed. NULL
 * with "cannot listen on <address>" in err when libevent fails. */
struct net_listener *net_listener_new(struct event_base *base, int fd,
                                      const struct net_listener_config *cfg,
                                      struct petrel_error *err);
/* Closes the socket; NULL is ignored. */
void net_listener_free(struct net_listener *l);
/* The bound address ("127.0.0.1:9105", "unix:/path"). */
const char *net_listener_address(const struct net_listener *l);
/* The owner's pause (e.g. at max_connections): accepting resumes only when
 * the owner enables it again and no resource pause is running. */
void net_listener_enable(struct net_listener *l, bool enabled);
/* The owner's refusal of an accepted connection (max_connections, server
 * stopping): gives back the per-address count taken at accept, writes
 * `reply` (best effort, never blocking; not on a TLS listener; may be
 * NULL) and closes the descriptor. */
void net_listener_refuse(struct net_listener *l, const struct net_accepted *a, const char *reply);
/* True for an implicit-TLS listener. */
bool net_listener_tls(const struct net_listener *l);
/* Times accept() failed for want of resources (for tests and metrics). */
uint64_t net_listener_resource_pauses(const struct net_listener *l);
/* The owner's own pass-through refusals (max_connections) use the same
 * once-a-second log limit: true when a line may be written now, with the
 * number of lines left out before it in *suppressed. */
bool net_listener_log_refusal(struct net_listener *l, unsigned *suppressed);

/* A once-per-interval log limit (what the listener uses; exported for the
 * owners' own refusal paths). */
struct net_log_limit {
    struct timespec last;
    unsigned suppressed;
};
bool net_log_limit_pass(struct net_log_limit *ll, int64_t interval_ms, unsigned *suppressed);

#endif
