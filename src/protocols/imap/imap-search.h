/* SEARCH / UID SEARCH programs (RFC 3501 6.4.4, RFC 9051 6.4.4) parsed into
 * a tree the server evaluates, with CONDSTORE's MODSEQ key (RFC 7162),
 * CHARSET, ESEARCH's RETURN options (RFC 4731) and SEARCHRES's "$"
 * (RFC 5182). Sequence sets are resolved against the mailbox's message count
 * and highest UID given by the caller. The program owns its memory: free with
 * imap_search_program_free(). Errors: PETREL_ERR_INVALID (BAD) or, for an
 * unknown charset, PETREL_ERR_UNSUPPORTED (NO [BADCHARSET (US-ASCII UTF-8)]). */
#ifndef PETREL_PROTOCOLS_IMAP_IMAP_SEARCH_H
#define PETREL_PROTOCOLS_IMAP_IMAP_SEARCH_H

#include "core/error.h"
#include "protocols/imap/imap-parser.h"
#include "protocols/imap/imap-seqset.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum imap_search_key {
    /* Flags and states: no argument. */
    IMAP_SEARCH_ALL,
    IMAP_SEARCH_ANSWERED,
    IMAP_SEARCH_DELETED,
    IMAP_SEARCH_DRAFT,
    IMAP_SEARCH_FLAGGED,
    IMAP_SEARCH_NEW, /* RECENT and UNSEEN */
    IMAP_SEARCH_OLD, /* NOT RECENT */
    IMAP_SEARCH_RECENT,
    IMAP_SEARCH_SEEN,
    IMAP_SEARCH_UNANSWERED,
    IMAP_SEARCH_UNDELETED,
    IMAP_SEARCH_UNDRAFT,
    IMAP_SEARCH_UNFLAGGED,
    IMAP_SEARCH_UNSEEN,
    /* str: a keyword. */
    IMAP_SEARCH_KEYWORD,
    IMAP_SEARCH_UNKEYWORD,
    /* str: a substring of a header or the body. */
    IMAP_SEARCH_BCC,
    IMAP_SEARCH_BODY,
    IMAP_SEARCH_CC,
    IMAP_SEARCH_FROM,
    IMAP_SEARCH_SUBJECT,
    IMAP_SEARCH_TEXT,
    IMAP_SEARCH_TO,
    IMAP_SEARCH_HEADER, /* header_name and str */
    /* day: internal date (BEFORE ON SINCE) or Date: header (SENT*). */
    IMAP_SEARCH_BEFORE,
    IMAP_SEARCH_ON,
    IMAP_SEARCH_SINCE,
    IMAP_SEARCH_SENTBEFORE,
    IMAP_SEARCH_SENTON,
    IMAP_SEARCH_SENTSINCE,
    /* number: RFC822.SIZE. */
    IMAP_SEARCH_LARGER,
    IMAP_SEARCH_SMALLER,
    /* set. */
    IMAP_SEARCH_SEQSET,
    IMAP_SEARCH_UID,
    /* number: mod-sequence >= number; modseq_entry optional. */
    IMAP_SEARCH_MODSEQ,
    /* children. */
    IMAP_SEARCH_NOT, /* one */
    IMAP_SEARCH_OR,  /* two */
    IMAP_SEARCH_AND, /* any number: the program and parenthesised groups */
};

enum imap_search_entry_type {
    IMAP_SEARCH_ENTRY_ALL,
    IMAP_SEARCH_ENTRY_SHARED,
    IMAP_SEARCH_ENTRY_PRIV
};

struct imap_search_node {
    enum imap_search_key key;
    char *str; /* NUL-terminated copy; may contain NUL from a literal */
    size_t str_len;
    char *header_name;
    int32_t day; /* days since 1970-01-01 */
    uint64_t number;
    struct imap_seqset set; /* set.searchres: "$" */
    char *modseq_entry;     /* "/flags/\\Seen", NULL when not given */
    enum imap_search_entry_type modseq_entry_type;
    struct imap_search_node *children;
    size_t child_count;
};

enum imap_search_return {
    IMAP_SEARCH_RETURN_MIN = 1u << 0,
    IMAP_SEARCH_RETURN_MAX = 1u << 1,
    IMAP_SEARCH_RETURN_ALL = 1u << 2,
    IMAP_SEARCH_RETURN_COUNT = 1u << 3,
    IMAP_SEARCH_RETURN_SAVE = 1u << 4,
    /* RFC 5267 (CONTEXT=SEARCH, CONTEXT=SORT) */
    IMAP_SEARCH_RETURN_PARTIAL = 1u << 5, /* partial_lo .. partial_hi */
    IMAP_SEARCH_RETURN_UPDATE = 1u << 6,  /* keep the result live */
    IMAP_SEARCH_RETURN_CONTEXT = 1u << 7, /* a hint: accepted, changes nothing */
};

/* The options that ask for result data in the ESEARCH response. */
#define IMAP_SEARCH_RETURN_DATA                                                                    \
    (IMAP_SEARCH_RETURN_MIN | IMAP_SEARCH_RETURN_MAX | IMAP_SEARCH_RETURN_ALL |                    \
     IMAP_SEARCH_RETURN_COUNT | IMAP_SEARCH_RETURN_PARTIAL)

struct imap_search_program {
    struct imap_search_node root; /* an AND of the top-level keys */
    bool charset_utf8;            /* CHARSET UTF-8 was given */
    bool has_return;              /* RETURN (...) given: answer with ESEARCH */
    unsigned return_options;      /* enum imap_search_return bits; () means ALL */
    /* PARTIAL lo:hi (RFC 5267 4.4): 1-based positions in the result, lo <= hi
     * (a reversed range is put in order, as Dovecot does). */
    uint32_t partial_lo, partial_hi;
};

/* Nesting of NOT / OR / parentheses a program may use. */
#define IMAP_SEARCH_MAX_DEPTH 32

/* Parses the arguments after SEARCH. On failure nothing needs freeing.
 * RETURN options: MIN MAX ALL COUNT SAVE (RFC 4731, 5182), CONTEXT, UPDATE
 * and PARTIAL n:m (RFC 5267); BAD for an unknown option, UPDATE twice,
 * PARTIAL twice or with ALL, and a PARTIAL range that is not nz:nz. */
bool imap_search_parse(const struct imap_arg *args, size_t count, uint32_t max_seq,
                       uint32_t max_uid, struct imap_search_program *out, struct petrel_error *err);
void imap_search_program_free(struct imap_search_program *prog);

enum imap_search_need {
    IMAP_SEARCH_NEEDS_FLAGS = 1u << 0,
    IMAP_SEARCH_NEEDS_INTERNALDATE = 1u << 1,
    IMAP_SEARCH_NEEDS_SIZE = 1u << 2,
    IMAP_SEARCH_NEEDS_HEADER = 1u << 3,
    IMAP_SEARCH_NEEDS_BODY = 1u << 4,
    IMAP_SEARCH_NEEDS_MODSEQ = 1u << 5,
};

/* What evaluating the program reads from each message (need bits), so the
 * server loads only that. */
unsigned imap_search_needs(const struct imap_search_program *prog);

#endif
