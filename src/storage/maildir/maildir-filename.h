/* Maildir message file names in the Dovecot/Courier form
 *     <unique>[,S=<size>][,W=<vsize>][:2,<flags>]
 * where <flags> are the standard letters D F P R S T in ASCII order followed
 * by keyword letters a..z (index into the folder's dovecot-keywords). The
 * base name is everything before ":2,"; it identifies the message across
 * flag changes and is what dovecot-uidlist records. */
#ifndef PETREL_STORAGE_MAILDIR_FILENAME_H
#define PETREL_STORAGE_MAILDIR_FILENAME_H

#include "core/buf.h"
#include "storage/mail-flags.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The storage's keyword slots are the letters a..z. */
#define MAILDIR_MAX_KEYWORDS MAILBOX_MAX_KEYWORDS
_Static_assert(MAILDIR_MAX_KEYWORDS == 26, "one keyword slot per letter a..z");

struct maildir_filename {
    const char *base; /* points into the parsed name */
    size_t base_len;
    bool has_size;
    uint64_t size;
    bool has_vsize;
    uint64_t vsize;
    bool has_info;     /* ":2," present */
    uint32_t flags;    /* MAIL_FLAG_* */
    uint32_t keywords; /* bit i = keyword letter 'a' + i */
    /* Info letters we don't know are kept (in order) so they survive renames. */
    char unknown_flags[32];
};

/* Parses a file name (no directory). False for names that are not message
 * files (dot files, empty, containing '/' or NUL, base without a character). */
bool maildir_filename_parse(const char *name, struct maildir_filename *out);
/* Builds "<base>:2,<flags><keywords><unknown>" into out (appended). */
void maildir_filename_build(const char *base, size_t base_len, uint32_t flags, uint32_t keywords,
                            const char *unknown_flags, struct buf *out);
/* What makes new file names unique: the process id and the host name, read
 * once (a host name changed later shows from the next start, as with
 * Dovecot), and a counter every storage handle of the process shares. */
struct maildir_name_source {
    _Atomic uint64_t counter;
    long pid;
    char host[4 * 256]; /* escaped: '/' and ':' as Dovecot writes them (\057, \072) */
};

/* Reads the pid and host name; the counter starts at 0. */
void maildir_name_source_init(struct maildir_name_source *src);
/* The next counter value (thread-safe). */
uint64_t maildir_name_source_next(struct maildir_name_source *src);
/* A fresh unique base "<secs>.M<usecs>P<pid>Q<n>.<host>,S=<size>,W=<vsize>"
 * with n = maildir_name_source_next(src). */
void maildir_filename_new_base(struct maildir_name_source *src, uint64_t size, uint64_t vsize,
                               struct buf *out);

#endif
