/* SORT programs (RFC 5256 3, RFC 5957 DISPLAYFROM/DISPLAYTO) and the
 * string rules SORT and THREAD share: base subject extraction (RFC 5256
 * 2.1), i;ascii-casemap comparison, the first address of a header. Pure
 * functions over per-message facts the caller gathers; nothing here reads
 * a mailbox. */
#ifndef PETREL_PROTOCOLS_IMAP_IMAP_SORT_H
#define PETREL_PROTOCOLS_IMAP_IMAP_SORT_H

#include "core/buf.h"
#include "core/error.h"
#include "protocols/imap/imap-parser.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum imap_sort_key {
    IMAP_SORT_ARRIVAL,
    IMAP_SORT_CC,
    IMAP_SORT_DATE,
    IMAP_SORT_FROM,
    IMAP_SORT_SIZE,
    IMAP_SORT_SUBJECT,
    IMAP_SORT_TO,
    IMAP_SORT_DISPLAYFROM,
    IMAP_SORT_DISPLAYTO,
};

/* More keys than there are distinct ones makes no sense; a bound keeps the
 * program a fixed-size value. */
#define IMAP_SORT_MAX_KEYS 16

struct imap_sort_criterion {
    enum imap_sort_key key;
    bool reverse;
};

struct imap_sort_program {
    struct imap_sort_criterion keys[IMAP_SORT_MAX_KEYS];
    size_t count;
};

/* What one message contributes to a sort. Strings are NUL-terminated,
 * already decoded (RFC 2047) and casemapped with imap_casemap(); absent
 * values are "". */
struct imap_sort_facts {
    uint32_t seq;    /* the final tie-breaker (RFC 5256 2.3) */
    uint32_t number; /* what is reported: the sequence number or the UID */
    int64_t arrival; /* INTERNALDATE, seconds since the epoch */
    int64_t date;    /* sent date in UTC, INTERNALDATE when unusable */
    uint64_t size;   /* RFC822.SIZE */
    char *subject;   /* base subject */
    char *from;      /* addr-mailbox of the first address */
    char *to;
    char *cc;
    char *display_from; /* RFC 5957 display form of the first address */
    char *display_to;
};

/* Parses the parenthesised sort criteria of SORT: "(REVERSE DATE SUBJECT)".
 * False with PETREL_ERR_INVALID for an empty list, an unknown key, REVERSE
 * not followed by a key, or more than IMAP_SORT_MAX_KEYS keys. */
bool imap_sort_parse(const struct imap_arg *list, struct imap_sort_program *out,
                     struct petrel_error *err);

/* Whether the program reads the message header (every key but ARRIVAL and
 * SIZE does). */
bool imap_sort_needs_header(const struct imap_sort_program *prog);

/* Orders `facts` by the program, ties by sequence number. */
void imap_sort_facts(const struct imap_sort_program *prog, struct imap_sort_facts *facts,
                     size_t count);
void imap_sort_facts_free(struct imap_sort_facts *f);
/* <0, 0, >0 as `a` sorts before, with, after `b` under the program, ties
 * broken by `seq` (what imap_sort_facts orders by). */
int imap_sort_compare(const struct imap_sort_program *prog, const struct imap_sort_facts *a,
                      const struct imap_sort_facts *b);
/* Writes numbers in the order given as a sequence set (RFC 5267 3.2):
 * only ascending runs become ranges ("5:7,3,9"). */
void imap_append_ordered_set(struct buf *out, const uint32_t *v, size_t n);

/* RFC 5256 2.1: appends the base subject of a subject that is already
 * decoded to UTF-8 (not casemapped). True when the extraction removed a
 * reply or forward marker ("Re:", "Fwd:", "(fwd)", "[fwd: ...]"): the
 * message is a reply or forward for THREAD=REFERENCES. */
bool imap_base_subject(const char *subject, size_t len, struct buf *out);

/* i;ascii-casemap (RFC 4790): ASCII letters upper-cased in place. */
void imap_casemap(char *s, size_t len);

/* The first address of an unfolded address-list header value: its
 * addr-mailbox (the local part) into `mailbox` and its RFC 5957 display
 * form into `display` (the decoded display name when it has a non-empty
 * one, otherwise "mailbox@host"). A group's members count as addresses;
 * nothing is appended when the value holds no address. */
void imap_sort_first_address(const char *value, size_t len, struct buf *mailbox,
                             struct buf *display);

#endif
