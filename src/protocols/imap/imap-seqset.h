/* IMAP sequence sets ("1:5,7,9:*") as sorted, merged, inclusive ranges.
 * Parsing resolves '*' against the caller's largest number (the message count
 * or the highest UID); a range is normalised so "5:*" with a largest number
 * of 3 is 3:5 (RFC 9051 6.4.8), and 0 never appears in a set. The set owns its
 * range array: free with imap_seqset_free(); a zeroed struct is empty. */
#ifndef PETREL_PROTOCOLS_IMAP_IMAP_SEQSET_H
#define PETREL_PROTOCOLS_IMAP_IMAP_SEQSET_H

#include "core/buf.h"
#include "core/error.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct imap_seq_range {
    uint32_t lo;
    uint32_t hi;
};

struct imap_seqset {
    struct imap_seq_range *ranges;
    size_t count;
    size_t cap;
    bool searchres; /* the input was "$" (RFC 5182): the saved result applies */
};

/* Accept "$" (the saved SEARCH result) as a whole set. */
#define IMAP_SEQSET_ALLOW_SEARCHRES 0x1u

/* Parses `len` bytes of `text` into `out` (emptied first; free it with
 * imap_seqset_free() whatever the result). `max` resolves '*'; with max 0
 * (an empty mailbox) "*" alone is the empty set. False with
 * PETREL_ERR_INVALID for a syntax error, a 0 or a number over 2^32-1. */
bool imap_seqset_parse(const char *text, size_t len, uint32_t max, unsigned flags,
                       struct imap_seqset *out, struct petrel_error *err);
/* Adds lo:hi (either order, 0 is ignored) keeping the set sorted and merged. */
void imap_seqset_add(struct imap_seqset *set, uint32_t lo, uint32_t hi);
bool imap_seqset_contains(const struct imap_seqset *set, uint32_t n);
/* How many numbers the set holds. */
uint64_t imap_seqset_count(const struct imap_seqset *set);
/* Appends the compact form ("1:3,5,7:9"); nothing for an empty set. */
void imap_seqset_format(const struct imap_seqset *set, struct buf *out);
void imap_seqset_clear(struct imap_seqset *set);
void imap_seqset_free(struct imap_seqset *set);

/* Ascending iteration: zero the iterator, then call next until it is false. */
struct imap_seqset_iter {
    size_t range;
    uint64_t next; /* 0: start of the current range */
};
bool imap_seqset_iter_next(const struct imap_seqset *set, struct imap_seqset_iter *it,
                           uint32_t *out);

#endif
