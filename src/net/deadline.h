/* A connection's deadline: the pre-authentication, handshake, request-head
 * and idle timers of the servers (IMAP/POP3 login_timeout, the ring's
 * handshake and auth timeouts, HTTP's head, keep-alive and linger timers,
 * the TLS handshake bound).
 *
 * Unlike a bufferevent read timeout, which every byte restarts, a deadline
 * runs from the moment it is armed whatever the peer sends: a client
 * trickling a byte at a time cannot keep a connection that must finish
 * something in time. Re-arming moves it; `expired` runs at most once per
 * arming, from the loop. */
#ifndef PETREL_NET_DEADLINE_H
#define PETREL_NET_DEADLINE_H

#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>

typedef void net_deadline_fn(void *arg);

struct net_deadline;

/* Not armed yet. */
struct net_deadline *net_deadline_new(struct event_base *base, net_deadline_fn *expired, void *arg);
/* `expired` runs `ms` from now (<= 0: at the next loop iteration); an
 * earlier arming is replaced. */
void net_deadline_arm(struct net_deadline *d, int64_t ms);
/* Disarms it (nothing runs); NULL is ignored. */
void net_deadline_clear(struct net_deadline *d);
bool net_deadline_armed(const struct net_deadline *d);
/* NULL is ignored; may be called from `expired`. */
void net_deadline_free(struct net_deadline *d);

#endif
