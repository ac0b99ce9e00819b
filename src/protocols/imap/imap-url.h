/* IMAP URLs (RFC 5092) as CATENATE (RFC 4469) takes them: a message, or a
 * section of one, in one of the user's own folders:
 *   [imap://[user[;AUTH=*]@]host[:port]]/mailbox[;UIDVALIDITY=n]/;UID=n
 *       [/;SECTION=section][/;PARTIAL=start[.length]]
 * or, relative to the selected mailbox, ";UID=n[/;SECTION=...][/;PARTIAL=...]"
 * (mailbox ""). The mailbox is percent-decoded UTF-8 (RFC 5092, for
 * the caller to check and convert); the section is percent-decoded text for
 * imap_section_parse(). Pure grammar, fuzzed with the IMAP parser. */
#ifndef PETREL_PROTOCOLS_IMAP_IMAP_URL_H
#define PETREL_PROTOCOLS_IMAP_IMAP_URL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define IMAP_URL_MAX 2048

struct imap_url {
    char user[256];     /* "" when the URL names none */
    bool absolute;      /* imap://... (the host is the caller's to judge) */
    char mailbox[1024]; /* percent-decoded, NUL-terminated; "" for ";UID=" */
    uint32_t uid_validity; /* 0: not given */
    uint32_t uid;
    char section[512]; /* percent-decoded; "" for the whole message */
    bool partial;
    uint64_t partial_start;
    uint64_t partial_len; /* 0 with `partial`: to the end */
};

/* False for anything outside the form above (a URL of a whole folder, a
 * search, a missing UID, bad escapes, a NUL, over-long parts). */
bool imap_url_parse(const char *text, size_t len, struct imap_url *out);

#endif
