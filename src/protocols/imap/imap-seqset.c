#include "protocols/imap/imap-seqset.h"

#include "core/xalloc.h"

#include <stdlib.h>
#include <string.h>

static int range_cmp(const void *a, const void *b)
{
    const struct imap_seq_range *x = a;
    const struct imap_seq_range *y = b;
    if (x->lo != y->lo)
        return x->lo < y->lo ? -1 : 1;
    if (x->hi != y->hi)
        return x->hi < y->hi ? -1 : 1;
    return 0;
}

/* Sorts and merges overlapping or adjacent ranges. */
static void normalise(struct imap_seqset *set)
{
    if (set->count < 2)
        return;
    qsort(set->ranges, set->count, sizeof(*set->ranges), range_cmp);
    size_t out = 0;
    for (size_t i = 1; i < set->count; i++) {
        struct imap_seq_range *last = &set->ranges[out];
        const struct imap_seq_range *r = &set->ranges[i];
        if (last->hi == UINT32_MAX || r->lo <= last->hi + 1) {
            if (r->hi > last->hi)
                last->hi = r->hi;
        } else {
            set->ranges[++out] = *r;
        }
    }
    set->count = out + 1;
}

static void append_range(struct imap_seqset *set, uint32_t lo, uint32_t hi)
{
    if (lo > hi) {
        uint32_t t = lo;
        lo = hi;
        hi = t;
    }
    if (lo == 0)
        lo = 1;
    if (hi == 0)
        return;
    set->ranges = xgrow(set->ranges, &set->cap, set->count + 1, sizeof(*set->ranges));
    set->ranges[set->count].lo = lo;
    set->ranges[set->count].hi = hi;
    set->count++;
}

void imap_seqset_add(struct imap_seqset *set, uint32_t lo, uint32_t hi)
{
    size_t before = set->count;
    append_range(set, lo, hi);
    if (set->count == before || before == 0)
        return;
    struct imap_seq_range *prev = &set->ranges[before - 1];
    const struct imap_seq_range *added = &set->ranges[before];
    /* Appending in ascending order (the common case) needs no sort. */
    if (prev->hi != UINT32_MAX && added->lo > prev->hi + 1)
        return;
    /* Touching or overlapping the last range only (the set is sorted and
     * merged, so that range is the highest): extend it. Adding UIDs one by
     * one (VANISHED of a mass expunge) stays linear this way. */
    if (added->lo >= prev->lo) {
        if (added->hi > prev->hi)
            prev->hi = added->hi;
        set->count--;
        return;
    }
    normalise(set);
}

/* One seq-number: nz-number or '*'. */
static bool parse_number(const char *s, size_t len, size_t *i, uint32_t max, uint32_t *out,
                         struct petrel_error *err)
{
    if (*i < len && s[*i] == '*') {
        (*i)++;
        *out = max;
        return true;
    }
    if (*i >= len || s[*i] < '1' || s[*i] > '9')
        return petrel_error_set(err, PETREL_ERR_INVALID, "Invalid sequence set");
    uint64_t v = 0;
    while (*i < len && s[*i] >= '0' && s[*i] <= '9') {
        v = v * 10 + (uint64_t)(s[*i] - '0');
        if (v > UINT32_MAX)
            return petrel_error_set(err, PETREL_ERR_INVALID, "Number in sequence set too large");
        (*i)++;
    }
    *out = (uint32_t)v;
    return true;
}

bool imap_seqset_parse(const char *text, size_t len, uint32_t max, unsigned flags,
                       struct imap_seqset *out, struct petrel_error *err)
{
    imap_seqset_clear(out);
    if (len == 1 && text[0] == '$') {
        if ((flags & IMAP_SEQSET_ALLOW_SEARCHRES) == 0)
            return petrel_error_set(err, PETREL_ERR_INVALID, "$ not allowed here");
        out->searchres = true;
        return true;
    }
    size_t i = 0;
    for (;;) {
        uint32_t lo = 0;
        uint32_t hi = 0;
        if (!parse_number(text, len, &i, max, &lo, err))
            goto fail;
        hi = lo;
        if (i < len && text[i] == ':') {
            i++;
            if (!parse_number(text, len, &i, max, &hi, err))
                goto fail;
        }
        append_range(out, lo, hi);
        if (i == len)
            break;
        if (text[i] != ',') {
            petrel_error_set(err, PETREL_ERR_INVALID, "Invalid sequence set");
            goto fail;
        }
        i++;
    }
    normalise(out);
    return true;
fail:
    imap_seqset_clear(out);
    return false;
}

bool imap_seqset_contains(const struct imap_seqset *set, uint32_t n)
{
    size_t lo = 0;
    size_t hi = set->count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct imap_seq_range *r = &set->ranges[mid];
        if (n < r->lo)
            hi = mid;
        else if (n > r->hi)
            lo = mid + 1;
        else
            return true;
    }
    return false;
}

uint64_t imap_seqset_count(const struct imap_seqset *set)
{
    uint64_t total = 0;
    for (size_t i = 0; i < set->count; i++)
        total += (uint64_t)set->ranges[i].hi - set->ranges[i].lo + 1;
    return total;
}

void imap_seqset_format(const struct imap_seqset *set, struct buf *out)
{
    for (size_t i = 0; i < set->count; i++) {
        const struct imap_seq_range *r = &set->ranges[i];
        if (i > 0)
            buf_append_char(out, ',');
        if (r->lo == r->hi)
            buf_printf(out, "%u", (unsigned)r->lo);
        else
            buf_printf(out, "%u:%u", (unsigned)r->lo, (unsigned)r->hi);
    }
}

void imap_seqset_clear(struct imap_seqset *set)
{
    set->count = 0;
    set->searchres = false;
}

void imap_seqset_free(struct imap_seqset *set)
{
    free(set->ranges);
    memset(set, 0, sizeof(*set));
}

bool imap_seqset_iter_next(const struct imap_seqset *set, struct imap_seqset_iter *it,
                           uint32_t *out)
{
    while (it->range < set->count) {
        const struct imap_seq_range *r = &set->ranges[it->range];
        if (it->next == 0)
            it->next = r->lo;
        if (it->next <= r->hi) {
            *out = (uint32_t)it->next++;
            return true;
        }
        it->range++;
        it->next = 0;
    }
    return false;
}
