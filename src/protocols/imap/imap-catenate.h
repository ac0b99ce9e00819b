/* CATENATE (RFC 4469): APPEND's message built from text literals and IMAP
 * URLs of messages (or their sections) in the user's own folders, written
 * into a spool file as it is assembled, so a large result is never whole
 * in memory. */
#ifndef PETREL_PROTOCOLS_IMAP_IMAP_CATENATE_H
#define PETREL_PROTOCOLS_IMAP_IMAP_CATENATE_H

#include "protocols/imap/imap-parser.h"

#include <stdint.h>

struct imap_session;

enum imap_catenate_result {
    IMAP_CATENATE_OK,
    IMAP_CATENATE_BAD,     /* syntax: *text says what */
    IMAP_CATENATE_NO,      /* refused: *text says what (with its response code) */
    IMAP_CATENATE_BADURL,  /* a URL the server cannot fetch: *url names it */
    IMAP_CATENATE_REPLIED, /* a tagged reply was sent already (a bad mailbox name) */
};

/* Builds the message of `parts` (the list after the CATENATE atom) into a
 * new spool file: *fd (the caller closes it) and *len. NUL bytes travel
 * only in a literal8 (RFC 3516), as for APPEND. */
enum imap_catenate_result imap_catenate_build(struct imap_session *s, const struct imap_arg *parts,
                                              int *fd, uint64_t *len, const char **text,
                                              const char **url);

#endif
