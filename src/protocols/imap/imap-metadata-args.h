/* The arguments of GETMETADATA and SETMETADATA (RFC 5464 section 4), from
 * the parser's argument tree, without I/O (fuzz-imap-metadata feeds it):
 *
 *   getmetadata = "GETMETADATA" [SP options] SP mailbox SP entries
 *   options     = "(" option *(SP option) ")"
 *   option      = "MAXSIZE" SP number / "DEPTH" SP ("0" / "1" / "infinity")
 *   entries     = entry / "(" entry *(SP entry) ")"
 *   setmetadata = "SETMETADATA" SP mailbox SP "(" entry SP value
 *                 *(SP entry SP value) ")"
 *   value       = nstring / literal8
 *
 * The options list is also accepted after the mailbox: RFC 5464's own
 * examples put it there (as Cyrus and Dovecot accept). Entry names follow
 * metadata-entry.h. Every failure is a BAD with the reason in *why. */
#ifndef PETREL_PROTOCOLS_IMAP_METADATA_ARGS_H
#define PETREL_PROTOCOLS_IMAP_METADATA_ARGS_H

#include "protocols/imap/imap-parser.h"
#include "storage/metadata/metadata-entry.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Entries one command may name (the parser's argument limit is higher). */
#define IMAP_METADATA_MAX_ENTRIES 1000

struct imap_getmetadata_args {
    const struct imap_arg *mailbox;
    int depth;        /* 0, 1, -1 for infinity */
    uint64_t maxsize; /* UINT64_MAX without MAXSIZE */
    struct metadata_entry *entries;
    size_t count;
};

struct imap_metadata_set {
    struct metadata_entry entry;
    const char *value; /* NULL: NIL (delete); points into the argument */
    size_t len;
    bool too_big_for_memory; /* a literal the parser spooled instead */
};

struct imap_setmetadata_args {
    const struct imap_arg *mailbox;
    struct imap_metadata_set *sets;
    size_t count;
};

bool imap_getmetadata_parse(const struct imap_arg *args, size_t argc,
                            struct imap_getmetadata_args *out, const char **why);
void imap_getmetadata_args_free(struct imap_getmetadata_args *a);
bool imap_setmetadata_parse(const struct imap_arg *args, size_t argc,
                            struct imap_setmetadata_args *out, const char **why);
void imap_setmetadata_args_free(struct imap_setmetadata_args *a);

#endif
