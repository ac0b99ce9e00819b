/* Dovecot's dovecot-acl file: one entry per line, "<identifier> <rights>",
 * so that a folder moves between Dovecot and Petrel with its ACL.
 *
 * Read: blank lines and lines starting with '#' are skipped; rights are
 * letters, Dovecot's ":name" words ("user=bob :lookup :read"), or both,
 * separated by spaces; virtual "c" and "d" are expanded; an identifier
 * given twice gets the union of its lines; CR before LF is ignored.
 * Anything else makes the whole file unreadable: an access list that is
 * half understood must not grant or take away rights (callers then refuse
 * access to the folder, as Dovecot does).
 * Written: the list's order, real letters in canonical order, LF ends. */
#ifndef PETREL_STORAGE_ACL_ACL_FILE_H
#define PETREL_STORAGE_ACL_ACL_FILE_H

#include "storage/acl/acl-list.h"

#include <stdbool.h>
#include <stddef.h>

/* Largest dovecot-acl file read. */
#define ACL_FILE_MAX (1024 * 1024)

/* Parses `len` bytes into `list` (emptied first). False with "line N: ..."
 * in `why` (a caller's buffer of `why_size` bytes) when the file is not
 * valid; `list` is then empty. */
bool acl_file_parse(const char *data, size_t len, struct acl_list *list, char *why,
                    size_t why_size);

/* Appends the file text of `list`. */
void acl_file_format(const struct acl_list *list, struct buf *out);

#endif
