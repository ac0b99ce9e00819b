/* Per-origin watermarks (director-watermarks.h): a map from origin to its
 * watermark (core/sorted-map.h). */
#include "services/director/director-watermarks.h"

#include "core/sorted-map.h"
#include "core/xalloc.h"

#include <stdlib.h>

struct director_watermarks {
    struct smap *seqs; /* origin -> its watermark (uint64_t, allocated) */
    size_t max;
};

struct director_watermarks *director_watermarks_new(size_t max)
{
    struct director_watermarks *wm = xcalloc(1, sizeof(*wm));
    wm->seqs = smap_new();
    wm->max = max;
    return wm;
}

void director_watermarks_free(struct director_watermarks *wm)
{
    if (wm == NULL)
        return;
    smap_free(wm->seqs, free);
    free(wm);
}

enum director_wm_verdict director_watermarks_accept(struct director_watermarks *wm,
                                                    const char *origin, uint64_t seq)
{
    uint64_t *mark = smap_get(wm->seqs, origin);
    if (mark == NULL) {
        if (smap_count(wm->seqs) >= wm->max)
            return DIRECTOR_WM_FULL;
        mark = xcalloc(1, sizeof(*mark));
        smap_put(wm->seqs, origin, mark);
    }
    if (seq <= *mark)
        return DIRECTOR_WM_DUPLICATE;
    *mark = seq;
    return DIRECTOR_WM_NEW;
}

uint64_t director_watermarks_get(const struct director_watermarks *wm, const char *origin)
{
    const uint64_t *mark = smap_get(wm->seqs, origin);
    return mark != NULL ? *mark : 0;
}

void director_watermarks_forget(struct director_watermarks *wm, const char *origin)
{
    free(smap_remove(wm->seqs, origin));
}

size_t director_watermarks_count(const struct director_watermarks *wm)
{
    return smap_count(wm->seqs);
}
