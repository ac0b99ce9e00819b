/* Binary search with an insert position (see bsearch-insert.h). */
#include "core/bsearch-insert.h"

size_t bsearch_insert_pos(const void *key, const void *base, size_t count, size_t size,
                          int (*cmp)(const void *key, const void *element), bool *found)
{
    const char *p = base;
    size_t lo = 0, hi = count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = cmp(key, p + mid * size);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c > 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}
