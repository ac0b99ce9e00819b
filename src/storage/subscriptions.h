/* Subscriptions in Dovecot's `subscriptions` file, so IMAP (SUBSCRIBE/LSUB)
 * and the operator API share one store and see each other's writes at once:
 *   version 2: "V\t2\n\n" then one mailbox per line, hierarchy levels
 *              separated by TAB; in a level, TAB, LF and '\' are escaped as
 *              "\t", "\n", "\\" and the first character... (Dovecot's
 *              mailbox-list-subscriptions escaping: see the .c file)
 *   version 0: no header, one mailbox per line with the namespace separator.
 * Both are read; version 2 is written. Every change takes the file's lock
 * (flock on "<file>.lock"), re-reads, modifies and replaces the file
 * (temp + fsync + rename). Names here are UTF-8 with '/' as the level
 * separator; the caller converts from the namespace separator. */
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
bool subscriptions_parse(const char *text, size_t len, struct subscriptions *out);
/* Serialises in version 2 (tests, fuzzing). */
char *subscriptions_format(const struct subscriptions *subs, size_t *len);
/* Locked read-modify-write. add: true when it was not there; remove: true
 * when it was. Creates parent directories as needed. */
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
