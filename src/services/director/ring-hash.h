/* Consistent hashing for the director (docs/director.md#hashing), the rule
 * of DECISIONS.md, chosen to route exactly as a Dovecot 2.3 director does:
 *
 *   user hash  = first 4 bytes, big-endian, of MD5(ASCII-lower-cased name),
 *                0 replaced by 1;
 *   point i    = first 4 bytes, big-endian, of MD5("<ip>-<i>"), i = 0..vhosts-1;
 *   lookup     = the first point >= the user's hash, wrapping to the first;
 *                ties between equal points go to the smaller (ip, port).
 *
 * A struct ring_hash holds one sorted point array per tag, rebuilt from the
 * routing members (the caller passes only backends that are up) on every
 * change; lookups are a binary search. Members are the caller's: the ring
 * keeps their `owner` pointers and copies of their points and tags. */
#ifndef PETREL_SERVICES_DIRECTOR_RING_HASH_H
#define PETREL_SERVICES_DIRECTOR_RING_HASH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The user's hash (never 0). `len` bytes of `user`, any length. */
uint32_t ring_hash_user(const char *user, size_t len);

/* The same, for hot paths: keeps the fetched MD5 implementation and a
 * digest context between calls (about 2.5x faster than ring_hash_user).
 * Not thread-safe: one per event loop. */
struct ring_hasher;
struct ring_hasher *ring_hasher_new(void);
void ring_hasher_free(struct ring_hasher *h);
uint32_t ring_hasher_user(struct ring_hasher *h, const char *user, size_t len);

/* Point i of the backend at `ip` (the text form the registry keeps). */
uint32_t ring_hash_point(const char *ip, uint32_t i);

/* Fills points[0..vhosts-1] with ring_hash_point(ip, i). */
void ring_hash_points(const char *ip, uint32_t vhosts, uint32_t *points);

struct ring_member {
    const char *ip;         /* IPv4/IPv6 literal: orders ties */
    unsigned port;          /* orders ties between equal ips */
    const char *tag;        /* "" = untagged */
    const uint32_t *points; /* `count` points, any order (copied) */
    uint32_t count;
    void *owner; /* returned by lookups */
};

struct ring_hash;

struct ring_hash *ring_hash_new(void);
void ring_hash_free(struct ring_hash *ring);

/* Replaces the ring's content with `members` (may be 0). */
void ring_hash_build(struct ring_hash *ring, const struct ring_member *members, size_t count);

/* The owner of the first point of `tag`'s ring at or after `user_hash`
 * (wrapping), or NULL when that tag has no point. */
void *ring_hash_lookup(const struct ring_hash *ring, const char *tag, uint32_t user_hash);

/* Number of points in `tag`'s ring (0 when the tag is unknown). */
size_t ring_hash_point_count(const struct ring_hash *ring, const char *tag);

#endif
