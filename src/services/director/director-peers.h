/* The peer directors this director knows: the permanent ones from
 * `director.peers` and those added at run time through the admin API
 * (POST /api/director/ring; lost on restart). Addresses are ring addresses
 * "<ip>:<port>" in canonical form, kept sorted by (address, port) — the
 * ring order. Peer synchronisation (director-sync.h) dials the two
 * neighbours of this director in that order. */
#ifndef PETREL_SERVICES_DIRECTOR_PEERS_H
#define PETREL_SERVICES_DIRECTOR_PEERS_H

#include "core/error.h"

#include <stdbool.h>
#include <stddef.h>

struct director_peer {
    char addr[64]; /* "<ip>:<port>" / "[<ip6>]:<port>", canonical */
    char ip[46];
    unsigned port;
    bool permanent; /* from the configuration */
};

struct director_peers;

/* `self` is this director's own ring address (never a peer). */
struct director_peers *director_peers_new(const char *self, size_t max_peers);
void director_peers_free(struct director_peers *peers);

size_t director_peers_count(const struct director_peers *peers);
const struct director_peer *director_peers_at(const struct director_peers *peers, size_t i);

/* Canonical form of a ring address into out (64 bytes); false when it is
 * not "<ip>:<port>" / "[<ip6>]:<port>". */
bool director_peer_addr_canonical(const char *text, char out[64]);

/* Adds a peer (adding a known one again is fine: it stays, and becomes
 * permanent when `permanent`). Errors: not an address, this director's own
 * address (PETREL_ERR_INVALID), too many peers (PETREL_ERR_UNAVAILABLE). */
bool director_peers_add(struct director_peers *peers, const char *addr, bool permanent,
                        struct petrel_error *err);
/* Ring order over this director and its peers, sorted by (address, port):
 * the index of this director among the count + 1 members. */
size_t director_peers_self_index(const struct director_peers *peers);
/* This director's neighbours in ring order (wrapping): NULL/NULL when it is
 * alone, the same peer twice when the ring has two members. */
void director_peers_neighbours(const struct director_peers *peers,
                               const struct director_peer **left,
                               const struct director_peer **right);
/* The peer with this canonical address, or NULL. */
const struct director_peer *director_peers_find(const struct director_peers *peers,
                                                const char *addr);

/* Removes a peer; PETREL_ERR_NOT_FOUND when unknown. */
bool director_peers_remove(struct director_peers *peers, const char *addr,
                           struct petrel_error *err);

#endif
