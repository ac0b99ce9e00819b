/* dovecot-keywords: the folder's keyword names, one per line "<index> <name>",
 * index 0..25 mapping to maildir flag letters 'a'..'z'. Written with temp +
 * rename under the folder lock. Keyword names follow the storage's rule,
 * mail_keyword_valid() (storage/mail-flags.h). */
#ifndef PETREL_STORAGE_MAILDIR_KEYWORDS_H
#define PETREL_STORAGE_MAILDIR_KEYWORDS_H

#include "core/error.h"
#include "storage/mail-flags.h"

#include <stdbool.h>
#include <stddef.h>

struct maildir_keywords {
    char *names[26]; /* NULL for unused slots */
};

/* A missing file is an empty list (not an error). Bad lines are skipped.
 * Writing moves the file's mtime forward (Dovecot caches it by mtime).
 * The file is reached as fs_read_file_at does: `path` itself with dir_fd
 * AT_FDCWD, else its last component in the open directory dir_fd. */
bool maildir_keywords_read(int dir_fd, const char *path, struct maildir_keywords *out,
                           struct petrel_error *err);
/* Parses file contents into a fresh list; false when some lines were
 * skipped (the list still holds the others). Names are kept as stored. */
bool maildir_keywords_parse(const char *text, size_t len, struct maildir_keywords *out);
bool maildir_keywords_write(int dir_fd, const char *path, const struct maildir_keywords *kw,
                            bool fsync, struct petrel_error *err);
/* Index of `name` (case-insensitive), or -1. */
int maildir_keywords_find(const struct maildir_keywords *kw, const char *name);
/* Index of `name`, adding it in the first free slot; -1 when all 26 are used
 * or the name is not a valid keyword (err says which). */
int maildir_keywords_add(struct maildir_keywords *kw, const char *name, struct petrel_error *err);
void maildir_keywords_free(struct maildir_keywords *kw);

#endif
