/* A stable merge sort (see stable-sort.h). */
#include "core/stable-sort.h"

#include "core/xalloc.h"

#include <stdlib.h>
#include <string.h>

void stable_sort(void *base, size_t n, size_t size,
                 int (*cmp)(const void *a, const void *b, void *ctx), void *ctx)
{
    if (n < 2)
        return;
    char *v = base;
    char *tmp = xcalloc(n, size);
    for (size_t width = 1; width < n; width *= 2) {
        for (size_t lo = 0; lo < n; lo += 2 * width) {
            size_t mid = lo + width < n ? lo + width : n;
            size_t hi = lo + 2 * width < n ? lo + 2 * width : n;
            size_t i = lo, j = mid, k = lo;
            /* Take from the right run only when strictly smaller: stable. */
            while (i < mid && j < hi) {
                size_t from = cmp(v + j * size, v + i * size, ctx) < 0 ? j++ : i++;
                memcpy(tmp + k++ * size, v + from * size, size);
            }
            memcpy(tmp + k * size, v + i * size, (mid - i) * size);
            k += mid - i;
            memcpy(tmp + k * size, v + j * size, (hi - j) * size);
        }
        memcpy(v, tmp, n * size);
    }
    free(tmp);
}
