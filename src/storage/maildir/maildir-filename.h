/* Maildir message file names in the Dovecot/Courier form
 *     <unique>[,S=<size>][,W=<vsize>][:2,<flags>]
 * where <flags> are the standard letters D F P R S T in ASCII order followed
 * by keyword letters a..z (index into the folder's dovecot-keywords). The
 * base name is everything before ":2,"; it identifies the message across
 * flag changes and is what dovecot-uidlist records. */
#ifndef PETREL_STORAGE_MAILDIR_FILENAME_H
#define PETREL_STORAGE_MAILDIR_FILENAME_H

#include "core/buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* System flags (bit values shared with the index). */
#define MAIL_FLAG_SEEN 0x01u
#define MAIL_FLAG_ANSWERED 0x02u
#define MAIL_FLAG_FLAGGED 0x04u
#define MAIL_FLAG_DELETED 0x08u
#define MAIL_FLAG_DRAFT 0x10u
#define MAIL_FLAG_PASSED 0x20u /* maildir 'P' (forwarded); no IMAP flag */
#define MAIL_FLAG_ALL 0x3fu

#define MAILDIR_MAX_KEYWORDS 26

struct maildir_filename {
    const char *base;   /* points into the parsed name */
    size_t base_len;
    bool has_size;
    uint64_t size;
    bool has_vsize;
    uint64_t vsize;
    bool has_info;      /* ":2," present */
    uint32_t flags;     /* MAIL_FLAG_* */
    uint32_t keywords;  /* bit i = keyword letter 'a' + i */
    /* Info letters we don't know are kept (in order) so they survive renames. */
    char unknown_flags[32];
};

/* Parses a file name (no directory). False for names that are not message
 * files (dot files, empty, containing '/' or NUL, base without a character). */
bool maildir_filename_parse(const char *name, struct maildir_filename *out);
/* Builds "<base>:2,<flags><keywords><unknown>" into out (appended). */
void maildir_filename_build(const char *base, size_t base_len, uint32_t flags, uint32_t keywords,
                            const char *unknown_flags, struct buf *out);
/* A fresh unique base "<secs>.M<usecs>P<pid>Q<n>.<host>,S=<size>,W=<vsize>";
 * `counter` makes names unique within the process. The host part has '/'
 * and ':' escaped as Dovecot does (\057, \072). */
void maildir_filename_new_base(uint64_t size, uint64_t vsize, uint64_t counter, struct buf *out);

#endif
