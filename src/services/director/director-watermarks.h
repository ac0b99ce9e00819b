/* Per-origin sequence watermarks of peer synchronisation: for every
 * director that made changes (its ring address, the `<origin>` of
 * RING-CHANGE / USER-MOVED / USER-KICKED), the highest `<seq>` processed
 * from it. A change at or below its origin's watermark was processed
 * already and is dropped, so every change is applied and forwarded once.
 *
 * Bounded: at most `max` origins (every origin is a director of the ring);
 * a change from one more origin is refused. Not thread-safe. */
#ifndef PETREL_SERVICES_DIRECTOR_WATERMARKS_H
#define PETREL_SERVICES_DIRECTOR_WATERMARKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum director_wm_verdict {
    DIRECTOR_WM_NEW,       /* above the watermark: apply it (recorded) */
    DIRECTOR_WM_DUPLICATE, /* at or below: processed already, drop it */
    DIRECTOR_WM_FULL,      /* an unknown origin and the table is full: drop it */
};

struct director_watermarks;

struct director_watermarks *director_watermarks_new(size_t max);
void director_watermarks_free(struct director_watermarks *wm);

/* Checks `seq` of `origin` (seq >= 1) and, when it is new, raises the
 * watermark to it. */
enum director_wm_verdict director_watermarks_accept(struct director_watermarks *wm,
                                                    const char *origin, uint64_t seq);
/* The watermark of `origin`; 0 when nothing was heard from it. */
uint64_t director_watermarks_get(const struct director_watermarks *wm, const char *origin);
/* Forgets `origin` (a peer removed from the ring). */
void director_watermarks_forget(struct director_watermarks *wm, const char *origin);
size_t director_watermarks_count(const struct director_watermarks *wm);

#endif
