/* Hands freed heap memory back to the system after bursts.
 *
 * glibc keeps what free() returns in its arenas (one per thread that ever
 * allocated, up to 8 per core) and gives the top of the main heap back only
 * above M_TRIM_THRESHOLD: after a burst of deliveries or large replies the
 * process stays at its peak RSS. A timer on the loop calls malloc_trim(0),
 * which walks every arena and releases its free pages, when the arenas hold
 * at least a megabyte free (docs/decisions.md, "Returning memory"). */
#ifndef PETREL_SERVER_MEMORY_TRIM_H
#define PETREL_SERVER_MEMORY_TRIM_H

#include <event2/event.h>
#include <stdint.h>

struct memory_trim;

/* Every `interval_ms` (0: never; returns NULL). */
struct memory_trim *memory_trim_start(struct event_base *base, int64_t interval_ms);
void memory_trim_free(struct memory_trim *trim);

#endif
