/* Tombstones (director-tombstones.h): a small array, kept sorted by
 * address text so listings are stable. */
#include "services/director/director-tombstones.h"

#include "core/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct director_tombstones {
    struct director_tombstone *items;
    size_t count;
    size_t max;
};

struct director_tombstones *director_tombstones_new(size_t max)
{
    struct director_tombstones *ts = xcalloc(1, sizeof(*ts));
    ts->max = max;
    ts->items = xcalloc(max > 0 ? max : 1, sizeof(*ts->items));
    return ts;
}

void director_tombstones_free(struct director_tombstones *ts)
{
    if (ts == NULL)
        return;
    free(ts->items);
    free(ts);
}

static size_t position(const struct director_tombstones *ts, const char *addr, bool *found)
{
    size_t i = 0;
    *found = false;
    while (i < ts->count) {
        int c = strcmp(ts->items[i].addr, addr);
        if (c == 0) {
            *found = true;
            return i;
        }
        if (c > 0)
            break;
        i++;
    }
    return i;
}

bool director_tombstones_add(struct director_tombstones *ts, const char *addr, int64_t now_ms)
{
    bool found;
    size_t at = position(ts, addr, &found);
    if (found)
        return true;
    if (ts->count >= ts->max)
        return false;
    memmove(ts->items + at + 1, ts->items + at, (ts->count - at) * sizeof(*ts->items));
    snprintf(ts->items[at].addr, sizeof(ts->items[at].addr), "%s", addr);
    ts->items[at].since_ms = now_ms;
    ts->count++;
    return true;
}

bool director_tombstones_clear(struct director_tombstones *ts, const char *addr)
{
    bool found;
    size_t at = position(ts, addr, &found);
    if (!found)
        return false;
    memmove(ts->items + at, ts->items + at + 1, (ts->count - at - 1) * sizeof(*ts->items));
    ts->count--;
    return true;
}

bool director_tombstones_has(const struct director_tombstones *ts, const char *addr)
{
    bool found;
    position(ts, addr, &found);
    return found;
}

size_t director_tombstones_count(const struct director_tombstones *ts)
{
    return ts->count;
}

const struct director_tombstone *director_tombstones_at(const struct director_tombstones *ts,
                                                        size_t i)
{
    return i < ts->count ? &ts->items[i] : NULL;
}
