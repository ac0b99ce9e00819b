/* Tombstones: ring members this director knows to be dead — a neighbour
 * whose link dropped or could not be established. A tombstone is set when
 * the link to a member is lost (or its first dial fails) and cleared when a
 * link to it is established again or the member leaves the ring (DELETE
 * ring). GET /api/director/ring lists them as {"addr", "age_secs"}.
 *
 * Bounded: at most `max` entries (one per ring member). Not thread-safe. */
#ifndef PETREL_SERVICES_DIRECTOR_TOMBSTONES_H
#define PETREL_SERVICES_DIRECTOR_TOMBSTONES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct director_tombstone {
    char addr[64];
    int64_t since_ms; /* when the member was found dead (unix ms) */
};

struct director_tombstones;

struct director_tombstones *director_tombstones_new(size_t max);
void director_tombstones_free(struct director_tombstones *ts);

/* Marks `addr` dead since now_ms; an existing tombstone keeps its age.
 * False when the table is full. */
bool director_tombstones_add(struct director_tombstones *ts, const char *addr, int64_t now_ms);
/* Clears the tombstone of `addr`; true when there was one. */
bool director_tombstones_clear(struct director_tombstones *ts, const char *addr);
bool director_tombstones_has(const struct director_tombstones *ts, const char *addr);
size_t director_tombstones_count(const struct director_tombstones *ts);
/* Sorted by address text; NULL when i >= count. */
const struct director_tombstone *director_tombstones_at(const struct director_tombstones *ts,
                                                        size_t i);

#endif
