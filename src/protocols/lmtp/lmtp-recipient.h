/* From an RCPT TO path to what delivery needs: the address as written into
 * Delivered-To, the name the userdb is asked for, and the detail (the part
 * after the recipient delimiter, "alice+Lists@example.org" -> "Lists").
 *
 * The local part is split at the first character of `delimiters` that is
 * not its first character (so "+x@..." keeps its name); an empty detail
 * counts as none. The lookup name is `username_format` with %u = the
 * address without its detail (the local part alone when there is no
 * domain), %n = the local part without the detail, %d = the domain, %% =
 * '%'. Domains are compared in lower case, so they are lower-cased in the
 * lookup name; local parts are kept as sent. */
#ifndef PETREL_PROTOCOLS_LMTP_LMTP_RECIPIENT_H
#define PETREL_PROTOCOLS_LMTP_LMTP_RECIPIENT_H

#include "protocols/lmtp/lmtp-parser.h"

struct lmtp_recipient_name {
    char *address; /* canonical text without brackets (lmtp_path_format) */
    char *lookup;  /* the userdb name */
    char *detail;  /* NULL when the address has none */
};

/* Fills `out` (fresh allocations; free with lmtp_recipient_name_free). */
void lmtp_recipient_name_make(const struct lmtp_path *path, const char *delimiters,
                              const char *username_format, struct lmtp_recipient_name *out);
void lmtp_recipient_name_free(struct lmtp_recipient_name *name);

#endif
