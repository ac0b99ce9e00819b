/* The listeners of one server (HTTP, a line protocol, the ring, IMAP/POP3,
 * LMTP): bound from configured addresses, paused and resumed together,
 * closed together when the server stops accepting.
 *
 * Each listener is a net_listener (listener.h: allow-list, per-address cap,
 * descriptor-exhaustion pause); the set adds what every server repeated
 * around them: creating the directory of a Unix socket and setting its
 * mode, the owner's pause (max_connections, conn-slots.h), the addresses
 * for logs and readiness, and stop-accepting. Used from the loop thread
 * that runs the listeners only. */
#ifndef PETREL_NET_LISTENER_SET_H
#define PETREL_NET_LISTENER_SET_H

#include "core/error.h"
#include "net/listener.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>

struct readiness;
struct net_listener_set;

struct net_listener_set *net_listener_set_new(struct event_base *base);
/* Closes every listener; NULL is ignored. */
void net_listener_set_free(struct net_listener_set *set);

/* Binds `addr` ("host:port", "[v6]:port", "unix:/path") and accepts on it
 * under `cfg` (copied, see net_listener_new; cfg.tls marks an implicit-TLS
 * port). For a Unix socket the directory is created when missing and the
 * socket's mode set to `socket_mode` (0: left as the umask made it). A new
 * listener starts paused when the set is paused. False with the reason in
 * `err` ("cannot listen on <addr>: ..."). */
bool net_listener_set_listen(struct net_listener_set *set, const char *addr, unsigned socket_mode,
                             const struct net_listener_config *cfg, struct petrel_error *err);

/* Listeners bound so far (closed ones included: their addresses stay). */
size_t net_listener_set_count(const struct net_listener_set *set);
/* The bound address of listener `i` ("127.0.0.1:9105", "unix:/path"), ""
 * past the end. */
const char *net_listener_set_address(const struct net_listener_set *set, size_t i);
/* Whether listener `i` is an implicit-TLS port. */
bool net_listener_set_tls(const struct net_listener_set *set, size_t i);

/* The owner's pause: no accept while false (connections wait in the
 * kernel's backlog), resumed by true. Ignored once stopped. */
void net_listener_set_enabled(struct net_listener_set *set, bool enabled);
bool net_listener_set_paused(const struct net_listener_set *set);

/* Stop accepting: every listening socket is closed (a Unix socket's file
 * stays until the next start replaces it); open connections are the
 * owner's to drain. Idempotent. */
void net_listener_set_stop(struct net_listener_set *set);
bool net_listener_set_stopped(const struct net_listener_set *set);

/* Registers each listener with the readiness check as
 * "<name>-listener-<i>" (TLS ports are probed with a handshake). */
void net_listener_set_add_readiness(const struct net_listener_set *set, struct readiness *r,
                                    const char *name);

#endif
