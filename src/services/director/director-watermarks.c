/* Per-origin watermarks (director-watermarks.h): a small array searched
 * linearly (a ring has a handful of directors). */
#include "services/director/director-watermarks.h"

#include "core/xalloc.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct wm_entry {
    char origin[64];
    uint64_t seq;
};

struct director_watermarks {
    struct wm_entry *items;
    size_t count;
    size_t max;
};

struct director_watermarks *director_watermarks_new(size_t max)
{
    struct director_watermarks *wm = xcalloc(1, sizeof(*wm));
    wm->max = max;
    wm->items = xcalloc(max > 0 ? max : 1, sizeof(*wm->items));
    return wm;
}

void director_watermarks_free(struct director_watermarks *wm)
{
    if (wm == NULL)
        return;
    free(wm->items);
    free(wm);
}

static struct wm_entry *find(const struct director_watermarks *wm, const char *origin)
{
    for (size_t i = 0; i < wm->count; i++) {
        if (strcmp(wm->items[i].origin, origin) == 0)
            return &wm->items[i];
    }
    return NULL;
}

enum director_wm_verdict director_watermarks_accept(struct director_watermarks *wm,
                                                    const char *origin, uint64_t seq)
{
    struct wm_entry *e = find(wm, origin);
    if (e == NULL) {
        if (wm->count >= wm->max)
            return DIRECTOR_WM_FULL;
        e = &wm->items[wm->count++];
        snprintf(e->origin, sizeof(e->origin), "%s", origin);
        e->seq = 0;
    }
    if (seq <= e->seq)
        return DIRECTOR_WM_DUPLICATE;
    e->seq = seq;
    return DIRECTOR_WM_NEW;
}

uint64_t director_watermarks_get(const struct director_watermarks *wm, const char *origin)
{
    const struct wm_entry *e = find(wm, origin);
    return e != NULL ? e->seq : 0;
}

void director_watermarks_forget(struct director_watermarks *wm, const char *origin)
{
    struct wm_entry *e = find(wm, origin);
    if (e == NULL)
        return;
    *e = wm->items[--wm->count];
}

size_t director_watermarks_count(const struct director_watermarks *wm)
{
    return wm->count;
}
