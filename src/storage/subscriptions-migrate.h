/* Folding old per-namespace subscription files into the user's own file,
 * for a namespace that keeps no file of its own any more
 * (`subscriptions: false`): "<namespace root>/subscriptions" and the
 * earlier path form "<personal root>/subscriptions.<slug>". Their rows are
 * relative to the namespace and use '/'; in the user's file they carry the
 * namespace prefix (storage/subscription-store.h). */
#ifndef PETREL_STORAGE_SUBSCRIPTIONS_MIGRATE_H
#define PETREL_STORAGE_SUBSCRIPTIONS_MIGRATE_H

#include "core/error.h"
#include "storage/mail-storage.h"

#include <stdbool.h>
#include <stddef.h>

struct mail_subscriptions_migration {
    char *sources[2]; /* the files read (NULL-padded), for the report */
    size_t source_count;
    size_t folded;  /* rows added (apply) or that would be (dry run) */
    size_t already; /* rows the user's file (or an earlier source) had */
};

/* Reads the old files of `ns` and, with `apply`, adds their rows to the
 * user's file and then removes them (every row is in the user's file
 * before any source goes). INVALID for a namespace that keeps its own
 * file, or the personal one. Free `out` with ..._free() either way. */
bool mail_subscriptions_migrate(struct mail_user *user, const struct namespace_config *ns,
                                bool apply, struct mail_subscriptions_migration *out,
                                struct petrel_error *err);
void mail_subscriptions_migration_free(struct mail_subscriptions_migration *m);

#endif
