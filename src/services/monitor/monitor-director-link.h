/* The monitor's connection to the director's ring port
 * (docs/ring-protocol.md): connect, say `VERSION` and `HELLO monitor
 * <name>`, read the HOST handshake up to `DONE`, follow `RING-CHANGE`
 * pushes, send `BACKEND-FLUSH` / `BACKEND-UP`. With a secret it answers
 * the director's challenge with AUTH before HELLO and requires the
 * director's AUTH-OK proof before it takes any HOST line (ring-auth.h); a
 * director that offers no challenge, or proves another secret, is treated
 * as a failed connection. Lines are coded with the
 * director's codec (clients/ring/ring-protocol.h).
 *
 * The link reconnects by itself: after a refused or broken connection, a
 * malformed line, a version mismatch, or silence (nothing heard for
 * `ping_interval` after a PING it sent, or no finished handshake within
 * `ping_interval` of connecting) it closes and tries again after a backoff
 * that starts at `reconnect_min` and doubles up to `reconnect_max`; a
 * completed handshake resets it. A PING is sent after `ping_interval`
 * without any line from the director. Callbacks run on the loop; they may
 * call monitor_link_report() but must not free the link. */
#ifndef PETREL_SERVICES_MONITOR_DIRECTOR_LINK_H
#define PETREL_SERVICES_MONITOR_DIRECTOR_LINK_H

#include "core/error.h"
#include "clients/ring/ring-protocol.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct monitor_link_events {
    /* A handshake starts: HOST lines follow (the full backend list). */
    void (*hosts_begin)(void *ctx);
    /* One backend of the handshake. */
    void (*host)(const struct ring_host *host, void *ctx);
    /* `DONE`: the list is complete; the link is ready for reports. */
    void (*hosts_done)(void *ctx);
    /* A RING-CHANGE push. */
    void (*change)(enum ring_change change, const struct ring_host *host, void *ctx);
    /* The connection was lost (only after it was ready). */
    void (*lost)(void *ctx);
};

struct monitor_link_options {
    const char *addr; /* "host:port" */
    const char *name; /* HELLO name */
    size_t max_line;
    int64_t reconnect_min_ms;
    int64_t reconnect_max_ms;
    int64_t ping_interval_ms;
    const char *secret; /* the ring secret, copied; NULL or "" = HELLO anonymously */
};

struct monitor_link;

/* Parses the address and connects at once (from the loop). */
struct monitor_link *monitor_link_new(struct event_base *base,
                                      const struct monitor_link_options *opts,
                                      const struct monitor_link_events *events, void *ctx,
                                      struct petrel_error *err);
/* Closes the connection; no callback runs afterwards. */
void monitor_link_free(struct monitor_link *link);
/* True between `DONE` and the loss of the connection. */
bool monitor_link_ready(const struct monitor_link *link);
/* Sends BACKEND-FLUSH (flush true, with `reason`, may be NULL) or BACKEND-UP
 * for `ip`. False when the link is not ready (nothing is sent). */
bool monitor_link_report(struct monitor_link *link, bool flush, const char *ip, const char *reason);
const char *monitor_link_address(const struct monitor_link *link);

#endif
