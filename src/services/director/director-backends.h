/* The director's backend registry: every backend the director knows, up or
 * flushed, identified by its IP address (one backend per ip), kept sorted
 * by (address, port) so every listing and the backend-set hash come out in
 * one order on every director.
 *
 * The registry owns its backends; a pointer stays valid until the backend
 * is removed. It knows nothing about users or the hash ring: the director
 * state (director-state.h) wires them together and is the only writer. */
#ifndef PETREL_SERVICES_DIRECTOR_BACKENDS_H
#define PETREL_SERVICES_DIRECTOR_BACKENDS_H

#include "core/error.h"
#include "clients/ring/ring-protocol.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DIRECTOR_IP_MAX 46 /* INET6_ADDRSTRLEN */

struct director_backend {
    char ip[DIRECTOR_IP_MAX]; /* canonical text form (inet_ntop) */
    unsigned port;
    char *tag; /* "" = untagged */
    uint32_t vhosts;
    enum ring_backend_state state;
    int64_t last_updown_change;          /* unix seconds; the time it was added, then changes */
    uint32_t *points;                    /* `vhosts` ring points (ring-hash.h) */
    uint64_t sessions[RING_PROTO_COUNT]; /* proxied sessions reported by login clients */
};

struct director_backends;

struct director_backends *director_backends_new(size_t max_backends);
void director_backends_free(struct director_backends *reg);

size_t director_backends_count(const struct director_backends *reg);
/* The i-th backend in (address, port) order; NULL past the end. */
struct director_backend *director_backends_at(const struct director_backends *reg, size_t i);

/* Writes the canonical form of `ip` (an IPv4/IPv6 literal) to out; false
 * when it is not one. */
bool director_ip_canonical(const char *ip, char out[DIRECTOR_IP_MAX]);

/* The backend with this ip (any spelling of the address), or NULL. */
struct director_backend *director_backends_find(const struct director_backends *reg,
                                                const char *ip);

/* Adds an `up` backend. Errors: invalid ip or port (PETREL_ERR_INVALID),
 * the ip exists (PETREL_ERR_EXISTS), the registry is full
 * (PETREL_ERR_CONFLICT). */
struct director_backend *director_backends_add(struct director_backends *reg, const char *ip,
                                               unsigned port, const char *tag, uint32_t vhosts,
                                               int64_t now, struct petrel_error *err);

/* Removes and frees `b`. */
void director_backends_remove(struct director_backends *reg, struct director_backend *b);

/* Changes the weight and recomputes the points. */
void director_backend_set_vhosts(struct director_backend *b, uint32_t vhosts);

/* Changes the tag. */
void director_backend_set_tag(struct director_backend *b, const char *tag);

/* "<ip>:<port>", or "[<ip6>]:<port>". */
void director_backend_address(const struct director_backend *b, char *out, size_t size);

#endif
