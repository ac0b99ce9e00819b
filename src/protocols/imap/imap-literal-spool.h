/* APPEND message literals over IMAP_SPOOL_THRESHOLD go to a spool file as
 * they arrive (the parser's literal sink), never whole into memory: an
 * unnamed file in the tmp/ of the user's INBOX (mail_user_spool_open),
 * which the storage then links into the destination folder, or copies in
 * the kernel where it cannot. A disconnect or a crash leaves nothing: the
 * file has no name until the save gives it one. Literals of other
 * commands stay in memory, up to IMAP_MEMORY_LITERAL_MAX. */
#ifndef PETREL_PROTOCOLS_IMAP_IMAP_LITERAL_SPOOL_H
#define PETREL_PROTOCOLS_IMAP_IMAP_LITERAL_SPOOL_H

#include "core/error.h"

#include <stdbool.h>
#include <stdint.h>

/* As Dovecot's mail_temp_dir threshold: smaller messages are not worth a file. */
#define IMAP_SPOOL_THRESHOLD (128u * 1024)
/* Literals of commands other than APPEND (a SEARCH string, a name): more
 * than any of them needs, little enough that many sessions cannot exhaust
 * memory with them. */
#define IMAP_MEMORY_LITERAL_MAX (1024u * 1024)

struct imap_session;

/* One spooled literal: what the APPEND command sees in imap_arg.spool. */
struct imap_literal_spool {
    int fd;           /* -1 when it could not be created */
    uint64_t written; /* bytes taken so far */
    bool literal8;    /* announced as ~{n} */
    bool has_nul;     /* a NUL byte came (refused outside literal8) */
    bool failed;      /* creating or writing failed: `err` says why */
    struct petrel_error err;
};

/* Gives the session's parser the sink (after login, with a user). */
void imap_literal_spool_attach(struct imap_session *s);

#endif
