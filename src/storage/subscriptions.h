/* Subscriptions in Dovecot's `subscriptions` file, so IMAP (SUBSCRIBE/LSUB)
 * and the operator API share one store and see each other's writes at once:
 *   version 2: "V\t2\n\n" then one mailbox per line, hierarchy levels
 *              separated by TAB. Each level is stored as Dovecot stores
 *              Maildir++ names: modified UTF-7, then Dovecot's tab-escaping
 *              (0x01 -> 0x01 '1', TAB -> 0x01 't', CR -> 0x01 'r',
 *              LF -> 0x01 'n'); details in the .c file.
 *   version 0: no header, one mailbox per line, levels separated by the
 *              storage separator ('.' or '/'; both are accepted).
 * Both are read; version 2 is written. Every change takes the file's lock
 * (flock on "<file>.lock", a file that exists only while the lock is held:
 * Dovecot uses that name for its dotlock), re-reads, modifies and replaces
 * the file (temp + fsync + rename). Names here are UTF-8 with '/' as the level
 * separator (this module converts to and from modified UTF-7); the caller
 * converts from the namespace separator. "INBOX" in any case is stored as
 * "INBOX". */
#ifndef PETREL_STORAGE_SUBSCRIPTIONS_H
#define PETREL_STORAGE_SUBSCRIPTIONS_H

#include "core/error.h"

#include <stdbool.h>
#include <stddef.h>

struct subscriptions {
    char **names; /* sorted, unique */
    size_t count;
    size_t cap;
};

/* Reads the file at `path`; a missing file is an empty list. Malformed
 * lines are skipped (logged), never fatal. */
bool subscriptions_read(const char *path, struct subscriptions *out, struct petrel_error *err);
/* Parses file contents into a fresh list; false when some lines were
 * skipped (the list still holds the others). */
bool subscriptions_parse(const char *text, size_t len, struct subscriptions *out);
/* Serialises in version 2 (tests, fuzzing). */
char *subscriptions_format(const struct subscriptions *subs, size_t *len);
/* Locked read-modify-write. add: true when it was not there; remove: true
 * when it was. Creates parent directories as needed. Added names must be
 * non-empty UTF-8 of at most 4096 bytes, not ending in '/'
 * (PETREL_ERR_INVALID otherwise); the caller validates folder names. */
bool subscriptions_add(const char *path, const char *name, bool *changed,
                       struct petrel_error *err);
bool subscriptions_remove(const char *path, const char *name, bool *changed,
                          struct petrel_error *err);
/* Adds every name of `names` in one locked write; counts what was new. */
bool subscriptions_add_many(const char *path, char *const *names, size_t count, size_t *added,
                            struct petrel_error *err);
bool subscriptions_contains(const struct subscriptions *subs, const char *name);
void subscriptions_free(struct subscriptions *subs);

#endif
