/* The quota mirror (document 3 "Mirror", Dovecot's quota_clone plugin):
 * a user's usage written to every dict of `quota.quota_clone_dicts` at the
 * keys priv/quota/storage (bytes) and priv/quota/messages (count), as
 * decimal text, for other systems to read. Advisory only: enforcement and
 * the API's quota/show sum the index and never read it.
 *
 * A storage module (quota_clone_module) whose hooks after a save, an
 * expunge or a folder deletion mark the user dirty, from whatever thread
 * the change ran on (IMAP session loops, LMTP delivery threads, the API on
 * the main loop). The mark crosses to the main event loop through a locked
 * set and an eventfd; the dicts are only ever used there (their handles
 * belong to the main event base). There, a dirty user is written
 * quota_clone_flush_delay after its first mark (so at most once per user
 * per delay), when the last session holding the user ends (the final
 * write), and at shutdown. Users due together share one batch per dict:
 * one transaction (one Redis MULTI/EXEC pipeline, one SQL transaction)
 * per dict and flush, sent to every dict at once. A failing dict is logged
 * (at most once a minute while it keeps failing) and counted; it delays
 * nothing, neither the other dicts nor the save that marked the user.
 * The usage written is computed then, from the index (quota-usage.h), on
 * the main loop's storage handle, with the rules the marks brought (the
 * quota module's view of the user on the session's handle), so it equals
 * what quota/show and GETQUOTA report. */
#ifndef PETREL_STORAGE_QUOTA_CLONE_H
#define PETREL_STORAGE_QUOTA_CLONE_H

#include "core/error.h"
#include "core/metrics.h"
#include "dict/dict.h"
#include "storage/mail-storage-module.h"
#include "storage/quota/quota-config.h"

#include <event2/event.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define QUOTA_CLONE_KEY_STORAGE "priv/quota/storage"
#define QUOTA_CLONE_KEY_MESSAGES "priv/quota/messages"
/* Users written in one transaction at most (a larger batch is split). */
#define QUOTA_CLONE_BATCH_USERS 1000

struct quota_clone;

/* The mirror for `cfg->clone_dicts` (non-empty) of `dicts`, flushing on
 * `base` (the main loop) with `storage` (the handle the main loop uses).
 * The dicts may be opened later, before the loop runs. Everything given
 * must outlive the mirror. */
struct quota_clone *quota_clone_new(struct event_base *base, const struct quota_config *cfg,
                                    struct dict_registry *dicts, struct mail_storage *storage,
                                    struct metrics_registry *metrics, struct petrel_error *err);
/* The storage module; its context is the struct quota_clone. */
extern const struct mail_storage_module quota_clone_module;
/* Marks `username` dirty from any thread; `final`: its session ended, so
 * write it now (when dirty) instead of waiting for the delay. `rules`: the
 * user's quota rules as quota_user_rules_copy gives them (copied; NULL:
 * not known here, the last ones known for the user stay), so the value
 * written skips the folders they mark ignore. */
void quota_clone_mark(struct quota_clone *clone, const char *username, const char *rules,
                      bool final);
/* Main loop: writes every dirty user now (shutdown, before the dicts
 * close). */
void quota_clone_flush_all(struct quota_clone *clone);
/* Batches sent and not yet answered (main loop). */
size_t quota_clone_in_flight(const struct quota_clone *clone);
/* After the dicts answered (or were freed): drops what is still marked. */
void quota_clone_free(struct quota_clone *clone);

/* A mirror value as written (decimal digits, no sign, 64-bit range). */
bool quota_clone_parse_value(const char *data, size_t len, uint64_t *out);

#endif
