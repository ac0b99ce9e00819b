/* RFC 4314 access rights as a bit set.
 *
 * The eleven real rights are bits; "c" and "d" are the RFC's virtual rights
 * of RFC 2086 clients: given, "c" means k and x and "d" means e and t (as
 * Dovecot, which announces RIGHTS=texk, takes them); shown, "c" stands
 * beside any of k, x and "d" beside any of e, t. Text forms use the
 * canonical order l r s w i p k x t e c d a. */
#ifndef PETREL_STORAGE_ACL_ACL_RIGHTS_H
#define PETREL_STORAGE_ACL_ACL_RIGHTS_H

#include "core/buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum acl_right {
    ACL_LOOKUP = 1u << 0,        /* l: the folder is listed, may be subscribed */
    ACL_READ = 1u << 1,          /* r: SELECT, FETCH, SEARCH, COPY from */
    ACL_WRITE_SEEN = 1u << 2,    /* s: keep \Seen (and \Recent) across sessions */
    ACL_WRITE = 1u << 3,         /* w: flags and keywords other than \Seen, \Deleted */
    ACL_INSERT = 1u << 4,        /* i: APPEND, COPY or MOVE into */
    ACL_POST = 1u << 5,          /* p: deliver into (LMTP to user+folder) */
    ACL_CREATE = 1u << 6,        /* k: create children, rename into */
    ACL_DELETE = 1u << 7,        /* x: delete or rename the folder */
    ACL_WRITE_DELETED = 1u << 8, /* t: set or clear \Deleted */
    ACL_EXPUNGE = 1u << 9,       /* e: EXPUNGE, and MOVE out */
    ACL_ADMIN = 1u << 10,        /* a: change the ACL */
};

#define ACL_ALL_RIGHTS 0x7ffu

/* Parses rights letters (virtual c and d expanded). False, with the first
 * letter that is no right in *bad, on anything else (empty text is no
 * rights). */
bool acl_rights_parse(const char *text, size_t len, uint32_t *rights, char *bad);

/* Appends `rights` in canonical order, with the virtual c and d when
 * `virtual_rights` (IMAP and the API show them; dovecot-acl files hold only
 * the real letters, which is all Dovecot reads there). */
void acl_rights_format(uint32_t rights, bool virtual_rights, struct buf *out);

/* The same into a caller's array (at least 14 bytes); returns it. */
const char *acl_rights_str(uint32_t rights, bool virtual_rights, char out[14]);

/* The letter of one real right (a single bit), or 0. */
char acl_right_letter(uint32_t right);

/* Dovecot's long name of a real right ("lookup", "write-seen", ...) to its
 * bit; 0 when the name is unknown. The names appear in dovecot-acl files
 * as ":name". */
uint32_t acl_right_from_name(const char *name, size_t len);

#endif
