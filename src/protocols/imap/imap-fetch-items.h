/* FETCH data items (RFC 3501 6.4.5, RFC 9051 6.4.5, RFC 3516 BINARY,
 * RFC 7162 CONDSTORE) parsed from the command's arguments into what the
 * server executes: a set of simple attributes plus a list of body sections.
 * The result owns its memory: free with imap_fetch_items_free(). Errors are
 * PETREL_ERR_INVALID with a message for the tagged BAD. */
#ifndef PETREL_PROTOCOLS_IMAP_IMAP_FETCH_ITEMS_H
#define PETREL_PROTOCOLS_IMAP_IMAP_FETCH_ITEMS_H

#include "core/buf.h"
#include "core/error.h"
#include "protocols/imap/imap-parser.h"
#include "protocols/imap/imap-section.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum imap_fetch_attr {
    IMAP_FETCH_FLAGS = 1u << 0,
    IMAP_FETCH_INTERNALDATE = 1u << 1,
    IMAP_FETCH_RFC822_SIZE = 1u << 2,
    IMAP_FETCH_ENVELOPE = 1u << 3,
    IMAP_FETCH_BODY = 1u << 4, /* BODY without a section: non-extensible structure */
    IMAP_FETCH_BODYSTRUCTURE = 1u << 5,
    IMAP_FETCH_UID = 1u << 6,
    IMAP_FETCH_MODSEQ = 1u << 7,
    IMAP_FETCH_RFC822 = 1u << 8,        /* = BODY[] (sets \Seen) */
    IMAP_FETCH_RFC822_HEADER = 1u << 9, /* = BODY.PEEK[HEADER] */
    IMAP_FETCH_RFC822_TEXT = 1u << 10,  /* = BODY[TEXT] (sets \Seen) */
};

enum imap_fetch_body_kind {
    IMAP_FETCH_BODY_SECTION,   /* BODY[...] / BODY.PEEK[...] */
    IMAP_FETCH_BINARY_SECTION, /* BINARY[...] / BINARY.PEEK[...] */
    IMAP_FETCH_BINARY_SIZE,    /* BINARY.SIZE[...] */
};

/* Section text kinds: enum imap_section_text of imap-section.h (IMAP_SECTION_BODY
 * for no text part: the whole message or part). */

#define IMAP_SECTION_MAX_PARTS 32

struct imap_fetch_body {
    enum imap_fetch_body_kind kind;
    bool peek;                              /* .PEEK: do not set \Seen */
    uint32_t parts[IMAP_SECTION_MAX_PARTS]; /* "1.2.3" */
    size_t part_count;
    enum imap_section_text text;
    char **fields; /* HEADER.FIELDS[.NOT] names as the client wrote them */
    size_t field_count;
    bool partial; /* <start.count> */
    uint64_t partial_start;
    uint64_t partial_count;
};

struct imap_fetch_items {
    unsigned attrs; /* enum imap_fetch_attr bits */
    struct imap_fetch_body *bodies;
    size_t body_count;
    bool changedsince; /* (CHANGEDSINCE n) modifier; implies IMAP_FETCH_MODSEQ */
    uint64_t changedsince_modseq;
    bool vanished; /* (... VANISHED) modifier (RFC 7162 3.2.6); needs CHANGEDSINCE */
};

/* Parses `items` (one atom, or a list of atoms; ALL/FAST/FULL only alone)
 * and the optional `modifiers` list (NULL when absent). On failure `out` is
 * left empty (nothing to free). */
bool imap_fetch_items_parse(const struct imap_arg *items, const struct imap_arg *modifiers,
                            struct imap_fetch_items *out, struct petrel_error *err);
void imap_fetch_items_free(struct imap_fetch_items *items);
/* Appends the name the response uses for `body`: "BODY[1.HEADER.FIELDS (From)]<0>",
 * "BINARY.SIZE[2]" (PEEK dropped, only the partial's origin kept). */
void imap_fetch_body_name(const struct imap_fetch_body *body, struct buf *out);
/* True when executing the items sets \Seen (a non-PEEK body or RFC822[.TEXT]). */
bool imap_fetch_items_set_seen(const struct imap_fetch_items *items);

#endif
