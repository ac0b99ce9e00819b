/* Reconnect with backoff: the one policy of every client that keeps a
 * connection to a server up (the line-protocol clients of auth and the
 * warden, the director's peer links, the monitor's director link, the
 * Redis and PostgreSQL dicts). After a failed attempt or a lost connection
 * the next attempt waits `min_ms`, then twice as long after each further
 * failure, up to `max_ms`; a working connection starts over at `min_ms`.
 * The caller keeps its own timer (or checks before an attempt): this only
 * counts, so it works for timer-driven and on-demand reconnects alike. */
#ifndef PETREL_NET_BACKOFF_H
#define PETREL_NET_BACKOFF_H

#include <stdint.h>

struct net_backoff {
    int64_t min_ms;
    int64_t max_ms;
    int64_t wait_ms;     /* the wait set by the last failure; 0 after a success */
    int64_t retry_at_ms; /* monotonic ms before which no attempt is made; 0: now */
};

/* A backoff with no failure yet; 0 < min_ms <= max_ms. */
void net_backoff_init(struct net_backoff *b, int64_t min_ms, int64_t max_ms);
/* An attempt failed (or the connection was lost) at `now_ms`: returns the
 * wait before the next attempt and sets retry_at_ms. */
int64_t net_backoff_failed(struct net_backoff *b, int64_t now_ms);
/* The connection works: the next failure waits min_ms again. */
void net_backoff_reset(struct net_backoff *b);
/* How long an attempt must still wait at `now_ms` (0: it may go now). */
int64_t net_backoff_remaining(const struct net_backoff *b, int64_t now_ms);

#endif
