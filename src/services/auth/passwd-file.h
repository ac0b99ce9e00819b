/* Dovecot-compatible passwd-file parsing:
 *   user:password:uid:gid:gecos:home:shell:extra_fields
 * Trailing fields may be left off; `#` starts a comment line; blank lines
 * are skipped. extra_fields are space-separated `key=value` (a bare `key`
 * means "yes"), fed to userdb_entry_set (so `userdb_quota_rule=...`,
 * `allow_nets=...`, `mail=...` work as in Dovecot). A malformed line is
 * reported with its line number and skipped; the rest of the file loads.
 * Pure (no I/O): the driver in auth-db-passwd-file.c reads the file. */
#ifndef PETREL_SERVICES_AUTH_PASSWD_FILE_H
#define PETREL_SERVICES_AUTH_PASSWD_FILE_H

#include "clients/auth/userdb.h"

#include <stdbool.h>
#include <stddef.h>

#define PASSWD_FILE_MAX_LINE 65536
#define PASSWD_FILE_MAX_USERS 10000000

/* Called once per malformed line; `message` says what is wrong (never the password). */
typedef void passwd_file_problem_fn(size_t line, const char *message, void *ctx);

struct passwd_file;

/* Parses `len` bytes of `text` (need not be NUL-terminated). A duplicate
 * username keeps the first line and reports the later ones. Never fails:
 * an empty or entirely malformed file gives an empty table. */
struct passwd_file *passwd_file_parse(const char *text, size_t len,
                                      passwd_file_problem_fn *problem, void *ctx);
void passwd_file_free(struct passwd_file *pf);
size_t passwd_file_count(const struct passwd_file *pf);
/* The user's record (borrowed; valid until passwd_file_free), or NULL. */
const struct userdb_entry *passwd_file_find(const struct passwd_file *pf, const char *username);
/* The i-th username in bytewise sorted order (0 <= i < count). */
const char *passwd_file_user_at(const struct passwd_file *pf, size_t i);

#endif
