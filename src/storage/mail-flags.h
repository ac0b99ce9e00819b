/* The message-flag vocabulary of the storage API, the same for every
 * driver and every front end: system flag bits and the rules for keyword
 * names. A driver maps these to its own encoding (maildir: the info
 * letters of the file name); the fileindex stores them as opaque bits. */
#ifndef PETREL_STORAGE_MAIL_FLAGS_H
#define PETREL_STORAGE_MAIL_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* System flags (RFC 9051 2.3.2), plus maildir's 'P' which no IMAP flag
 * names but which survives every change a front end makes. */
#define MAIL_FLAG_SEEN 0x01u
#define MAIL_FLAG_ANSWERED 0x02u
#define MAIL_FLAG_FLAGGED 0x04u
#define MAIL_FLAG_DELETED 0x08u
#define MAIL_FLAG_DRAFT 0x10u
#define MAIL_FLAG_PASSED 0x20u /* forwarded; no IMAP flag */
#define MAIL_FLAG_ALL 0x3fu

/* The system flags' IMAP names, in the order front ends list them
 * (MAIL_FLAG_PASSED has none); `len` spares a strlen when appending. */
struct mail_flag_name {
    uint32_t bit;
    const char *name;
    size_t len;
};
#define MAIL_FLAG_NAME_COUNT 5
extern const struct mail_flag_name mail_flag_names[MAIL_FLAG_NAME_COUNT];
/* The system flag called `name` ("\\Seen", any case), 0 when none is. */
uint32_t mail_flag_by_name(const char *name);

/* Keywords a folder can hold at once (maildir: the letters a..z); a set of
 * keywords is a bit mask of that many bits. */
#define MAILBOX_MAX_KEYWORDS 26
/* Longest keyword name in bytes. */
#define MAIL_KEYWORD_MAX_LEN 128

/* A keyword name is an IMAP atom (RFC 9051 9: no space, control
 * character, parenthesis, brace, '%', '*', '"', '\' or ']') of 1 to
 * MAIL_KEYWORD_MAX_LEN bytes of printable ASCII. Every front end checks
 * names with this before asking the storage to set them. */
bool mail_keyword_valid(const char *name);

#endif
