/* The warden's auth penalties: failed logins counted per client IP (and
 * per user, under keys "user:<name>"), shared by every auth instance that
 * asks the warden (PENALTY-GET, PENALTY-INC).
 * A count decays to nothing after `decay_ms` without a new failure (the
 * same rule as the auth service's own in-process store). The table holds
 * at most `max_ips` addresses: when it is full, decayed entries go first,
 * then the one with the oldest failure. Addresses are kept in canonical
 * text form, so "::1" and "0:0::1" are one entry. Not thread-safe. */
#ifndef PETREL_SERVICES_WARDEN_PENALTY_H
#define PETREL_SERVICES_WARDEN_PENALTY_H

#include <stddef.h>
#include <stdint.h>

#define WARDEN_PENALTY_MAX_FAILURES 65535 /* a count stops growing here */

struct warden_penalty_config {
    int64_t decay_ms;
    int64_t max_ips;
};

enum warden_penalty_lookup {
    WARDEN_PENALTY_HIT,     /* a live count */
    WARDEN_PENALTY_MISS,    /* no entry */
    WARDEN_PENALTY_EXPIRED, /* an entry that had decayed (now removed) */
};

struct warden_penalty;

struct warden_penalty *warden_penalty_new(const struct warden_penalty_config *cfg);
void warden_penalty_free(struct warden_penalty *p);
/* Failures of `ip` (an IPv4/IPv6 address in text form) at `now_ms`
 * (monotonic); *result says how the lookup went. */
unsigned warden_penalty_get(struct warden_penalty *p, const char *ip, int64_t now_ms,
                            enum warden_penalty_lookup *result);
/* One more failure of `ip`; returns the new count. */
unsigned warden_penalty_inc(struct warden_penalty *p, const char *ip, int64_t now_ms);
/* Addresses in the table (decayed ones included until they are looked at
 * or pushed out). */
size_t warden_penalty_entries(const struct warden_penalty *p);

#endif
